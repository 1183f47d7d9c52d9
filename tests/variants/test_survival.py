"""How much of each component survives bf16 rounding of W0 + component, pooled over a transition
(grrr_stream/variants/survival.py): the decomposition's sampled estimate against the full-matrix fidelity report of
the variant W0 + component built in bf16 (an independent computation: every entry, float64 sums), and the estimate
measured from the store and the checkpoints equal to the one the decomposition stored."""

from __future__ import annotations

import pytest
from helpers.common import no_track_config

from grrr_stream.decompose.run import run_transition
from grrr_stream.fixtures.synthetic import ModelShape, Update, make_transition
from grrr_stream.geometry.analyses.survival import survival_sample
from grrr_stream.store.transition_store import StoredTransition
from grrr_stream.variants.builder import VariantBuilder
from grrr_stream.variants.spec import parse_variant
from grrr_stream.variants.survival import COMPONENTS, measured_columns, pooled, stored_columns, transition_survival

# MLP matrices of 640 × 64: the estimate sees 214 of their 640 rows (the attention ones whole)
SHAPE = ModelShape(hidden=64, intermediate=640, layers=1, heads=4, kv_heads=2, vocab=128)
PLANT = (0.3, 0.5, 0.2)
# |sampled − full| of the pooled share; the largest seen on these pairs was 0.0017 (diag of the 3e-4 update)
TOLERANCE = 0.01


def _decomposed(root, r_delta: float, dtype: str, **settings):
    base, post = make_transition(root / "m", SHAPE, dtype=dtype, update=Update(r_delta=r_delta, plant=PLANT))
    run_transition(no_track_config(base=str(base), post=str(post), store=root / "s", device="cpu", **settings))
    return StoredTransition(root / "s")


def _full_matrix_share(store, component: str) -> float:
    """The fidelity report's pooled energy kept by the variant W0 + component built in bfloat16."""
    b = VariantBuilder(store, parse_variant(component), dtype="bfloat16", device="cpu")
    for _ in b.tensors():
        pass
    return b.report.summary()["energy_survived"]


@pytest.mark.parametrize("r_delta,dtype", [(0.2, "bfloat16"), (3e-4, "bfloat16"), (0.2, "float32")])
def test_the_sampled_estimate_agrees_with_the_full_matrix_fidelity_report(tmp_path, r_delta, dtype):
    t = _decomposed(tmp_path, r_delta, dtype)
    axis, idx = survival_sample((640, 64))
    assert axis == 0 and len(idx) < 640  # the estimate is a sample here, not the whole matrix
    est, source = transition_survival(t, "bfloat16")
    assert source == "stored"
    full = {c: _full_matrix_share(t.path, c) for c in COMPONENTS}
    for c in COMPONENTS:
        assert abs(est[c].kept - full[c]) <= TOLERANCE, (c, est[c].kept, full[c])
    if r_delta == 3e-4:  # an RL-sized increment: rounding takes most of the diagonal part (below 0.1 kept)
        assert est["diag"].kept < 0.1 and full["diag"] < 0.1
    else:
        assert min(full.values()) > 0.999


@pytest.mark.parametrize("null_storage", ["array", "norms"])
def test_measured_from_the_store_equals_what_the_decomposition_stored(tmp_path, null_storage):
    """A 'paper' store keeps no survival columns: the shares are measured from it and the checkpoints, with the
    decomposition's functions on its sample, and equal those a standard store of the same pair holds."""
    standard = _decomposed(tmp_path / "a", 3e-4, "bfloat16")
    paper = _decomposed(tmp_path / "b", 3e-4, "bfloat16", profile="paper", null_storage=null_storage)
    assert stored_columns(paper, "bfloat16") is None
    assert stored_columns(standard, "float16") is None  # another dtype's shares are not these
    stored = {r["name"]: r for r in stored_columns(standard, "bfloat16")}
    measured = measured_columns(paper, "bfloat16")
    assert {r["name"] for r in measured} == set(stored)
    for r in measured:
        for c in COMPONENTS:
            assert r[f"kept_{c}"] == pytest.approx(stored[r["name"]][f"kept_{c}"], abs=1e-6)
    assert transition_survival(paper, "bfloat16")[1] == "measured"


def test_pooling_weighs_each_matrix_by_its_component_energy():
    rows = [
        {"name": "a", "e_diag": 3.0, "kept_diag": 1.0, "e_off": 0.0, "kept_off": 0.0, "e_null": 1.0, "kept_null": 0.5},
        {"name": "b", "e_diag": 1.0, "kept_diag": 0.2, "e_off": 0.0, "kept_off": 0.3, "e_null": 1.0, "kept_null": 0.9},
    ]
    p = pooled(rows)
    assert p["diag"].kept == pytest.approx((3 * 1.0 + 1 * 0.2) / 4)
    assert (p["diag"].worst_matrix, p["diag"].worst_kept) == ("b", 0.2)
    assert p["null"].kept == pytest.approx(0.7) and p["null"].worst_matrix == "a"
    assert p["off"].kept == 1.0 and p["off"].matrices == 0  # no energy anywhere: nothing to lose
    rows[0]["kept_diag"] = float("nan")  # a failed estimate passes no floor
    assert pooled(rows)["diag"].kept == pytest.approx(0.2 / 4) and pooled(rows)["diag"].worst_matrix == "a"
