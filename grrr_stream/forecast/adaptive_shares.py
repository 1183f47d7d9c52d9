"""What an evaluation under the adaptive design (run by :mod:`grrr_stream.evaluation.designs.adaptive`, its stopping
rule in :mod:`grrr_stream.stats.anytime`) is expected to answer, for the forecast: each variant's share of the
problems and how often it is streamed into the engine.

The shares are the simulation study's (``tools/simulate.py designs``, studies shaped like the paper's 28
evaluated transitions × 12 variants × 1,517 problems, coupling ρ = 0.9, a look every 64 problems, the betting
sequence with tuned bets, weighted draws; docs/evaluation.md, "Adaptive design: simulation"). They rest on a model
of the accuracies (the paper's 12 visible rows, the rest drawn around them) and of how variants agree per problem (about
14 % of problems disagree at ρ = 0.9, three times the 4.6 % of close variants elsewhere: pessimistic for them).
They are an assumption, printed with the forecast, not a measurement of a study. Between two simulated precision
targets the shares are interpolated; outside, the nearest is taken.
"""

from __future__ import annotations

from typing import Sequence

# precision target (``precision_points``) → variant → share of the problems answered, at the default precision per
# variant (the controls, off, null and diag at ±4 whatever the target), the default bets (tuned to each variant's
# precision) and the default allocation (weighted draws): `tools/simulate.py designs --studies 50 --precisions 2,3,4
# --retention-studies 10` (ρ = 0.9, the betting sequence, seed 0; each share ±0.01-0.02 over 50 studies).
SIMULATED: dict[float, dict[str, float]] = {
    2.0: {
        "base": 0.196,
        "full": 0.304,
        "proj": 0.191,
        "diag": 0.158,
        "off": 0.200,
        "null": 0.201,
        "offnull": 0.263,
        "randrm": 0.194,
        "off-principal-64": 0.195,
        "no-off-principal-64": 0.195,
    },
    3.0: {
        "base": 0.160,
        "full": 0.237,
        "proj": 0.191,
        "diag": 0.158,
        "off": 0.200,
        "null": 0.201,
        "offnull": 0.201,
        "randrm": 0.194,
        "off-principal-64": 0.195,
        "no-off-principal-64": 0.195,
    },
    4.0: {
        "base": 0.139,
        "full": 0.212,
        "proj": 0.191,
        "diag": 0.158,
        "off": 0.200,
        "null": 0.201,
        "offnull": 0.167,
        "randrm": 0.194,
        "off-principal-64": 0.195,
        "no-off-principal-64": 0.195,
    },
}
# answering ahead of the next look (adaptive.lookahead 0.5) generates a few answers past each stop: 8.5 % more
# on the stand-in engine's test evaluation (tests/evaluation/test_adaptive_design.py's setting); taken as 10 %
AHEAD = 1.10
SOURCE = (
    "tools/simulate.py designs: paper-shaped studies at the default precision per variant, ρ = 0.9 (about 14 % "
    "of problems disagree), betting sequence with tuned bets, weighted draws"
)


def _share_at(variant: str, table: dict[str, float]) -> float:
    name = "randrm" if variant.startswith("randrm-") else variant
    if name in table:
        return table[name]
    # a variant the study did not simulate: as the variants without a threshold of their own
    return sum(table[k] for k in ("off", "null", "randrm", "proj")) / 4


def share(variant: str, precision_points: float) -> float:
    """The expected share of the problems ``variant`` answers (full: as many as its longest variant)."""
    points = sorted(SIMULATED)
    p = min(max(precision_points, points[0]), points[-1])
    lo = max(q for q in points if q <= p)
    hi = min(q for q in points if q >= p)
    a, b = _share_at(variant, SIMULATED[lo]), _share_at(variant, SIMULATED[hi])
    t = 0.0 if hi == lo else (p - lo) / (hi - lo)
    return min(1.0, AHEAD * (a + t * (b - a)))


def expected(variants: Sequence[str], sizes: dict[str, int], settings) -> tuple[list[float], list[float], str]:
    """Per variant: the share of the problems of benchmarks of ``sizes`` it answers, and how many engine calls
    stream it in (one load a call), under ``settings``
    (:class:`~grrr_stream.evaluation.settings.AdaptiveSettings`); and what that rests on, in words."""
    from ..stats.order import problem_order, round_ends

    order = problem_order(sizes, settings.seed, settings.max_weight, settings.allocation)
    ends = round_ends(order, settings.chunk, settings.growth, settings.min_batch)
    total = order.total
    stops = [share(v, settings.precision_points) for v in variants]
    # the first round ends after a chunk (or ``min_batch``); the next goes as far as the intervals say the
    # variants need (evaluation/designs/rounds.py): a variant that did not stop in the first is streamed in about
    # twice, once more where that guess fell short (taken as one in four), and each later call answers at least
    # ``min_batch`` problems; without answering ahead, once per round
    first = ends[0] / total
    if settings.lookahead > 0:
        loads = [1.0 if s <= first else 2.25 for s in stops]
        later = min(1.0, first + settings.min_batch / total)
        shares = [first if s <= first else min(1.0, max(s, later)) for s in stops]
    else:
        loads, shares = [], []
        for s in stops:
            k = next((i for i, end in enumerate(ends) if end >= s * total), len(ends) - 1)
            loads.append(float(k + 1))
            shares.append(max(s, ends[k] / total if settings.min_batch > settings.chunk else s))
    basis = (
        f"adaptive ±{settings.precision_points:g} points: {sum(shares) / len(shares):.0%} of the problems "
        f"on average{f' in calls of ≥ {min(settings.min_batch, total)}' if settings.min_batch > 1 else ''}, "
        f"{sum(loads) / len(loads):.1f} loads a variant ({SOURCE})"
    )
    return shares, loads, basis
