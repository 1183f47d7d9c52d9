"""The evaluation designs (grrr_stream/evaluation/designs/): a design is one record in one registry, and nothing
outside that package compares a design's name. A design planted in the registry alone (here, the fixed design
under another name that answers only the first half of each benchmark) runs through the pipeline with the
stand-in engine, is named in its results' keys and record, is refused by name where unknown, and prints."""

from __future__ import annotations

import ast
import io
import json
from pathlib import Path

import pytest

pytest.importorskip("math_verify", reason="grading needs math-verify (the eval extra)")

from helpers.stand_in import SETTINGS, StandInEngine, sums_transition  # noqa: E402

from grrr_stream.errors import ConfigError  # noqa: E402
from grrr_stream.evaluation import designs  # noqa: E402
from grrr_stream.evaluation.designs import fixed  # noqa: E402
from grrr_stream.evaluation.designs.base import EvaluationDesign  # noqa: E402
from grrr_stream.evaluation.pipeline import EvaluationRequest, run_evaluation  # noqa: E402
from grrr_stream.evaluation.settings import EvaluationOptions  # noqa: E402

PKG = Path(designs.__file__).resolve().parents[2]


def _first_half(evaluation, order, slot, scores, log):
    """The fixed design on the first half of each benchmark's problems."""
    for b in evaluation.benches:
        del b.problems[len(b.problems) // 2 :]
    fixed.score(evaluation, order, slot, scores, log)


HALF = EvaluationDesign(
    "half",
    score=_first_half,
    differences=fixed.differences,
    forecast=lambda variants, sizes, settings: ([0.5] * len(variants), [1.0] * len(variants), "half of each"),
)


@pytest.fixture(scope="module")
def transition(tmp_path_factory):
    return sums_transition(tmp_path_factory.mktemp("designs"), n_a=10, n_b=10)  # 100 problems


def test_a_design_planted_in_the_registry_alone_runs_end_to_end(transition, tmp_path, monkeypatch):
    _, _, store, bench = transition
    monkeypatch.setitem(designs.DESIGNS, "half", HALF)
    opts = EvaluationOptions(engine=SETTINGS, design="half")
    res = run_evaluation(
        EvaluationRequest(store, tmp_path / "e", ["full", "base"], ["sums"], bench, opts),
        engine_factory=StandInEngine,
        log=lambda m: None,
    )
    assert {r.n for r in res.results} == {50}  # its own rule: half of the 100 problems
    record = json.loads((tmp_path / "e" / "evaluation.json").read_text())
    assert record["design"] == "half" and res.design == "half" and res.design_params == {"design": "half"}
    # named in the keys (not the paper's design, whose keys hold no design), and nowhere compared by name
    assert opts.key_fields()["design"] == "half" and "design" not in EvaluationOptions(engine=SETTINGS).key_fields()
    from grrr_stream.cli.printing import print_evaluation

    text = io.StringIO()
    print_evaluation(res, text)
    assert "base" in text.getvalue()


def test_an_unknown_design_is_refused_by_name_before_an_engine_starts(transition, tmp_path):
    _, _, store, bench = transition
    opts = EvaluationOptions(engine=SETTINGS, design="halves")

    def no_engine(*a, **k):
        raise AssertionError("an engine was started")

    with pytest.raises(ConfigError, match="'halves' is not one of fixed, adaptive"):
        run_evaluation(
            EvaluationRequest(store, tmp_path / "x", ["full", "base"], ["sums"], bench, opts),
            engine_factory=no_engine,
            log=lambda m: None,
        )


def _compares_a_design_name(node: ast.Compare) -> bool:
    """``x.design == 'adaptive'``, ``design != "fixed"``, ``"adaptive" == options.design``, ... (or the adaptive
    design's old name, 'sequential')"""
    sides = [node.left, *node.comparators]
    names = {"fixed", "adaptive", "sequential"}
    literal = any(isinstance(s, ast.Constant) and s.value in names for s in sides)
    about_design = any("design" in ast.unparse(s) for s in sides if not isinstance(s, ast.Constant))
    return literal and about_design and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops)


def test_no_module_outside_the_designs_compares_a_design_name():
    found = []
    for path in sorted(PKG.rglob("*.py")):
        if "designs" in path.relative_to(PKG).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and _compares_a_design_name(node):
                found.append(f"{path.relative_to(PKG)}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
    # and the check finds one where there is one
    planted = ast.parse('if opts.design == "adaptive": pass').body[0].test
    assert _compares_a_design_name(planted)
