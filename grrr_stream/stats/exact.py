"""Exact tests of a sweep's counts and medians against the paper's, for sets of transitions too small for an
interval over problems to speak to the paper (a sweep of 3 transitions against the paper's 25).

- A rate ("OffNull within 4.3 points of Full in 24 of 25"): :func:`rate_test`, Fisher's exact test of this sweep's
  k of n against the paper's count, one-sided (this sweep's rate below the paper's). The paper's rate is itself a
  count of a few dozen transitions, so it is not taken as exact: against a known rate of 24/25, 0 of 1 would
  already contradict it (binomial p = 0.04), and "all 17" (a rate of 1) would be contradicted by any single
  exception, however few transitions this sweep has. With it, the paper's and this sweep's transitions are two
  samples of one population.
- A median ("OffNull retention, median 99 %"): :func:`sign_test`, the exact two-sided sign test of the values
  above and below the paper's median (values equal to it dropped); :func:`median_ci` is its dual, the
  distribution-free order-statistic interval of this sweep's median.
- "Generally above" (null-only above diag-only): :func:`sign_test` one-sided, the count of transitions below.

Every test also says the smallest p that any outcome at this n could give (``floor``): when it is not below α,
no outcome of this size can contradict the paper, and a verdict says "too few to tell".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

ALPHA = 0.05  # the project's significance level (ComparisonSettings.alpha's default)


@dataclass(frozen=True)
class RateTest:
    """This sweep's k of n against the paper's ``paper_k`` of ``paper_n`` (:func:`rate_test`)."""

    k: int
    n: int
    paper_k: int
    paper_n: int
    p: float  # one-sided: P(a count as low as k or lower | both samples from one rate), Fisher's exact test
    floor: float  # the p of the most extreme outcome at this n (0 of n): no outcome can give less
    ci: tuple[float, float]  # the exact (Clopper–Pearson) interval of this sweep's rate, two-sided at ``level``


def rate_test(k: int, n: int, paper_k: int, paper_n: int, level: float = 1 - ALPHA) -> RateTest:
    """Fisher's exact test, one-sided, that this sweep's rate k/n is below the paper's ``paper_k``/``paper_n``,
    with the smallest p an outcome at this n can give and the exact interval of k/n."""
    from scipy import stats

    if not 0 <= k <= n or not 0 <= paper_k <= paper_n or n == 0:
        raise ValueError(f"a count of {k} of {n} against {paper_k} of {paper_n} is no rate")

    def p_of(j: int) -> float:
        table = [[j, n - j], [paper_k, paper_n - paper_k]]
        return float(stats.fisher_exact(table, alternative="less").pvalue)

    ci = stats.binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return RateTest(k, n, paper_k, paper_n, p_of(k), p_of(0), (float(ci.low), float(ci.high)))


def sign_test(above: int, below: int, alternative: str = "two-sided") -> float:
    """The exact sign test of ``above`` values above and ``below`` below a reference value (ties dropped before):
    two-sided, or 'less' (p of as few above as this or fewer) / 'greater'. 1.0 when no value is off the
    reference."""
    from scipy import stats

    n = above + below
    if n == 0:
        return 1.0
    return float(stats.binomtest(above, n, 0.5, alternative=alternative).pvalue)


def sign_floor(n: int, alternative: str = "two-sided") -> float:
    """The smallest p the sign test can give with ``n`` values (all on one side)."""
    return sign_test(0, n, alternative) if n else 1.0


def median_ci(values: Sequence[float], level: float = 1 - ALPHA) -> Optional[tuple[float, float, float]]:
    """The distribution-free interval of the median from order statistics: (x_(j), x_(n+1−j), its coverage) with
    the largest j whose coverage 1 − 2·P(B ≤ j − 1), B ~ Bin(n, 1/2), reaches ``level``; None when even the range
    (j = 1) covers less (n ≤ 5 at 95 %)."""
    from scipy import stats

    xs = sorted(float(v) for v in values)
    n = len(xs)
    best = None
    for j in range(1, n // 2 + 1):
        coverage = 1.0 - 2.0 * float(stats.binom.cdf(j - 1, n, 0.5))
        if coverage < level - 1e-12:
            break
        best = (xs[j - 1], xs[n - j], coverage)
    return best


def sign_counts(sides: Iterable[str]) -> set[tuple[int, int]]:
    """Every (above, below) that values on ``sides`` can give: per value 'above', 'below', 'tie', or a set of
    them written with '|' ('above|tie': its interval reaches both); a tie adds to neither."""
    reach = {(0, 0)}
    for s in sides:
        options = set(s.split("|"))
        reach = {
            (a + (o == "above"), b + (o == "below"))
            for a, b in reach
            for o in options
            if o in ("above", "below", "tie")
        }
    return reach


def side(lo: float, hi: float, low: float, high: float) -> str:
    """Where an interval [lo, hi] lies against the band [low, high] (a paper's whole percent is [v − 0.5, v + 0.5]):
    'above', 'below', 'tie', or the sides it reaches joined by '|'."""
    out = []
    if hi > high:
        out.append("above")
    if lo < low:
        out.append("below")
    if lo <= high and hi >= low:
        out.append("tie")
    return "|".join(out) if out else "tie"


def finite(*xs) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in xs)
