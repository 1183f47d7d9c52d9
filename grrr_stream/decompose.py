"""Run one transition: validate, plan, stream matrix pairs through the frame kernel
into the store, summarise, track.

Data flow per matrix (three stages overlap, each bounded to one item)::

    reader thread:  mmap-read W0, W1 (checkpoint dtype) → digests, finiteness,
                    cached base frame if any
    main thread:    upcast on the compute device → svdvals(W1), ΔW, SVD(W0) unless
                    cached, ‖ΔW‖₂, P and null residual, metrics
    writer thread:  new frame → frame cache; P, null, σ → store; completion record

So at most three matrices' worth of data are alive at once, whatever the model size.
"""

from __future__ import annotations

import math
import platform
import re
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional, TextIO

import numpy as np
import torch

from . import __version__
from .arch import MatrixName, default_modules, pattern_for, select_matrices, split_fused
from .checkpoint import Checkpoint, resolve_source, tensor_digest
from .cluster import parse_scheduler, require
from .config import DEFAULT_MODULES, DecomposeConfig, result_settings, settings_hash
from .dtypes import ITEMSIZE, torch_dtype
from .errors import ConfigError, NonFiniteWeightError, StoreMismatchError, TensorMismatchError
from .frame import Frame, MatrixResult, decompose_matrix, survival_sample, update_sparsity
from .frame_cache import FrameCache
from .phases import PhaseTimer
from .progress import Progress
from .runs import log_decomposition
from .runtime import bound_heap_growth, resolve_device
from .store import StoreLock, TransitionStore, to_store_array

# Columns of the per-matrix table that are aggregated (mean ± std) per transition.
SUMMARY_EXCLUDE = {"rows", "cols", "layer", "expert", "e_diag", "e_off", "e_null", "w0_fro"}


# ---------------------------------------------------------------------------
# planning


@dataclass(frozen=True)
class TransitionPlan:
    """One transition's checkpoints and the matrices paired and checked in them (a sweep's units are
    :class:`grrr_stream.sweep.Plan`)."""

    base: Checkpoint
    post: Checkpoint
    matrices: list[MatrixName]


def plan_transition(base: Checkpoint, post: Checkpoint, cfg: DecomposeConfig) -> TransitionPlan:
    """Pair and validate every decomposed tensor before any heavy work; all problems at once."""
    if base.model_type and post.model_type and base.model_type != post.model_type:
        raise TensorMismatchError(
            f"base is a '{base.model_type}' model ({base.folder}) but post is '{post.model_type}' ({post.folder}); "
            "a transition needs two checkpoints of the same architecture"
        )
    model_type = base.model_type or post.model_type
    pattern = pattern_for(model_type, cfg.module_pattern)
    _refuse_quantized_experts(base)
    modules = default_modules(model_type, cfg.modules, DEFAULT_MODULES)
    in_base = _select(base, pattern, modules, cfg.split_fused)
    in_post = {m.name for m in _select(post, pattern, modules, cfg.split_fused)}
    if not in_base and not in_post:
        raise TensorMismatchError(
            f"no tensor of {base.folder} matches the decomposition pattern for modules {list(modules)}; "
            f"pattern: {pattern}. Pass module_pattern (a regex with groups 'layer' and 'module') for this layout."
        )
    if cfg.module_pattern is None and tuple(cfg.modules) == DEFAULT_MODULES:  # the family's own selection
        _refuse_partial(base, in_base, model_type, pattern)
    problems: list[str] = []
    for name in sorted(in_post - {m.name for m in in_base}):
        problems.append(f"{name}: in post ({post.folder}) but not in base ({base.folder})")
    for m in in_base:
        b = base.tensors[m.source]
        p = post.tensors.get(m.source)
        if p is None or m.name not in in_post:
            problems.append(f"{m.name}: in base ({base.folder}) but not in post ({post.folder})")
            continue
        if b.shape != p.shape:
            problems.append(f"{m.source}: shape {list(b.shape)} in base but {list(p.shape)} in post")
        shape = base.matrix_shape(m)
        if len(shape) != 2:
            problems.append(f"{m.name}: expected a 2-D matrix (or a 3-D stack of expert matrices), got shape "
                            f"{list(b.shape)}")
        elif 0 in shape:
            problems.append(f"{m.name}: shape {list(shape)} has a zero-size dimension; there is nothing to "
                            "decompose (a broken export?)")
        for side, info in (("base", b), ("post", p)):
            if not info.is_floating:
                problems.append(f"{m.name}: dtype {info.dtype} in {side} is not floating point")
    problems += _memory_problems(base, in_base, cfg.compute_dtype)
    if problems:
        shown = problems[:25]
        more = f"\n  ... and {len(problems) - 25} more" if len(problems) > 25 else ""
        raise TensorMismatchError(
            f"the two checkpoints do not pair up ({len(problems)} problem(s)):\n  " + "\n  ".join(shown) + more
        )
    return TransitionPlan(base=base, post=post, matrices=in_base)


