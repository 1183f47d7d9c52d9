"""What an evaluation under the adaptive design (run by :mod:`grrr_stream.evaluation.designs.adaptive`, its rounds
in :mod:`grrr_stream.evaluation.designs.schedule`, its stopping rule in :mod:`grrr_stream.stats.anytime`) is
expected to answer, for the forecast: each variant's engine calls and their sizes.

The figures are the design's own schedule run over planted answers (``tools/simulate_rounds.py``: studies shaped
like the paper's 28 evaluated transitions × 12 variants × 1,517 problems, coupling ρ = 0.9, the defaults: a look
every 64 problems, the betting sequence with tuned bets, weighted draws, lookahead 1). They count every answer
generated, those past a stop included, and every call. They rest on a model of the accuracies (the paper's 12
visible rows, the rest drawn around them) and of how variants agree per problem (about 14 % of problems disagree
at ρ = 0.9, three times the 4.6 % of close variants elsewhere: pessimistic for them). They are an assumption,
printed with the forecast, not a measurement of a study. Between two simulated precision targets the figures are
interpolated; outside, the nearest is taken.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

# precision target (``precision_points``) → variant → (share of the problems its decisions rest on, its engine
# calls: per call in turn, how often a variant makes it and its mean share of the problems then), at the defaults
# (the controls, off, null and diag at ±4 whatever the target): `tools/simulate_rounds.py --studies 20 --precision
# P --table` (ρ = 0.9, seed 0; 20 studies at ±2, 10 at ±3 and ±4; full: as many as its longest variant, and
# what it answered ahead)
Calls = tuple[tuple[float, float], ...]
SIMULATED: dict[float, dict[str, tuple[float, Calls]]] = {
    2.0: {
        "base": (0.194, ((1.0, 0.088), (0.954, 0.104), (0.227, 0.059), (0.052, 0.052), (0.013, 0.048))),
        "full": (0.305, ((1.0, 0.088), (1.0, 0.22), (0.27, 0.143), (0.018, 0.308))),
        "proj": (0.189, ((1.0, 0.088), (1.0, 0.105), (0.095, 0.042))),
        "diag": (0.155, ((1.0, 0.088), (0.82, 0.08), (0.107, 0.046), (0.011, 0.042), (0.002, 0.042))),
        "off": (0.2, ((1.0, 0.088), (1.0, 0.113), (0.127, 0.042), (0.002, 0.042))),
        "null": (0.202, ((1.0, 0.088), (1.0, 0.114), (0.116, 0.042))),
        "offnull": (
            0.268,
            ((1.0, 0.088), (1.0, 0.178), (0.296, 0.062), (0.057, 0.062), (0.009, 0.051), (0.004, 0.042)),
        ),
        "randrm": (0.194, ((1.0, 0.088), (1.0, 0.108), (0.104, 0.042))),
        "off-principal-64": (0.196, ((1.0, 0.088), (1.0, 0.11), (0.109, 0.042))),
        "no-off-principal-64": (0.195, ((1.0, 0.088), (1.0, 0.11), (0.1, 0.042))),
    },
    3.0: {
        "base": (0.16, ((1.0, 0.088), (0.789, 0.086), (0.15, 0.044), (0.021, 0.049), (0.004, 0.042), (0.004, 0.042))),
        "full": (0.237, ((1.0, 0.088), (1.0, 0.155), (0.118, 0.134), (0.004, 0.169))),
        "proj": (0.19, ((1.0, 0.088), (1.0, 0.105), (0.107, 0.042))),
        "diag": (0.154, ((1.0, 0.088), (0.811, 0.081), (0.107, 0.046), (0.004, 0.042))),
        "off": (0.2, ((1.0, 0.088), (1.0, 0.113), (0.129, 0.042))),
        "null": (0.201, ((1.0, 0.088), (1.0, 0.114), (0.118, 0.042))),
        "offnull": (0.202, ((1.0, 0.088), (0.982, 0.116), (0.214, 0.044), (0.032, 0.042), (0.004, 0.042))),
        "randrm": (0.194, ((1.0, 0.088), (1.0, 0.108), (0.096, 0.042))),
        "off-principal-64": (0.196, ((1.0, 0.088), (1.0, 0.11), (0.121, 0.042))),
        "no-off-principal-64": (0.194, ((1.0, 0.088), (1.0, 0.111), (0.075, 0.042))),
    },
    4.0: {
        "base": (0.139, ((1.0, 0.088), (0.661, 0.071), (0.111, 0.044), (0.011, 0.042))),
        "full": (0.212, ((1.0, 0.088), (1.0, 0.134), (0.046, 0.084))),
        "proj": (0.19, ((1.0, 0.088), (1.0, 0.105), (0.107, 0.042))),
        "diag": (0.154, ((1.0, 0.088), (0.811, 0.081), (0.107, 0.045), (0.004, 0.042))),
        "off": (0.2, ((1.0, 0.088), (1.0, 0.113), (0.129, 0.042))),
        "null": (0.201, ((1.0, 0.088), (1.0, 0.114), (0.118, 0.042))),
        "offnull": (0.167, ((1.0, 0.088), (0.936, 0.084), (0.125, 0.043), (0.007, 0.042))),
        "randrm": (0.194, ((1.0, 0.088), (1.0, 0.108), (0.096, 0.042))),
        "off-principal-64": (0.196, ((1.0, 0.088), (1.0, 0.11), (0.121, 0.042))),
        "no-off-principal-64": (0.194, ((1.0, 0.088), (1.0, 0.111), (0.075, 0.042))),
    },
}
SOURCE = (
    "tools/simulate_rounds.py: the design's schedule over paper-shaped studies at the default precision per "
    "variant, ρ = 0.9 (about 14 % of problems disagree), tuned bets, weighted draws, lookahead 1"
)
# the variants without a threshold of their own: a variant the study did not simulate is taken as their mean
LIKE = ("off", "null", "randrm", "proj")


def padded(calls: Sequence) -> list[np.ndarray]:
    """Lists of calls ((how often, share) rows) as arrays of one length: missing later calls made never."""
    arrays = [np.asarray(c, dtype=float).reshape(-1, 2) for c in calls]
    most = max(len(a) for a in arrays)
    return [np.vstack([a, np.zeros((most - len(a), 2))]) for a in arrays]


def _entry(variant: str, table: dict) -> tuple[float, np.ndarray]:
    """(decided share, calls as rows of (how often, share)) of ``variant`` in one precision's table."""
    name = "randrm" if variant.startswith("randrm-") else variant
    if name in table:
        decided, calls = table[name]
        return decided, np.array(calls, dtype=float)
    parts = [_entry(k, table) for k in LIKE]
    return float(np.mean([d for d, _ in parts])), np.mean(padded([c for _, c in parts]), axis=0)


