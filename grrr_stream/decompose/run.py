"""Run one transition: validate, plan, stream matrix pairs through the frame kernel
into the store, summarise, track.

The plan and its refusals are in :mod:`grrr_stream.decompose.plan`, the reader → math →
writer pipeline in :mod:`grrr_stream.decompose.streaming` (or spread over Dask workers by
:mod:`grrr_stream.decompose.spread`); this module opens or resumes the store around them and writes
the tables, figures and the MLflow run once every matrix is done.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TextIO

import numpy as np
import torch

from .. import __version__, plots
from ..checkpoints.arch import MatrixName
from ..checkpoints.reader import Checkpoint, resolve_source, tensor_digest
from ..columns import aggregate, held
from ..config import DecomposeConfig, result_settings, settings_hash
from ..dtypes import torch_dtype
from ..errors import NonFiniteWeightError, StoreMismatchError
from ..geometry.analyses import MATRIX_COLUMNS
from ..geometry.analyses.bands import band_key, is_band
from ..progress import Progress
from ..runtime.cluster import parse_scheduler, require
from ..runtime.device import bound_heap_growth, resolve_device
from ..runtime.diskplan import check_space, describe, transition_needs
from ..runtime.phases import PhaseTimer
from ..store.channel_tables import write_channel_tables
from ..store.frame_cache import FrameCache
from ..store.metric_tables import write_metric_tables
from ..store.transition_store import StoreLock, TransitionStore
from ..tracking.model_runs import log_decomposition
from ..tracking.run_log import preflight
from ..unit_log import console
from .plan import TransitionPlan, plan_transition
from .spread import run_spread
from .stages import Pipeline
from .streaming import compute_layout, stream_matrices, torch_threads


@dataclass
class TransitionResult:
    store: Path
    rows: list[dict]
    summary_rows: list[dict]
    computed: int  # matrices computed in this call (0 when everything was already done)
    frames_reused: int
    run_id: Optional[str] = None
    timings: dict[str, float] = field(default_factory=dict)
    cpu_timings: dict[str, float] = field(default_factory=dict)  # the same phases' thread CPU seconds
    workers: dict[str, int] = field(default_factory=dict)  # Dask worker → matrices it computed (spread runs)


def _identity(cfg: DecomposeConfig, base: Checkpoint, post: Checkpoint) -> dict:
    return {
        "base_fingerprint": base.fingerprint(),
        "post_fingerprint": post.fingerprint(),
        "settings_hash": settings_hash(cfg),
    }


def versions() -> dict[str, str]:
    import zarr

    return {
        "grrr_stream": __version__,
        "torch": torch.__version__,
        "zarr": zarr.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def run_transition(cfg: DecomposeConfig, *, stream: Optional[TextIO] = None, client: Any = None) -> TransitionResult:
    """Decompose every selected matrix of ``cfg.base`` → ``cfg.post`` into ``cfg.store``.

    Resumable: matrices already complete in the store are skipped. With ``cfg.scheduler`` local:N or
    a scheduler address, or a dask.distributed ``client``, the matrices are spread over the cluster's
    workers (grrr_stream.decompose.spread); the results are the same. Raises a
    :class:`~grrr_stream.errors.GrrrError` subclass for bad inputs before any SVD.
    """
    spreads = _spreads(cfg, client)  # a scheduler it cannot use is refused before any work
    t_start = time.monotonic()
    started_ms = int(time.time() * 1000)  # the MLflow run, opened after the work, starts here

    stream = stream or console()  # the terminal, also inside a sweep unit whose output goes to its log
    timer = PhaseTimer(resolve_device(cfg.device) if cfg.sync_timing else None)
    t_plan = time.perf_counter()
    bound_heap_growth()
    plan, folders = _open_and_plan(cfg)
    if cfg.tracking.enabled:  # once, before the work: an unreachable server is known now, not after it
        cfg = cfg.model_copy(update={"tracking": preflight(cfg.tracking, stream)})
    device = resolve_device(cfg.device)
    dtype = torch_dtype(cfg.compute_dtype)
    manifest = _manifest(cfg, plan, folders)
    base_fingerprint = manifest["identity"]["base_fingerprint"]
    TransitionStore.check_writable(cfg.store)  # before the lock file is created in it
    frames = FrameCache(cfg.frame_cache_path()).prepare()  # refuses a folder that is not a frame cache
    with StoreLock(cfg.store):
        store, done = _open_store(cfg, plan, manifest, stream)
        pending = [m for m in plan.matrices if m.name not in done]
        progress = Progress(
            len(plan.matrices), done=len(plan.matrices) - len(pending), enabled=cfg.progress, stream=stream
        )
        if pending:
            _check_disk_space(cfg, plan, pending, frames, progress, base_fingerprint)
        if done:
            progress.message(f"resuming {cfg.store}: {len(done)} of {len(plan.matrices)} matrices already done")
        timer.add("plan", time.perf_counter() - t_plan)
        t_matrices = time.perf_counter()
        pipeline = Pipeline(cfg, plan, store, frames, device, dtype, timer, base_fingerprint)
        computed, reused, failures, workers = _compute_pending(pipeline, pending, progress, folders, spreads, client)
        timer.add("matrices_wall", time.perf_counter() - t_matrices)
        _refuse_failures(failures, len(plan.matrices))
        rows, summary_rows, summary = _tables_and_figures(cfg, store, plan, timer)
    result = TransitionResult(cfg.store, rows, summary_rows, computed, reused, workers=workers)
    if cfg.tracking.enabled:
        with timer.phase("tracking"):
            result.run_id = log_decomposition(
                cfg, store, manifest, rows, summary, started_ms, time.monotonic() - t_start
            )
    result.timings = {**timer.seconds(), "total_s": time.monotonic() - t_start}
    result.cpu_timings = timer.cpu_seconds()
    return result


def _tables_and_figures(cfg: DecomposeConfig, store, plan: TransitionPlan, timer: PhaseTimer):
    """The store's tables (rows, summary rows, summary) from its finished matrices, and its figures if asked."""
    with timer.phase("tables"):
        rows, summary_rows, summary = finalize(store, plan.matrices)
    if cfg.figures:
        with timer.phase("figures"):
            write_figures(store, rows, cfg.label or f"{plots.model_label(cfg.base)} → {plots.model_label(cfg.post)}")
    return rows, summary_rows, summary


