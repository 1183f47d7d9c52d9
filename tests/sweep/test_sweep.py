"""Sweeps: planning from lineage, resume after kill -9, failures, the workdir lock, Dask workers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers.common import assert_same, results_snapshot

from grrr_stream.config import TrackingConfig
from grrr_stream.errors import ConfigError
from grrr_stream.fixtures.synthetic import TINY, Update, write_model
from grrr_stream.sweep import KINDS, Records, SweepLock, plan_sweep, run_sweep, sweep_status
from grrr_stream.sweep.config import SweepConfig, load_sweep_config

ROOT = Path(__file__).resolve().parents[2]
SFT = Update(r_delta=2e-2, plant=(0.25, 0.45, 0.30))
RL = Update(r_delta=5e-3, plant=(0.10, 0.70, 0.20), seed=1)
SIB = Update(r_delta=2e-2, plant=(0.30, 0.40, 0.30), seed=2)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A synthetic base → sft → rl chain plus an sft sibling, float32, Qwen2 layout."""
    root = tmp_path_factory.mktemp("sweep_models")
    for name, updates in {"base": (), "sft": (SFT,), "rl": (SFT, RL), "sibling": (SIB,)}.items():
        write_model(
            root / name, TINY, family="qwen2", dtype="float32", seed=0, updates=updates, max_shard_bytes=200_000
        )
    return root


def config(models: Path, workdir: Path, **sections) -> dict:
    cfg = {
        "name": "test",
        "workdir": str(workdir),
        "chains": [
            {
                "name": "syn",
                "base": {"id": "base", "source": str(models / "base")},
                "models": [
                    {"id": "sft", "source": str(models / "sft"), "parent": "base", "method": "SFT"},
                    {"id": "rl", "source": str(models / "rl"), "parent": "sft", "method": "GRPO"},
                    {"id": "sibling", "source": str(models / "sibling"), "method": "SFT"},
                ],
            }
        ],
        "decomposition": {"device": "cpu"},
        "statistics": {"resamples": 200, "null_draws": 200},
        "variants": {"names": ["base", "full", "diag", "randrm-0"], "transitions": ["base-to-rl"]},
        "evaluation": {"enabled": False},
        "tracking": {"enabled": False},
        "progress": False,
    }
    for k, v in sections.items():
        cfg[k] = {**cfg[k], **v} if isinstance(v, dict) and isinstance(cfg.get(k), dict) else v
    return cfg


def write_cfg(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg))
    return path