def _select(ckpt: Checkpoint, pattern: str, modules, split: bool) -> list[MatrixName]:
    shapes = {n: i.shape for n, i in ckpt.tensors.items()}
    found = select_matrices(ckpt.tensors, pattern, modules, shapes=shapes)
    return split_fused(found, ckpt.config, shapes) if split else found


# decoder-layer weights a family's built-in selection must account for (biases and norms aside)
_DECODER_WEIGHT_RE = re.compile(r"^(?:model|language_model\.model|model\.language_model)\.layers\.\d+\."
                                r"(?:self_attn|mlp|block_sparse_moe)\.(?!.*bias$)")


def _refuse_partial(ckpt: Checkpoint, selected: list[MatrixName], model_type: Optional[str], pattern: str) -> None:
    """A family's built-in pattern must take every matrix of the decoder's attention and MLP blocks: a weight
    it leaves out means the checkpoint is not laid out as its model_type says (a wrong model_type, a newer
    variant of the family), and decomposing the rest would be a partial result without notice."""
    taken = {m.source for m in selected}
    left = sorted(n for n, i in ckpt.tensors.items()
                  if len(i.shape) >= 2 and n not in taken and _DECODER_WEIGHT_RE.match(n))
    if left:
        raise ConfigError(
            f"{ckpt.folder}: the built-in pattern of model_type '{model_type}' leaves out {len(left)} decoder "
            f"weight(s), e.g. {', '.join(left[:3])}: the checkpoint is not laid out as that family. Check "
            "config.json's model_type, or pass module_pattern (a regex with named groups (?P<layer>\\d+) and "
            f"(?P<module>...)) and modules for this layout; the built-in pattern was '{pattern}'.")


def _refuse_quantized_experts(ckpt: Checkpoint) -> None:
    """gpt-oss ships its experts MXFP4-quantized (``*_blocks`` / ``*_scales`` uint8 tensors): no float
    matrix to decompose, and skipping them silently would leave out most of the model."""
    packed = [n for n in ckpt.tensors if n.endswith(("_proj_blocks", "_proj_scales"))]
    if packed:
        raise TensorMismatchError(
            f"{ckpt.folder} stores expert weights quantized ({packed[0]}, MXFP4 blocks and scales); dequantize "
            "it first (e.g. load with transformers, Mxfp4Config(dequantize=True), and save_pretrained), then "
            "decompose the bf16/float32 checkpoint")


def _memory_problems(base: Checkpoint, matrices: list[MatrixName], compute_dtype: str) -> list[str]:
    """The largest matrix must fit: its SVD holds about four m×n buffers of the compute dtype at
    once (W0, ΔW, LAPACK's copy, U), refused before any allocation rather than failing mid-run."""
    import psutil

    shapes = [base.matrix_shape(m) for m in matrices if len(base.matrix_shape(m)) == 2]
    if not shapes:
        return []
    m, n = max(shapes, key=lambda s: s[0] * s[1])
    need = 4 * m * n * ITEMSIZE[compute_dtype]
    avail = psutil.virtual_memory().available + psutil.swap_memory().free
    if need > avail:
        return [f"the largest matrix ({m}×{n}) needs about {need / 2**30:.1f} GiB in {compute_dtype} for its SVD; "
                f"{avail / 2**30:.1f} GiB of memory is available. Free memory, or use a machine with more"]
    return []


