"""One matrix pair's whole GRRR treatment: frame, ΔW, projection, split, analyses and metrics.

Pure torch, no I/O; the steps themselves live in :mod:`grrr_stream.geometry.frame` (frame and
projection), :mod:`grrr_stream.geometry.analyses` (beyond the paper) and :mod:`grrr_stream.geometry.metrics`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

import torch

from ..runtime.phases import NO_TIMER, PhaseTimer
from .analyses import ANALYSES, options
from .analyses.base import MatrixState
from .frame import (
    DEGENERATE_GAP,
    Frame,
    Projection,
    all_finite,
    compute_frame,
    project,
    spectral_norm,
    split_energies,
    svdvals,
)
from .metrics import MatrixMetrics, matrix_metrics


@dataclass(frozen=True)
class MatrixResult:
    frame: Frame
    projection: Projection
    sigma1: torch.Tensor
    metrics: MatrixMetrics
    # (channels, 3) float64 diag/off/null energy per residual channel (grrr_stream.geometry.channel_energy), or None
    channel_energy: Optional[torch.Tensor] = None

    def nonfinite(self, name: str, compute_dtype: str) -> Optional[str]:
        """Why this result cannot be stored (a NaN or Inf metric or array), or None."""
        bad = sorted(k for k, v in self.metrics.as_row().items() if isinstance(v, float) and not math.isfinite(v))
        arrays = {"P": self.projection.P, "sigma1": self.sigma1}
        if not self.projection.null_is_structural_zero:
            arrays["null"] = self.projection.null
        bad += [k for k, t in arrays.items() if not all_finite(t)]
        if not bad:
            return None
        return (
            f"{name}: non-finite result in {compute_dtype} ({', '.join(bad[:6])}): the update W1 − W0 overflows "
            "or the weights are too large for the compute dtype; try compute_dtype float64"
        )

    def sigma_only(self) -> "MatrixResult":
        """The writer needs only σ of a cached frame: U and V are not kept alive."""
        r = self.frame.rank
        return replace(
            self, frame=Frame(U=self.frame.U.new_empty(0, r), S=self.frame.S, V=self.frame.V.new_empty(0, r))
        )


@dataclass(frozen=True)
class MatrixSettings:
    """How one matrix pair is decomposed. ``degenerate_gap``: see :func:`grrr_stream.geometry.frame.compute_frame`
    (a new frame of a float32 W0 with near-equal singular values is computed in float64) and the
    ``f_degenerate`` column (None: neither). ``analyses``: the analyses' settings (an
    :class:`~grrr_stream.geometry.analyses.AnalysisOptions` or a decomposition's settings; default: only those
    without settings); ``prepared``: analysis name → what its reader-thread step returned for this matrix."""

    core_rel_threshold: Optional[float] = None
    rank_thresholds: tuple[float, ...] = (1e-7, 1e-3)
    svd_driver: Optional[str] = None
    degenerate_gap: Optional[float] = DEGENERATE_GAP
    analyses: Any = field(default_factory=options)
    prepared: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, cfg: Any, prepared: Optional[Mapping[str, Any]] = None) -> "MatrixSettings":
        """The settings of a decomposition's config (:class:`grrr_stream.config.DecompositionSettings`)."""
        return cls(
            cfg.core_rel_threshold,
            tuple(cfg.rank_thresholds),
            cfg.svd_driver,
            cfg.degenerate_gap,
            cfg,
            dict(prepared or {}),
        )


