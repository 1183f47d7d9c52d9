"""The degenerate share: the energy of P inside W0's clusters of near-equal singular values (the f_degenerate
column), the part of ‖ΔW‖² whose diag/off split depends on the basis chosen inside each cluster. Its gap is the
frame's setting ``degenerate_gap`` (None: not measured)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ...columns import SUMMARY, Column
from ..metrics import ratio_or_zero
from .base import Analysis, MatrixState

if TYPE_CHECKING:
    import torch


def degenerate_energy(P: "torch.Tensor", S: "torch.Tensor", gap: float) -> float:
    """Σ over the clusters C of near-equal singular values of W0 (neighbours within gap·σ₁) of ‖P_CC‖²,
    diagonal entries included: the energy whose diag/off split depends on the basis chosen inside each
    cluster (a rotation Q of a cluster turns P_CC into Qᵀ P_CC Q, keeping only ‖P_CC‖)."""
    from ..degenerate import degenerate_clusters

    return sum(float(P[a:b, a:b].double().square().sum()) for a, b in degenerate_clusters(S, P.shape[0], gap))


F_DEGENERATE = Column("f_degenerate", "f_degenerate", shown=frozenset({SUMMARY}))


def _split(state: MatrixState, opts: Any, prepared: Any) -> Optional[dict]:
    if state.degenerate_gap is None:
        return None
    energy = degenerate_energy(state.proj.P, state.frame.S, state.degenerate_gap)
    return {F_DEGENERATE.name: ratio_or_zero(energy, state.delta_fro**2)}


ANALYSIS = Analysis("degenerate_share", None, {"split": _split}, (F_DEGENERATE,))
