"""Evaluation orchestration without vLLM: which engine runs which variant, the prompt format, the
diagnostics of every answer, and the paired differences (a stand-in engine answers deterministically
from the weights it holds; tests/evaluation/test_evaluate_vllm.py runs the real engine)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("math_verify", reason="grading needs math-verify (the eval extra)")

from helpers.stand_in import SETTINGS, StandInEngine, sums_transition  # noqa: E402,F401

from grrr_stream.evaluation.pipeline import EvaluationRequest, run_evaluation  # noqa: E402
from grrr_stream.evaluation.settings import EvaluationOptions  # noqa: E402


@pytest.fixture()
def transition(tmp_path):
    return sums_transition(tmp_path)


def test_one_engine_on_the_post_model_when_configs_agree(transition, tmp_path):
    base, post, store, bench = transition
    StandInEngine.started = []
    logs: list[str] = []
    res = run_evaluation(
        EvaluationRequest(
            store, tmp_path / "e", ["base", "full", "proj", "diag"], ["sums"], bench, EvaluationOptions(engine=SETTINGS)
        ),
        engine_factory=StandInEngine,
        log=logs.append,
    )
    assert StandInEngine.started == [(post, post)]
    assert res.prompt["from"] == str(post) and res.prompt["files"]["generation_config.json"]
    saved = json.loads((tmp_path / "e" / "evaluation.json").read_text())
    assert saved["prompt_format"]["digest"] == res.prompt["digest"]
    assert saved["variants"]["diag"]["rest_from"] == "base" and saved["variants"]["full"]["config_from"] == "post"
    # diagnostics, recounted from the per-answer records
    recs = {
        v: [json.loads(x) for x in (tmp_path / "e" / v / "sums.jsonl").read_text().splitlines()]
        for v in ("base", "full", "proj", "diag")
    }
    acc = {r["variant"]: r for r in res.accuracy_rows}
    for v, rs in recs.items():
        assert acc[v]["answers"] == len(rs) == 63
        assert acc[v]["wait_per_answer"] == pytest.approx(sum(r["wait"] for r in rs) / len(rs))
        assert acc[v]["truncated"] == sum(r["finish_reason"] == "length" for r in rs) > 0
    assert any("cut off at max_new_tokens = 32" in m for m in logs)  # > 5 % capped: a loud warning
    # paired differences: every variant against full, base and proj; full against itself is exactly 0
    diffs = {r["variant"]: r for r in res.differences}
    assert (diffs["full"]["minus_full"], diffs["full"]["minus_full_ci_lo"], diffs["full"]["minus_full_ci_hi"]) == (
        0.0,
        0.0,
        0.0,
    )
    for v, rs in recs.items():
        mine = 100 * sum(r["correct"] for r in rs) / 63
        full = 100 * sum(r["correct"] for r in recs["full"]) / 63
        assert diffs[v]["minus_full"] == pytest.approx(mine - full, abs=1e-9)
    assert res.info["gain"] == pytest.approx(acc["full"]["average"] - acc["base"]["average"])
    assert "gain_ci_lo" in res.info and "full_minus_proj" in res.info
    assert (tmp_path / "e" / "table_differences.csv").is_file()


def test_base_config_that_differs_gets_its_own_engine_with_the_post_prompt_format(transition, tmp_path):
    base, post, store, bench = transition
    cfg = json.loads((base / "config.json").read_text())
    cfg["rope_theta"] = 500000.0  # changes the forward pass: base-config variants cannot run in the post engine
    (base / "config.json").write_text(json.dumps(cfg))
    StandInEngine.started = []
    logs: list[str] = []
    res = run_evaluation(
        EvaluationRequest(
            store, tmp_path / "e", ["base", "full", "proj", "diag"], ["sums"], bench, EvaluationOptions(engine=SETTINGS)
        ),
        engine_factory=StandInEngine,
        log=logs.append,
    )
    # one engine per config, each started once, each prompting as the post model does
    assert StandInEngine.started == [(base, post), (post, post)]
    assert any("rope_theta" in m and "engine on" in m for m in logs)
    meta = json.loads((tmp_path / "e" / "evaluation.json").read_text())["variants"]
    assert meta["proj"]["config_differences"] == ["rope_theta"] and meta["proj"]["config_from"] == "base"
    assert {r.variant for r in res.results} == {"base", "full", "proj", "diag"}
    # rest_from post puts every composed variant on the post model's config: one engine again
    StandInEngine.started = []
    run_evaluation(
        EvaluationRequest(
            store,
            tmp_path / "p",
            ["full", "proj", "diag"],
            ["sums"],
            bench,
            EvaluationOptions(engine=SETTINGS),
            rest_from="post",
        ),
        engine_factory=StandInEngine,
        log=logs.append,
    )
    assert StandInEngine.started == [(post, post)]


def test_a_rerun_scores_nothing_and_starts_no_engine(transition, tmp_path):
    _, _, store, bench = transition
    first = run_evaluation(
        EvaluationRequest(
            store, tmp_path / "e", ["full", "offnull"], ["sums"], bench, EvaluationOptions(engine=SETTINGS)
        ),
        engine_factory=StandInEngine,
        log=lambda m: None,
    )
    StandInEngine.started = []
    again = run_evaluation(
        EvaluationRequest(
            store, tmp_path / "e", ["full", "offnull"], ["sums"], bench, EvaluationOptions(engine=SETTINGS)
        ),
        engine_factory=StandInEngine,
        log=lambda m: None,
    )
    assert StandInEngine.started == [] and not any(r.scored_now for r in again.results)
    assert again.accuracy_rows == first.accuracy_rows and again.differences == first.differences


@pytest.mark.parametrize(
    "line,match",
    [
        (b'{"problem": "1+1", "answer": "2"', "is not valid JSON"),  # a torn line
        (b'["1+1", "2"]', "is not a JSON object"),
        (b'{"problem": "1+1"}', "lacks a gold answer"),
        (b'{"problem": "1+1", "answer": null}', "lacks a gold answer"),  # not graded against 'None'
        (b'{"problem": "1+1", "answer": ""}', "lacks a gold answer"),
        (b'{"answer": "2"}', "lacks a question"),
        (b'{"problem": "1+1", "answer": "\xff\xfe"}', "is not valid UTF-8"),
    ],
)
def test_malformed_benchmark_lines_are_refused_with_file_and_line_or_skipped_when_lenient(tmp_path, line, match):
    from grrr_stream.errors import ConfigError
    from grrr_stream.evaluation.benchmarks import load_benchmark

    (tmp_path / "b").mkdir()
    good = json.dumps({"problem": "2+2", "answer": "4"}).encode()
    (tmp_path / "b" / "test.jsonl").write_bytes(good + b"\n" + line + b"\n" + good + b"\n")
    with pytest.raises(ConfigError, match=match) as e:
        load_benchmark("b", tmp_path)
    assert f"{tmp_path / 'b' / 'test.jsonl'}:2" in str(e.value) and "--lenient-benchmarks" in str(e.value)
    bench = load_benchmark("b", tmp_path, lenient=True)
    assert len(bench.problems) == 2 and bench.skipped == 1 and [p.idx for p in bench.problems] == [0, 1]


@pytest.mark.parametrize("name", ["..", ".hidden", "a/b", ""])
def test_benchmark_names_that_are_not_one_folder_name_are_refused(tmp_path, name):
    from grrr_stream.errors import ConfigError
    from grrr_stream.evaluation.benchmarks import load_benchmark

    with pytest.raises(ConfigError, match="benchmark name"):
        load_benchmark(name, tmp_path)


# -- sampled metrics ---------------------------------------------------------------------------


def test_pass_at_k_against_hand_computed_values():
    from grrr_stream.evaluation.scoring import pass_at_k

    # n = 5 answers, 2 right: pass@1 = 2/5; pass@2 = 1 − C(3,2)/C(5,2) = 1 − 3/10; pass@4 = 1 (only 3 wrong)
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(5, 2, 4) == 1.0 and pass_at_k(5, 0, 5) == 0.0 and pass_at_k(5, 5, 1) == 1.0
    # pass@k is the chance that k answers drawn without replacement contain a right one: enumerate it
    from itertools import combinations

    right = [True, True, False, False, False]
    draws = list(combinations(range(5), 3))
    assert pass_at_k(5, 2, 3) == pytest.approx(sum(any(right[i] for i in d) for d in draws) / len(draws))


def test_majority_vote_groups_equivalent_answers():
    from grrr_stream.evaluation.scoring import majority_correct

    half = [
        {"extracted": "\\frac{1}{2}", "correct": True},
        {"extracted": "0.5", "correct": True},
        {"extracted": "1/3", "correct": False},
    ]
    assert majority_correct(half, 3)  # \frac{1}{2} and 0.5 vote together: 2 against 1
    third = [
        {"extracted": "0.5", "correct": True},
        {"extracted": "\\frac{1}{3}", "correct": False},
        {"extracted": "1/3", "correct": False},
    ]
    assert not majority_correct(third, 3)
    assert majority_correct(third, 1)  # only the first answer votes
    tie = [{"extracted": "7", "correct": False}, {"extracted": "2", "correct": True}]
    assert not majority_correct(tie, 2)  # a tie goes to the answer seen first
    assert not majority_correct([{"extracted": None, "correct": False}], 1)


def test_sampled_evaluation_draws_n_answers_in_one_request_and_reports_every_metric(transition, tmp_path):
    from grrr_stream.evaluation.scoring import pass_at_k
    from grrr_stream.evaluation.settings import SamplingSettings

    _, _, store, bench = transition
    sampling = SamplingSettings(n=4, temperature=0.7, pass_k=[1, 2, 4], maj_k=[4])
    StandInEngine.calls = 0
    res = run_evaluation(
        EvaluationRequest(
            store,
            tmp_path / "e",
            ["full", "offnull"],
            ["sums"],
            bench,
            EvaluationOptions(engine=SETTINGS, sampling=sampling, metric="pass@2"),
        ),
        engine_factory=StandInEngine,
        log=lambda m: None,
    )
    assert StandInEngine.calls == 2  # one request per variant (63 prompts < one chunk), n answers each
    out = tmp_path / "e" / "sampled-n4-T0.7-p1-s0"  # beside greedy results and other settings
    assert res.out == out
    recs = [json.loads(x) for x in (out / "full" / "sums.jsonl").read_text().splitlines()]
    assert len(recs) == 63 and all(len(r["samples"]) == 4 for r in recs)
    full = next(r for r in res.results if r.variant == "full")
    # every metric recomputed by hand from the records
    c = [sum(a["correct"] for a in r["samples"]) for r in recs]
    assert full.metrics["avg"] == pytest.approx(100 * sum(x / 4 for x in c) / 63)
    assert full.metrics["pass@2"] == pytest.approx(100 * sum(pass_at_k(4, x, 2) for x in c) / 63)
    assert full.metrics["pass@4"] == pytest.approx(100 * sum(x > 0 for x in c) / 63)
    assert full.truncated == sum(a["finish_reason"] == "length" for r in recs for a in r["samples"])
    acc = {r["variant"]: r for r in res.accuracy_rows}
    assert acc["full"]["metric"] == "pass@2" and acc["full"]["sums"] == pytest.approx(full.metrics["pass@2"])
    assert acc["full"]["answers"] == 63 * 4
    tokens = [a["tokens"] for r in recs for a in r["samples"]]
    assert acc["full"]["tokens_mean"] == pytest.approx(sum(tokens) / len(tokens))
    waits = sum(a["wait"] for r in recs for a in r["samples"])
    assert acc["full"]["wait_per_1k_tokens"] == pytest.approx(1000 * waits / sum(tokens))
    # per-problem records as a table, and what full solves that a variant loses
    import csv

    with open(out / "full" / "problems.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 63 * 4 and {"problem", "sample", "extracted", "finish_reason", "wait"} <= set(rows[0])
    lost = {(r["problem"], r["change"]) for r in res.solved_lost if r["variant"] == "offnull"}
    off = next(r for r in res.results if r.variant == "offnull")
    want = {
        (i, "lost" if a >= 0.5 else "gained")
        for i, (a, b) in enumerate(zip(full.scores["pass@2"], off.scores["pass@2"]))
        if (a >= 0.5) != (b >= 0.5)
    }
    assert lost == want
    # other sampling settings: new results beside the old; back to the first: nothing generated again
    StandInEngine.calls = 0
    run_evaluation(
        EvaluationRequest(
            store,
            tmp_path / "e",
            ["full"],
            ["sums"],
            bench,
            EvaluationOptions(engine=SETTINGS, sampling=SamplingSettings(n=4, temperature=1.0)),
        ),
        engine_factory=StandInEngine,
        log=lambda m: None,
    )
    assert StandInEngine.calls == 1
    assert (tmp_path / "e" / "sampled-n4-T1-p1-s0" / "full" / "sums.json").is_file()
    StandInEngine.calls = 0
    again = run_evaluation(
        EvaluationRequest(
            store,
            tmp_path / "e",
            ["full"],
            ["sums"],
            bench,
            EvaluationOptions(engine=SETTINGS, sampling=sampling, metric="maj@4"),
        ),
        engine_factory=StandInEngine,
        log=lambda m: None,
    )
    assert StandInEngine.calls == 0 and again.results[0].metrics["maj@4"] == full.metrics["maj@4"]


def test_pass_k_added_later_is_summarised_from_the_answers_without_generating(transition, tmp_path):
    from grrr_stream.evaluation.settings import SamplingSettings

    _, _, store, bench = transition
    kw = dict(engine_factory=StandInEngine, log=lambda m: None)
    run_evaluation(
        EvaluationRequest(
            store,
            tmp_path / "e",
            ["full"],
            ["sums"],
            bench,
            EvaluationOptions(engine=SETTINGS, sampling=SamplingSettings(n=3, temperature=0.5)),
        ),
        **kw,
    )
    StandInEngine.calls, StandInEngine.started = 0, []
    maj = SamplingSettings(n=3, temperature=0.5, maj_k=[3])
    res = run_evaluation(
        EvaluationRequest(
            store,
            tmp_path / "e",
            ["full"],
            ["sums"],
            bench,
            EvaluationOptions(engine=SETTINGS, metric="maj@3", sampling=maj),
        ),
        **kw,
    )
    assert StandInEngine.calls == 0 and StandInEngine.started == []
    assert "maj@3" in res.results[0].metrics and res.accuracy_rows[0]["metric"] == "maj@3"


def test_sampling_settings_are_checked():
    from grrr_stream.evaluation.settings import SamplingSettings
    from grrr_stream.sweep.config import SweepEvaluation

    with pytest.raises(ValueError, match="temperature > 0"):
        SamplingSettings(n=4)
    with pytest.raises(ValueError, match="must not exceed n"):
        SamplingSettings(n=2, temperature=1.0, pass_k=[4])
    with pytest.raises(ValueError, match="not computed"):
        SweepEvaluation(metric="maj@8")
    assert SamplingSettings().key_fields() is None  # greedy keys stay as they were


def test_seeded_sampling_on_cpu_is_batched_so_no_prefill_is_split():
    """vLLM's CPU backend fails on a seeded request whose prefill the scheduler splits ('CPU Generator does
    not use offset'): each batch's prompt tokens × n must fit the step's token budget."""
    from types import SimpleNamespace

    from grrr_stream.evaluation.engine import Engine
    from grrr_stream.evaluation.settings import SamplingSettings

    eng = object.__new__(Engine)
    eng.on_cpu = True
    eng.llm = SimpleNamespace(
        llm_engine=SimpleNamespace(
            vllm_config=SimpleNamespace(scheduler_config=SimpleNamespace(max_num_batched_tokens=100))
        )
    )
    todo = [(f"p{i}", 10) for i in range(7)]
    sampled = SamplingSettings(n=4, temperature=0.7)
    batches = eng._batches(todo, sampled)
    assert [len(b) for b in batches] == [2, 2, 2, 1] and sum(batches, []) == [p for p, _ in todo]
    assert eng._batches(todo, SamplingSettings()) == [[p for p, _ in todo]]  # greedy: one batch
    eng.on_cpu = False
    assert len(eng._batches(todo, sampled)) == 1  # GPU generators can rewind: one batch
