"""The column schema (grrr_stream/columns.py): names of statistics found back, families, the one scope
aggregator checked against float64 numpy and exact fractions computed here, and the paper's and analyses'
declarations against the per-matrix table a decomposition writes."""

from __future__ import annotations

import csv
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from grrr_stream.columns import (
    CONSOLE,
    JOINED,
    MEAN,
    NONE,
    POOLED,
    Column,
    Schema,
    aggregate,
    at_one_edge,
    scopes,
)
from grrr_stream.geometry.analyses import MATRIX_COLUMNS

BAND = Column("band{edge}_off_principal", "off share in the top-{edge} block", short="top-{edge} off")
KEPT = Column("{dtype}_kept_{part}", "{part} energy kept through {dtype}")
RANK = Column("nrank_w0_{threshold}", "nrank w0 {threshold}")
FRAC = Column("frac_x", "entries x", aggregate=POOLED)
WORD = Column("compared", "compared in", aggregate=JOINED)
SIZE = Column("rows", "rows", aggregate=NONE)
SCHEMA = Schema((Column("f", "f"),), (BAND,), (KEPT, RANK), (FRAC, WORD, SIZE, Column("cols", "cols", aggregate=NONE)))


def test_a_statistic_is_found_back_as_its_column_and_suffix():
    f = SCHEMA.find("band64_off_principal_mean")
    assert (f.column.name, f.column.values, f.suffix, f.label) == (
        "band64_off_principal",
        {"edge": "64"},
        "_mean",
        "off share in the top-64 block",
    )
    f = SCHEMA.find("nrank_w0_1e-07_std")  # a field value with a dot and a minus sign
    assert (f.column.name, f.column.values["threshold"], f.suffix) == ("nrank_w0_1e-07", "1e-07", "_std")
    assert SCHEMA.find("float16_kept_null_mean").column.values == {"dtype": "float16", "part": "null"}
    assert SCHEMA.find("frac_x_median").label == "entries x (median matrix)"
    assert SCHEMA.find("compared").suffix == ""
    assert SCHEMA.find("frac_x_mean") is None  # a pooled column has no mean
    assert SCHEMA.find("band64_off_principal_pooled") is None
    assert SCHEMA.find("tokens_mean") is None and SCHEMA.label("tokens_mean") is None
    assert BAND.at(edge=16).of(BAND) and not KEPT.at(dtype="float16", part="off").of(BAND)


def test_an_unknown_place_is_refused():
    with pytest.raises(ValueError, match="unknown places"):
        Column("x", "x", shown=frozenset({"consol"}))


def test_one_edge_and_the_members_order():
    cols = [BAND.at(edge=e) for e in ("256", "16", "64")] + [Column("g", "g")]
    assert [c.name for c in Schema((BAND,), (cols[-1],)).sorted(cols)] == [
        "band16_off_principal",
        "band64_off_principal",
        "band256_off_principal",
        "g",
    ]
    assert [c.name for c in at_one_edge(cols)] == ["band64_off_principal", "g"]
    assert [c.name for c in at_one_edge(cols[:2])] == ["band256_off_principal"]


def _rows(rng: np.random.Generator) -> list[dict]:
    out = []
    for layer in range(3):
        for module in ("q_proj", "up_proj"):
            for expert in (None, 0, 1) if module == "up_proj" else (None,):
                rows, cols = int(rng.integers(3, 40)), int(rng.integers(3, 40))
                out.append(
                    {
                        "name": f"{layer}.{module}.{expert}",
                        "layer": layer,
                        "module": module,
                        "expert": expert,
                        "rows": rows,
                        "cols": cols,
                        "f": float(rng.normal()),
                        "band16_off_principal": float(rng.random()),
                        "frac_x": int(rng.integers(0, rows * cols + 1)) / (rows * cols),
                        "compared": "bfloat16" if layer else "float32 (bfloat16→float32)",
                    }
                )
    return out


