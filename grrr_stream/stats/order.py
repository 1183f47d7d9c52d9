"""The seeded order in which an adaptive evaluation answers its problems, and the schedule of prefixes it is looked
at and answered in.

A benchmark's weight in the score (1/B) over its share of the problems can be large (AIME: 30 of 1,517 problems, a
fifth of the score): such benchmarks are answered in full first (the *census*, with every weight ``N'/(B' N_b)`` of
the rest at most ``max_weight``), then the remaining benchmarks' problems in one seeded random permutation,
interleaved. On that pooled part a per-problem value ``u`` (a paired difference, in [-1, 1]) is weighted by its
benchmark's ``c_b = N'/(B' N_b)``: the mean of ``c_b u`` over the pooled problems is the mean over the pooled
benchmarks of their means, so one sample of a finite population estimates it (:mod:`grrr_stream.stats.anytime`).

How the pooled problems are drawn is the order's *allocation* (:mod:`grrr_stream.stats.allocation`):
``proportional``, one uniform permutation (each benchmark in proportion to its size), or ``weighted``, each next
problem with probability ∝ c_b among those left (at first equal numbers from each benchmark), observed as
``scale_t · u`` with the draw's ``scale_t`` (for proportional draws ``scale_t = c_b``).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .allocation import ALLOCATIONS, Allocation, draw_order


@dataclass(frozen=True)
class Order:
    """The order problems are answered in: ``items`` = (benchmark, position in its problem list)."""

    items: tuple[tuple[str, int], ...]
    sizes: dict[str, int]
    census: tuple[str, ...]  # benchmarks answered in full first
    weight: dict[str, float]  # c_b of the pooled benchmarks
    allocation: Allocation = "proportional"
    # per pooled position (after the census): what its value is multiplied by to be observed (c_b when proportional)
    scale: tuple[float, ...] = ()

    @property
    def census_end(self) -> int:
        """Problems answered before the first decision: the census benchmarks, in full."""
        return sum(self.sizes[b] for b in self.census)

    @property
    def total(self) -> int:
        return len(self.items)

    @property
    def max_weight(self) -> float:
        return max(self.weight.values()) if self.weight else 1.0

    def boundaries(self, chunk: int) -> list[int]:
        """Where decisions are taken: every ``chunk`` problems after the census, and at the end."""
        start = self.census_end
        return sorted({*range(start + chunk, self.total, chunk), self.total} - {0})


def problem_order(
    sizes: Mapping[str, int], seed: int = 0, max_weight: float = 2.0, allocation: Allocation = "proportional"
) -> Order:
    """The seeded order of the problems of benchmarks of ``sizes`` (name → number of problems), the pooled ones
    drawn under ``allocation`` (proportional, whatever is asked, where the pooled benchmarks are of one size: the
    order's ``allocation`` says which)."""
    if not sizes or min(sizes.values()) < 1:
        raise ValueError(f"every benchmark needs at least one problem, got {dict(sizes)}")
    if allocation not in ALLOCATIONS:
        raise ValueError(f"allocation must be one of {', '.join(ALLOCATIONS)}, got {allocation!r}")
    pooled, census = sorted(sizes), []
    while len(pooled) > 1:
        weights = _weights(sizes, pooled)
        worst = max(pooled, key=lambda b: (weights[b], b))
        if weights[worst] <= max_weight:
            break
        pooled.remove(worst)
        census.append(worst)
    # the salt keeps the adaptive design's old name: another salt would draw another order (and other results)
    rng = np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(b"sequential-order")]))
    members = [(b, i) for b in sorted(census) for i in range(sizes[b])]
    items = [members[j] for j in rng.permutation(len(members))]
    weight = _weights(sizes, pooled)
    if len(set(weight.values())) == 1:  # every pooled problem weighs the same: weighted draws are proportional ones
        allocation = "proportional"
    if allocation == "proportional":
        members = [(b, i) for b in pooled for i in range(sizes[b])]
        drawn = [members[j] for j in rng.permutation(len(members))]
        scale = [weight[b] for b, _ in drawn]
    else:
        counts = [sizes[b] for b in pooled]
        draws = draw_order(counts, [1 / len(pooled)] * len(pooled), rng, allocation)  # c_b = N' w_b / N_b
        offset = np.concatenate([[0], np.cumsum(counts)[:-1]])
        drawn = [(pooled[k], int(j - offset[k])) for j, k in zip(draws.items, draws.strata)]
        scale = draws.scale.tolist()
    return Order(tuple(items + drawn), dict(sizes), tuple(sorted(census)), weight, allocation, tuple(scale))


def _weights(sizes: Mapping[str, int], pooled: Sequence[str]) -> dict[str, float]:
    total = sum(sizes[b] for b in pooled)
    return {b: total / (len(pooled) * sizes[b]) for b in pooled}


def benchmark_mean(order: Order, values: np.ndarray) -> float:
    """The mean over benchmarks of each benchmark's mean of ``values`` (a prefix of the order): the score on the
    problems answered (NaN while a benchmark has none)."""
    names = [b for b, _ in order.items[: len(values)]]
    means = []
    for b in order.sizes:
        mine = [v for v, name in zip(values, names) if name == b]
        means.append(float(np.mean(mine)) if mine else math.nan)
    return float(np.mean(means))


def round_ends(order: Order, chunk: int, growth: float, min_batch: int = 1) -> list[int]:
    """The answered prefixes at which the rounds end: the census and a first chunk, then each ``growth`` times
    longer (past the census), every round at least ``min_batch`` problems, snapped to decision boundaries, the
    last at the end of the order."""
    marks = order.boundaries(chunk)
    ends: list[int] = []
    size = float(chunk)
    while not ends or ends[-1] < order.total:
        target = max(order.census_end + math.ceil(size), (ends[-1] if ends else 0) + min_batch)
        target = min(target, order.total)
        end = next(k for k in marks if k >= target)
        if not ends or end > ends[-1]:
            ends.append(end)
        size *= growth
    return ends