def _open_and_plan(cfg: DecomposeConfig) -> tuple[TransitionPlan, tuple[str, str]]:
    """The checkpoints (fetched from the Hub if need be) paired and checked; their absolute folders."""
    base_dir = resolve_source(cfg.base, cfg.base_revision)
    post_dir = resolve_source(cfg.post, cfg.post_revision)
    plan = plan_transition(Checkpoint.open(base_dir), Checkpoint.open(post_dir), cfg)
    # absolute: variants and statistics read the checkpoints from wherever they are run
    return plan, (str(Path(base_dir).absolute()), str(Path(post_dir).absolute()))


def _manifest(cfg: DecomposeConfig, plan: TransitionPlan, folders: tuple[str, str]) -> dict:
    """The store's manifest: what its results were computed from and with."""
    return {
        "identity": _identity(cfg, plan.base, plan.post),
        "base": cfg.base,
        "post": cfg.post,
        "base_folder": folders[0],
        "post_folder": folders[1],
        "model_type": plan.base.model_type,
        "method": cfg.method,
        "chain": cfg.chain,
        **({"label": cfg.label} if cfg.label else {}),  # descriptive: not part of the identity
        "settings": result_settings(cfg),
        "matrices": [m.name for m in plan.matrices],
        "frame_cache": str(cfg.frame_cache_path().resolve()),
        "versions": versions(),
    }


def _open_store(
    cfg: DecomposeConfig, plan: TransitionPlan, manifest: dict, stream: TextIO
) -> tuple[TransitionStore, dict[str, dict]]:
    """The store opened or resumed, and the completion records of its matrices still valid."""
    store = TransitionStore.open(cfg.store, manifest, overwrite=cfg.overwrite)
    done = store.completed()
    if done and store.adopted:
        # an unfinished run over inputs that changed since (a NaN repaired): keep what still matches
        changed = _changed_since_recorded(plan, done)
        names = {c.rsplit(" (", 1)[0] for c in changed}
        for name in names:
            store.remove_matrix(name)
        done = {k: v for k, v in done.items() if k not in names}
        Progress(0, enabled=cfg.progress, stream=stream).message(
            f"{cfg.store}: the inputs changed since the unfinished run; {len(done)} matrices whose tensors are "
            f"unchanged are kept, {len(names)} changed ones are recomputed"
        )
    elif done and cfg.verify_resume:
        changed = _changed_since_recorded(plan, done)
        if changed and not cfg.overwrite:
            raise StoreMismatchError(
                f"{len(changed)} tensor(s) differ from those the stored results were computed from, e.g. "
                + ", ".join(changed[:5])
                + f". The checkpoint was modified in place since {cfg.store} was "
                "written. Use another --store, or pass --overwrite to recompute everything."
            )
        if changed:
            TransitionStore.clear(cfg.store)
            store = TransitionStore.open(cfg.store, manifest)
            done = {}
    return store, done


def _spreads(cfg: DecomposeConfig, client: Any) -> bool:
    """Whether the matrices go to a cluster's workers: a dask.distributed ``client``, or a scheduler local:N
    or at an address (a scheduler the decomposition cannot use is refused)."""
    return (
        client is not None
        or require(
            parse_scheduler(cfg.scheduler), ("threads", "synchronous", "local", "address"), "decompose"
        ).distributed
    )


def _compute_pending(
    pipeline: Pipeline,
    pending: list[MatrixName],
    progress: Progress,
    folders: tuple[str, str],
    spreads: bool,
    client: Any,
) -> tuple[int, int, list[str], dict[str, int]]:
    """(matrices computed, frames reused, why the others were refused, Dask worker → matrices it computed)
    of the pending matrices, spread over the cluster's workers or streamed in this process; here torch's
    thread count is set for the math and restored after."""
    cfg, plan = pipeline.cfg, pipeline.plan
    if pending and spreads:
        return run_spread(cfg, plan, pending, progress, pipeline.base_fingerprint, folders, client=client)
    layout = compute_layout(cfg, pipeline.device, plan)
    with torch_threads(layout.threads):
        computed, reused, failures = stream_matrices(pipeline, pending, progress, layout)
    return computed, reused, failures, {}


