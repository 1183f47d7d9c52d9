"""This sweep's count of independent units against the paper's, with the paper's side a sample too.

The verdict box tests a claim over a set of transitions at the level of independent units: transitions that share a
base model are one unit (a chain), since their values move together. The paper's sets have the same structure, so
its count is read the same way: "24 of 25 informative transitions", over the 10 bases of configs/paper.yaml, is a
rate of 0.96 seen in 10 units.

The test (:func:`count_test`): with the paper's rate ρ from U units, the population rate has the Jeffreys
posterior θ ~ Beta(ρU + ½, (1 − ρ)U + ½), and this sweep's count of k meeting among its C units is compared
with its predictive distribution, X ~ BetaBinomial(C, ρU + ½, (1 − ρ)U + ½): p = P(X ≤ k) for a claim that a
lower rate contradicts, twice the smaller tail for a median (the paper's median: half its units above it). It
handles the fractional counts that units give (ρU = 9.6), and reduces to the binomial test of a fixed rate as U
grows: a claim the paper states without a count ("generally above") is a fixed rate of one half (``units=None``).

Every test also gives ``floor``, the smallest p any outcome at this C can give: when it is not below α no outcome
can contradict the paper, and :func:`detectable` the departure from the paper this C would have detected with
80 % power at a stated level, for the word "consistent".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

POWER = 0.8  # the power at which a "consistent" row states what it could have detected
# how the paper's side is read (a sweep's ``claims.paper_side``): its stated values as fixed, or as a sample of the
# independent units its study rests on
FIXED, SAMPLE = "fixed", "sample"


@dataclass(frozen=True)
class Reference:
    """The paper's side of a claim: its rate (the share of its units above its median for a median) and how many
    independent units it rests on (None: a fixed value, stated without a count)."""

    rate: float
    units: Optional[float]

    def cdf(self, k: int, n: int) -> float:
        """P(a count among ``n`` units drawn from the paper's population is at most ``k``)."""
        from scipy import stats

        if k < 0:
            return 0.0
        if self.units is None:
            return float(stats.binom.cdf(k, n, self.rate))
        a, b = self.rate * self.units + 0.5, (1.0 - self.rate) * self.units + 0.5
        return float(stats.betabinom.cdf(k, n, a, b))

    def describe(self) -> str:
        if self.units is None:
            return f"a fixed rate of {100 * self.rate:.0f} %"
        return f"a rate of {100 * self.rate:.0f} % seen in {self.units:g} independent units"


@dataclass(frozen=True)
class CountTest:
    k: int  # this sweep's units meeting the claim (above the paper's median)
    n: int  # this sweep's units (untied, for a median)
    p: float
    floor: float  # the smallest p any outcome at this n can give


def count_test(k: int, n: int, ref: Reference, two_sided: bool = False) -> CountTest:
    """This sweep's k of n units against the paper's ``ref``: one-sided (fewer contradicts), or two-sided."""
    if not (0 <= k <= n) or n < 1:
        raise ValueError(f"a count of {k} of {n} units is no rate")
    return CountTest(k, n, _p(k, n, ref, two_sided), min(_p(0, n, ref, two_sided), _p(n, n, ref, two_sided)))


@lru_cache(maxsize=65536)  # a verdict box asks the same few (k, n) many times over the intervals' reach
def _p(k: int, n: int, ref: Reference, two_sided: bool) -> float:
    low = min(1.0, ref.cdf(k, n))
    if not two_sided:
        return low
    return min(1.0, 2.0 * min(low, 1.0 - ref.cdf(k - 1, n)))


@lru_cache(maxsize=4096)
def detectable(n: int, ref: Reference, level: float, two_sided: bool = False) -> Optional[tuple[float, float]]:
    """The rates this sweep's ``n`` units would have told from the paper's with power :data:`POWER` at ``level``:
    (highest detectable rate below the paper's, lowest above it; nan for a side not tested or out of reach), or
    None when no outcome at this n rejects at ``level``."""
    from scipy import stats

    ks = range(n + 1)
    reject = [k for k in ks if _p(k, n, ref, two_sided) < level]
    if not reject:
        return None
    low_edge = max((k for k in reject if k < ref.rate * n), default=None)
    high_edge = min((k for k in reject if k > ref.rate * n), default=None) if two_sided else None

    def solve(power, lo: float, hi: float, increasing: bool) -> float:
        # power is monotone in the rate: bisect for where it crosses POWER
        if (power(hi) if increasing else power(lo)) < POWER:
            return math.nan
        for _ in range(60):
            mid = (lo + hi) / 2
            if (power(mid) >= POWER) == increasing:
                hi = mid
            else:
                lo = mid
        return hi if increasing else lo

    below = math.nan
    if low_edge is not None:
        below = solve(lambda t: float(stats.binom.cdf(low_edge, n, t)), 0.0, ref.rate, increasing=False)
    above = math.nan
    if high_edge is not None:
        above = solve(lambda t: float(stats.binom.sf(high_edge - 1, n, t)), ref.rate, 1.0, increasing=True)
    return below, above
