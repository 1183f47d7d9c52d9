"""The adaptive evaluation design's statistics: anytime-valid confidence sequences for a variant's paired
difference to full and for its retention, over the problems answered in the seeded order of
:mod:`grrr_stream.stats.order`, and the rule that stops a variant.

What is estimated is the fixed design's own number: a variant's score is the unweighted mean over benchmarks of its
accuracy on *all* of each benchmark's problems, a finite population (greedy answers do not change). Problems are
drawn without replacement, so an interval shrinks to the exact value as a benchmark runs out, and a verdict that a
sequence decides early is the verdict the fixed design would reach, but for the sequence's error rate. The census
benchmarks are answered in full first (their part of the score is exact); on the pooled part each per-problem value
is weighted by its benchmark's ``c_b``, so one sample of a finite population estimates the mean over benchmarks.
Under weighted draws (:mod:`grrr_stream.stats.allocation`) the sequences are fed each draw's observation and the
value it removes from the population, and the running estimate is the mean of each benchmark's answered problems.

The sequences. By default the hedged betting sequence of :mod:`grrr_stream.stats.betting`, looked at the decision
boundaries (``sequence='betting'``); or (``sequence='eb'``) the empirical-Bernstein closed form of
:mod:`grrr_stream.stats.empirical_bernstein` (cheaper, wider). Either's running intersection is reported.
Bootstrap intervals looked at after every chunk have no such guarantee and are not used here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from .betting import betting_excludes, betting_wor_cs, looks_of
from .empirical_bernstein import eb_wor_cs
from .order import Order

SEQUENCES = ("betting", "eb")


@dataclass(frozen=True)
class Path:
    """An anytime-valid sequence for a mean over benchmarks of a per-problem value in [low, high], after each
    problem of the order: ``lo``/``hi`` in the value's units (NaN before the census is complete)."""

    lo: np.ndarray
    hi: np.ndarray
    estimate: np.ndarray


def _census(order: Order, values: np.ndarray, names: list[str]) -> np.ndarray:
    """The census benchmarks' part of the score, exact: the sum of their means (values' leading shape; 0 without
    a census). ``names``: each answered problem's benchmark."""
    end = order.census_end
    total = np.zeros(values.shape[:-1])
    for b in order.census:
        total = total + values[..., [i for i in range(end) if names[i] == b]].mean(axis=-1)
    return total


def _pooled(order: Order, values: np.ndarray, low: float, high: float):
    """The census part of the score (exact), the pooled draws' observations and the values they remove from the
    pooled population (:mod:`grrr_stream.stats.allocation`; the same for proportional draws), both mapped to
    [0, 1], and the affine map from the pooled population's mean back to the score."""
    n, end = values.shape[-1], order.census_end
    names = [b for b, _ in order.items[:n]]
    census = _census(order, values, names)
    cmax, pooled = order.max_weight, len(order.weight)
    weight = np.array([order.weight[b] for b in names[end:]])
    scale = np.asarray(order.scale[: n - end]) if order.scale else weight

    def unit(c):  # c v ∈ [cmax low, cmax high] for 0 ≤ c ≤ cmax (low ≤ 0 ≤ high)
        return (c * values[..., end:] - cmax * low) / (cmax * (high - low))

    def to_score(m):
        return (census[..., None] + pooled * (cmax * low + cmax * (high - low) * m)) / len(order.sizes)

    return census, unit(scale), unit(weight), to_score


def running_score(order: Order, values: np.ndarray) -> np.ndarray:
    """The estimate of the mean over benchmarks of ``values`` (last axis: the answered prefix of the order) after
    each problem, NaN before the census is complete: the census part exact, the pooled part the running mean of
    ``c_b u`` under proportional draws, the mean of each pooled benchmark's answered problems under weighted draws
    (within a benchmark they are a uniform sample; NaN while one has none)."""
    values = np.asarray(values, dtype=np.float64)
    n, end = values.shape[-1], order.census_end
    est = np.full(values.shape, np.nan)
    if n <= end:
        return est
    names = [b for b, _ in order.items[:n]]
    census = _census(order, values, names)
    count = np.arange(1, n - end + 1)
    if order.allocation == "proportional":
        weight = np.array([order.weight[b] for b in names[end:]])
        pooled = len(order.weight) * np.cumsum(weight * values[..., end:], axis=-1) / count
    else:
        pooled = 0.0
        for b in order.weight:
            mine = np.array([name == b for name in names[end:]])
            with np.errstate(divide="ignore", invalid="ignore"):
                pooled = pooled + np.cumsum(values[..., end:] * mine, axis=-1) / np.cumsum(mine)
    est[..., end:] = (census[..., None] + pooled) / len(order.sizes)
    return est


def _pooled_target(order: Order, target: Optional[float], low, high):
    """A half-width in the score's units as one in the pooled values' [0, 1] (the inverse of ``to_score``'s
    slope), or None."""
    if target is None:
        return None
    slope = len(order.weight) * order.max_weight * (np.asarray(high) - np.asarray(low)) / len(order.sizes)
    return target / slope


