"""Principal bands: the energy of P by principal band (top-k of σ(W0)) for each band edge k."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from pydantic import field_validator

from ...columns import CONSOLE, DEFAULT_SHOWN, FIGURE, Column
from ..isotropic import of_row
from ..metrics import PAPER_COLUMNS, ratio_or_zero
from .base import Analysis, AnalysisSettings, MatrixState, sorted_positive

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
    """Energy of diag and off of P by principal band, for each band edge k (absolute, float64), by column name.

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
        out[band_column(edge, "diag_principal").name] = float(d[:k].sum())
        out[band_column(edge, "diag_tail").name] = float(d[k:].sum())
        out[band_column(edge, "off_principal").name] = float(sq[:k, :k].sum())
        out[band_column(edge, "off_mixed").name] = float(sq[:k, k:].sum() + sq[k:, :k].sum())
        out[band_column(edge, "off_tail").name] = float(sq[k:, k:].sum())
    return out


def _split(state: MatrixState, opts: Any, prepared: Any) -> dict[str, float]:
    d2 = state.delta_fro**2
    return {k: ratio_or_zero(v, d2) for k, v in band_energies(state.proj.P, opts.band_edges).items()}


OFF_PRINCIPAL = Column(
    "band{edge}_off_principal",
    "off share of ‖ΔW‖² in the top-{edge} block",
    short="top-{edge} block, off",
    shown=DEFAULT_SHOWN | {FIGURE, CONSOLE},
    isotropic=of_row("off_principal"),
)
# band{k}_{part}: shares of ‖ΔW‖² (geometry.frame.band_energies), one family per part
BAND_COLUMNS = (
    Column(
        "band{edge}_diag_principal",
        "diag share of ‖ΔW‖² in the top-{edge} block",
        short="top-{edge} block, diag",
        shown=DEFAULT_SHOWN | {FIGURE},
        isotropic=of_row("diag_principal"),
    ),
    Column("band{edge}_diag_tail", "diag share of ‖ΔW‖² beyond the top {edge}", isotropic=of_row("diag_tail")),
    OFF_PRINCIPAL,
    Column(
        "band{edge}_off_mixed",
        "off share of ‖ΔW‖² between the top {edge} and the rest",
        isotropic=of_row("off_mixed"),
    ),
    Column("band{edge}_off_tail", "off share of ‖ΔW‖² beyond the top {edge}", isotropic=of_row("off_tail")),
)

BAND_PARTS = ("diag_principal", "diag_tail", "off_principal", "off_mixed", "off_tail")
_BY_PART = dict(zip(BAND_PARTS, BAND_COLUMNS))


def band_column(edge: int, part: str) -> Column:
    """The column of one part of the top-``edge`` band ('diag_principal', 'diag_tail', 'off_principal',
    'off_mixed', 'off_tail')."""
    return _BY_PART[part].at(edge=edge)


def band_key(headline: bool = False) -> Callable[[str, int], str]:
    """(part, edge) → its column's name (its headline statistic's with ``headline``: a transitions.csv row); the
    part 'null' is the paper's f_null: what the band figures draw."""
    f_null = PAPER_COLUMNS.column("f_null")

    def key(part: str, edge: int) -> str:
        c = f_null if part == "null" else band_column(edge, part)
        return c.headline if headline else c.name

    return key


def is_band(column: Column) -> bool:
    """Whether a column (a member) is one of the bands' columns."""
    return any(column.of(f) for f in BAND_COLUMNS)


ANALYSIS = Analysis(
    "bands",
    BandSettings,
    {"split": _split},
    BAND_COLUMNS,
    profiles={"paper": {"band_edges": ()}},
    result_defaults={"band_edges": list(DEFAULT_BAND_EDGES)},
    result_group="analyses",
    enabled=lambda opts: bool(opts.band_edges),
)
