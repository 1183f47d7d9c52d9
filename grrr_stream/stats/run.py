"""The runs behind ``grrr-stream stats``, ``bands`` and ``compare``: they run the statistics over
finished stores, write tables and figures, and log to MLflow."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from .. import plots
from ..config import TrackingConfig, stable_hash
from ..files import atomic_write_text, ensure_folder, to_csv
from ..geometry.analyses import MATRIX_COLUMNS
from ..geometry.analyses.bands import DEFAULT_BAND_EDGES, band_key, is_band
from ..progress import dask_tasks
from ..store.transition_store import StoredTransition
from ..tracking import runs
from . import summaries as stats
from .comparisons import STEPWISE, compare, kind_label, stored_kind
from .settings import BootstrapSettings, ComparisonSettings, checked

if TYPE_CHECKING:
    from .comparisons import Comparison


@dataclass
class StatsResult:
    out: Path
    long_rows: list[dict]
    files: list[Path]


OVERALL_TABLE = "table_overall.csv"  # run_stats: one row per transition (its last table but two)
COMPARISONS_TABLE = "comparisons.csv"  # run_comparisons: one row per comparison, written after them all
STATS_SOURCE, COMPARE_SOURCE = "statistics settings", "comparison settings"  # how a refusal names its settings
COSINES_FIGURE, NORMS_FIGURE = "offdiag_cosine_medians.png", "update_norms.png"  # run_comparisons' figures


def run_stats(
    stores: Sequence[Path],
    out: Path,
    *,
    resamples: int = 10_000,
    seed: int = 0,
    scheduler: Any = None,
    tracking: Optional[TrackingConfig] = None,
    progress: bool = False,
) -> StatsResult:
    """Per-transition summaries with bootstrap CIs (paper Tables 3, 4, 7) as CSV files in ``out``; ``progress``:
    the bootstrap's Dask tasks done / total with an ETA (local schedulers)."""
    checked(BootstrapSettings, STATS_SOURCE, resamples=resamples, seed=seed)
    started = time.time()  # the statistics' MLflow run, opened after them, starts here

    transitions = [StoredTransition(Path(s)) for s in stores]
    with dask_tasks("[stats] ", enabled=progress):
        long_rows = stats.summary_tables(transitions, resamples=resamples, seed=seed, scheduler=scheduler)
    out = ensure_folder(Path(out), "--out")
    files = []
    for name, rows in (
        ("summary_long.csv", long_rows),
        (OVERALL_TABLE, stats.wide_table(long_rows, "all")),
        ("table_by_module.csv", stats.wide_table(long_rows, "module")),
        ("table_by_layer.csv", stats.wide_table(long_rows, "layer")),
    ):
        atomic_write_text(out / name, to_csv(rows))
        files.append(out / name)
    if runs.enabled(tracking):
        runs.log_stats(transitions, long_rows, out, tracking, resamples=resamples, seed=seed, started=started)
    return StatsResult(out, long_rows, files)


def run_bands(
    stores: Sequence[Path],
    out: Path,
    *,
    edges: Sequence[int] = DEFAULT_BAND_EDGES,
    scheduler: Any = None,
    progress: bool = False,
) -> list[Path]:
    """Principal-band energies of finished stores from their stored P (``grrr-stream bands``): per matrix,
    mean per module and per layer, and a figure per transition, in ``out``; ``progress``: Dask tasks done /
    total with an ETA (local schedulers)."""
    out = ensure_folder(Path(out), "--out")
    files = []
    all_rows = []
    for path in stores:
        t = StoredTransition(Path(path))
        with dask_tasks(f"[bands {t.label}] ", enabled=progress):
            rows = [{"transition": t.label, **r} for r in stats.band_rows(t, edges, scheduler=scheduler)]
        all_rows += rows
        stem = stable_hash(str(t.path), 8)
        figure = out / f"band_energy_by_module_{stem}.png"
        files.append(plots.band_energy_by_module(rows, list(edges), figure, band_key(), t.label))
    cols = [c.name for c in MATRIX_COLUMNS.present(all_rows[0] if all_rows else ()) if is_band(c) or c.name == "f_null"]
    for scope in ("module", "layer"):
        groups: dict[tuple, list[dict]] = {}
        for r in all_rows:
            groups.setdefault((r["transition"], r[scope]), []).append(r)
        table = [
            {"transition": tr, scope: s, "n": len(rs), **{c: sum(r[c] for r in rs) / len(rs) for c in cols}}
            for (tr, s), rs in groups.items()
        ]
        atomic_write_text(out / f"bands_by_{scope}.csv", to_csv(table))
        files.append(out / f"bands_by_{scope}.csv")
    atomic_write_text(out / "bands.csv", to_csv(all_rows))
    files.append(out / "bands.csv")
    return files


