"""The three stages of the streaming pipeline, for one matrix each (the scheduling that overlaps them is
:mod:`grrr_stream.decompose.streaming`)::

    reader:   the pair read in the checkpoints' dtypes, checked for non-finite values and digested, its
              cached frame read ahead unless large, the analyses' reader steps
    compute:  the frame kernel on the compute device (grrr_stream.geometry.kernel.decompose_matrix)
    writer:   a new frame to the frame cache, the arrays and completion record to the store
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from ..checkpoints.arch import MatrixName
from ..checkpoints.reader import tensor_digest
from ..config import DecomposeConfig
from ..dtypes import name_of
from ..geometry.analyses import ANALYSES
from ..geometry.channel_energy import COMPONENTS, residual_axis, side
from ..geometry.frame import Frame, all_finite
from ..geometry.kernel import MatrixResult, MatrixSettings, decompose_matrix
from ..runtime.phases import PhaseTimer
from ..store.frame_cache import FrameCache
from ..store.transition_store import TransitionStore, to_store_array
from .plan import TransitionPlan


@dataclass
class LoadedPair:
    """One matrix pair as the reader hands it to the math."""

    matrix: MatrixName
    w0: torch.Tensor
    w1: torch.Tensor
    digest0: str
    digest1: str
    frame_key: str
    frame: Optional[Frame]
    problems: list[str]
    shape: tuple[int, int] = (0, 0)
    dtypes: dict = field(default_factory=dict)  # each side's checkpoint dtype: a pair may mix them
    prepared: dict = field(default_factory=dict)  # analysis name → its reader step's result
    frame_deferred: bool = False  # a large cached frame is read when its matrix is computed, not ahead

    def take(self, attr: str, timer: PhaseTimer, **to_kwargs) -> torch.Tensor:
        """Hand over w0/w1 upcast and drop this item's reference, so the checkpoint-dtype copy
        is freed as soon as the compute-dtype copy exists (one m×n buffer less at peak)."""
        t = getattr(self, attr)
        setattr(self, attr, None)
        with timer.phase("upcast"):
            return t.to(**to_kwargs)


def _nonfinite(t: torch.Tensor, name: str, where: str) -> Optional[str]:
    if all_finite(t):
        return None
    finite = torch.isfinite(t)
    n_nan = int(torch.isnan(t).sum())
    n_inf = int(t.numel() - finite.sum() - n_nan)
    return f"{name} in {where}: {n_nan} NaN and {n_inf} Inf value(s)"


# A cached frame larger than this is read when its matrix is computed instead of by the reader thread
# ahead of time: on 14B shapes the next MLP frame (U and V of 17408×5120, 0.46 GiB) would otherwise sit
# in memory during the whole current matrix. Reading it is well under 1 % of that matrix's compute.
PREFETCH_FRAME_BYTES = 256 << 20


def frame_bytes(shape: tuple[int, int], dtype: torch.dtype) -> int:
    """Bytes of a full-rank frame of an m×n matrix: U (m×r), S (r) and V (n×r), r = min(m, n)."""
    m, n = shape
    r = min(m, n)
    return (m * r + r + n * r) * torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class Pipeline:
    """What the three stages of one run share: the settings, the inputs and where results go (the
    options of :func:`grrr_stream.decompose.streaming.stream_matrices`)."""

    cfg: DecomposeConfig
    plan: TransitionPlan
    store: TransitionStore
    frames: FrameCache
    device: torch.device
    dtype: torch.dtype
    timer: PhaseTimer
    base_fingerprint: str

    def read(self, m: MatrixName) -> LoadedPair:
        """The reader thread: one pair in the checkpoints' dtype, checked and digested, its cached frame."""
        cfg, timer = self.cfg, self.timer
        with timer.phase("read"):
            w0, w1 = self.plan.base.read_matrix(m), self.plan.post.read_matrix(m)
        with timer.phase("checks"):
            problems = [p for p in (_nonfinite(w0, m.name, "base"), _nonfinite(w1, m.name, "post")) if p]
        with timer.phase("digest"):
            d0, d1 = tensor_digest(w0), tensor_digest(w1)
        key = FrameCache.key(d0, cfg.compute_dtype, cfg.core_rel_threshold, cfg.degenerate_gap)
        deferred = not problems and frame_bytes(tuple(w0.shape), self.dtype) > PREFETCH_FRAME_BYTES
        frame = None
        if not problems and not deferred:
            with timer.phase("frame_read"):
                frame = self.frames.get(key, self.dtype, shape=tuple(w0.shape))
        item = LoadedPair(
            m,
            w0,
            w1,
            d0,
            d1,
            key,
            frame,
            problems,
            tuple(w0.shape),
            frame_deferred=deferred,
            dtypes={"base": name_of(w0.dtype), "post": name_of(w1.dtype)},
        )
        if not problems:  # the analyses' reader steps: the checkpoints' own dtypes, while the reader has them
            with timer.phase("sparsity_sample"):
                item.prepared = {a.name: a.read(cfg, m, w0, w1) for a in ANALYSES if a.read and a.enabled(cfg)}
        return item

    def compute(self, item: LoadedPair) -> tuple[MatrixResult, bool]:
        """The main thread: (the matrix's result, whether its frame is new rather than from the cache)."""
        cfg, device, dtype, timer = self.cfg, self.device, self.dtype, self.timer
        if item.frame_deferred:
            with timer.phase("frame_read"):
                item.frame = self.frames.get(item.frame_key, dtype, shape=item.shape)
        frame = item.frame
        frame_is_new = frame is None
        item.frame = None  # the CPU copy: the writer must not keep it alive
        if frame is not None:
            frame = Frame(U=frame.U.to(device), S=frame.S.to(device), V=frame.V.to(device))
        # no local names for the inputs: decompose_matrix frees W0 once the frame exists, and takes W1 over
        # (it becomes ΔW in place): the reader's tensors are the item's own (Checkpoint.read_part), so a W1
        # already in the compute dtype is handed over as it is, not copied (55 MB per 8960 × 1536 float32 matrix)
        prepared, item.prepared = item.prepared, {}
        res = decompose_matrix(
            item.take("w0", timer, device=device, dtype=dtype),
            item.take("w1", timer, device=device, dtype=dtype),
            frame,
            MatrixSettings.of(cfg, prepared),
            timer,
        )
        return res, frame_is_new

    def write(self, item: LoadedPair, res: MatrixResult, frame_is_new: bool) -> None:
        """The writer thread: a new frame to the cache, then the matrix's arrays and its completion record."""
        cfg = self.cfg
        if frame_is_new:
            with self.timer.phase("frame_write"):
                self.frames.put(
                    item.frame_key,
                    res.frame,
                    {
                        "shape": list(item.shape),
                        "dtype": cfg.compute_dtype,
                        "core_rel_threshold": cfg.core_rel_threshold,
                        "base_digest": item.digest0,
                        "base_fingerprint": self.base_fingerprint,
                    },
                )
        arrays, array_attrs, null_kept = _store_arrays(res, cfg.null_storage, cfg.store_dtype)
        m = item.matrix
        attrs = {
            "name": m.name,
            "layer": m.layer,
            "module": m.module,
            **m.record(),
            "shape": list(item.shape),
            "rank": res.frame.rank,
            "dtypes": item.dtypes,
            "base_digest": item.digest0,
            "post_digest": item.digest1,
            "frame_key": item.frame_key,
            "null_stored": "null" in arrays,
            "null_kept": null_kept,
            **({"channels": {"side": side(m.module), "axis": residual_axis(m)}} if "channel_energy" in arrays else {}),
            "metrics": res.metrics.as_row(),
        }
        self.store.write_matrix(m.name, arrays, attrs, array_attrs, timer=self.timer)