def test_the_scope_aggregator_against_float64_numpy_and_exact_fractions():
    rows = _rows(np.random.default_rng(0))
    schema = SCHEMA + Schema(*((c,) for c in (Column("name", "", aggregate=NONE), Column("layer", "", aggregate=NONE))))
    schema += Schema((Column("module", "", aggregate=NONE), Column("expert", "", aggregate=NONE)))
    got = {r["scope"]: r for r in aggregate(rows, schema, by=("module", "layer", "expert"))}
    assert list(got)[:3] == ["all", "module:q_proj", "module:up_proj"]
    assert [s for s in got if s.startswith("expert:")] == ["expert:0", "expert:1"]
    for scope, members in {
        "all": rows,
        "module:up_proj": [r for r in rows if r["module"] == "up_proj"],
        "layer:2": [r for r in rows if r["layer"] == 2],
        "expert:1": [r for r in rows if r["expert"] == 1],
    }.items():
        row = got[scope]
        assert row["n"] == len(members)
        for name in ("f", "band16_off_principal"):
            v = np.array([r[name] for r in members], dtype=np.float64)
            assert row[f"{name}_mean"] == v.mean() and row[f"{name}_std"] == v.std(ddof=1)
        # pooled: Σ counted / Σ entries, as exact fractions
        counted = sum(
            Fraction(r["frac_x"]).limit_denominator(r["rows"] * r["cols"]) * r["rows"] * r["cols"] for r in members
        )
        entries = sum(r["rows"] * r["cols"] for r in members)
        assert row["frac_x_pooled"] == float(counted / entries)
        fr = sorted(r["frac_x"] for r in members)
        assert (row["frac_x_min"], row["frac_x_max"], row["frac_x_median"]) == (fr[0], fr[-1], float(np.median(fr)))
        assert row["compared"] == "; ".join(sorted({r["compared"] for r in members}))
        assert "rows_mean" not in row and "layer_mean" not in row and "frac_x_mean" not in row
    # mean ± std first, in the rows' order; then the others as declared
    keys = list(got["all"])
    assert keys[:6] == ["scope", "n", "f_mean", "f_std", "band16_off_principal_mean", "band16_off_principal_std"]
    assert keys[6:] == ["frac_x_pooled", "frac_x_min", "frac_x_median", "frac_x_max", "compared"]


def test_a_column_no_schema_declares_is_summarised_not_dropped():
    rows = [{"name": "a", "module": "m", "new_metric": 1.0}, {"name": "b", "module": "m", "new_metric": 3.0}]
    whole = aggregate(rows, Schema((Column("name", "", aggregate=NONE), Column("module", "", aggregate=NONE))))[0]
    assert whole["new_metric_mean"] == 2.0 and whole["new_metric_std"] == np.std([1.0, 3.0], ddof=1)


def test_scopes_are_spelled_one_way():
    rows = [{"module": "q", "layer": 1, "expert": None}, {"module": "q", "layer": 0, "expert": 3}]
    assert list(scopes(rows)) == ["all", "module:q", "layer:0", "layer:1", "expert:3"]


def test_every_column_of_a_decomposition_is_declared(tmp_path: Path):
    """Every column metrics.csv holds (full profile: every analysis on) is a column of MATRIX_COLUMNS, the
    aggregates are the ones intended, and summary.csv holds exactly each column's statistics."""
    from helpers.common import no_track_config

    from grrr_stream import run_transition
    from grrr_stream.fixtures.synthetic import TINY, Update, write_model

    base = write_model(tmp_path / "base", TINY, family="qwen2", dtype="float32", seed=0)
    post = write_model(tmp_path / "post", TINY, family="qwen2", dtype="float32", seed=0, updates=(Update(),))
    cfg = no_track_config(base=str(base), post=str(post), store=str(tmp_path / "store"), profile="full", device="cpu")
    res = run_transition(cfg)
    with open(res.store / "metrics.csv") as f:
        header = next(csv.reader(f))
    missing = [k for k in header if MATRIX_COLUMNS.column(k) is None]
    assert missing == []
    kinds = {k: MATRIX_COLUMNS.column(k).aggregate for k in header}
    assert kinds["f_diag"] is MEAN and kinds["frac_unchanged"] is POOLED and kinds["sparsity_compare"] is JOINED
    assert kinds["rows"] is NONE and kinds["band64_off_principal"] is MEAN
    with open(res.store / "summary.csv") as f:
        summary = next(csv.reader(f))
    expected = {
        s for k in header for s in (MATRIX_COLUMNS.column(k).stat(x) for x, _ in MATRIX_COLUMNS.column(k).stats)
    }
    assert set(summary) - {"scope", "n"} == expected
    # the shape-dependent shares carry their isotropic value and their ratio to it; a shape's own facts do not
    assert {"f_diag_iso", "f_diag_vs_iso", "band64_off_principal_vs_iso"} <= set(summary)
    assert not any(k.startswith(("sv_cos", "r_delta")) and k.endswith("iso") for k in summary)
    assert [r["scope"] for r in res.summary_rows][:2] == ["all", "module:q_proj"]
    assert {c.name for c in MATRIX_COLUMNS.present(header, CONSOLE)} >= {"f_diag", "frac_unchanged"}