def _refuse_failures(failures: list[str], total: int) -> None:
    """Refuse a transition some of whose matrices could not be decomposed (the others are kept)."""
    if failures:
        raise NonFiniteWeightError(
            f"{len(failures)} matrix pair(s) hold non-finite weights or give non-finite results and were not "
            f"decomposed (the other {total - len(failures)} are done and kept; a rerun after the "
            "fix computes only these):\n  " + "\n  ".join(failures)
        )


def _check_disk_space(
    cfg: DecomposeConfig,
    plan: TransitionPlan,
    pending: list[MatrixName],
    frames: FrameCache,
    progress: Progress,
    base_fingerprint: str,
) -> None:
    """Say what the pending matrices will write, and refuse to start when it cannot fit."""
    # frames of this base in these settings already cached (a sweep shares one cache between bases)
    cached = frames.count(base_fingerprint, cfg.compute_dtype, cfg.core_rel_threshold)
    needs = transition_needs(
        (plan.base.matrix_shape(m) for m in pending),
        cfg.store,
        frames.path,
        store_dtype=cfg.store_dtype,
        compute_dtype=cfg.compute_dtype,
        null_storage=cfg.null_storage,
        core_truncated=cfg.core_rel_threshold is not None,
        frames_cached_fraction=min(1.0, cached / max(1, len(plan.matrices))),
    )
    progress.message(f"disk: {describe(needs)} for {len(pending)} matrices")
    check_space(
        needs,
        f"{len(pending)} matrices of {cfg.store}",
        "Free space or point --store / --frame-cache at another disk; a rerun resumes where it stopped.",
    )


def _changed_since_recorded(plan: TransitionPlan, done: dict[str, dict]) -> list[str]:
    """Names (with side) of completed matrices whose current tensor digest differs from the record."""
    changed = []
    for m in plan.matrices:
        attrs = done.get(m.name)
        if attrs is None:
            continue
        for side, ckpt, key in (("base", plan.base, "base_digest"), ("post", plan.post, "post_digest")):
            if tensor_digest(ckpt.read_matrix(m)) != attrs.get(key):
                changed.append(f"{m.name} ({side})")
    return changed


# ---------------------------------------------------------------------------
# tables and tracking


def summarize(rows: list[dict]) -> tuple[list[dict], dict]:
    """Each column's statistics (its aggregate's: mean ± std for most, sample std, 0 for a single matrix; the
    update-sparsity fractions pooled over entries) overall, per module (a module of a mixture of experts
    aggregates all its experts) and, for expert matrices, per expert index (aggregating layers and modules).
    A metric that only some matrices have (a subspace angle for a k above a small matrix's rank) is summarised
    over those that have it."""
    out_rows = aggregate(rows, MATRIX_COLUMNS, by=("module", "expert"))
    metrics = [c.name for c in held(rows, MATRIX_COLUMNS) if c.aggregate.first]
    return out_rows, {"metrics": metrics, "scopes": {r["scope"]: r for r in out_rows}}


def finalize(store: TransitionStore, matrices: list[MatrixName]) -> tuple[list[dict], list[dict], dict]:
    """Build the per-matrix table and summary from the completion records and write them."""
    done = store.completed()
    rows = []
    for m in matrices:
        attrs = done[m.name]
        # expert: empty for a matrix outside the experts (every matrix of a dense model)
        rows.append({"name": m.name, "layer": m.layer, "module": m.module, "expert": m.expert, **attrs["metrics"]})
    summary_rows, summary = summarize(rows)
    write_metric_tables(store, rows, summary_rows, summary)
    write_channel_tables(store, matrices, done)
    # the transition's record of which comparison its sparsity figures made (mixed dtypes: docs/statistics.md)
    store.mark_complete({"sparsity_compare": summary["scopes"]["all"].get("sparsity_compare")})
    return rows, summary_rows, summary


def write_figures(store: TransitionStore, rows: list[dict], title: str = "") -> None:
    """The transition's figures from its per-matrix rows and stored spectra, in <store>/figures."""
    fig_dir = store.path / "figures"
    fig_dir.mkdir(exist_ok=True)
    plots.energy_fractions_by_layer(rows, fig_dir / "energy_fractions.png", title)
    edges = sorted({int(c.values["edge"]) for c in MATRIX_COLUMNS.present(rows[0]) if is_band(c)})
    if edges:
        plots.band_energy_by_module(rows, edges, fig_dir / "band_energy_by_module.png", band_key(), title)
    top = sorted(rows, key=lambda r: r["r_delta"], reverse=True)[:4]
    spectra = [(r["name"], *store.read_sigmas(r["name"])) for r in top]
    plots.normalized_spectra(spectra, fig_dir / "spectra_most_changed.png", title)