def at_precision(variant: str, precision_points: float) -> tuple[float, np.ndarray]:
    """The variant's decided share and calls (rows of (how often, share)) at ``precision_points``: interpolated
    between the two simulated targets around it, the nearest outside them."""
    points = sorted(SIMULATED)
    p = min(max(precision_points, points[0]), points[-1])
    lo, hi = max(q for q in points if q <= p), min(q for q in points if q >= p)
    (da, ca), (db, cb) = _entry(variant, SIMULATED[lo]), _entry(variant, SIMULATED[hi])
    t = 0.0 if hi == lo else (p - lo) / (hi - lo)
    ca, cb = padded([ca, cb])
    return da + t * (db - da), ca + t * (cb - ca)


def expected(
    variants: Sequence[str], sizes: dict[str, int], settings
) -> tuple[list[float], list[list[tuple[float, float]]], str]:
    """Per variant: the share of the problems of benchmarks of ``sizes`` it answers, and its engine calls as
    (how many such calls, share of the problems each), under ``settings``
    (:class:`~grrr_stream.evaluation.settings.AdaptiveSettings`); and what that rests on, in words."""
    from ..stats.order import problem_order, round_ends

    order = problem_order(sizes, settings.seed, settings.max_weight, settings.allocation)
    total = order.total
    floor = min(settings.min_batch, total) / total  # no call answers fewer, where as many are left
    shares, calls = [], []
    for v in variants:
        decided, table = at_precision(v, settings.precision_points)
        if settings.lookahead > 0:
            mine = [(float(k), max(float(s), floor)) for k, s in table if k > 0]
        else:  # the first round in one call, then a chunk a call up to the decided share
            first = round_ends(order, settings.chunk, settings.growth, settings.min_batch)[0] / total
            step = max(settings.chunk / total, floor)
            mine = [(1.0, first)] + ([(max(0.0, decided - first) / step, step)] if decided > first else [])
        share = min(1.0, sum(k * s for k, s in mine))
        shares.append(share)
        calls.append(mine)
    n = max(1, len(variants))
    basis = (
        f"adaptive ±{settings.precision_points:g} points: {sum(shares) / n:.0%} of the problems answered on "
        f"average{f' in calls of ≥ {min(settings.min_batch, total)}' if settings.min_batch > 1 else ''}, "
        f"{sum(k for c in calls for k, _ in c) / n:.1f} calls a variant"
        f"{' (as at lookahead 1)' if 0 < settings.lookahead < 1 else ''} ({SOURCE})"
    )
    return shares, calls, basis