def score_path(
    order: Order,
    values: np.ndarray,
    low: float,
    high: float,
    alpha: float = 0.05,
    *,
    sequence: str = "betting",
    looks: Optional[Sequence[int]] = None,
    target: Optional[float] = None,
) -> Path:
    """The sequence of the mean over benchmarks of ``values`` (one per answered problem, in the order's order, a
    prefix of it) bounded in [low, high] (low ≤ 0 ≤ high). ``looks``: the numbers of answered problems at which
    the sequence is looked at (None: every one); between looks lo/hi are the last look's. ``target``: the
    half-width (the score's units) the betting sequence's bets are tuned to (None: the plug-in bets)."""
    values = np.asarray(values, dtype=np.float64)
    n, end = values.shape[-1], order.census_end
    lo = np.full(values.shape, np.nan)
    hi, est = lo.copy(), lo.copy()
    if n <= end:
        return Path(lo, hi, est)
    _, x, z, to_score = _pooled(order, values, low, high)
    at = looks_of(None if looks is None else [k - end for k in looks if end < k <= n], n - end)
    if sequence == "eb":
        zlo, zhi = (a[..., at - 1] for a in eb_wor_cs(x, order.total - end, alpha, removed=z))
    elif sequence == "betting":
        h = _pooled_target(order, target, low, high)
        zlo, zhi = betting_wor_cs(x, order.total - end, alpha, at, h, removed=z)
    else:
        raise ValueError(f"sequence {sequence!r}: choose one of {', '.join(SEQUENCES)}")
    last = np.searchsorted(at, np.arange(1, n - end + 1), side="right") - 1  # each prefix's last look
    seen = last >= 0
    lo[..., end:][..., seen] = to_score(zlo)[..., last[seen]]
    hi[..., end:][..., seen] = to_score(zhi)[..., last[seen]]
    return Path(lo, hi, running_score(order, values))


@dataclass(frozen=True)
class Thresholds:
    """What a variant's verdicts are decided against: variant − full in points, variant / full in percent."""

    difference_points: tuple[float, ...] = ()
    retention_pct: tuple[float, ...] = ()

    @property
    def labels(self) -> list[str]:
        return [f"minus_full {d:g}" for d in self.difference_points] + [f"retention {r:g}%" for r in self.retention_pct]


@dataclass(frozen=True)
class Decision:
    """Where a variant stands after the problems it answered: stopped (at ``problems``, for ``reason``: 'thresholds'
    when every threshold lies outside its sequence, 'precision' when the difference's sequence is within ±the
    target, 'exhausted' when every problem is answered) or still running (``reason`` ''). The interval of the
    difference to full (points) and the side of each threshold ('above', 'below', or 'open') at that point."""

    problems: int
    reason: str
    minus_full: float
    lo: float
    hi: float
    sides: dict[str, str] = field(default_factory=dict)

    @property
    def stopped(self) -> bool:
        return bool(self.reason)


def _side(lo: np.ndarray, hi: np.ndarray, at: float) -> np.ndarray:
    return np.where(lo > at, "above", np.where(hi < at, "below", "open"))


def decide(
    order: Order,
    variant: np.ndarray,
    full: np.ndarray,
    thresholds: Thresholds,
    *,
    chunk: int,
    precision_points: Optional[float],
    alpha: float = 0.05,
    sequence: str = "betting",
    retention_points: Optional[float] = None,
    bets: str = "plugin",
) -> Decision:
    """The first decision boundary at which a variant stops, from its per-problem values and full's (in the order's
    order, each a prefix: answered so far); if none, where it stands at the last boundary both have answered. The
    sequences are looked at the boundaries. ``precision_points`` None: only the thresholds (or the census) stop
    it. With ``retention_points``, a variant stops on thresholds or precision
    only once its difference's half-width over full's running score is within that many percent: about its
    retention interval's half-width, so that a median of retentions over transitions rests on narrow ones.
    ``bets``: 'tuned' tunes the betting sequences' bets to ``precision_points`` (where there is one), 'plugin'
    does not."""
    n = min(len(variant), len(full))
    variant, full = np.asarray(variant[:n], dtype=np.float64), np.asarray(full[:n], dtype=np.float64)
    marks = [k for k in order.boundaries(chunk) if k <= n]
    if not marks:
        return Decision(n, "", math.nan, math.nan, math.nan, {lab: "open" for lab in thresholds.labels})
    target = bet_target(bets, precision_points)
    diff = score_path(order, variant - full, -1.0, 1.0, alpha, sequence=sequence, looks=marks, target=target)
    sides = {f"minus_full {d:g}": _side(diff.lo, diff.hi, d / 100) for d in thresholds.difference_points}
    for r in thresholds.retention_pct:
        theta = r / 100
        path = score_path(
            order, variant - theta * full, -theta, 1.0, alpha, sequence=sequence, looks=marks, target=target
        )
        sides[f"retention {r:g}%"] = _side(path.lo, path.hi, 0.0)
    narrow = _retention_narrow(order, full, diff, retention_points)
    for k in marks:
        i = k - 1
        reason = (
            "exhausted"
            if k == order.total
            else ""
            if not narrow[i]
            else "thresholds"
            if sides and all(s[i] != "open" for s in sides.values())
            else "precision"
            if precision_points is not None and 100 * (diff.hi[i] - diff.lo[i]) / 2 <= precision_points
            else ""
        )
        if reason or k == marks[-1]:
            return Decision(
                k,
                reason,
                100 * float(diff.estimate[i]),
                100 * float(diff.lo[i]),
                100 * float(diff.hi[i]),
                {lab: str(s[i]) for lab, s in sides.items()},
            )
    raise AssertionError("unreachable: the last boundary returns")


