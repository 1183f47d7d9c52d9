"""A missing file is a damaged file: what a unit's "done" rests on is checked for presence as well as digest.

A deleted summary makes its evaluation stale (summarised again from the answers, generating nothing) and the rerun's
claims equal the first run's; claims recomputed while a summary is missing are refused naming it, never written
over fewer transitions; a tiny chain whose file list is deleted is written again and checked against its files.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from grrr_stream.errors import GrrrError
from grrr_stream.evaluation.answers import verified_summary
from grrr_stream.evaluation.scoring import result_path
from grrr_stream.sweep import plan_sweep
from grrr_stream.sweep.kinds import KINDS
from grrr_stream.sweep.kinds.claims import LEFT_OUT
from grrr_stream.sweep.records import Records, unit_state

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[2]


def test_a_deleted_summary_is_summarised_again_and_claims_refuse_to_run_without_it(tmp_path):
    pytest.importorskip("math_verify", reason="grading needs math-verify (the eval extra)")
    from helpers.report_sweep import run_small_sweep
    from helpers.stand_in import StandInEngine

    first = run_small_sweep(tmp_path)
    assert first.ok, first.states
    plan = first.plan
    records = Records(plan.workdir)
    evaluation = next(u for u in plan.units if u.kind == "evaluate")
    suite = next(u for u in plan.units if u.kind == "claims")
    claims_before = json.loads((Path(suite.out) / "claims.json").read_text())
    assert claims_before["counts"]["transitions"] == 2

    summary = result_path(Path(evaluation.out), "diag", "sums")
    kept = summary.read_text()
    summary.unlink()
    assert unit_state(evaluation, records)[0] == "stale"

    # the claims computed now would rest on one evaluation fewer: refused, naming the missing file
    with pytest.raises(GrrrError, match=str(summary).replace("\\", "\\\\") + " is missing"):
        KINDS["claims"].run(suite, None)

    class Refusing(StandInEngine):
        def generate(self, prompts, sampling=None):
            raise AssertionError("a missing summary is summarised again from the answers, nothing generated")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("helpers.stand_in.StandInEngine", Refusing)
        again = run_small_sweep(tmp_path)
    assert again.ok, again.states
    assert evaluation.id in again.ran
    assert verified_summary(summary) == json.loads(kept)
    assert json.loads((Path(suite.out) / "claims.json").read_text())["counts"] == claims_before["counts"]


def test_claims_over_evaluations_with_no_per_problem_results_are_refused_not_written_empty(tmp_path):
    """An evaluation whose summaries carry no per-problem values (an older version's) gives no claims and is named
    in the claims' ``left_out``; a suite none of whose evaluations has them is refused, never written as a table
    over 0 transitions."""
    pytest.importorskip("math_verify", reason="grading needs math-verify (the eval extra)")
    from helpers.report_sweep import run_small_sweep

    first = run_small_sweep(tmp_path)
    assert first.ok, first.states
    suite = next(u for u in first.plan.units if u.kind == "claims")
    from grrr_stream.evaluation.answers import summary_text

    def strip(e):
        for v in e.variants:
            for b in e.benchmarks:
                p = result_path(Path(e.evaluation_out), v, b)
                d = {
                    k: x for k, x in json.loads(p.read_text()).items() if k not in ("digest", "scores", "correct_bits")
                }
                p.write_text(summary_text(d))

    first_e, second_e = suite.params.evaluations
    strip(first_e)  # one of two: the claims cover the other and name the one they left out
    KINDS["claims"].run(suite, None)
    summary = json.loads((Path(suite.out) / "claims.json").read_text())
    assert summary["counts"]["transitions"] == 1
    assert summary["left_out"] == [{"transition": first_e.transition, "why": LEFT_OUT}]
    strip(second_e)
    (Path(suite.out) / "claims.json").unlink()
    with pytest.raises(GrrrError, match="none of the suite's 2 evaluation"):
        KINDS["claims"].run(suite, None)
    assert not (Path(suite.out) / "claims.json").exists()


def test_a_tiny_chain_whose_file_list_is_gone_is_written_again_and_checked(tmp_path):
    """The demo's generate unit with its files.json deleted is damaged; its rerun copies the shipped chain again,
    records the list and is done; had a model file been changed meanwhile, the rerun is refused naming it."""
    from grrr_stream.sweep.config import load_sweep_config

    plan = plan_sweep(load_sweep_config(ROOT / "configs" / "demo.yaml", workdir=tmp_path / "w"))
    gen = next(u for u in plan.units if u.kind == "generate")
    kind = KINDS["generate"]
    ctx = SimpleNamespace(progress=None)
    kind.run(gen, ctx)
    assert kind.done(gen)
    files = Path(gen.out) / "files.json"
    listed = json.loads(files.read_text())["files"]
    files.unlink()
    assert not kind.done(gen)
    kind.run(gen, ctx)
    assert kind.done(gen) and json.loads(files.read_text())["files"] == listed

    files.unlink()
    model = next(p for p in sorted(Path(gen.out).rglob("*.safetensors")))
    with model.open("r+b") as f:
        f.seek(-4, 2)
        f.write(b"\x00\x00\x80\x7f")
    with pytest.raises(GrrrError, match="differs from the one this sweep's results rest on"):
        kind.run(gen, ctx)
