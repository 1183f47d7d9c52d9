"""Real vLLM on CPU: engine weight swapping and the end-to-end evaluation of a tiny trained chain."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("vllm", reason="needs vLLM (install with tools/install.sh)")
pytest.importorskip("math_verify", reason="needs math-verify (the eval extra)")
pytestmark = pytest.mark.vllm

from helpers.common import no_track_config  # noqa: E402

from grrr_stream.config import TrackingConfig  # noqa: E402
from grrr_stream.decompose.run import run_transition  # noqa: E402
from grrr_stream.evaluation.benchmarks import load_benchmark  # noqa: E402
from grrr_stream.evaluation.engine import Engine  # noqa: E402
from grrr_stream.evaluation.pipeline import EvaluationRequest, run_evaluation  # noqa: E402
from grrr_stream.evaluation.settings import EngineSettings, EvaluationOptions  # noqa: E402
from grrr_stream.variants.builder import VariantBuilder, write_variant  # noqa: E402
from grrr_stream.variants.spec import parse_variant  # noqa: E402

SETTINGS = EngineSettings(max_new_tokens=64, enforce_eager=True, max_model_len=512, cpu_kv_cache_gib=0.5)


@pytest.fixture(scope="module")
def chain(tiny_chain, tmp_path_factory):
    _, models = tiny_chain
    root = tmp_path_factory.mktemp("tinychain_eval")
    store = root / "store"
    run_transition(
        no_track_config(base=str(models["base"]), post=str(models["sft"]), store=store, frame_cache=root / "frames")
    )
    return root, models, store


def _texts(engine, prompts):
    return [answers[0].text for answers in engine.generate(prompts)]


def test_engine_swap_equals_fresh_engine(chain, tmp_path):
    _, models, store = chain
    bench = load_benchmark("arith", models["benchmark"], limit=24)
    engine = Engine(models["sft"], SETTINGS)
    try:
        prompts = engine.prompts(bench.problems)
        before = _texts(engine, prompts)
        builder = VariantBuilder(store, parse_variant("base"))
        engine.load_weights(builder.tensors())
        swapped = _texts(engine, prompts)
    finally:
        engine.close()
    folder = tmp_path / "base_variant"
    write_variant(VariantBuilder(store, parse_variant("base")), folder)
    fresh_engine = Engine(folder, SETTINGS)
    try:
        fresh = _texts(fresh_engine, fresh_engine.prompts(bench.problems))
    finally:
        fresh_engine.close()
    assert swapped == fresh  # token-identical greedy outputs after an in-place swap
    assert swapped != before  # and the swap really changed the model


def test_end_to_end_evaluation_tables_and_resume(chain, tmp_path):
    from mlflow.tracking import MlflowClient

    _, models, store = chain
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    variants = ["base", "full", "proj", "diag", "off", "null", "offnull", "randrm-0"]
    request = EvaluationRequest(
        store, tmp_path / "eval", variants, ["arith"], models["benchmark"], EvaluationOptions(engine=SETTINGS, limit=60)
    )
    res = run_evaluation(request, tracking=TrackingConfig(uri=uri))
    acc = {r["variant"]: r["average"] for r in res.accuracy_rows}
    print("accuracy by variant:", acc, "info:", res.info)
    print(
        "differences:",
        [
            (d["variant"], round(d["minus_full"], 2), round(d["minus_full_ci_lo"], 2), round(d["minus_full_ci_hi"], 2))
            for d in res.differences
        ],
    )
    assert set(acc) == set(variants) and all(a is not None for a in acc.values())
    assert acc["full"] > acc["base"]  # post-training helps on the chain's own benchmark
    assert [r["variant"] for r in res.table56] == ["base", "full", "proj", "diag", "off", "null", "offnull"]
    t8 = res.table8[0]
    assert t8["delta_diag"] == pytest.approx(acc["offnull"] - acc["full"])  # Δ = remove − full
    assert t8["delta_rand"] == pytest.approx(acc["randrm-0"] - acc["full"])
    assert res.info["gain"] == pytest.approx(acc["full"] - acc["base"])
    assert res.info["full_minus_proj"] == pytest.approx(acc["full"] - acc["proj"])
    assert all(r.scored_now for r in res.results)
    gens = (tmp_path / "eval" / "full" / "arith.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in gens]
    assert len(gens) == 60 and {"generation", "extracted", "correct", "status", "wait", "finish_reason"} <= set(recs[0])
    assert {r["finish_reason"] for r in recs} <= {"stop", "length"}
    full_row = next(r for r in res.accuracy_rows if r["variant"] == "full")
    assert full_row["truncated"] == sum(r["finish_reason"] == "length" for r in recs)
    assert full_row["wait_per_answer"] == pytest.approx(sum(r["wait"] for r in recs) / 60)
    diffs = {d["variant"]: d for d in res.differences}
    assert diffs["full"]["minus_full_ci_lo"] == diffs["full"]["minus_full_ci_hi"] == 0.0
    assert diffs["base"]["minus_full"] == pytest.approx(acc["base"] - acc["full"])
    # rerun: nothing is scored twice, and MLflow gets no duplicate runs
    stamp = {v: os.stat(tmp_path / "eval" / v / "arith.jsonl").st_mtime_ns for v in variants}
    again = run_evaluation(request, tracking=TrackingConfig(uri=uri))
    assert not any(r.scored_now for r in again.results)
    assert {v: os.stat(tmp_path / "eval" / v / "arith.jsonl").st_mtime_ns for v in variants} == stamp
    assert again.accuracy_rows == res.accuracy_rows and again.run_ids == res.run_ids
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("grrr_stream").experiment_id])
    evals = [r for r in runs if r.data.tags.get("grrr.kind") == "evaluation"]
    assert len(evals) == len(variants)
    parent = next(r for r in runs if r.data.tags.get("grrr.kind") == "transition")
    variant_runs = {r.info.run_id: r for r in runs if r.data.tags.get("grrr.kind") == "variant"}
    for r in evals:  # each under its variant's run, under the transition's
        v = variant_runs[r.data.tags["mlflow.parentRunId"]]
        assert (
            v.info.run_name == f"{r.data.tags['grrr.variant']} · {parent.info.run_name}"
            and v.data.tags["mlflow.parentRunId"] == parent.info.run_id
        )
        assert "acc/arith" in r.data.metrics and "retention" in r.data.metrics
        assert r.data.params["engine.dtype"] == "float32" and "sha256.arith" in r.data.params
        assert r.info.run_name == f"{v.info.run_name} on arith"  # unique: "full · base → sft on arith"
        assert len(client.get_metric_history(r.info.run_id, "acc/arith")) == 1


def test_interrupted_benchmark_resumes_at_first_unanswered_prompt(chain, tmp_path):
    _, models, store = chain
    out = tmp_path / "eval"
    request = EvaluationRequest(
        store, out, ["full"], ["arith"], models["benchmark"], EvaluationOptions(engine=SETTINGS, limit=20)
    )
    first = run_evaluation(request, tracking=None)
    gens = out / "full" / "arith.jsonl"
    lines = gens.read_text().splitlines()
    # simulate a kill after 7 answers (with a torn 8th line) and a lost summary
    gens.write_text("\n".join(lines[:7]) + "\n" + lines[7][:25])
    (out / "full" / "arith.json").unlink()
    again = run_evaluation(request, tracking=None)
    assert again.results[0].scored_now and again.results[0].accuracy == first.results[0].accuracy
    assert [json.loads(x)["generation"] for x in gens.read_text().splitlines()] == [
        json.loads(x)["generation"] for x in lines
    ]


def test_folder_materialization_is_deleted_unless_kept(chain, tmp_path):
    _, models, store = chain
    kw = dict(options=EvaluationOptions(engine=SETTINGS, limit=10, materialize="folder"))
    res = run_evaluation(
        EvaluationRequest(store, tmp_path / "a", ["offnull"], ["arith"], models["benchmark"], **kw), tracking=None
    )
    assert not (tmp_path / "a" / "_variants" / "offnull").exists() and res.results[0].n == 10
    run_evaluation(
        EvaluationRequest(store, tmp_path / "b", ["offnull"], ["arith"], models["benchmark"], keep_variants=True, **kw),
        tracking=None,
    )
    assert (tmp_path / "b" / "_variants" / "offnull" / "config.json").is_file()


def test_prompt_longer_than_the_context_is_counted_wrong_not_fatal(chain, tmp_path):
    _, models, store = chain
    bench = tmp_path / "bench" / "mixed"
    bench.mkdir(parents=True)
    bench.joinpath("test.jsonl").write_text(
        json.dumps({"problem": "What is 12+30?", "answer": "42"})
        + "\n"
        + json.dumps({"problem": "Add these numbers. " + "1+" * 200 + "1", "answer": "201"})
        + "\n"
    )
    settings = EngineSettings(max_new_tokens=16, enforce_eager=True, max_model_len=128, cpu_kv_cache_gib=0.25)
    res = run_evaluation(
        EvaluationRequest(
            store, tmp_path / "eval", ["full"], ["mixed"], tmp_path / "bench", EvaluationOptions(engine=settings)
        ),
        tracking=None,
    )
    (r,) = res.results
    assert r.n == 2 and r.too_long == 1
    recs = [json.loads(x) for x in (tmp_path / "eval" / "full" / "mixed.jsonl").read_text().splitlines()]
    assert [x["status"] == "prompt_too_long" for x in recs] == [False, True]
    assert recs[0]["tokens"] > 0 and recs[1]["tokens"] == 0 and not recs[1]["correct"]


@pytest.mark.slow
def test_sweep_evaluates_on_a_dask_worker_and_a_rerun_starts_no_engine(tiny_chain, tmp_path):
    """vLLM inside a LocalCluster worker process (in-process engine), then resume: nothing runs."""
    import csv

    from grrr_stream.sweep import Records, plan_sweep, run_sweep
    from grrr_stream.sweep.config import SweepConfig

    _, models = tiny_chain
    cfg = SweepConfig.model_validate(
        {
            "name": "eval-on-worker",
            "workdir": str(tmp_path / "w"),
            "chains": [
                {
                    "name": "tiny",
                    "base": {"id": "base", "source": str(models["base"])},
                    "models": [{"id": "sft", "source": str(models["sft"]), "method": "SFT"}],
                }
            ],
            "decomposition": {"device": "cpu"},
            "statistics": {"enabled": False},
            "variants": {"enabled": False},
            "evaluation": {
                "variants": ["base", "full"],
                "benchmarks": ["arith"],
                "bench_dir": str(models["benchmark"]),
                "limit": 12,
                "engine": SETTINGS.model_dump(),
            },
            "progress": False,
        }
    )
    res = run_sweep(plan_sweep(cfg), scheduler="local:2", progress=False)
    assert res.ok, {u: (res.records.get(u) or {}).get("traceback") for u in res.failed}
    unit = res.plan.unit("evaluate/base-to-sft")
    assert Records(res.plan.workdir).read(unit)["pid"] != os.getpid()
    with open(tmp_path / "w" / "report" / "accuracy.csv") as f:
        acc = {r["variant"]: float(r["average"]) for r in csv.DictReader(f)}
    assert set(acc) == {"base", "full"} and acc["full"] > acc["base"]
    again = run_sweep(plan_sweep(cfg), scheduler="local:2", progress=False)
    assert again.ok and again.ran == []


def test_sampled_answers_come_from_one_request_with_real_finish_reasons(chain, tmp_path):
    """n samples per prompt in one vLLM request; cut-offs counted from vLLM's own finish reasons (a token
    limit below the tiny chain's ~46-token answers forces them)."""
    from grrr_stream.evaluation.scoring import pass_at_k, score_benchmark
    from grrr_stream.evaluation.settings import SamplingSettings

    _, models, _ = chain
    settings = EngineSettings(max_new_tokens=46, enforce_eager=True, max_model_len=512, cpu_kv_cache_gib=0.5)
    bench = load_benchmark("arith", models["benchmark"], limit=10)
    sampling = SamplingSettings(n=4, temperature=0.8, pass_k=[1, 4], maj_k=[4])
    engine = Engine(models["sft"], settings)
    calls = []
    real = engine.llm.generate

    def counting(*args, **kwargs):
        calls.append(len(args[0]))
        return real(*args, **kwargs)

    engine.llm.generate = counting
    try:
        res = score_benchmark(engine, bench, "full", tmp_path, "k", sampling=sampling)
    finally:
        engine.close()
    assert calls == [10]  # one request per prompt, all in one call: not 4 passes
    recs = [json.loads(x) for x in (tmp_path / "full" / "arith.jsonl").read_text().splitlines()]
    answers = [a for r in recs for a in r["samples"]]
    assert len(recs) == 10 and len(answers) == 40
    assert res.truncated == sum(a["finish_reason"] == "length" for a in answers) > 0
    assert {a["finish_reason"] for a in answers} <= {"stop", "length"}
    c = [sum(a["correct"] for a in r["samples"]) for r in recs]
    assert res.metrics["pass@4"] == pytest.approx(100 * sum(pass_at_k(4, x, 4) for x in c) / 10)
    print(
        f"sampled n=4 at T=0.8, 46 tokens: avg@4 {res.metrics['avg']:.1f}, pass@4 {res.metrics['pass@4']:.1f}, "
        f"maj@4 {res.metrics['maj@4']:.1f}, cut off {res.truncated}/40"
    )
