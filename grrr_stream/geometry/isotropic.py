"""What an isotropic update puts where: the matched null of the energy shares, for a matrix's own shape.

An update ΔW (m×n) with i.i.d. Gaussian entries is isotropic in R^{m·n}. The matrices u_i v_jᵀ of W0's frame
(i, j < r) are orthonormal in the Frobenius inner product, so each part of the split is the projection of ΔW onto
a fixed subspace of dimension d, and its share of ‖ΔW‖² is Beta(d/2, (m·n − d)/2) distributed, with mean exactly
d / (m·n):

    diag  d = r                off  d = r² − r              null  d = m·n − r²

and for a principal band of k directions (k' = min(k, r)): diag_principal k', diag_tail r − k', off_principal
k'² − k', off_mixed 2·k'·(r − k'), off_tail (r − k')² − (r − k').

So f_diag = 0.03 means nothing by itself: on a 128×128 matrix an isotropic update gives 1/128 = 0.0078, on a
4096×4096 one 0.00024. A share is read against :func:`expected` for the same shapes: its ratio to it transfers
between model sizes, the raw value does not.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

# share → the dimension of its subspace, from (m, n, r) and the band edge k (None outside a band)
_DIMENSIONS: dict[str, Callable[[int, int, int, int], int]] = {
    "diag": lambda m, n, r, k: r,
    "off": lambda m, n, r, k: r * r - r,
    "null": lambda m, n, r, k: m * n - r * r,
    "diag_principal": lambda m, n, r, k: k,
    "diag_tail": lambda m, n, r, k: r - k,
    "off_principal": lambda m, n, r, k: k * k - k,
    "off_mixed": lambda m, n, r, k: 2 * k * (r - k),
    "off_tail": lambda m, n, r, k: (r - k) * (r - k) - (r - k),
}
SHARES = tuple(_DIMENSIONS)


def dimension(share: str, m: int, n: int, r: int, edge: int = 0) -> int:
    """The dimension of the subspace ``share`` projects on, for an m×n matrix with a core of rank r."""
    if share not in _DIMENSIONS:
        raise ValueError(f"no isotropic share {share!r}; known: {', '.join(SHARES)}")
    if not (m > 0 and n > 0 and 0 <= r <= min(m, n)):
        raise ValueError(f"a {m}×{n} matrix has no core of rank {r}")
    return _DIMENSIONS[share](m, n, r, min(int(edge), r))


def expected(share: str, m: int, n: int, r: int, edge: int = 0) -> float:
    """E[share of ‖ΔW‖²] for an isotropic ΔW on an m×n matrix with a core of rank r (exact: d / (m·n))."""
    return dimension(share, m, n, r, edge) / (m * n)


def transition_expected(share: str, matrices: Sequence[Mapping], edge: int = 0) -> float:
    """The mean over a transition's matrices (rows with ``rows``, ``cols``, ``rank``; as metrics.csv) of
    :func:`expected`: the isotropic value of the transition's mean share (f_diag_mean)."""
    have = [r for r in matrices if all(isinstance(r.get(k), (int, float)) for k in ("rows", "cols", "rank"))]
    if not have:
        return float("nan")
    return sum(expected(share, int(r["rows"]), int(r["cols"]), int(r["rank"]), edge) for r in have) / len(have)


def decoder_expected(share: str, shapes: Sequence[tuple[int, int]]) -> float:
    """The same over a model's decomposed matrices given as (m, n), each with a full core (r = min(m, n)): for a
    model known only by its published shapes (:mod:`grrr_stream.forecast.shapes`)."""
    return sum(expected(share, m, n, min(m, n)) for m, n in shapes) / len(shapes)


def of_row(share: str) -> Callable[[Mapping, Mapping], float]:
    """A column's ``isotropic`` (:class:`grrr_stream.columns.Column`): a metrics.csv row (``rows``, ``cols``,
    ``rank``; a full core when the rank is not recorded) and the member's field values (a band's ``edge``) → the
    share's isotropic value on that matrix."""
    dimension(share, 1, 1, 1)  # an unknown share is refused where the column is declared

    def value(row: Mapping, values: Mapping) -> float:
        m, n = int(row["rows"]), int(row["cols"])
        r = row.get("rank")
        r = int(r) if isinstance(r, (int, float)) and not isinstance(r, bool) else min(m, n)
        return expected(share, m, n, r, int(values.get("edge", 0) or 0))

    return value
