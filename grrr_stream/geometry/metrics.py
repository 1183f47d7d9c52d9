"""The scalar metrics of one matrix update, from the spectra of W0 and W1, the norms of ΔW and the
split energies: returned as Python floats computed in float64."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..columns import CONSOLE, HEADLINE, NONE, SUMMARY, TRANSITIONS, Column, Schema
from .isotropic import of_row


@dataclass(frozen=True)
class MatrixMetrics:
    """Descriptive metrics of one matrix update (all float64 Python scalars)."""

    rows: int
    cols: int
    rank: int  # size of the pretrained core r
    w0_fro: float
    delta_fro: float
    r_delta: float
    e_diag: float
    e_off: float
    e_null: float
    f_diag: float
    f_off: float
    f_null: float
    sv_cos: float
    delta_max: float
    sr_w0: float
    sr_delta: float
    sr_w1: float
    dsr_pct: float
    alpha: float
    rank_w0: dict  # threshold (as str) → numerical rank
    rank_w1: dict
    # beyond the paper (column name → value): band{k}_{diag,off}_{principal,mixed,tail} as fractions of
    # ‖ΔW‖², angle{k}_{left,right}_{max_deg,cos2}, {dtype}_kept_{diag,off,null}
    extra: dict = field(default_factory=dict)

    def as_row(self) -> dict:
        row = {k: v for k, v in self.__dict__.items() if not isinstance(v, dict)}
        for t, v in self.rank_w0.items():
            row[NRANK_W0.at(threshold=t).name] = v
        for t, v in self.rank_w1.items():
            row[NRANK_W1.at(threshold=t).name] = v
        row.update(self.extra)
        return row


_PAPER = frozenset({SUMMARY, TRANSITIONS})
_HEAD = frozenset({SUMMARY, TRANSITIONS, HEADLINE})
# a matrix's name and place, as the decomposition writes them beside its metrics
IDENTITY_COLUMNS = tuple(Column(k, k, aggregate=NONE, shown=frozenset()) for k in ("name", "layer", "module", "expert"))
NRANK_W0 = Column("nrank_w0_{threshold}", "nrank w0 {threshold}", "count", shown=_PAPER)
NRANK_W1 = Column("nrank_w1_{threshold}", "nrank w1 {threshold}", "count", shown=_PAPER)
# The paper's metrics of one matrix (Tables 3, 4 and 7), in the order its tables and transitions.csv put them;
# the numerical ranks per threshold T follow them. Shape and raw energies stay in metrics.csv.
PAPER_COLUMNS = Schema(
    *(
        (c,)
        for c in (
            *IDENTITY_COLUMNS,
            Column("f_diag", "f_diag", shown=_HEAD | {CONSOLE}, fmt=".4f", isotropic=of_row("diag")),
            Column("f_off", "f_off", shown=_HEAD | {CONSOLE}, fmt=".4f", isotropic=of_row("off")),
            Column("f_null", "f_null", shown=_HEAD | {CONSOLE}, fmt=".4f", isotropic=of_row("null")),
            Column("r_delta", "r_Δ", shown=_HEAD | {CONSOLE}, fmt=".2e"),
            Column("sv_cos", "SV cos", shown=_HEAD | {CONSOLE}, fmt=".6f"),
            Column("delta_max", "δ_max", shown=_PAPER | {HEADLINE}),
            Column("sr_w0", "SR(W0)", shown=_PAPER),
            Column("sr_delta", "SR(ΔW)", shown=_PAPER),
            Column("sr_w1", "SR(W1)", shown=_PAPER),
            Column("dsr_pct", "Δ% SR", "%", shown=_PAPER | {HEADLINE}),
            Column("alpha", "α", shown=_PAPER | {HEADLINE, CONSOLE}, fmt=".3g"),
            NRANK_W0,
            NRANK_W1,
            Column("rank", "rank of the core", "count", shown=frozenset()),
            Column("delta_fro", "‖ΔW‖_F", shown=frozenset({HEADLINE})),
            *(
                Column(k, k, aggregate=NONE, shown=frozenset())
                for k in ("rows", "cols", "w0_fro", "e_diag", "e_off", "e_null")
            ),
        )
    )
)


def ratio_or_zero(a: float, b: float) -> float:
    """a / b, and 0 where b is 0: a zero update gives zero fractions, never NaN."""
    return a / b if b > 0 else 0.0


def _sum_of_products(a: np.ndarray, b: np.ndarray) -> float:
    """Σ a_i·b_i, correctly rounded (each product is an IEEE operation, the sum exact before one rounding)."""
    return math.fsum((a * b).tolist())


def numerical_rank(s: np.ndarray, rel: float) -> int:
    return int((s > rel * s[0]).sum()) if s.size and s[0] > 0 else 0


def matrix_metrics(
    s0: Sequence[float] | np.ndarray,
    s1: Sequence[float] | np.ndarray,
    *,
    delta_fro: float,
    delta_spec: float,
    energies: tuple[float, float, float],
    rows: int,
    cols: int,
    rank: int,
    rank_thresholds: Sequence[float],
) -> MatrixMetrics:
    """Metrics from the spectra of W0 and W1, ‖ΔW‖_F, ‖ΔW‖₂ and the split energies.

    Conventions for a zero update (ΔW = 0): fractions, SR(ΔW) and α are 0, never NaN.
    """
    s0 = np.asarray(s0, dtype=np.float64)
    s1 = np.asarray(s1, dtype=np.float64)
    # ‖W‖² = Σσ² as a correctly rounded sum (math.fsum): the same spectrum gives the same bits on every
    # machine, whatever BLAS's summation order, so a model compared with itself gives exact zeros.
    # Every quantity below is built from these sums, never from a square root squared again.
    w0_fro2, w1_fro2 = _sum_of_products(s0, s0), _sum_of_products(s1, s1)
    w0_fro = math.sqrt(w0_fro2)
    e_diag, e_off, e_null = energies
    d2 = delta_fro**2
    sr_w0 = ratio_or_zero(w0_fro2, s0[0] ** 2) if s0.size else 0.0
    sr_w1 = ratio_or_zero(w1_fro2, s1[0] ** 2) if s1.size else 0.0
    sr_delta = ratio_or_zero(d2, delta_spec**2)
    # sqrt(x·x) is x exactly in IEEE arithmetic: identical spectra give sv_cos = 1 exactly
    sv_norm = math.sqrt(w0_fro2 * w1_fro2)
    return MatrixMetrics(
        rows=rows,
        cols=cols,
        rank=rank,
        w0_fro=w0_fro,
        delta_fro=delta_fro,
        r_delta=ratio_or_zero(delta_fro, w0_fro),
        e_diag=e_diag,
        e_off=e_off,
        e_null=e_null,
        f_diag=ratio_or_zero(e_diag, d2),
        f_off=ratio_or_zero(e_off, d2),
        f_null=ratio_or_zero(e_null, d2),
        sv_cos=ratio_or_zero(_sum_of_products(s0, s1), sv_norm),
        delta_max=ratio_or_zero(float(np.max(np.abs(s1 - s0))) if s0.size else 0.0, s0[0] if s0.size else 0.0),
        sr_w0=sr_w0,
        sr_delta=sr_delta,
        sr_w1=sr_w1,
        dsr_pct=100.0 * ratio_or_zero(sr_w1 - sr_w0, sr_w0),
        alpha=ratio_or_zero(sr_w1 - sr_w0, sr_delta) if sr_delta > 0 else 0.0,
        rank_w0={f"{t:g}": numerical_rank(s0, t) for t in rank_thresholds},
        rank_w1={f"{t:g}": numerical_rank(s1, t) for t in rank_thresholds},
    )