def cli(*args, cwd, check=True, **kw):
    return subprocess.run(
        [sys.executable, "-m", "grrr_stream.cli", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=check,
        **kw,
    )


# ---------------------------------------------------------------------------- planning


def test_plan_derives_transitions_comparisons_and_units_from_lineage(models, tmp_path):
    plan = plan_sweep(SweepConfig.model_validate(config(models, tmp_path / "w")))
    kinds = {t.id: t.kind for t in plan.transitions.values()}
    assert kinds == {
        "base-to-sft": "cumulative",
        "sft-to-rl": "incremental",
        "base-to-rl": "cumulative",
        "base-to-sibling": "cumulative",
    }
    ids = [u.id for u in plan.units]
    assert set(i for i in ids if i.startswith("compare/")) == {
        "compare/sequential/base-to-sft--base-to-rl",  # SFT then RL, in the base frame
        "compare/independent/base-to-rl--base-to-sibling",  # same base, neither descends from the other
        "compare/independent/base-to-sft--base-to-sibling",
    }  # no sft-vs-rl independent pair: rl descends from sft
    assert [i for i in ids if i.startswith("variant/")] == [
        f"variant/base-to-rl/{n}" for n in ("base", "full", "diag", "randrm-0")
    ]
    assert set(plan.unit("stats/summary").deps) == {f"decompose/{t}" for t in kinds}
    # the first decomposition from each W0 computes its frames; the others from that W0 start after it
    after = {u.id: u.after for u in plan.units if u.kind == "decompose"}
    assert after == {
        "decompose/base-to-sft": (),
        "decompose/sft-to-rl": (),
        "decompose/base-to-rl": ("decompose/base-to-sft",),
        "decompose/base-to-sibling": ("decompose/base-to-sft",),
    }
    # dependencies always precede dependents
    pos = {u.id: i for i, u in enumerate(plan.units)}
    assert all(pos[d] < pos[u.id] for u in plan.units for d in u.deps)


def test_keys_change_with_result_settings_only(models, tmp_path):
    def keys(**sections):
        plan = plan_sweep(SweepConfig.model_validate(config(models, tmp_path / "w", **sections)))
        return {u.id: (u.key, u.out) for u in plan.units}

    ref = keys()
    # settings that cannot change results: same keys, same result folders
    assert keys(progress=True, tracking={"enabled": True, "experiment": "x"}, decomposition={"device": "auto"}) == ref
    # a result setting: every decomposition and everything downstream gets a new key and folder
    changed = keys(decomposition={"device": "cpu", "store_dtype": "float64"})
    assert all(changed[u][0] != ref[u][0] and changed[u][1] != ref[u][1] for u in ref)
    # a statistics setting touches statistics only
    stats = keys(statistics={"resamples": 300, "null_draws": 200})
    assert {u for u in ref if stats[u] != ref[u]} == {u for u in ref if u.startswith(("stats/", "compare/"))}


def test_plan_reports_every_problem_at_once(models, tmp_path):
    cfg = config(models, tmp_path / "w")
    cfg["chains"][0]["models"] += [
        {"id": "sft", "source": "x"},  # duplicate id
        {"id": "orphan", "source": "x", "parent": "nowhere"},  # unknown parent
        {"id": "a", "source": "x", "parent": "b"},
        {"id": "b", "source": "x", "parent": "a"},  # cycle
    ]
    cfg["variants"]["names"].append("halfdiag=diag:abc")
    cfg["variants"]["transitions"] = ["base-to-nothing"]
    with pytest.raises(ConfigError) as err:
        plan_sweep(SweepConfig.model_validate(cfg))
    msg = str(err.value)
    for needle in ("'sft' is used twice", "parent 'nowhere'", "cycle", "halfdiag", "base-to-nothing"):
        assert needle in msg, needle


def test_independent_pairs_at_any_depth_use_their_nearest_common_ancestor(models, tmp_path):
    cfg = config(models, tmp_path / "w")
    cfg["chains"][0]["models"].append({"id": "rl2", "source": str(models / "rl"), "parent": "sft", "method": "PPO"})
    plan = plan_sweep(SweepConfig.model_validate(cfg))
    pairs = {u.id: u for u in plan.units if u.id.startswith("compare/independent/")}
    assert set(pairs) == {
        f"compare/independent/{a}--{b}"
        for a, b in (
            ("base-to-rl", "base-to-rl2"),
            ("base-to-rl", "base-to-sibling"),
            ("base-to-rl2", "base-to-sibling"),
            ("base-to-sft", "base-to-sibling"),
        )
    }
    # two RL runs from the SFT model: their steps from SFT, not their cumulative updates (which share SFT's)
    rl = pairs["compare/independent/base-to-rl--base-to-rl2"]
    assert rl.params.ancestor == "base-to-sft" and "decompose/base-to-sft" in rl.deps
    assert "from sft" in rl.label
    sib = pairs["compare/independent/base-to-rl--base-to-sibling"]
    assert sib.params.ancestor is None and "from base" in sib.label


def test_plan_refuses_a_rest_source_the_base_cannot_supply(models, tmp_path):
    import torch

    from grrr_stream.checkpoints.reader import Checkpoint
    from grrr_stream.checkpoints.writer import write_checkpoint

    ck = Checkpoint.open(models / "sft")

    def grown():  # the post model gained two tokens
        for name in ck.tensors:
            t = ck.read(name)
            yield name, (torch.cat([t, t[:2]]) if name in ("model.embed_tokens.weight", "lm_head.weight") else t)

    write_checkpoint(tmp_path / "grown", grown(), config=ck.config)
    cfg = config(models, tmp_path / "w", variants={"names": ["base", "full", "diag"], "transitions": ["base-to-sft"]})
    cfg["chains"][0]["models"][0]["source"] = str(tmp_path / "grown")
    with pytest.raises(ConfigError) as err:
        plan_sweep(SweepConfig.model_validate(cfg))
    msg = str(err.value)
    assert "variants: base-to-sft: rest_from: base cannot be used" in msg and "embed_tokens" in msg
    assert "variants.rest_from: post" in msg and "rest_from: auto" in msg
    cfg["variants"]["rest_from"] = "auto"  # base when it can, else post, on record: plans
    plan_sweep(SweepConfig.model_validate(cfg))
    cfg["variants"].update(rest_from="base", names=["base", "full"])  # the checkpoints themselves need no rest
    plan_sweep(SweepConfig.model_validate(cfg))


def test_plan_refuses_differences_of_16_bit_stores(models, tmp_path):
    cfg = config(models, tmp_path / "w", decomposition={"store_dtype": "bfloat16"})
    with pytest.raises(ConfigError, match="store_dtype: bfloat16 cannot feed stepwise comparisons"):
        plan_sweep(SweepConfig.model_validate(cfg))
    cfg["statistics"]["stepwise"] = False  # the independent pairs here are all from the base: no differences
    plan_sweep(SweepConfig.model_validate(cfg))


def _planned(cfg: dict) -> tuple[dict, list[str]]:
    import warnings

    from grrr_stream.errors import RenamedSettingWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = plan_sweep(SweepConfig.model_validate(cfg))
    return {u.id: u.key for u in plan.units}, [str(w.message) for w in caught if w.category is RenamedSettingWarning]


def test_the_old_key_statistics_sequential_still_works_and_warns_once(models, tmp_path):
    """statistics.sequential, the stepwise comparisons' switch before issue 49: the same plan as statistics.stepwise
    (the stepwise units keep their ids and keys, compare/sequential/...), one warning; both at once are refused."""
    new = config(models, tmp_path / "w")
    now, none = _planned(new)
    assert none == [] and "compare/sequential/base-to-sft--base-to-rl" in now
    for on in (True, False):
        new["statistics"]["stepwise"] = on
        old = {
            **new,
            "statistics": {**{k: v for k, v in new["statistics"].items() if k != "stepwise"}, "sequential": on},
        }
        (was, said), (is_, _) = _planned(old), _planned(new)
        assert was == is_ and said == [
            "statistics.sequential is deprecated (renamed in issue 49): write statistics.stepwise"
        ]
        assert any(u.startswith("compare/sequential/") for u in was) is on
    both = {**new, "statistics": {**new["statistics"], "sequential": True}}
    with pytest.raises(ConfigError, match="statistics: Value error, both 'sequential' and 'stepwise' are given"):
        load_sweep_config(write_cfg(tmp_path / "both.yaml", both))


def test_auto_engine_dtype_judges_the_last_step_into_a_model_trained_from_an_intermediate_one(models, tmp_path):
    """base → rl was trained through sft: its evaluation under engine.dtype auto also reads the sft → rl store,
    waits for it and is keyed by it; base → sft (trained from the base) and a float32 engine read none."""
    evaluation = {
        "enabled": True,
        "transitions": "cumulative",
        "variants": ["base", "full", "diag"],
        "benchmarks": ["math500"],
        "engine": {"dtype": "auto"},
    }
    plan = plan_sweep(SweepConfig.model_validate(config(models, tmp_path / "w", evaluation=evaluation)))
    units = {u.id: u for u in plan.units if u.kind == "evaluate"}
    rl, sft = units["evaluate/base-to-rl"], units["evaluate/base-to-sft"]
    assert rl.params.last_step == "sft-to-rl" and "decompose/sft-to-rl" in rl.deps
    assert rl.params.key_content()["last_step"] == rl.params.last_step_key != None  # noqa: E711
    assert sft.params.last_step is None and "last_step" not in sft.params.key_content()
    fixed = {**evaluation, "engine": {"dtype": "float32"}}
    plan = plan_sweep(SweepConfig.model_validate(config(models, tmp_path / "w", evaluation=fixed)))
    assert all(u.params.last_step is None for u in plan.units if u.kind == "evaluate")
    # the last step not decomposed: refused at plan time, naming it and what to set
    cfg = config(models, tmp_path / "w", evaluation=evaluation, decomposition={"incremental": False})
    with pytest.raises(ConfigError, match=r"sft → rl\) too, which is not decomposed: set decomposition.incremental"):
        plan_sweep(SweepConfig.model_validate(cfg))


def test_yaml_bare_off_and_null_are_variant_names(tmp_path):
    text = "name: t\nworkdir: w\nchains: [{name: c, base: {id: b, source: x}}]\nvariants: {names: [off, null]}\n"
    cfg = SweepConfig.model_validate(yaml.safe_load(text))
    assert cfg.variants.names == ["off", "null"]


# ------------------------------------------------------------------------- running


def test_sweep_runs_then_rerun_computes_nothing_and_logs_no_duplicates(models, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = SweepConfig.model_validate(config(models, tmp_path / "w"))
    tracking = TrackingConfig(uri=uri, experiment="sweep_test")
    first = run_sweep(plan_sweep(cfg), tracking=tracking, progress=False)
    assert first.ok and len(first.ran) == len(first.plan.units)
    records = {u.id: Records(first.plan.workdir).read(u) for u in first.plan.units}
    snap = results_snapshot(tmp_path / "w")

    again = run_sweep(plan_sweep(cfg), tracking=tracking, progress=False)
    assert again.ok and again.ran == []
    assert {u.id: Records(again.plan.workdir).read(u) for u in again.plan.units} == records
    assert_same(results_snapshot(tmp_path / "w"), snap)

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("sweep_test")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    keys = [r.data.tags["grrr.key"] for r in runs]
    assert len(keys) == len(set(keys))
    kinds = sorted(r.data.tags["grrr.kind"] for r in runs)
    assert kinds.count("transition") == 4 and kinds.count("comparison") == 3
    assert kinds.count("variant") == 4 and kinds.count("sweep") == 1
    assert all(r.data.tags.get("grrr.complete") == "true" for r in runs)
    report = tmp_path / "w" / "report"
    assert {"units.csv", "transitions.csv", "comparisons.csv", "stats_overall.csv"} <= {
        p.name for p in report.iterdir()
    }


def _done_units(workdir: Path) -> int:
    n = 0
    for p in (workdir / ".sweep" / "units").glob("*.json"):
        try:
            n += json.loads(p.read_text())["status"] == "done"
        except (ValueError, KeyError):
            pass
    return n


@pytest.mark.slow
def test_kill_9_at_any_moment_then_resume_equals_uninterrupted_sweep(models, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # both tracked (tracking adds per-transition stats artifacts to the stats folder)
    clean_cfg = write_cfg(tmp_path / "clean.yaml", config(models, tmp_path / "clean", tracking={"enabled": True}))
    killed_cfg = write_cfg(tmp_path / "killed.yaml", config(models, tmp_path / "killed", tracking={"enabled": True}))
    cli("sweep", clean_cfg, "--tracking-uri", f"sqlite:///{tmp_path / 'clean.db'}", cwd=tmp_path)
    total = len(plan_sweep(SweepConfig.model_validate(config(models, tmp_path / "killed"))).units)

    # kill at three moments: during the decompositions, the statistics and the variant builds
    for target in (2, 6, 9):
        proc = subprocess.Popen(
            [sys.executable, "-m", "grrr_stream.cli", "sweep", str(killed_cfg), "--tracking-uri", uri],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 180
        while proc.poll() is None and _done_units(tmp_path / "killed") < target and time.monotonic() < deadline:
            time.sleep(0.005)
        assert proc.poll() is None, "the sweep finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert _done_units(tmp_path / "killed") < total

    status = cli("status", killed_cfg, cwd=tmp_path)
    assert "pending" in status.stdout or "interrupted" in status.stdout
    done_before = {
        p.name: p.read_text()
        for p in (tmp_path / "killed" / ".sweep" / "units").glob("*.json")
        if json.loads(p.read_text())["status"] == "done"
    }
    cli("sweep", killed_cfg, "--tracking-uri", uri, cwd=tmp_path)
    # nothing that was recorded done ran again
    for name, text in done_before.items():
        assert (tmp_path / "killed" / ".sweep" / "units" / name).read_text() == text
    assert_same(results_snapshot(tmp_path / "killed"), results_snapshot(tmp_path / "clean"))

    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("grrr_stream").experiment_id], max_results=1000)
    keys = [r.data.tags["grrr.key"] for r in runs]
    assert len(keys) == len(set(keys)), "a killed sweep left duplicate MLflow runs"
    assert all(r.data.tags.get("grrr.complete") == "true" for r in runs)


@pytest.mark.slow
def test_failing_unit_is_recorded_and_the_rest_goes_on(models, tmp_path):
    cfg = config(models, tmp_path / "w")
    missing = tmp_path / "not_downloaded_yet"
    cfg["chains"][0]["models"].append({"id": "dpo", "source": str(missing), "parent": "sft", "method": "DPO"})
    path = write_cfg(tmp_path / "sweep.yaml", cfg)
    run = cli("sweep", path, "--no-track", cwd=tmp_path, check=False)
    assert run.returncode == 1, run.stderr
    assert "not_downloaded_yet" in run.stdout
    status = cli("status", path, cwd=tmp_path, check=False)
    assert status.returncode == 1
    lines = {ln.split()[1]: ln.split()[0] for ln in status.stdout.splitlines() if ln.startswith("  ")}
    assert lines["decompose/sft-to-dpo"] == "failed" and lines["decompose/base-to-dpo"] == "failed"
    assert lines["compare/sequential/base-to-sft--base-to-dpo"] == "blocked"
    assert "not_downloaded_yet" in status.stdout
    plan = plan_sweep(SweepConfig.model_validate(cfg))
    states = {r["unit"]: r["state"] for r in sweep_status(plan)}
    assert all(s == "done" for u, s in states.items() if "dpo" not in u and not u.startswith("stats/"))
    assert states["stats/summary"] == "blocked"  # it summarises every transition

    records = Records(plan.workdir)
    before = {u: records.read(plan.unit(u)) for u, s in states.items() if s == "done"}
    shutil.copytree(models / "rl", missing)  # the checkpoint arrives: rerun finishes only what was missing
    cli("sweep", path, "--no-track", cwd=tmp_path)
    assert {u: records.read(plan.unit(u)) for u in before} == before
    # the arrived checkpoint now has a content fingerprint, part of its units' keys: plan again
    assert all(r["state"] == "done" for r in sweep_status(plan_sweep(SweepConfig.model_validate(cfg))))


def test_second_sweep_on_the_same_workdir_is_refused_clearly(models, tmp_path):
    path = write_cfg(tmp_path / "sweep.yaml", config(models, tmp_path / "w"))
    with SweepLock(tmp_path / "w"):
        second = cli("sweep", path, "--no-track", cwd=tmp_path, check=False)
        assert second.returncode == 2
        assert "another grrr-stream sweep is running" in second.stderr
        assert f"pid {os.getpid()}" in second.stderr
    assert not (tmp_path / "w" / "stores").exists()


def test_dry_run_prints_the_plan_and_runs_nothing(models, tmp_path):
    path = write_cfg(tmp_path / "sweep.yaml", config(models, tmp_path / "w"))
    out = cli("sweep", path, "--dry-run", cwd=tmp_path).stdout
    assert "decompose/sft-to-rl" in out and "after decompose/base-to-sft, decompose/base-to-rl" in out
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_local_cluster_of_two_workers_matches_one_process(models, tmp_path):
    multi = SweepConfig.model_validate(config(models, tmp_path / "two"))
    # LAPACK's last bits depend on the thread count; each local:2 worker runs torch on
    # cpu_count // 2 threads, so the single-process run gets as many, in a fresh process
    # (vLLM, used by earlier tests in this one, pins torch's thread setting).
    threads = str(max(1, (os.cpu_count() or 1) // 2))
    cli(
        "sweep",
        write_cfg(tmp_path / "one.yaml", config(models, tmp_path / "one")),
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": threads},
    )
    # tracked: both workers write to one SQLite MLflow store at the same time
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    b = run_sweep(
        plan_sweep(multi), scheduler="local:2", progress=False, tracking=TrackingConfig(uri=uri, experiment="cluster")
    )
    assert b.ok, {u: (b.records.get(u) or {}).get("traceback") for u in b.failed} or b.states
    hosts = {Records(b.plan.workdir).read(u)["pid"] for u in b.plan.units if KINDS[u.kind].on_worker}
    assert os.getpid() not in hosts  # the heavy units ran in the worker processes
    spread = [Records(b.plan.workdir).read(u)["result"]["spread_over"] for u in b.plan.units if u.kind == "decompose"]
    assert spread and all(n >= 1 for n in spread)  # each transition's matrices went out as Dask tasks
    assert_same(results_snapshot(tmp_path / "two"), results_snapshot(tmp_path / "one"))
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("cluster").experiment_id], max_results=1000)
    assert sorted(r.data.tags["grrr.kind"] for r in runs).count("transition") == 4
    assert all(r.data.tags.get("grrr.complete") == "true" for r in runs)


def test_math_subset_flag_adds_a_suite_of_the_five_benchmarks(tmp_path):
    out = cli(
        "sweep",
        ROOT / "configs" / "demo.yaml",
        "--workdir",
        tmp_path / "w",
        "--dry-run",
        "--math-subset",
        "3",
        "--bench-dir",
        tmp_path / "bench",
        cwd=tmp_path,
    ).stdout
    for t in ("base-to-sft", "base-to-rl", "base-to-sibling", "sft-to-rl"):
        assert (
            f"evaluate/{t}/math: evaluate 10 variant(s) of {t} on math500, aime24, amc23, minerva_math, "
            f"olympiadbench (first 3 each)" in out
        )
        assert f"evaluate/{t}: evaluate 10 variant(s) of {t} on arith" in out
    bad = cli("sweep", ROOT / "configs" / "demo.yaml", "--dry-run", "--math-subset", "0", cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "--math-subset: must be an integer in 1..2147483647 (got 0)" in bad.stderr


@pytest.mark.slow  # ~20-27 s: three sweeps; keeps the default suite under ~15 min on 2 cores
def test_changed_setting_makes_new_results_beside_old_and_switching_back_reuses_them(models, tmp_path):
    def run(resamples, **kw):
        cfg = config(
            models,
            tmp_path / "w",
            statistics={"resamples": resamples, "null_draws": 200},
            variants={"enabled": False},
            **kw,
        )
        return run_sweep(plan_sweep(SweepConfig.model_validate(cfg)), progress=False)

    first = run(200)
    assert first.ok
    second = run(300)  # a statistics setting: statistics and comparisons only, into new folders
    assert sorted(second.ran) == sorted(u.id for u in second.plan.units if u.kind in ("stats", "compare"))
    old = {u.id: u.out for u in first.plan.units}
    assert all(Path(old[u]).is_dir() and old[u] != second.plan.unit(u).out for u in second.ran)
    assert run(200).ran == []  # back to the first setting: its results are still there and done
    assert run(200, progress=True, decomposition={"device": "cpu", "verify_resume": False}).ran == []


@pytest.mark.slow  # ~20-27 s: three sweeps; keeps the default suite under ~15 min on 2 cores
def test_checkpoint_replaced_in_place_gets_new_results(models, tmp_path):
    local = tmp_path / "models"
    shutil.copytree(models, local)
    cfg = config(local, tmp_path / "w", variants={"enabled": False}, statistics={"enabled": False})
    first = run_sweep(plan_sweep(SweepConfig.model_validate(cfg)), progress=False)
    assert first.ok
    shutil.rmtree(local / "rl")
    shutil.copytree(models / "sibling", local / "rl")  # another model under the same path
    plan = plan_sweep(SweepConfig.model_validate(cfg))
    stale = {u.id for u in plan.units if u.id.endswith("-to-rl")}
    rows = {r["unit"]: r["state"] for r in sweep_status(plan)}
    assert {u for u, s in rows.items() if s != "done"} == stale == {"decompose/sft-to-rl", "decompose/base-to-rl"}
    again = run_sweep(plan, progress=False)
    assert again.ok and sorted(again.ran) == sorted(stale)
    assert {plan.unit(u).out for u in stale}.isdisjoint(first.plan.unit(u).out for u in stale)


def test_sampling_settings_key_evaluations_and_metrics_only_recompute_tables(models, tmp_path):
    def evaluate_unit(**sampling):
        cfg = config(
            models,
            tmp_path / "w",
            evaluation={"enabled": True, "benchmarks": ["b"], "bench_dir": str(tmp_path), **sampling},
            variants={"enabled": False},
        )
        return plan_sweep(SweepConfig.model_validate(cfg)).unit("evaluate/base-to-sft")

    greedy = evaluate_unit()
    hot = evaluate_unit(sampling={"n": 4, "temperature": 0.7})
    warm = evaluate_unit(sampling={"n": 4, "temperature": 0.6})
    assert len({greedy.key, hot.key, warm.key}) == 3 and len({greedy.out, hot.out, warm.out}) == 3
    assert evaluate_unit(sampling={"n": 4, "temperature": 0.7}).key == hot.key  # back: the same results
    # pass@k, maj@k and the table metric are computed from the answers: same key, same folder
    maj = evaluate_unit(sampling={"n": 4, "temperature": 0.7, "maj_k": [4]}, metric="maj@4")
    assert (maj.key, maj.out) == (hot.key, hot.out) and maj.params.options.metric == "maj@4"