@dataclass
class CompareResult:
    out: Path
    comparisons: list
    summaries: list[dict]
    files: list[Path]
    run_ids: list[str]


def comparison_label(kind: str, a: StoredTransition, b: StoredTransition, ancestor_label: Optional[str]) -> str:
    if kind == STEPWISE:
        return f"{a.label} then incr. to {b.label}"
    if kind == "cumulative":
        return f"{a.label} vs {b.label} (cumulative)"
    return f"{a.label} vs {b.label} (from {ancestor_label})"


@dataclass
class _Compared:
    """One comparison done: its stores, its summary row, the files written for it, and when it ran."""

    comparison: Comparison
    a: StoredTransition
    b: StoredTransition
    ancestor: Optional[StoredTransition]
    summary: dict
    files: list[Path]  # its per-matrix CSV and its JSON
    started: float
    seconds: float


def run_comparisons(
    pairs: Sequence[tuple],
    out: Path,
    *,
    resamples: int = 10_000,
    null_draws: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
    scheduler: Any = None,
    tracking: Optional[TrackingConfig] = None,
    progress: bool = False,
) -> CompareResult:
    """Off-diagonal cosine geometry for each (kind, a, b) or (kind, a, b, ancestor) of stores;
    CSV/JSON + Figures 4/5 in ``out``. ``ancestor``: the store of base → C, C the nearest common
    ancestor of an independent pair (None or absent: C is the base). ``progress``: each comparison's Dask
    tasks done / total with an ETA (local schedulers)."""
    checked(ComparisonSettings, COMPARE_SOURCE, resamples=resamples, null_draws=null_draws, seed=seed, alpha=alpha)
    out = ensure_folder(Path(out), "--out")
    settings = {"resamples": resamples, "null_draws": null_draws, "seed": seed, "alpha": alpha}
    compared = [
        _compare_pair(pair, out, f"[compare {i}/{len(pairs)} {kind_label(pair[0])}] ", settings, scheduler, progress)
        for i, pair in enumerate(pairs, 1)
    ]
    summaries = [done.summary for done in compared]
    files = [path for done in compared for path in done.files]
    atomic_write_text(out / COMPARISONS_TABLE, to_csv(summaries))  # written last: the comparisons are done
    files.append(out / COMPARISONS_TABLE)
    figs = [plots.cosine_medians(summaries, out / COSINES_FIGURE), plots.norm_bars(summaries, out / NORMS_FIGURE)]
    files += figs
    run_ids = _log_comparisons(compared, figs, tracking, settings) if runs.enabled(tracking) else []
    return CompareResult(out, [done.comparison for done in compared], summaries, files, run_ids)


def _compare_pair(
    pair: tuple, out: Path, prefix: str, settings: dict[str, Any], scheduler: Any, progress: bool
) -> _Compared:
    """One (kind, a, b[, ancestor]) of stores compared with ``settings`` (resamples, null_draws, seed, alpha), its
    per-matrix CSV and summary JSON written in ``out``; ``prefix`` names it in the progress line."""
    kind, a_path, b_path = stored_kind(pair[0]), *pair[1:3]
    c_path = pair[3] if len(pair) > 3 else None
    a, b = StoredTransition(Path(a_path)), StoredTransition(Path(b_path))
    c = StoredTransition(Path(c_path)) if c_path is not None else None
    started = time.time()
    with dask_tasks(prefix, enabled=progress):
        comp = compare(a, b, kind, ancestor=c, **settings, scheduler=scheduler)
    summary = {"label": comparison_label(kind, a, b, comp.ancestor_label), **comp.summary()}
    stem = f"{kind}_{stable_hash([str(a.path), str(b.path)] + ([str(c.path)] if c else []), 8)}"
    atomic_write_text(out / f"{stem}_per_matrix.csv", to_csv(comp.rows))
    atomic_write_text(out / f"{stem}.json", json.dumps(summary, indent=2))
    files = [out / f"{stem}_per_matrix.csv", out / f"{stem}.json"]
    return _Compared(comp, a, b, c, summary, files, started, time.time() - started)


def _log_comparisons(
    compared: Sequence[_Compared], figs: Sequence[Path], tracking: TrackingConfig, settings: dict[str, Any]
) -> list[str]:
    """One MLflow run per comparison, with its files and the figures of them all; the runs' ids."""
    return [
        runs.log_comparison(
            done.comparison,
            done.a,
            done.b,
            done.ancestor,
            done.summary,
            [*done.files, *figs],
            tracking,
            **settings,
            started=done.started,
            seconds=done.seconds,
        )
        for done in compared
    ]
