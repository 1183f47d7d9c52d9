"""The evaluation's options are defined once (evaluation.settings.EvaluationOptions): a sweep's evaluation section
extends them, its evaluate units carry them and the request takes them, so an option set in a config reaches
the pipeline without being copied field by field, and enters a unit's key only as key_fields says."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from grrr_stream.config import TrackingConfig
from grrr_stream.evaluation import pipeline
from grrr_stream.evaluation.settings import EvaluationOptions
from grrr_stream.sweep.config import SweepEvaluation, load_sweep_config
from grrr_stream.sweep.context import RunContext
from grrr_stream.sweep.kinds import decompose, evaluate
from grrr_stream.sweep.plan import plan_sweep

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = set(EvaluationOptions.model_fields)


def test_no_one_echoes_the_options_field_by_field():
    assert issubclass(SweepEvaluation, EvaluationOptions)
    assert not OPTIONS & set(evaluate.EvaluateParams.model_fields), "EvaluateParams carries them as `options`"
    assert not OPTIONS & {f.name for f in dataclasses.fields(pipeline.EvaluationRequest)}, "request.options"
    assert {"limit", "lenient", "engine", "sampling", "metric"} <= OPTIONS


def _evaluate_units(tmp_path: Path, **section):
    cfg = load_sweep_config(ROOT / "configs" / "demo.yaml", workdir=tmp_path / "w")
    cfg = cfg.model_copy(update={"evaluation": cfg.evaluation.model_copy(update=section)})
    return [u for u in plan_sweep(cfg).units if u.kind == evaluate.NAME]


def test_an_option_set_in_the_config_reaches_the_request_and_the_key(tmp_path, monkeypatch):
    (plain, *_) = _evaluate_units(tmp_path)
    (lenient, *_) = _evaluate_units(tmp_path, lenient=True, limit=7)
    # off, lenient is absent from the key (keys made before it existed stay); on, it changes the key
    assert "lenient" not in plain.params.key_content() and lenient.params.key_content()["lenient"] is True
    assert lenient.key != plain.key and lenient.params.options.limit == 7
    seen = []
    monkeypatch.setattr(
        pipeline,
        "run_evaluation",
        lambda request, **kw: (
            seen.append(request) or dataclasses.make_dataclass("R", [("accuracy_rows", list), ("info", dict)])([], {})
        ),
    )
    ctx = RunContext(
        str(tmp_path / "w"),
        TrackingConfig(),
        False,
        None,
        None,
        outs={decompose.unit_id(lenient.params.transition): str(tmp_path / "store")},
    )
    evaluate.run(lenient, ctx)
    (request,) = seen
    assert request.options == lenient.params.options and request.options.lenient and request.options.limit == 7
    assert request.rest_from == lenient.params.rest_from and list(request.benchmarks) == list(lenient.params.benchmarks)


@pytest.mark.parametrize(
    "keyword", ["settings", "sampling", "metric", "materialize", "limit", "lenient", "template", "instruction"]
)
def test_the_options_are_given_as_one_object_only(tmp_path, keyword):
    """A request's options are its EvaluationOptions, whole: a setting given beside them as a keyword is refused,
    so that no request holds one value in a keyword and another in its options."""
    from grrr_stream.evaluation.pipeline import EvaluationRequest
    from grrr_stream.evaluation.settings import EvaluationOptions

    with pytest.raises(TypeError, match=keyword):
        EvaluationRequest(tmp_path, tmp_path / "o", ["full"], ["arith"], "tinychain", **{keyword: None})
    assert EvaluationRequest(tmp_path, tmp_path, ["full"], ["arith"], "x").options == EvaluationOptions()