def _store_arrays(
    res: MatrixResult, null_storage: str, store_dtype: str
) -> tuple[dict[str, np.ndarray], dict[str, dict], str]:
    """(arrays, their attributes, how the null residual is kept) of one matrix's result."""
    arrays: dict[str, np.ndarray] = {}
    array_attrs: dict[str, dict] = {}
    proj = res.projection
    null_kept = "none" if proj.null_is_structural_zero else null_storage
    arrays["P"], array_attrs["P"] = to_store_array(proj.P, store_dtype)
    if null_kept == "array":
        arrays["null"], array_attrs["null"] = to_store_array(proj.null, store_dtype)
    elif null_kept == "norms":  # the user chose to keep only these (null_storage: norms)
        arrays["null_row_norms"] = torch.linalg.vector_norm(proj.null, dim=1).double().cpu().numpy()
        arrays["null_col_norms"] = torch.linalg.vector_norm(proj.null, dim=0).double().cpu().numpy()
    arrays["sigma0"] = res.frame.S.detach().double().cpu().numpy()
    arrays["sigma1"] = res.sigma1.detach().double().cpu().numpy()
    if res.channel_energy is not None:  # (channel, component): float64, a few KiB
        arrays["channel_energy"] = res.channel_energy.cpu().numpy()
        array_attrs["channel_energy"] = {"components": list(COMPONENTS)}
    return arrays, array_attrs, null_kept
