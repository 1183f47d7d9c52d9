"""A family of tests shown together (the verdict box's claims over sets of transitions): adjusted p-values that
control the family-wise error rate (Holm) or the false discovery rate (Benjamini–Hochberg).

Holm's step-down adjustment of p_(1) ≤ … ≤ p_(m): p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) · p_(j)). Rejecting
every test with p̃ < α keeps the chance of any false rejection at most α, whatever the dependence between the
tests. Both adjustments are monotone in every raw p: a vector of p's that is larger test by test gives adjusted
p's that are larger test by test, which is what lets a verdict take the adjusted p at both ends of an interval.
"""

from __future__ import annotations

from typing import Sequence


def holm(ps: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out, running = [1.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(ps[i])))
        out[i] = running
    return out


def benjamini_hochberg(ps: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg q-values (step-up), in the order given."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i], reverse=True)
    out, running = [1.0] * m, 1.0
    for k, i in enumerate(order):
        rank = m - k  # 1-based rank of ps[i] from the smallest
        running = min(running, float(ps[i]) * m / rank)
        out[i] = min(1.0, running)
    return out


ADJUSTMENTS = {"holm": holm, "bh": benjamini_hochberg}
