"""The adaptive design in the evaluation pipeline, with the deterministic stand-in engine: which problems each
variant answers, what its rows say, and that a run killed mid-chunk resumes exactly (tests/stats/test_anytime.py
tests the statistics themselves)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("math_verify", reason="grading needs math-verify (the eval extra)")

from helpers.stand_in import SETTINGS, StandInEngine, sums_transition  # noqa: E402

from grrr_stream.errors import ConfigError, RenamedSettingWarning  # noqa: E402
from grrr_stream.evaluation.pipeline import EvaluationRequest, run_evaluation  # noqa: E402
from grrr_stream.evaluation.settings import AdaptiveSettings, EvaluationOptions, build_evaluation_options  # noqa: E402
from grrr_stream.stats.order import problem_order  # noqa: E402

VARIANTS = ["full", "base", "diag", "offnull"]
# a chunk at a time, every variant on ±12 points (diag too: by default it stops on its thresholds alone)
SEQ = AdaptiveSettings(chunk=40, precision_points=12.0, seed=3, lookahead=0.0, variant_precision_points={})


@pytest.fixture(scope="module")
def transition(tmp_path_factory):
    return sums_transition(tmp_path_factory.mktemp("seq"), n_a=20, n_b=20)  # 400 problems


def _request(store, bench, out, adaptive=SEQ, **kw):
    return EvaluationRequest(
        store,
        out,
        VARIANTS,
        ["sums"],
        bench,
        EvaluationOptions(engine=SETTINGS, design="adaptive", adaptive=adaptive, **kw),
    )


def _records(out: Path, variant: str) -> dict[int, dict]:
    rows = [json.loads(x) for x in (out / variant / "sums.jsonl").read_text().splitlines()]
    return {r["idx"]: r for r in rows}


def test_each_variant_answers_a_prefix_of_the_order_up_to_its_stop(transition, tmp_path):
    _, _, store, bench = transition
    res = run_evaluation(_request(store, bench, tmp_path / "e"), engine_factory=StandInEngine, log=lambda m: None)
    order = [i for _, i in problem_order({"sums": 400}, seed=3).items]
    rows = {r["variant"]: r for r in res.differences}
    assert all(r["interval"] == "anytime-valid" for r in rows.values())
    stops = {v: rows[v]["problems"] for v in VARIANTS}
    assert stops["full"] == max(stops[v] for v in VARIANTS if v != "full")
    assert any(stops[v] < 400 for v in VARIANTS)  # 12 points of precision: the stand-in's variants stop early
    for v in VARIANTS:
        answered = set(_records(tmp_path / "e", v))
        assert set(order[: stops[v]]) <= answered  # the prefix the row rests on, all answered
        assert stops[v] % 40 == 0 or stops[v] == 400  # decisions at chunk boundaries only
        if v != "full":
            assert answered == set(order[: stops[v]])  # and nothing past its stop
            assert rows[v]["stopped"] in ("thresholds", "precision", "exhausted")
    # the row's numbers, recounted from the records of the problems it rests on
    full, diag = _records(tmp_path / "e", "full"), _records(tmp_path / "e", "diag")
    mine = order[: stops["diag"]]
    diff = 100 * np.mean([float(diag[i]["correct"]) - float(full[i]["correct"]) for i in mine])
    assert rows["diag"]["minus_full"] == pytest.approx(diff)
    # at the census the interval closes on the estimate: equal up to rounding
    assert rows["diag"]["minus_full_ci_lo"] - 1e-9 <= diff <= rows["diag"]["minus_full_ci_hi"] + 1e-9
    acc = {r["variant"]: r for r in res.accuracy_rows}
    assert acc["diag"]["answers"] == stops["diag"] and acc["full"]["answers"] == stops["full"]
    saved = json.loads((tmp_path / "e" / "sequential.json").read_text())
    assert saved["variants"]["diag"]["problems"] == stops["diag"] and saved["settings"]["seed"] == 3
    assert json.loads((tmp_path / "e" / "evaluation.json").read_text())["design"] == "sequential"
    assert res.info["design"] == "sequential" and "gain" in res.info


def test_adaptive_needs_full_and_an_engine(transition, tmp_path):
    _, _, store, bench = transition
    with pytest.raises(ConfigError, match="evaluate full"):
        run_evaluation(
            EvaluationRequest(
                store,
                tmp_path / "x",
                ["base", "diag"],
                ["sums"],
                bench,
                EvaluationOptions(engine=SETTINGS, design="adaptive"),
            ),
            engine_factory=StandInEngine,
            log=lambda m: None,
        )
    with pytest.raises(ConfigError, match="materialize: engine"):
        run_evaluation(
            EvaluationRequest(
                store,
                tmp_path / "x",
                ["full", "diag"],
                ["sums"],
                bench,
                EvaluationOptions(engine=SETTINGS, design="adaptive", materialize="folder"),
            ),
            engine_factory=StandInEngine,
            log=lambda m: None,
        )


def test_the_design_enters_the_key_only_when_adaptive():
    fixed = EvaluationOptions().key_fields()
    assert "design" not in fixed and "sequential" not in fixed
    seq = EvaluationOptions(design="adaptive").key_fields()
    # keys hold the design's old name (evaluation/settings.py, RECORDED_NAMES): results made before the rename match
    assert seq["design"] == "sequential" and seq["sequential"]["precision_points"] == 2.0
    assert EvaluationOptions(design="adaptive", adaptive=AdaptiveSettings(seed=1)).key_fields() != seq
    # the sequence is always in the key: a default that changes must not relabel results made with another
    assert seq["sequential"]["sequence"] == "betting"
    eb = EvaluationOptions(design="adaptive", adaptive=AdaptiveSettings(sequence="eb")).key_fields()
    assert eb["sequential"]["sequence"] == "eb" and {k: v for k, v in eb["sequential"].items() if k != "sequence"} == {
        k: v for k, v in seq["sequential"].items() if k != "sequence"
    }
    assert seq["sequential"]["retention_precision_pct"] == {}
    rp = AdaptiveSettings(retention_precision_pct={"diag": 10.0})
    assert EvaluationOptions(design="adaptive", adaptive=rp).key_fields()["sequential"]["retention_precision_pct"] == {
        "diag": 10.0
    }


def _validated(values: dict) -> tuple[EvaluationOptions, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opts = build_evaluation_options(values)
    return opts, [str(w.message) for w in caught if issubclass(w.category, RenamedSettingWarning)]


def test_the_old_design_name_sequential_still_works_and_warns_once():
    opts, said = _validated({"design": "sequential"})
    assert opts.design == "adaptive" and issubclass(RenamedSettingWarning, DeprecationWarning)
    assert said == ["evaluation design: sequential is deprecated (renamed in issue 49): write design: adaptive"]
    assert opts.key_fields() == EvaluationOptions(design="adaptive").key_fields()  # the same results, the same keys


def test_the_old_settings_block_sequential_still_works_and_warns_once():
    opts, said = _validated({"design": "adaptive", "sequential": {"chunk": 50}})
    assert opts.adaptive.chunk == 50 and len(said) == 1 and "'sequential:'" in said[0] and "'adaptive:'" in said[0]
    new, none = _validated({"design": "adaptive", "adaptive": {"chunk": 50}})
    assert none == [] and new.key_fields() == opts.key_fields()
    both, said = _validated({"design": "sequential", "sequential": {"chunk": 50}})  # both old spellings: two lines
    assert both == opts and len(said) == 2


def test_the_old_and_the_new_settings_block_at_once_are_refused():
    with pytest.raises(ConfigError, match="both 'sequential' and 'adaptive' are given"):
        build_evaluation_options({"design": "adaptive", "sequential": {"chunk": 50}, "adaptive": {"chunk": 40}})


def test_a_sweep_config_in_the_old_spelling_has_the_same_units_and_keys(tmp_path):
    """configs/demo_adaptive.yaml written as it was before the rename (demo_sequential.yaml): one line per old
    spelling, and the same units with the same keys, so that its workdir resumes."""
    from grrr_stream.sweep.config import load_sweep_config
    from grrr_stream.sweep.plan import plan_sweep

    configs = Path(__file__).resolve().parents[2] / "configs"
    new = (configs / "demo_adaptive.yaml").read_text()
    old = tmp_path / "demo_sequential.yaml"
    old.write_text(
        new.replace("include: demo.yaml", f"include: {configs / 'demo.yaml'}").replace("adaptive", "sequential")
    )

    def keys(path):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plan = plan_sweep(load_sweep_config(path, workdir=tmp_path / "w"))
        return {u.id: u.key for u in plan.units}, [w for w in caught if issubclass(w.category, RenamedSettingWarning)]

    (now, none), (before, said) = keys(configs / "demo_adaptive.yaml"), keys(old)
    assert now == before and none == [] and len(said) == 2


def test_the_command_line_shows_a_renamed_setting_once_in_one_line(capsys):
    from grrr_stream.cli.entry import renamed_settings_shown

    with renamed_settings_shown():
        for _ in range(3):
            build_evaluation_options({"design": "sequential"})
    said = "evaluation design: sequential is deprecated (renamed in issue 49): write design: adaptive"
    assert capsys.readouterr().err == f"grrr-stream: warning: {said}\n"


def test_weighted_draws_over_two_benchmarks_answer_a_prefix_and_resume_exactly(transition, tmp_path):
    """Two pooled benchmarks of unequal size (400 and 150 problems): the order draws them about equally at first
    (weighted draws, the default), each variant answers a prefix of that seeded order up to its stop, and a run
    that lost the second half of every answers file (a crash) resumes to the same rows and answers."""
    import shutil

    _, _, store, bench = transition
    two = tmp_path / "bench"
    shutil.copytree(bench, two)
    (two / "more").mkdir()
    (two / "more" / "test.jsonl").write_text(
        "".join(
            json.dumps({"problem": f"{100 + a}+{b}", "answer": str(100 + a + b)}) + "\n"
            for a in range(15)
            for b in range(10)
        )
    )
    opts = EvaluationOptions(engine=SETTINGS, design="adaptive", adaptive=SEQ)
    assert opts.adaptive.allocation == "weighted"

    def run(out):
        req = EvaluationRequest(store, out, VARIANTS, ["sums", "more"], two, opts)
        return run_evaluation(req, engine_factory=StandInEngine, log=lambda m: None)

    whole = run(tmp_path / "w")
    order = problem_order({"sums": 400, "more": 150}, seed=3, allocation="weighted")
    assert order.allocation == "weighted" and order.census == ()
    assert 28 <= [b for b, _ in order.items[:80]].count("more") <= 52  # in proportion to size it would be ~22
    rows = {r["variant"]: r for r in whole.differences}
    assert any(rows[v]["problems"] < 550 for v in VARIANTS if v != "full")
    for v in VARIANTS:
        answered = {(b, r["idx"]) for b in ("sums", "more") for r in _records_of(tmp_path / "w", v, b)}
        prefix = {(b, i) for b, i in order.items[: rows[v]["problems"]]}
        assert prefix <= answered and (v == "full" or answered == prefix), v
    saved = json.loads((tmp_path / "w" / "sequential.json").read_text())
    assert saved["settings"]["allocation"] == "weighted"
    for v in VARIANTS:  # a crash that kept the first half of every answers file
        for b in ("sums", "more"):
            lines = (tmp_path / "w" / v / f"{b}.jsonl").read_text().splitlines(keepends=True)
            (tmp_path / "r" / v).mkdir(parents=True, exist_ok=True)
            (tmp_path / "r" / v / f"{b}.jsonl").write_text("".join(lines[: len(lines) // 2]))
    again = run(tmp_path / "r")
    assert again.differences == whole.differences
    for v in VARIANTS:
        for b in ("sums", "more"):
            assert _records_of(tmp_path / "r", v, b) == _records_of(tmp_path / "w", v, b)


def _records_of(out: Path, variant: str, bench: str) -> list[dict]:
    rows = [json.loads(x) for x in (out / variant / f"{bench}.jsonl").read_text().splitlines()]
    return sorted(rows, key=lambda r: r["idx"])


KILLER = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from helpers.stand_in import SETTINGS, StandInEngine
    from grrr_stream.evaluation.pipeline import EvaluationRequest, run_evaluation
    from grrr_stream.evaluation.settings import EvaluationOptions, AdaptiveSettings

    class Killed(StandInEngine):
        def generate(self, prompts, sampling=None):
            Killed.calls += 1
            if Killed.calls == {at}:  # inside a batch, before its answers are written
                os.kill(os.getpid(), signal.SIGKILL)
            return super().generate(prompts, sampling)

    Killed.calls = 0
    opts = EvaluationOptions(engine=SETTINGS, design="adaptive",
                             adaptive=AdaptiveSettings(chunk=40, precision_points=12.0, seed=3, lookahead={ahead}))
    run_evaluation(EvaluationRequest({store!r}, {out!r}, {variants!r}, ["sums"], {bench!r}, opts),
                   engine_factory=Killed, log=lambda m: None)
""")


