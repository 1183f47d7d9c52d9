"""``engine.dtype: auto`` (grrr_stream/evaluation/dtype_choice.py): the rule on known shares, the parts each
variant is judged by, the choice on planted transitions (a large, cumulative-like update gets bfloat16, an
RL-sized increment float32, the reason naming the part that failed), the keys (answers keyed by the dtype that
produced them, the sweep unit's key by 'auto' and its floor), and what an evaluation records of it (its record,
its result, MLflow) with the stand-in engine of tests/evaluation/test_evaluate.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from helpers.stand_in import StandInEngine, sums_transition

from grrr_stream.errors import ConfigError
from grrr_stream.evaluation.dtype_choice import choose_engine_dtype, evaluated_parts, resolve_engine_dtype
from grrr_stream.evaluation.settings import EngineSettings, EvaluationOptions, build_engine_settings
from grrr_stream.fixtures.synthetic import Update
from grrr_stream.store.transition_store import StoredTransition
from grrr_stream.sweep.kinds.evaluate.rows import DTYPE_TABLE, dtype_row, report
from grrr_stream.sweep.rows import Report
from grrr_stream.variants.spec import parse_variants
from grrr_stream.variants.survival import ComponentSurvival

CUMULATIVE = Update(r_delta=0.2, plant=(0.3, 0.5, 0.2))  # ‖ΔW‖/‖W0‖ of a whole post-training
INCREMENT = Update(r_delta=3e-4, plant=(0.3, 0.5, 0.2))  # of an RL step after SFT
AUTO = EngineSettings(dtype="auto", max_new_tokens=32)
VARIANTS = ["base", "full", "diag", "offnull"]


def _s(c: str, kept: float) -> ComponentSurvival:
    return ComponentSurvival(c, kept, f"layers.0.{c}", kept / 2, 3)


def test_the_rule_takes_bf16_only_when_every_part_keeps_the_floor():
    assert choose_engine_dtype({"diag": _s("diag", 0.999), "off": _s("off", 1.0)}, 0.999)[0] == "bfloat16"
    dtype, reason = choose_engine_dtype(
        {"diag": _s("diag", 0.9989), "off": _s("off", 0.5)}, 0.999, {"off": ["off", "offnull"], "diag": ["diag"]}
    )
    assert dtype == "float32"
    # each failed part, lowest first, with its worst matrix and the variants that carry it
    assert reason.index("off keeps 0.5000") < reason.index("diag keeps 0.9989")
    assert "layers.0.off: 0.2500" in reason and "carried by off, offnull" in reason
    assert choose_engine_dtype({}, 0.999)[0] == "bfloat16"  # nothing rounding can take


def test_the_parts_each_variant_is_judged_by():
    specs = parse_variants(
        ["base", "full", "proj", "diag", "offnull", "randrm-0", "off-principal-4", "channels-rest-null"]
    )
    narrow = evaluated_parts(specs, checkpoints_narrow=True)
    assert narrow == {
        "diag": ["diag", "randrm-0"],
        "off": ["offnull", "randrm-0", "off-principal-4"],
        "null": ["offnull", "randrm-0", "channels-rest-null"],
    }
    wide = evaluated_parts(specs, checkpoints_narrow=False)  # W1 copied is rounded too: full, proj judged
    assert wide["diag"] == ["full", "proj", "diag", "randrm-0"]
    assert evaluated_parts(parse_variants(["base", "full"]), checkpoints_narrow=True) == {}


def test_the_floor_is_validated():
    assert build_engine_settings({"dtype": "auto", "auto_min_energy": 1.0}).auto_min_energy == 1.0
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ConfigError, match="auto_min_energy"):
            build_engine_settings({"dtype": "auto", "auto_min_energy": bad})
    with pytest.raises(ValueError):
        AUTO.resolved("auto")


def test_keys_hold_auto_and_its_floor_for_units_and_the_resolved_dtype_for_answers():
    plain = EngineSettings().result_fields()
    assert "auto_min_energy" not in plain  # keys of set dtypes are as they were (tests/sweep_keys.json)
    assert plain == {
        "dtype": "float32",
        "max_new_tokens": 3000,
        "seed": 0,
        "tensor_parallel_size": 1,
        "max_model_len": None,
        "enforce_eager": False,
    }
    unit = EvaluationOptions(engine=AUTO).key_fields()["engine"]
    assert unit["dtype"] == "auto" and unit["auto_min_energy"] == 0.999
    other = EvaluationOptions(engine=AUTO.model_copy(update={"auto_min_energy": 0.99})).key_fields()
    assert other["engine"] != unit
    # resolved, the settings are those of the dtype asked for outright: the answers' keys are shared
    assert AUTO.resolved("float32").result_fields() == EngineSettings(max_new_tokens=32).result_fields()
    assert (
        AUTO.resolved("bfloat16").result_fields() == EngineSettings(dtype="bfloat16", max_new_tokens=32).result_fields()
    )


@pytest.fixture(scope="module")
def cumulative(tmp_path_factory):
    return sums_transition(tmp_path_factory.mktemp("cum"), update=CUMULATIVE, dtype="bfloat16")


@pytest.fixture(scope="module")
def increment(tmp_path_factory):
    return sums_transition(tmp_path_factory.mktemp("inc"), update=INCREMENT, dtype="bfloat16")


def test_a_large_update_gets_bf16_and_an_rl_sized_increment_float32(cumulative, increment):
    specs = parse_variants(VARIANTS)
    big = resolve_engine_dtype(StoredTransition(cumulative[2]), specs, AUTO)
    assert big.dtype == "bfloat16" and big.source == "stored" and set(big.parts) == {"diag", "off", "null"}
    assert min(p["kept"] for p in big.parts.values()) >= 0.999
    small = resolve_engine_dtype(StoredTransition(increment[2]), specs, AUTO)
    assert small.dtype == "float32"
    assert small.parts["diag"]["kept"] < 0.5 and "diag keeps" in small.reason and "carried by diag" in small.reason
    # only what is evaluated is judged: base and full of bf16 checkpoints are exact in bf16
    assert (
        resolve_engine_dtype(StoredTransition(increment[2]), parse_variants(["base", "full"]), AUTO).dtype == "bfloat16"
    )
    # a floor the increment's parts all reach takes bf16 there too
    floor = min(p["kept"] for p in small.parts.values()) / 2
    low = AUTO.model_copy(update={"auto_min_energy": floor})
    assert resolve_engine_dtype(StoredTransition(increment[2]), specs, low).dtype == "bfloat16"
    # a dtype set outright is taken as it is, nothing measured
    assert (
        resolve_engine_dtype(StoredTransition(increment[2]), specs, EngineSettings(dtype="bfloat16")).reason
        == "set in the engine settings"
    )


def test_a_cumulative_transition_is_judged_by_its_last_step_too(cumulative, increment):
    """A large cumulative update whose last step is RL-sized: its own parts keep ≥ 0.999 in bf16 (above), the last
    step's do not, so bf16(W1) would lose that step and the choice is float32, naming the step's part."""
    specs = parse_variants(VARIANTS)
    with_step = resolve_engine_dtype(
        StoredTransition(cumulative[2]), specs, AUTO, last_step=StoredTransition(increment[2])
    )
    assert with_step.dtype == "float32"
    step_parts = {k: v for k, v in with_step.parts.items() if "of the last step" in k}
    assert len(step_parts) == 3 and min(v["kept"] for v in step_parts.values()) < 0.5
    assert "diag of the last step" in with_step.reason and "carried by diag" in with_step.reason
    # the cumulative parts themselves are still judged, and pass
    assert min(with_step.parts[c]["kept"] for c in ("diag", "off", "null")) >= 0.999
    # a last step that survives bf16 as well leaves the choice at bf16
    assert (
        resolve_engine_dtype(
            StoredTransition(cumulative[2]), specs, AUTO, last_step=StoredTransition(cumulative[2])
        ).dtype
        == "bfloat16"
    )
    # nothing evaluated that rounding can take: no step is read either
    assert (
        resolve_engine_dtype(
            StoredTransition(increment[2]),
            parse_variants(["base", "full"]),
            AUTO,
            last_step=StoredTransition(increment[2]),
        ).parts
        == {}
    )


def _evaluate(transition, out, engine, **kw):
    pytest.importorskip("math_verify", reason="grading needs math-verify (the eval extra)")
    from grrr_stream.evaluation.pipeline import EvaluationRequest, run_evaluation

    _, _, store, bench = transition
    StandInEngine.started, StandInEngine.settings_seen = [], []
    logs: list[str] = []
    res = run_evaluation(
        EvaluationRequest(store, out, VARIANTS, ["sums"], bench, EvaluationOptions(engine=engine)),
        engine_factory=_Recording,
        log=logs.append,
        **kw,
    )
    return res, logs


class _Recording(StandInEngine):
    def __init__(self, model, settings, **kw):
        super().__init__(model, settings, **kw)
        StandInEngine.settings_seen.append(settings)


def test_the_evaluation_records_the_choice_and_runs_the_engine_in_it(cumulative, increment, tmp_path):
    res, logs = _evaluate(cumulative, tmp_path / "c", AUTO)
    assert [s.dtype for s in StandInEngine.settings_seen] == ["bfloat16"]
    assert res.info["engine_dtype"] == "bfloat16" and "every part keeps" in res.info["engine_dtype_reason"]
    assert any(m.startswith("engine dtype auto: bfloat16") for m in logs)
    saved = json.loads((tmp_path / "c" / "evaluation.json").read_text())
    assert saved["engine"]["dtype"] == "bfloat16" and saved["engine_dtype"]["requested"] == "auto"
    assert saved["engine_dtype"]["floor"] == 0.999 and saved["engine_dtype"]["parts"]["null"]["worst_matrix"]
    # the variants are built in the engine's dtype: their fidelity reports measure its rounding
    assert saved["variants"]["diag"]["dtype"] == "bfloat16" and res.fidelity["diag"]["dtype"] == "bfloat16"
    assert res.fidelity["diag"]["energy_survived"] >= 0.999
    row = dtype_row(tmp_path / "c" / "evaluation.json")  # the sweep report's engine_dtype.csv row
    assert row["engine_dtype"] == "bfloat16" and row["kept_null"] == saved["engine_dtype"]["parts"]["null"]["kept"]
    assert row["lowest_part"] in ("diag", "off", "null") and row["shares"] == "stored"
    # the sweep's report: one engine_dtype.csv row per evaluation that asked for auto
    tr = SimpleNamespace(id="base-post", kind="cumulative", parent="base", child="post")
    unit = SimpleNamespace(params=SimpleNamespace(transition=tr.id, suite=None), out=str(tmp_path / "c"))
    rep = Report(tmp_path / "report")
    tables = {t.name: t for t in report(SimpleNamespace(transitions={tr.id: tr}), [unit], rep)}
    assert tables[DTYPE_TABLE].rows == [{"transition": "base-post", "kind": "cumulative", **row}]
    assert tables[DTYPE_TABLE].title  # shown by the page's one section of the kinds' tables

    res, _ = _evaluate(increment, tmp_path / "i", AUTO)
    assert [s.dtype for s in StandInEngine.settings_seen] == ["float32"]
    assert res.info["engine_dtype"] == "float32" and "diag keeps" in res.info["engine_dtype_reason"]
    saved = json.loads((tmp_path / "i" / "evaluation.json").read_text())
    assert saved["variants"]["diag"]["dtype"] == "float32" and saved["engine_dtype"]["dtype"] == "float32"
    assert dtype_row(tmp_path / "i" / "evaluation.json")["engine_dtype"] == "float32"
    _evaluate(increment, tmp_path / "f", EngineSettings(max_new_tokens=32))
    assert dtype_row(tmp_path / "f" / "evaluation.json") == {}  # a dtype set outright: no row


def test_an_evaluation_given_the_last_step_runs_in_float32_and_says_why(cumulative, increment, tmp_path):
    """The same cumulative evaluation as above, now told that its W1 came through an RL-sized last step."""
    pytest.importorskip("math_verify", reason="grading needs math-verify (the eval extra)")
    from grrr_stream.evaluation.pipeline import EvaluationRequest, run_evaluation

    StandInEngine.settings_seen = []
    request = EvaluationRequest(
        cumulative[2],
        tmp_path / "c",
        VARIANTS,
        ["sums"],
        cumulative[3],
        EvaluationOptions(engine=AUTO),
        last_step=increment[2],
    )
    res = run_evaluation(request, engine_factory=_Recording, log=lambda m: None)
    assert [s.dtype for s in StandInEngine.settings_seen] == ["float32"]
    assert "of the last step" in res.info["engine_dtype_reason"]
    row = dtype_row(tmp_path / "c" / "evaluation.json")
    assert row["engine_dtype"] == "float32" and row["kept_diag"] >= 0.999 and row["last_step_kept_diag"] < 0.5
    assert row["lowest_part"].startswith("diag of the last step")


def test_auto_reuses_the_answers_of_its_dtype_and_never_those_of_another(cumulative, increment, tmp_path):
    explicit, _ = _evaluate(increment, tmp_path / "i", EngineSettings(max_new_tokens=32))  # float32 outright
    again, logs = _evaluate(increment, tmp_path / "i", AUTO)  # resolves to float32: nothing generated
    assert StandInEngine.started == [] and not any(r.scored_now for r in again.results)
    assert again.accuracy_rows == explicit.accuracy_rows
    _evaluate(cumulative, tmp_path / "c", EngineSettings(max_new_tokens=32))  # float32 answers in the folder
    bf16, _ = _evaluate(cumulative, tmp_path / "c", AUTO)  # resolves to bfloat16: answered again, apart
    assert StandInEngine.started and all(r.scored_now for r in bf16.results)


def test_mlflow_holds_the_dtype_chosen_and_why(cumulative, tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from grrr_stream.config import TrackingConfig

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    res, _ = _evaluate(cumulative, tmp_path / "e", AUTO, tracking=TrackingConfig(uri=uri, experiment="dt"))
    client = MlflowClient(uri)
    runs = [client.get_run(r) for r in res.run_ids if r]
    assert len(runs) == len(VARIANTS)
    for run in runs:
        assert run.data.params["engine.dtype"] == "bfloat16"
        assert run.data.tags["grrr.engine_dtype"] == "bfloat16"
        assert run.data.tags["grrr.engine_dtype_reason"] == res.info["engine_dtype_reason"]


@pytest.mark.parametrize(
    "field, value",
    [("bfloat16_kept_diag", 5.0), ("bfloat16_kept_off", -0.5), ("bfloat16_kept_null", "0.99"), ("e_diag", "x")],
)
def test_damaged_survival_data_means_float32_with_its_reason(cumulative, tmp_path, field, value):
    """A stored share outside [0, 1], an energy that is a string: the data cannot vouch for bf16 (it would have
    passed the floor, or ended in ValueError): float32, the reason naming the matrix and the field."""
    import shutil

    store = tmp_path / "store"
    shutil.copytree(cumulative[2], store)
    meta = sorted(store.glob("matrices/*/zarr.json"))
    meta = next(p for p in meta if "metrics" in json.loads(p.read_text()).get("attributes", {}))
    d = json.loads(meta.read_text())
    d["attributes"]["metrics"][field] = value
    meta.write_text(json.dumps(d))
    specs = parse_variants(VARIANTS)
    assert resolve_engine_dtype(StoredTransition(cumulative[2]), specs, AUTO).dtype == "bfloat16"  # undamaged
    choice = resolve_engine_dtype(StoredTransition(store), specs, AUTO)
    assert choice.dtype == "float32" and "damaged" in choice.reason and field in choice.reason
    assert "matrix " in choice.reason and "bfloat16" != choice.dtype