# ---------------------------------------------------------------------------
# the streaming loop


@dataclass
class _Loaded:
    matrix: MatrixName
    w0: torch.Tensor
    w1: torch.Tensor
    digest0: str
    digest1: str
    frame_key: str
    frame: Optional[Frame]
    problems: list[str]
    shape: tuple[int, int] = (0, 0)
    sparsity: dict = field(default_factory=dict)  # checkpoint-precision sparsity of the update
    survival: Optional[tuple] = None  # (axis, indices, W0 sample in checkpoint dtype, target dtype)
    frame_deferred: bool = False  # a large cached frame is read when its matrix is computed, not ahead

    def take(self, attr: str, timer: PhaseTimer, **to_kwargs) -> torch.Tensor:
        """Hand over w0/w1 upcast and drop this item's reference, so the checkpoint-dtype copy
        is freed as soon as the compute-dtype copy exists (one m×n buffer less at peak)."""
        t = getattr(self, attr)
        setattr(self, attr, None)
        with timer.phase("upcast"):
            return t.to(**to_kwargs)


def _nonfinite(t: torch.Tensor, name: str, where: str) -> Optional[str]:
    finite = torch.isfinite(t)
    if bool(finite.all()):
        return None
    n_nan = int(torch.isnan(t).sum())
    n_inf = int(t.numel() - finite.sum() - n_nan)
    return f"{name} in {where}: {n_nan} NaN and {n_inf} Inf value(s)"


def _nonfinite_result(res: MatrixResult, name: str, compute_dtype: str) -> Optional[str]:
    """Why a matrix's results cannot be stored (a NaN or Inf metric or array), or None."""
    bad = sorted(k for k, v in res.metrics.as_row().items() if isinstance(v, float) and not math.isfinite(v))
    arrays = {"P": res.projection.P, "sigma1": res.sigma1}
    if not res.projection.null_is_structural_zero:
        arrays["null"] = res.projection.null
    bad += [k for k, t in arrays.items() if not bool(torch.isfinite(t).all())]
    if not bad:
        return None
    return (f"{name}: non-finite result in {compute_dtype} ({', '.join(bad[:6])}): the update W1 − W0 overflows or "
            "the weights are too large for the compute dtype; try compute_dtype float64")


