"""A transition's per-matrix tables: metrics.csv (one row per matrix), summary.csv and summary.json (mean ±
std per scope, grrr_stream.decompose.run.summarize) and the same rows as the store's ``metrics/`` group, one
float64 column array per metric (attrs: names, columns), for xarray (store.xarray_view.read_metrics)."""

from __future__ import annotations

import json

import numpy as np

from ..files import atomic_write_text, to_csv
from .transition_store import TransitionStore
from .zarr_arrays import METRICS_DIM


def write_metric_tables(store: TransitionStore, rows: list[dict], summary_rows: list[dict], summary: dict) -> None:
    """metrics.csv, summary.csv, summary.json and the metrics/ column arrays of ``store``."""
    atomic_write_text(store.path / "metrics.csv", to_csv(rows))
    atomic_write_text(store.path / "summary.csv", to_csv(summary_rows))
    atomic_write_text(store.path / "summary.json", json.dumps(summary, indent=2, sort_keys=True))
    numeric: list[str] = []
    for r in rows:  # a column some matrices lack (an angle above a small matrix's size) is NaN there
        numeric += [
            k for k, v in r.items() if k not in numeric and isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
    arrays = {
        col: (
            np.array([np.nan if r.get(col) is None else float(r[col]) for r in rows], dtype=np.float64),
            (METRICS_DIM,),
        )  # a column some rows leave empty (expert of a dense matrix) is NaN there
        for col in numeric
    }
    store.write_group("metrics", arrays, {"names": [r["name"] for r in rows], "columns": numeric})
