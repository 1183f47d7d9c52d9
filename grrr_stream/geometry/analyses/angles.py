"""Principal subspace angles between the top-k singular subspaces of W0 and W1, for each angle edge k (the solver:
:mod:`.davidson`; no SVD of W1)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional

from pydantic import field_validator

from ...columns import Column
from .base import Analysis, AnalysisSettings, MatrixState, sorted_positive

if TYPE_CHECKING:
    from .davidson import AnglePair


class AngleSettings(AnalysisSettings):
    # k of the subspace angles (the cost grows with the largest k: (16, 64) measured 8.6 % of a
    # decomposition on Qwen2.5-1.5B shapes; docs/statistics.md, "Beyond the paper"); empty: none
    angle_edges: tuple[int, ...] = (16, 64)

    @field_validator("angle_edges")
    @classmethod
    def _edges(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        return sorted_positive(v, "band and angle edges must be positive integers (numbers of principal directions)")


MAX_DEG = Column(
    "angle{edge}_{side}_max_deg",
    "top-{edge} {side} subspaces of W0, W1: largest angle (°)",
    "degrees",
    fmt=".1f",
)
COS2 = Column("angle{edge}_{side}_cos2", "top-{edge} {side} subspaces of W0, W1: mean cos²")


def angle_columns(angles: dict[int, AnglePair]) -> dict[str, float]:
    """The metric columns angle{k}_{left,right}_{max_deg,cos2}."""
    out: dict[str, float] = {}
    for k, sides in angles.items():
        for side, (worst, cos2) in zip(("left", "right"), sides):
            out[MAX_DEG.at(edge=k, side=side).name] = worst
            out[COS2.at(edge=k, side=side).name] = cos2
    return out


def _ks(state: MatrixState, opts: Any) -> list[int]:
    """The edges measured: k ≥ min(m, n) is not (the longer side's top-k subspaces are then the row or column
    spaces, which differ between W0 and W1 and would need W1's full SVD)."""
    m, n = state.shape
    return sorted({int(k) for k in opts.angle_edges if int(k) < min(m, n, state.frame.rank)})


def _in_frame(state: MatrixState) -> bool:
    """An untruncated core: the angles come from P and the null residual."""
    return state.frame.rank == min(state.shape)


def _on_w1(state: MatrixState, opts: Any, prepared: Any) -> Optional[dict]:
    """A truncated core: W0's tail is in W1 but not in the frame, so the solver iterates on W1 itself."""
    ks = _ks(state, opts)
    if ks and not _in_frame(state):
        from .davidson import principal_angles_of_w1

        state.scratch["angles"] = _guarded(lambda: principal_angles_of_w1(state.W1, state.frame, ks)[0], ks)
    return None


def _split(state: MatrixState, opts: Any, prepared: Any) -> Optional[dict]:
    """An untruncated core's angles, from P and the null residual (exactly 0° and cos² 1 when W1 == W0: the
    subspaces coincide); then the columns of either."""
    ks = _ks(state, opts)
    if ks and _in_frame(state):
        if state.delta_fro == 0.0:
            state.scratch["angles"] = angle_columns({k: ((0.0, 1.0), (0.0, 1.0)) for k in ks})
        else:
            from .davidson import principal_angles_in_frame

            state.scratch["angles"] = _guarded(
                lambda: principal_angles_in_frame(state.frame, state.proj, ks, state.delta_spec)[0], ks
            )
    return state.scratch.get("angles")


def _guarded(compute, ks: list[int]) -> dict[str, float]:
    """The angles' columns, or NaN for their largest angles where computing them failed."""
    import torch

    try:
        return angle_columns(compute())
    except torch.linalg.LinAlgError:  # products that overflow (weights near the dtype's limit): the angles are
        # NaN, and the caller refuses the matrix as non-finite
        return {MAX_DEG.at(edge=k, side=side).name: math.nan for k in ks for side in ("left", "right")}


ANALYSIS = Analysis(
    "angles",
    AngleSettings,
    {"w1": _on_w1, "split": _split},
    (MAX_DEG, COS2),
    profiles={"standard": {"angle_edges": ()}, "paper": {"angle_edges": ()}},
    result_defaults={"angle_edges": [16, 64]},
    result_group="analyses",
    enabled=lambda opts: bool(opts.angle_edges),
    phase="angles",
)