BETS = ("tuned", "plugin")


def bet_target(bets: str, precision_points: Optional[float]) -> Optional[float]:
    """The half-width (the score's units) a variant's bets are tuned to: its precision with ``bets`` 'tuned', else
    None (the plug-in bets; also for a variant that stops on its thresholds alone)."""
    if bets not in BETS:
        raise ValueError(f"bets {bets!r}: choose one of {', '.join(BETS)}")
    return None if bets == "plugin" or precision_points is None else precision_points / 100


def _retention_narrow(order: Order, full: np.ndarray, diff: Path, retention_points: Optional[float]) -> np.ndarray:
    """Per answered prefix (last axis), whether the difference's half-width is within ``retention_points`` percent
    of full's running score (all true without a target)."""
    if retention_points is None:
        return np.ones(diff.lo.shape, dtype=bool)
    full_score = (
        score_path(order, full, 0.0, 1.0, looks=[]).estimate
        if full.shape[-1] > order.census_end
        else np.full(full.shape, np.nan)
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        return 100 * (diff.hi - diff.lo) / 2 <= retention_points * full_score


def ratio_sides(
    order: Order,
    variant: np.ndarray,
    full: np.ndarray,
    theta: np.ndarray,
    *,
    alpha: float = 0.05,
    sequence: str = "betting",
    looks: Optional[Sequence[int]] = None,
    target: Optional[float] = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Whether the sequence of the mean of (variant − θ full) over the answered prefix (last axis; leading axes:
    paths, θ one per path) has put it above 0 (ratio > θ) and below 0 (ratio < θ) at one of ``looks`` (None:
    the end of the prefix only). ``target``: as :func:`score_path`'s."""
    n = variant.shape[-1]
    looks = [n] if looks is None else looks
    theta = np.asarray(theta, dtype=np.float64)
    values = variant - theta[..., None] * full
    if sequence == "eb":
        path = score_path(order, values, -theta[..., None], 1.0, alpha, sequence="eb", looks=looks)
        return path.lo[..., -1] > 0.0, path.hi[..., -1] < 0.0
    census, x, z, _ = _pooled(order, values, -theta[..., None], 1.0)
    cmax, pooled = order.max_weight, len(order.weight)
    # the pooled mean m at which the score is 0: census + pooled · (−cmax θ + cmax (1 + θ) m) = 0
    zero = (cmax * theta - census / pooled) / (cmax * (1 + theta))
    end = order.census_end
    pooled_target = _pooled_target(order, target, -theta[..., None], 1.0)
    at = [k - end for k in looks if end < k <= n]
    return betting_excludes(x, order.total - end, zero, alpha, at, pooled_target, removed=z)


def retention_interval(
    order: Order,
    variant: np.ndarray,
    full: np.ndarray,
    *,
    alpha: float = 0.05,
    top: float = 10.0,
    tolerance: float = 1e-4,
    sequence: str = "betting",
    target: Optional[float] = None,
) -> tuple[float, float]:
    """The interval of variant / full (percent) after the answered prefix, from the sequence at its end: the
    ratios θ whose sequence for the mean of (variant − θ full) has not put it above 0 (ratio > θ) nor below 0
    (ratio < θ), found by bisection (both sides move monotonically with θ). (NaN, NaN) before the census is
    complete; the upper end is ``top`` (×100 %) when full may still score 0. ``target``: as :func:`score_path`'s."""
    n = min(len(variant), len(full))
    if n <= order.census_end:
        return math.nan, math.nan
    v, f = np.asarray(variant[:n], dtype=np.float64), np.asarray(full[:n], dtype=np.float64)

    def sides(theta: float) -> tuple[bool, bool]:
        above, below = ratio_sides(order, v, f, np.float64(theta), alpha=alpha, sequence=sequence, target=target)
        return bool(above), bool(below)

    def edge(excluded) -> float:  # the first θ in [0, top] at which ``excluded`` turns true
        a, b = 0.0, top
        if excluded(a):
            return a
        if not excluded(b):
            return b
        while b - a > tolerance:
            mid = (a + b) / 2
            a, b = (a, mid) if excluded(mid) else (mid, b)
        return (a + b) / 2

    lower = edge(lambda t: not sides(t)[0])  # below it, variant − θ full is surely positive
    upper = edge(lambda t: sides(t)[1])  # from it on, surely negative
    return 100 * lower, 100 * upper