@dataclass
class TransitionResult:
    store: Path
    rows: list[dict]
    summary_rows: list[dict]
    computed: int  # matrices computed in this call (0 when everything was already done)
    frames_reused: int
    run_id: Optional[str] = None
    timings: dict[str, float] = field(default_factory=dict)
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
    workers (grrr_stream.spread); the results are the same. Raises a
    :class:`~grrr_stream.errors.GrrrError` subclass for bad inputs before any SVD.
    """
    spreads = client is not None or require(parse_scheduler(cfg.scheduler), ("threads", "synchronous", "local",
                                                                             "address"), "decompose").distributed
    t_start = time.monotonic()
    started_ms = int(time.time() * 1000)  # the MLflow run, opened after the work, starts here
    stream = stream or sys.stderr
    timer = PhaseTimer(resolve_device(cfg.device) if cfg.sync_timing else None)
    t_plan = time.perf_counter()
    bound_heap_growth()
    base_dir = resolve_source(cfg.base, cfg.base_revision)
    post_dir = resolve_source(cfg.post, cfg.post_revision)
    base, post = Checkpoint.open(base_dir), Checkpoint.open(post_dir)
    plan = plan_transition(base, post, cfg)
    device = resolve_device(cfg.device)
    dtype = torch_dtype(cfg.compute_dtype)
    identity = _identity(cfg, base, post)
    manifest = {
        "identity": identity,
        "base": cfg.base,
        "post": cfg.post,
        # absolute: variants and statistics read the checkpoints from wherever they are run
        "base_folder": str(Path(base_dir).absolute()),
        "post_folder": str(Path(post_dir).absolute()),
        "model_type": base.model_type,
        "method": cfg.method,
        "chain": cfg.chain,
        "settings": result_settings(cfg),
        "matrices": [m.name for m in plan.matrices],
        "frame_cache": str(cfg.frame_cache_path().resolve()),
        "versions": versions(),
    }
    TransitionStore.check_writable(cfg.store)  # before the lock file is created in it
    frames = FrameCache(cfg.frame_cache_path()).prepare()  # refuses a folder that is not a frame cache
    with StoreLock(cfg.store):
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
                f"unchanged are kept, {len(names)} changed ones are recomputed")
        elif done and cfg.verify_resume:
            changed = _changed_since_recorded(plan, done)
            if changed and not cfg.overwrite:
                raise StoreMismatchError(
                    f"{len(changed)} tensor(s) differ from those the stored results were computed from, e.g. "
                    + ", ".join(changed[:5]) + f". The checkpoint was modified in place since {cfg.store} was "
                    "written. Use another --store, or pass --overwrite to recompute everything."
                )
            if changed:
                TransitionStore.clear(cfg.store)
                store = TransitionStore.open(cfg.store, manifest)
                done = {}
        pending = [m for m in plan.matrices if m.name not in done]
        progress = Progress(len(plan.matrices), done=len(plan.matrices) - len(pending),
                            enabled=cfg.progress, stream=stream)
        if pending:
            _check_disk_space(cfg, plan, pending, frames, progress, identity["base_fingerprint"])
        if done:
            progress.message(f"resuming {cfg.store}: {len(done)} of {len(plan.matrices)} matrices already done")
        timer.add("plan", time.perf_counter() - t_plan)
        t_matrices = time.perf_counter()
        workers: dict[str, int] = {}
        if pending and spreads:
            from .spread import run_spread

            computed, reused, failures, workers = run_spread(
                cfg, plan, pending, progress, identity["base_fingerprint"], (manifest["base_folder"],
                                                                             manifest["post_folder"]), client=client)
        else:
            threads = torch.get_num_threads()
            torch.set_num_threads(compute_threads(cfg, device, plan))
            try:
                computed, reused, failures = stream_matrices(cfg, plan, pending, store, frames, device, dtype,
                                                             progress, timer, identity["base_fingerprint"])
            finally:
                torch.set_num_threads(threads)
        timer.add("matrices_wall", time.perf_counter() - t_matrices)
        if failures:
            raise NonFiniteWeightError(
                f"{len(failures)} matrix pair(s) hold non-finite weights or give non-finite results and were not "
                f"decomposed (the other {len(plan.matrices) - len(failures)} are done and kept; a rerun after the "
                "fix computes only these):\n  " + "\n  ".join(failures)
            )
        with timer.phase("tables_figures"):
            rows, summary_rows, summary = finalize(store, plan.matrices, f"{cfg.base} → {cfg.post}")
    result = TransitionResult(cfg.store, rows, summary_rows, computed, reused, workers=workers)
    if cfg.tracking.enabled:
        with timer.phase("tracking"):
            result.run_id = log_decomposition(cfg, store, manifest, rows, summary, started_ms,
                                              time.monotonic() - t_start)
    result.timings = {**timer.seconds(), "total_s": time.monotonic() - t_start}
    return result


# A cached frame larger than this is read when its matrix is computed instead of by the reader thread
# ahead of time: on 14B shapes the next MLP frame (U and V of 17408×5120, 0.46 GiB) would otherwise sit
# in memory during the whole current matrix. Reading it is well under 1 % of that matrix's compute.
PREFETCH_FRAME_BYTES = 256 << 20


# Likewise the next pair of checkpoint tensors: above this (both tensors, checkpoint dtype) it is read
# once the current matrix's math is done, overlapping its write instead (14B MLP pair in bf16: 356 MiB).
PREFETCH_PAIR_BYTES = 256 << 20


def pair_bytes(plan: TransitionPlan, m: MatrixName) -> int:
    """Bytes of the W0 and W1 matrices of ``m`` as stored (a slice of a 3-D expert tensor: its share)."""
    total = 0
    for ckpt in (plan.base, plan.post):
        info = ckpt.tensors[m.source]
        total += info.nbytes * math.prod(ckpt.matrix_shape(m)) // max(1, math.prod(info.shape))
    return total


def frame_bytes(shape: tuple[int, int], dtype: torch.dtype) -> int:
    """Bytes of a full-rank frame of an m×n matrix: U (m×r), S (r) and V (n×r), r = min(m, n)."""
    m, n = shape
    r = min(m, n)
    return (m * r + r + n * r) * torch.empty((), dtype=dtype).element_size()


# Below this many entries per matrix, a second LAPACK thread is not worth the core it takes from the
# reader and writer threads (measured on 2 cores, tools/bench_decompose.py; README "Benchmarks").
SMALL_MATRIX = 4 << 20


def compute_threads(cfg: DecomposeConfig, device: torch.device, plan: TransitionPlan,
                    available: Optional[int] = None) -> int:
    """torch's intra-op threads for this run's math. On a GPU, or when the user set cpu_threads, as
    given. On a CPU the reader and writer threads need a core of their own while the math runs:
    MKL's OpenMP team spins at its barriers, so a team that shares its cores with them runs at the
    pace of its slowest member (measured: LAPACK 3x slower inside the pipeline than alone with two
    threads on two cores). Small matrices keep all cores but one for the math; large ones, whose
    SVDs dwarf the reading and writing, keep every core. ``available``: the cores this process may use
    (a Dask worker's share of its host), default torch's current thread count."""
    current = available or torch.get_num_threads()
    if cfg.cpu_threads is not None:
        return cfg.cpu_threads
    if device.type != "cpu" or current <= 1 or not plan.matrices:
        return current
    largest = max(math.prod(plan.base.matrix_shape(m)) for m in plan.matrices)
    return current - 1 if largest < SMALL_MATRIX else current


def _check_disk_space(cfg: DecomposeConfig, plan: TransitionPlan, pending: list[MatrixName], frames: FrameCache,
                      progress: Progress, base_fingerprint: str) -> None:
    """Say what the pending matrices will write, and refuse to start when it cannot fit."""
    from .diskplan import check_space, describe, transition_needs

    # frames of this base in these settings already cached (a sweep shares one cache between bases)
    cached = frames.count(base_fingerprint, cfg.compute_dtype, cfg.core_rel_threshold)
    needs = transition_needs(
        (plan.base.matrix_shape(m) for m in pending), cfg.store, frames.path,
        store_dtype=cfg.store_dtype, compute_dtype=cfg.compute_dtype, null_storage=cfg.null_storage,
        core_truncated=cfg.core_rel_threshold is not None,
        frames_cached_fraction=min(1.0, cached / max(1, len(plan.matrices))))
    progress.message(f"disk: {describe(needs)} for {len(pending)} matrices")
    check_space(needs, f"{len(pending)} matrices of {cfg.store}",
                "Free space or point --store / --frame-cache at another disk; a rerun resumes where it stopped.")


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


def stream_matrices(cfg, plan: TransitionPlan, pending: list[MatrixName], store: TransitionStore,
                    frames: FrameCache, device: torch.device, dtype: torch.dtype, progress: Progress,
                    timer: PhaseTimer, base_fingerprint: str) -> tuple[int, int, list[str]]:
    def load(m: MatrixName) -> _Loaded:
        with timer.phase("read"):
            w0, w1 = plan.base.read_matrix(m), plan.post.read_matrix(m)
        with timer.phase("checks"):
            problems = [p for p in (_nonfinite(w0, m.name, "base"), _nonfinite(w1, m.name, "post")) if p]
        with timer.phase("digest"):
            d0, d1 = tensor_digest(w0), tensor_digest(w1)
        key = FrameCache.key(d0, cfg.compute_dtype, cfg.core_rel_threshold)
        deferred = not problems and frame_bytes(tuple(w0.shape), dtype) > PREFETCH_FRAME_BYTES
        frame = None
        if not problems and not deferred:
            with timer.phase("frame_read"):
                frame = frames.get(key, dtype, shape=tuple(w0.shape))
        item = _Loaded(m, w0, w1, d0, d1, key, frame, problems, tuple(w0.shape), frame_deferred=deferred)
        if not problems:  # in the checkpoints' own dtype, while the reader thread has them
            with timer.phase("sparsity_sample"):
                item.sparsity = update_sparsity(w0, w1)
                if cfg.survival_dtype is not None:
                    axis, idx = survival_sample(tuple(w0.shape))
                    sample = (w0[idx] if axis == 0 else w0[:, idx]).clone()
                    item.survival = (axis, idx, sample, getattr(torch, cfg.survival_dtype))
        return item

    def write(item: _Loaded, res: MatrixResult, frame_is_new: bool) -> None:
        if frame_is_new:
            with timer.phase("frame_write"):
                frames.put(item.frame_key, res.frame, {"shape": list(item.shape), "dtype": cfg.compute_dtype,
                                                   "core_rel_threshold": cfg.core_rel_threshold,
                                                       "base_digest": item.digest0,
                                                       "base_fingerprint": base_fingerprint})
        arrays: dict[str, np.ndarray] = {}
        array_attrs: dict[str, dict] = {}
        proj = res.projection
        null_kept = "none" if proj.null_is_structural_zero else cfg.null_storage
        arrays["P"], array_attrs["P"] = to_store_array(proj.P, cfg.store_dtype)
        if null_kept == "array":
            arrays["null"], array_attrs["null"] = to_store_array(proj.null, cfg.store_dtype)
        elif null_kept == "norms":  # the user chose to keep only these (null_storage: norms)
            arrays["null_row_norms"] = torch.linalg.vector_norm(proj.null, dim=1).double().cpu().numpy()
            arrays["null_col_norms"] = torch.linalg.vector_norm(proj.null, dim=0).double().cpu().numpy()
        arrays["sigma0"] = res.frame.S.detach().double().cpu().numpy()
        arrays["sigma1"] = res.sigma1.detach().double().cpu().numpy()
        m = item.matrix
        attrs = {
            "name": m.name, "layer": m.layer, "module": m.module, **m.record(),
            "shape": list(item.shape), "rank": res.frame.rank,
            "base_digest": item.digest0, "post_digest": item.digest1, "frame_key": item.frame_key,
            "null_stored": "null" in arrays, "null_kept": null_kept,
            "metrics": {**res.metrics.as_row(), **item.sparsity},
        }
        store.write_matrix(m.name, arrays, attrs, array_attrs, timer=timer)

    computed = reused = 0
    failures: list[str] = []
    if not pending:
        return computed, reused, failures
    with ThreadPoolExecutor(1, thread_name_prefix="grrr-read") as reader, \
            ThreadPoolExecutor(1, thread_name_prefix="grrr-write") as writer:
        next_load: Optional[Future] = reader.submit(load, pending[0])
        in_flight: Optional[Future] = None
        for i, m in enumerate(pending):
            with timer.phase("wait_read"):
                item = next_load.result()
            nxt = pending[i + 1] if i + 1 < len(pending) else None
            # a large pair is read while this matrix's result is written, not during its math (peak memory)
            late = nxt is not None and pair_bytes(plan, nxt) > PREFETCH_PAIR_BYTES
            next_load = reader.submit(load, nxt) if nxt is not None and (not late or item.problems) else None
            if item.problems:
                failures.extend(item.problems)
                progress.advance(f"{m.name} SKIPPED (non-finite)")
                continue
            if item.frame_deferred:
                with timer.phase("frame_read"):
                    item.frame = frames.get(item.frame_key, dtype, shape=item.shape)
            frame = item.frame
            frame_is_new = frame is None
            item.frame = None  # the CPU copy: the writer must not keep it alive
            if frame is not None:
                frame = Frame(U=frame.U.to(device), S=frame.S.to(device), V=frame.V.to(device))
                reused += 1
            # no local names for the inputs: decompose_matrix frees W0 once the frame exists
            survival = item.survival
            if survival is not None:
                survival = (survival[0], survival[1].to(device), survival[2].to(device), survival[3])
            res = decompose_matrix(item.take("w0", timer, device=device, dtype=dtype),
                                   item.take("w1", timer, device=device, dtype=dtype, copy=True),
                                   frame=frame, core_rel_threshold=cfg.core_rel_threshold,
                                   rank_thresholds=cfg.rank_thresholds, band_edges=cfg.band_edges,
                                   angle_edges=cfg.angle_edges, survival=survival, timer=timer,
                                   svd_driver=cfg.svd_driver)
            if next_load is None and nxt is not None:
                next_load = reader.submit(load, nxt)
            bad = _nonfinite_result(res, m.name, cfg.compute_dtype)
            if bad:  # finite inputs can still overflow (|W1 − W0| beyond the compute dtype): never stored
                failures.append(bad)
                del res, item, frame
                progress.advance(f"{m.name} SKIPPED (non-finite result)")
                continue
            if in_flight is not None:
                with timer.phase("wait_write"):
                    in_flight.result()  # at most one write queued; surfaces writer errors
            if not frame_is_new:  # the writer needs only σ of a cached frame: U and V are not kept alive
                r = res.frame.rank
                res = replace(res, frame=Frame(U=res.frame.U.new_empty(0, r), S=res.frame.S,
                                               V=res.frame.V.new_empty(0, r)))
            in_flight = writer.submit(write, item, res, frame_is_new)
            del res, item, frame
            computed += 1
            progress.advance(m.name)
        if in_flight is not None:
            in_flight.result()
    return computed, reused, failures


# ---------------------------------------------------------------------------
# tables and tracking


def summarize(rows: list[dict]) -> tuple[list[dict], dict]:
    """Mean ± std (sample std, 0 for a single matrix) of every metric, overall, per module (a module of a
    mixture of experts aggregates all its experts) and, for expert matrices, per expert index
    (scope ``expert-<e>``, aggregating layers and modules)."""
    # every numeric column of any row: a metric that only some matrices have (a subspace angle for a k
    # above a small matrix's rank) is summarised over those that have it
    metrics: list[str] = []
    for r in rows:
        metrics += [k for k, v in r.items() if k not in metrics and isinstance(v, (int, float))
                    and not isinstance(v, bool) and k not in SUMMARY_EXCLUDE]
    scopes: dict[str, list[dict]] = {"all": rows}
    for r in rows:
        scopes.setdefault(r["module"], []).append(r)
    for r in sorted((r for r in rows if r.get("expert") is not None), key=lambda r: r["expert"]):
        scopes.setdefault(f"expert-{r['expert']}", []).append(r)
    out_rows = []
    for scope, rs in scopes.items():
        row: dict[str, Any] = {"scope": scope, "n": len(rs)}
        for k in metrics:
            vals = np.array([float(r[k]) for r in rs if k in r])
            if not len(vals):
                continue
            row[f"{k}_mean"] = float(vals.mean())
            row[f"{k}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
        out_rows.append(row)
    return out_rows, {"metrics": metrics, "scopes": {r["scope"]: r for r in out_rows}}


def finalize(store: TransitionStore, matrices: list[MatrixName], title: str = "") -> tuple[list[dict], list[dict], dict]:
    """Build the per-matrix table and summary from the completion records; write tables and figures."""
    from . import plots

    done = store.completed()
    rows = []
    for m in matrices:
        attrs = done[m.name]
        # expert: empty for a matrix outside the experts (every matrix of a dense model)
        rows.append({"name": m.name, "layer": m.layer, "module": m.module, "expert": m.expert, **attrs["metrics"]})
    summary_rows, summary = summarize(rows)
    store.write_tables(rows, summary_rows, summary)
    fig_dir = store.path / "figures"
    fig_dir.mkdir(exist_ok=True)
    plots.energy_fractions_by_layer(rows, fig_dir / "energy_fractions.png", title)
    edges = sorted({int(k[4:].split("_")[0]) for k in rows[0] if k.startswith("band") and "_" in k})
    if edges:
        plots.band_energy_by_module(rows, edges, fig_dir / "band_energy_by_module.png", title)
    top = sorted(rows, key=lambda r: r["r_delta"], reverse=True)[:4]
    spectra = [(r["name"], *store.read_sigmas(r["name"])) for r in top]
    plots.normalized_spectra(spectra, fig_dir / "spectra_most_changed.png", title)
    store.mark_complete()
    return rows, summary_rows, summary