def decompose_matrix(
    W0: torch.Tensor,
    W1: torch.Tensor,
    frame: Optional[Frame] = None,
    settings: MatrixSettings = MatrixSettings(),
    timer: PhaseTimer = NO_TIMER,
) -> MatrixResult:
    """Full GRRR treatment of one matrix pair, given already upcast (float32/64) tensors, and every enabled
    analysis beyond the paper (:data:`grrr_stream.geometry.analyses.ANALYSES`) in the same pass.

    Consumes ``W1`` (it becomes ΔW, then the null residual) and drops ``W0`` as soon as
    the frame exists, to keep at most a few m×n buffers alive. Pass a cached ``frame``
    to skip the SVD of W0. ``timer`` collects the seconds of each step (see :mod:`grrr_stream.runtime.phases`).
    """
    if W0.dtype != W1.dtype or W0.dtype not in (torch.float32, torch.float64):
        raise TypeError("decompose_matrix expects two float32 or two float64 tensors")
    with timer.phase("svdvals_w1"):
        sigma1 = svdvals(W1, settings.svd_driver)
    # the frame first, while W1 is intact: the same peak memory as forming ΔW first (W1 takes ΔW's place
    # during the SVD), and a truncated core's angles, which iterate on W1 itself, start from W0's
    if frame is None:
        with timer.phase("svd_w0"):
            frame = compute_frame(W0, settings.core_rel_threshold, settings.svd_driver, settings.degenerate_gap)
    state = MatrixState(frame=frame, shape=tuple(W1.shape), timer=timer, W1=W1, degenerate_gap=settings.degenerate_gap)
    columns: dict[str, dict] = {}
    _run_stage("w1", state, settings, columns)
    state.W1 = None
    with timer.phase("delta"):
        delta = W1.sub_(W0)
        del W1, W0  # W0 freed here when the caller passed it without keeping a reference
        state.delta_fro = float(torch.linalg.vector_norm(delta).item())
    with timer.phase("spectral_norm"):
        state.delta_spec = spectral_norm(delta) if state.delta_fro > 0 else 0.0
    if state.delta_fro == 0.0:
        # W1 == W0 bit for bit: use the identical spectrum rather than one from another
        # LAPACK routine, so a model compared with itself gives exact zeros.
        sigma1 = frame.S.clone()
    state.delta = delta
    _run_stage("delta", state, settings, columns)
    state.delta = None
    with timer.phase("projection"):
        proj = project(delta, frame, in_place=True, lift=state.lift)
        energies = split_energies(proj.P, proj.null)
    state.proj, state.lifted = proj, proj.lifted
    _run_stage("lifted", state, settings, columns)
    state.proj = proj = replace(proj, lifted=None)
    state.lifted = None
    _run_stage("split", state, settings, columns)
    return MatrixResult(
        frame=frame,
        projection=proj,
        sigma1=sigma1,
        metrics=_metrics(state, sigma1, energies, settings.rank_thresholds, columns),
        channel_energy=state.arrays.get("channel_energy"),
    )


def _metrics(
    state: MatrixState,
    sigma1: torch.Tensor,
    energies: tuple[float, float, float],
    rank_thresholds: tuple[float, ...],
    columns: dict[str, dict],
) -> MatrixMetrics:
    """The matrix's metrics row: the paper's, from the two spectra, the update's norms and its split
    energies, then the analyses' ``columns`` in the registry's order."""
    frame = state.frame
    m, n = state.shape
    metrics = matrix_metrics(
        frame.S.double().cpu().numpy(),
        sigma1.double().cpu().numpy(),
        delta_fro=state.delta_fro,
        delta_spec=state.delta_spec,
        energies=energies,
        rows=m,
        cols=n,
        rank=frame.rank,
        rank_thresholds=rank_thresholds,
    )
    extra = {k: v for a in ANALYSES for k, v in columns.get(a.name, {}).items()}  # in the registry's order
    if extra:
        metrics = replace(metrics, extra=extra)
    return metrics


def _run_stage(stage: str, state: MatrixState, settings: MatrixSettings, columns: dict[str, dict]) -> None:
    """Each enabled analysis's step for this stage, its columns kept by analysis."""
    for a in ANALYSES:
        step = a.steps.get(stage)
        if step is None or not a.enabled(settings.analyses):
            continue
        with state.timer.phase(a.phase):
            got = step(state, settings.analyses, settings.prepared.get(a.name))
        if got:
            columns.setdefault(a.name, {}).update(got)