@pytest.mark.parametrize("ahead", [0.0, 0.5])
def test_a_run_killed_mid_chunk_resumes_exactly(transition, tmp_path, ahead):
    """kill -9 inside a generation, then the same evaluation again: the same decisions as a run that was never
    killed (a chunk at a time: the same answers too; answering ahead, the rounds follow the answers there are, so
    the answers past a stop may differ), and the rerun generates only what was not yet written."""
    _, _, store, bench = transition
    seq = SEQ.model_copy(update={"lookahead": ahead})
    whole = run_evaluation(
        _request(store, bench, tmp_path / "whole", adaptive=seq), engine_factory=StandInEngine, log=lambda m: None
    )
    script = KILLER.format(
        tests=str(Path(__file__).parents[1]),
        at=4,
        store=str(store),
        out=str(tmp_path / "k"),
        variants=VARIANTS,
        bench=str(bench),
        ahead=ahead,
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    before = {
        v: set(_records(tmp_path / "k", v)) if (tmp_path / "k" / v / "sums.jsonl").exists() else set() for v in VARIANTS
    }
    assert 0 < sum(map(len, before.values())) < sum(r["problems"] for r in whole.differences)

    asked: list[str] = []

    class Counting(StandInEngine):
        def generate(self, prompts, sampling=None):
            asked.extend(prompts)
            return super().generate(prompts, sampling)

    again = run_evaluation(
        _request(store, bench, tmp_path / "k", adaptive=seq), engine_factory=Counting, log=lambda m: None
    )
    assert again.differences == whole.differences
    for v in VARIANTS if ahead == 0 else ():
        assert _records(tmp_path / "k", v) == _records(tmp_path / "whole", v)
    redone = sum(len(set(_records(tmp_path / "k", v)) - before[v]) for v in VARIANTS)
    assert len(asked) == redone  # nothing answered before the kill was asked again


def counting(calls: dict, key: str):
    """The stand-in engine, recording the size of each call under ``key``."""

    class Counting(StandInEngine):
        def generate(self, prompts, sampling=None):
            calls[key].append(len(prompts))
            return super().generate(prompts, sampling)

    return Counting


def test_answering_ahead_changes_no_decision(transition, tmp_path):
    """A chunk at a time, or ahead in larger batches (half-way and, the default, all the way to where the interval
    is expected to decide): the same rows; ahead asks the engine fewer, larger batches."""
    _, _, store, bench = transition
    aheads = {"0": 0.0, "0.5": 0.5, "1": 1.0}
    calls: dict[str, list[int]] = {k: [] for k in aheads}

    rows = {}
    for key, ahead in aheads.items():
        opts = EvaluationOptions(
            engine=SETTINGS,
            design="adaptive",
            adaptive=AdaptiveSettings(chunk=40, precision_points=6.0, seed=3, lookahead=ahead),
        )
        res = run_evaluation(
            EvaluationRequest(store, tmp_path / key, VARIANTS, ["sums"], bench, opts),
            engine_factory=counting(calls, key),
            log=lambda m: None,
        )
        rows[key] = res.differences
    assert rows["0"] == rows["0.5"] == rows["1"]
    assert len(calls["1"]) <= len(calls["0.5"]) < len(calls["0"])
    assert sum(calls["1"]) >= sum(calls["0.5"]) >= sum(calls["0"])
    # and the rounds follow what the intervals expect: at the default about half the calls of a chunk at a time
    # (14 against 27 on these 400 problems)
    assert len(calls["1"]) <= 0.6 * len(calls["0"])


@pytest.mark.parametrize("min_batch", [150, 400])
def test_a_call_answers_at_least_min_batch_problems_and_no_decision_changes(transition, tmp_path, min_batch):
    """Every engine call answers at least ``min_batch`` problems or all that are left of the order; the rows are
    those of a chunk at a time; at ``min_batch`` ≥ the order each variant is streamed in once (as the fixed
    design), and each variant answers at least as many problems as its decision rests on."""
    _, _, store, bench = transition
    calls: dict[str, list[tuple[str, int]]] = {"1": [], "big": []}

    rows, answered = {}, {}
    for key, batch in (("1", 1), ("big", min_batch)):
        seq = AdaptiveSettings(chunk=40, precision_points=6.0, seed=3, lookahead=0.5, min_batch=batch)
        res = run_evaluation(
            _request(store, bench, tmp_path / key, adaptive=seq),
            engine_factory=counting(calls, key),
            log=lambda m: None,
        )
        rows[key] = res.differences
        answered[key] = {v: len(_records(tmp_path / key, v)) for v in VARIANTS}
    assert rows["1"] == rows["big"]
    timing = json.loads((tmp_path / "big" / "sequential_timing.json").read_text())["calls"]
    assert len(timing) == len(calls["big"])
    done: dict[str, int] = {}
    for c in timing:  # each call from the variant's answered prefix on: at least min_batch, or the rest
        left = 400 - done.get(c["variant"], 0)
        assert c["problems"] >= min(min_batch, left), (c, left)
        done[c["variant"]] = done.get(c["variant"], 0) + c["problems"]
    assert done == answered["big"]
    decided = {r["variant"]: r["problems"] for r in rows["big"]}
    assert all(answered["big"][v] >= decided[v] for v in VARIANTS)
    if min_batch >= 400:
        assert sorted(c["variant"] for c in timing) == sorted(VARIANTS) and set(answered["big"].values()) == {400}
        assert len(calls["big"]) < len(calls["1"])
    assert len(calls["big"]) <= len(calls["1"])  # never more calls (fewer where a variant needed three rounds)


def test_an_adaptive_evaluation_with_proj_prints_full_minus_proj(transition, tmp_path):
    """full − proj comes with its anytime-valid interval (proj's paired difference, negated), so printing the
    result does not end in a KeyError after the files were written."""
    import io

    from grrr_stream.cli.printing import print_evaluation

    _, _, store, bench = transition
    req = EvaluationRequest(
        store,
        tmp_path / "p",
        ["full", "base", "proj"],
        ["sums"],
        bench,
        EvaluationOptions(engine=SETTINGS, design="adaptive", adaptive=SEQ),
    )
    res = run_evaluation(req, engine_factory=StandInEngine, log=lambda m: None)
    proj = next(r for r in res.differences if r["variant"] == "proj")
    info = res.info
    assert info["full_minus_proj"] == -proj["minus_full"]
    assert info["full_minus_proj_ci_lo"] == -proj["minus_full_ci_hi"]
    assert info["full_minus_proj_ci_lo"] <= info["full_minus_proj"] <= info["full_minus_proj_ci_hi"]
    text = io.StringIO()
    print_evaluation(res, text)
    assert "full − proj" in text.getvalue()


def _damage(path: Path, how: str, at: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    if how == "flip":
        r = json.loads(lines[at])
        r["correct"] = not r["correct"]
        lines[at] = json.dumps(r) + "\n"
    elif how == "delete":
        del lines[at]
    else:
        lines.insert(at, lines[at])
    path.write_text("".join(lines))


@pytest.mark.parametrize("how, asked", [("flip", 1), ("delete", 2), ("duplicate", 0)])
def test_a_damaged_answers_file_is_answered_again_not_kept(transition, tmp_path, how, asked):
    """A correctness bit flipped, a line deleted or duplicated in a finished run's answers: the rerun names the file,
    answers again exactly the problems whose lines do not verify, and its rows equal the undamaged run's."""
    _, _, store, bench = transition
    first = run_evaluation(_request(store, bench, tmp_path / "e"), engine_factory=StandInEngine, log=lambda m: None)
    path = tmp_path / "e" / "diag" / "sums.jsonl"
    _damage(path, how, 5)
    prompts: list[str] = []

    class Counting(StandInEngine):
        def generate(self, prompts_, sampling=None):
            prompts.extend(prompts_)
            return super().generate(prompts_, sampling)

    said: list[str] = []
    again = run_evaluation(_request(store, bench, tmp_path / "e"), engine_factory=Counting, log=said.append)
    assert again.differences == first.differences
    assert len(prompts) == asked
    assert any(str(path) in m and "answered again" in m for m in said)
    from grrr_stream.evaluation.answers import read_answers

    key = next(iter(_records(tmp_path / "e", "diag").values()))["key"]
    assert read_answers(path, key).clean()  # rewritten with the records that verify, re-chained
