"""One matrix pair's whole GRRR treatment: frame, ΔW, projection, split, analyses and metrics.

Pure torch, no I/O; the steps themselves live in :mod:`grrr_stream.geometry.frame` (frame and
projection), :mod:`grrr_stream.geometry.analyses` (beyond the paper) and :mod:`grrr_stream.geometry.metrics`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional, Sequence

import torch

from ..dtypes import name_of
from ..runtime.phases import NO_TIMER, PhaseTimer
from .analyses import (
    AnglePair,
    angle_columns,
    band_energies,
    component_samples,
    principal_angles_in_frame,
    principal_angles_of_w1,
    round_trip_survival,
)
from .channel_energy import channel_energies
from .degenerate import degenerate_clusters
from .frame import DEGENERATE_GAP, Frame, Projection, compute_frame, project, spectral_norm, split_energies, svdvals
from .metrics import MatrixMetrics, matrix_metrics, ratio_or_zero

# (axis, indices, W0 on those rows/columns in the checkpoint dtype, target dtype): see decompose_matrix
Survival = tuple[int, torch.Tensor, torch.Tensor, torch.dtype]


@dataclass(frozen=True)
class MatrixResult:
    frame: Frame
    projection: Projection
    sigma1: torch.Tensor
    metrics: MatrixMetrics
    # (channels, 3) float64 diag/off/null energy per residual channel (grrr_stream.geometry.channel_energy), or None
    channel_energy: Optional[torch.Tensor] = None


def decompose_matrix(
    W0: torch.Tensor,
    W1: torch.Tensor,
    *,
    frame: Optional[Frame] = None,
    core_rel_threshold: Optional[float] = None,
    rank_thresholds: Sequence[float] = (1e-7, 1e-3),
    band_edges: Sequence[int] = (),
    angle_edges: Sequence[int] = (),
    survival: Optional[Survival] = None,
    timer: PhaseTimer = NO_TIMER,
    svd_driver: Optional[str] = None,
    degenerate_gap: Optional[float] = DEGENERATE_GAP,
    channel_axis: Optional[int] = None,
) -> MatrixResult:
    """Full GRRR treatment of one matrix pair, given already upcast (float32/64) tensors.

    Consumes ``W1`` (it becomes ΔW, then the null residual) and drops ``W0`` as soon as
    the frame exists, to keep at most a few m×n buffers alive. Pass a cached ``frame``
    to skip the SVD of W0. Beyond the paper, in the same pass: ``band_edges`` splits the
    energy of P by principal band; ``angle_edges`` measures the principal angles between the
    top-k singular subspaces of W0 and W1 for each k (in W0's frame, no SVD of W1, stopped by a
    Davis–Kahan bound: :func:`grrr_stream.geometry.analyses.principal_angles_in_frame`); ``survival`` = (axis, indices, W0 on
    those rows/columns in the checkpoint dtype, target dtype) estimates how much of each component survives a round
    trip of W0 + component through the target dtype. ``timer`` collects the seconds of each
    step (see :mod:`grrr_stream.runtime.phases`). ``degenerate_gap``: see :func:`grrr_stream.geometry.frame.compute_frame`
    (a new frame of a float32 W0 with near-equal singular values is computed in float64) and the
    ``f_degenerate`` column (None: neither). ``channel_axis`` (0: rows, 1: columns) adds each component's
    energy per residual channel along that axis (:func:`grrr_stream.geometry.channel_energy.channel_energies`).
    """
    if W0.dtype != W1.dtype or W0.dtype not in (torch.float32, torch.float64):
        raise TypeError("decompose_matrix expects two float32 or two float64 tensors")
    with timer.phase("svdvals_w1"):
        sigma1 = svdvals(W1, svd_driver)
    m, n = W1.shape
    # the frame first, while W1 is intact: the same peak memory as forming ΔW first (W1 takes ΔW's place
    # during the SVD), and a truncated core's angles, which iterate on W1 itself, start from W0's
    if frame is None:
        with timer.phase("svd_w0"):
            frame = compute_frame(W0, core_rel_threshold, svd_driver, degenerate_gap)
    ks = sorted({int(k) for k in angle_edges if int(k) < min(m, n, frame.rank)})
    # (k ≥ min(m, n) is not measured: the longer side's top-k subspaces are then the row or column
    # spaces, which differ between W0 and W1 and would need W1's full SVD)
    in_frame = frame.rank == min(m, n)  # untruncated core: the angles come from P and the null residual
    angles: Optional[dict[int, AnglePair]] = None
    angles_failed = False
    if ks and not in_frame:  # truncated core: W0's tail is in W1 but not in the frame; iterate on W1 itself
        with timer.phase("angles"):
            angles, angles_failed = _guarded(lambda: principal_angles_of_w1(W1, frame, ks)[0])
    with timer.phase("delta"):
        delta = W1.sub_(W0)
        del W1, W0  # W0 freed here when the caller passed it without keeping a reference
        delta_fro = float(torch.linalg.vector_norm(delta).item())
    with timer.phase("spectral_norm"):
        delta_spec = spectral_norm(delta) if delta_fro > 0 else 0.0
    if delta_fro == 0.0:
        # W1 == W0 bit for bit: use the identical spectrum rather than one from another
        # LAPACK routine, so a model compared with itself gives exact zeros.
        sigma1 = frame.S.clone()
    delta_sample = None
    if survival is not None:  # ΔW on the sampled rows or columns, before it becomes the null residual
        axis, idx = survival[0], survival[1].to(delta.device)
        delta_sample = (delta[idx] if axis == 0 else delta[:, idx]).clone()
    with timer.phase("projection"):
        proj = project(delta, frame, in_place=True, lift=channel_axis)
        energies = split_energies(proj.P, proj.null)
    per_channel = None
    if channel_axis is not None:  # now, while the projection's intermediate is alive: an r×n buffer, freed after
        with timer.phase("channel_energy"):
            per_channel = channel_energies(proj.P, proj.null, frame.U, frame.V, channel_axis, proj.lifted)
    proj = replace(proj, lifted=None)
    if ks and in_frame:
        angles, angles_failed = _angles_in_frame(frame, proj, ks, delta_fro, delta_spec, timer)
    with timer.phase("analyses"):
        extra = _beyond_the_paper(proj, frame, delta_fro, band_edges, ks, angles, angles_failed, survival, delta_sample)
    if degenerate_gap is not None:
        extra["f_degenerate"] = ratio_or_zero(degenerate_energy(proj.P, frame.S, degenerate_gap), delta_fro**2)
    metrics = matrix_metrics(
        frame.S.double().cpu().numpy(),
        sigma1.double().cpu().numpy(),
        delta_fro=delta_fro,
        delta_spec=delta_spec,
        energies=energies,
        rows=m,
        cols=n,
        rank=frame.rank,
        rank_thresholds=rank_thresholds,
    )
    if extra:
        metrics = replace(metrics, extra=extra)
    return MatrixResult(frame=frame, projection=proj, sigma1=sigma1, metrics=metrics, channel_energy=per_channel)


def _angles_in_frame(
    frame: Frame, proj: Projection, ks: list[int], delta_fro: float, delta_spec: float, timer: PhaseTimer
) -> tuple[Optional[dict[int, AnglePair]], bool]:
    """The angles of an untruncated core, from P and the null residual (exactly 0° and cos² 1 when W1 == W0:
    the subspaces coincide)."""
    if delta_fro == 0.0:
        return {k: ((0.0, 1.0), (0.0, 1.0)) for k in ks}, False
    with timer.phase("angles"):
        return _guarded(lambda: principal_angles_in_frame(frame, proj, ks, delta_spec)[0])


def degenerate_energy(P: torch.Tensor, S: torch.Tensor, gap: float) -> float:
    """Σ over the clusters C of near-equal singular values of W0 (neighbours within gap·σ₁) of ‖P_CC‖²,
    diagonal entries included: the energy whose diag/off split depends on the basis chosen inside each
    cluster (a rotation Q of a cluster turns P_CC into Qᵀ P_CC Q, keeping only ‖P_CC‖)."""
    return sum(float(P[a:b, a:b].double().square().sum()) for a, b in degenerate_clusters(S, P.shape[0], gap))


def _guarded(compute) -> tuple[Optional[dict[int, AnglePair]], bool]:
    """(the angles or None, whether computing them failed)."""
    try:
        return compute(), False
    except torch.linalg.LinAlgError:  # products that overflow (weights near the dtype's limit): the angles
        return None, True  # are NaN, and the caller refuses the matrix as non-finite


def _beyond_the_paper(
    proj: Projection,
    frame: Frame,
    delta_fro: float,
    band_edges: Sequence[int],
    ks: list[int],
    angles: Optional[dict[int, AnglePair]],
    angles_failed: bool,
    survival: Optional[Survival],
    delta_sample: Optional[torch.Tensor],
) -> dict[str, float]:
    """The extra metric columns: band shares of ‖ΔW‖², principal angles, round-trip survival."""
    extra: dict[str, float] = {}
    if band_edges:
        d2 = delta_fro**2
        extra.update({f"band{k}": ratio_or_zero(v, d2) for k, v in band_energies(proj.P, band_edges).items()})
    if angles is not None:
        extra.update(angle_columns(angles))
    elif angles_failed:
        extra.update({f"angle{k}_{side}_max_deg": math.nan for k in ks for side in ("left", "right")})
    if survival is not None:
        axis, idx, w0_sample, target = survival
        kept = round_trip_survival(w0_sample, component_samples(proj, frame, axis, idx, delta_sample), target)
        tag = name_of(target)
        extra.update({f"{tag}_kept_{c}": v for c, v in kept.items()})
    return extra
