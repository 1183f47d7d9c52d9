"""Principal bands: the energy of P by principal band (top-k of σ(W0)) for each band edge k."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from pydantic import field_validator

from ..metrics import ratio_or_zero
from .base import Analysis, AnalysisSettings, Columns, MatrixState, sorted_positive

if TYPE_CHECKING:
    import torch

DEFAULT_BAND_EDGES = (16, 64, 256)


class BandSettings(AnalysisSettings):
    # energy of P by principal band (top-k of σ(W0)) for these edges; an empty tuple skips the bands
    band_edges: tuple[int, ...] = DEFAULT_BAND_EDGES

    @field_validator("band_edges")
    @classmethod
    def _edges(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        return sorted_positive(v, "band and angle edges must be positive integers (numbers of principal directions)")


def band_energies(P: "torch.Tensor", edges: Sequence[int]) -> dict[str, float]:
    """Energy of diag and off of P by principal band, for each band edge k (absolute, float64).

    Rows and columns of P follow σ(W0) in descending order; the top-k block holds the update
    among the k principal directions on both sides. Per k: ``diag_principal`` = Σ_{i<k} P_ii²,
    ``diag_tail`` = Σ_{i≥k} P_ii², ``off_principal`` = the off-diagonal energy of P[:k, :k],
    ``off_mixed`` = ‖P[:k, k:]‖² + ‖P[k:, :k]‖², ``off_tail`` = the off-diagonal energy of
    P[k:, k:]. They sum to ‖diag P‖² + ‖P − diag P‖² for every k (k ≥ r: everything principal).
    """
    r = P.shape[0]
    sq = P.double().square()
    d = sq.diagonal().clone()
    sq.diagonal().zero_()
    out: dict[str, float] = {}
    for edge in edges:
        k = min(int(edge), r)  # named by the edge asked for: the same columns for every matrix
        out[f"{edge}_diag_principal"] = float(d[:k].sum())
        out[f"{edge}_diag_tail"] = float(d[k:].sum())
        out[f"{edge}_off_principal"] = float(sq[:k, :k].sum())
        out[f"{edge}_off_mixed"] = float(sq[:k, k:].sum() + sq[k:, :k].sum())
        out[f"{edge}_off_tail"] = float(sq[k:, k:].sum())
    return out


def _split(state: MatrixState, opts: Any, prepared: Any) -> dict[str, float]:
    d2 = state.delta_fro**2
    return {f"band{k}": ratio_or_zero(v, d2) for k, v in band_energies(state.proj.P, opts.band_edges).items()}


ANALYSIS = Analysis(
    "bands",
    BandSettings,
    {"split": _split},
    Columns(("band",)),
    profiles={"paper": {"band_edges": ()}},
    result_defaults={"band_edges": list(DEFAULT_BAND_EDGES)},
    result_group="analyses",
    enabled=lambda opts: bool(opts.band_edges),
)
