"""The sequential design's stopping rule and retention interval over many paths at once, for
tools/simulate_designs.py: the same arithmetic as grrr_stream.stats.sequential.decide and retention_interval (which
take one path), built on its score_path, so that a thousand studies run in minutes.
tests/test_simulate_designs.py checks both against the scalar functions path by path."""

from __future__ import annotations

import numpy as np

from grrr_stream.stats.order import Order
from grrr_stream.stats.sequential import Thresholds, ratio_sides, score_path

REASON_CODES = {"thresholds": 0, "precision": 1, "exhausted": 2}
SIDE_NAMES = {1: "above", -1: "below", 0: "open"}


def _side(lo: np.ndarray, hi: np.ndarray, at: float) -> np.ndarray:
    """+1 above, −1 below, 0 open (NaN before the census: open)."""
    return (lo > at).astype(np.int8) - (hi < at).astype(np.int8)


def score_estimate(order: Order, values: np.ndarray) -> np.ndarray:
    """score_path's estimate (the mean over benchmarks, census exact, the pooled part by its weighted running
    mean) without its confidence sequence: paths × problems, NaN before the census is complete."""
    values = np.asarray(values, dtype=np.float64)
    n, end = values.shape[-1], order.census_end
    est = np.full(values.shape, np.nan)
    if n <= end:
        return est
    names = [b for b, _ in order.items[:n]]
    census = (
        sum(values[..., [i for i in range(end) if names[i] == b]].mean(axis=-1) for b in order.census)
        if order.census
        else 0.0
    )
    weight = np.array([order.weight[b] for b in names[end:]])
    running = np.cumsum(weight * values[..., end:], axis=-1) / np.arange(1, n - end + 1)
    est[..., end:] = (np.asarray(census)[..., None] + len(order.weight) * running) / len(order.sizes)
    return est


def decide_many(
    order: Order,
    variant: np.ndarray,
    full: np.ndarray,
    thresholds: Thresholds,
    *,
    chunk: int,
    precisions,
    alpha: float = 0.05,
    sequence: str = "betting",
    retention_points=None,
) -> dict:
    """decide() for every row of ``variant``/``full`` (paths × problems, every problem answered) and each
    precision target: {target: {'problems', 'reason' (REASON_CODES), 'minus_full', 'lo', 'hi' (points), 'sides'
    (paths × thresholds: +1 above, −1 below, 0 open, in Thresholds.labels' order)}}."""
    variant, full = np.asarray(variant, dtype=np.float64), np.asarray(full, dtype=np.float64)
    if variant.shape[-1] != order.total:
        raise ValueError(f"{variant.shape[-1]} problems, the order has {order.total}: answer all of them")
    marks = np.array(order.boundaries(chunk))
    at = marks - 1
    diff = score_path(order, variant - full, -1.0, 1.0, alpha, sequence=sequence, looks=marks)
    sides = [_side(diff.lo[:, at], diff.hi[:, at], d / 100) for d in thresholds.difference_points]
    for r in thresholds.retention_pct:
        theta = r / 100
        path = score_path(order, variant - theta * full, -theta, 1.0, alpha, sequence=sequence, looks=marks)
        sides.append(_side(path.lo[:, at], path.hi[:, at], 0.0))
    side = np.stack(sides, axis=-1) if sides else np.zeros(diff.lo[:, at].shape + (0,), dtype=np.int8)
    decided = (side != 0).all(axis=-1) if sides else np.zeros(side.shape[:2], dtype=bool)
    exhausted = np.broadcast_to(marks == order.total, decided.shape)
    half = 100 * (diff.hi[:, at] - diff.lo[:, at]) / 2
    narrow = np.ones(half.shape, dtype=bool)
    if retention_points is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            narrow = half <= retention_points * score_estimate(order, full)[:, at]
    rows = np.arange(variant.shape[0])
    out = {}
    for p in precisions:
        stop = exhausted | (narrow & (decided if p is None else decided | (half <= p)))
        first = np.argmax(stop, axis=1)  # the last mark is the end: every row stops somewhere
        reason = np.where(exhausted[rows, first], 2, np.where(decided[rows, first], 0, 1))
        i = at[first]
        out[p] = {
            "problems": marks[first],
            "reason": reason,
            "minus_full": 100 * diff.estimate[rows, i],
            "lo": 100 * diff.lo[rows, i],
            "hi": 100 * diff.hi[rows, i],
            "sides": side[rows, first],
        }
    return out


def retention_many(
    order: Order,
    variant: np.ndarray,
    full: np.ndarray,
    stops: np.ndarray,
    *,
    alpha: float = 0.05,
    top: float = 10.0,
    tolerance: float = 1e-4,
    sequence: str = "betting",
) -> tuple[np.ndarray, np.ndarray]:
    """retention_interval() of each row after its first ``stops[row]`` problems: (lower, upper) in percent. The
    bisection halves every row's bracket in step, so it takes the scalar loop's exact steps."""
    lower, upper = np.full(len(stops), np.nan), np.full(len(stops), np.nan)
    for k in np.unique(stops):
        rows = np.flatnonzero(stops == k)
        if k <= order.census_end:
            continue
        v, f = np.asarray(variant[rows, :k], dtype=np.float64), np.asarray(full[rows, :k], dtype=np.float64)
        lower[rows], upper[rows] = _bisect(order, v, f, alpha, top, tolerance, sequence)
    return 100 * lower, 100 * upper


def _bisect(order, v, f, alpha, top, tolerance, sequence):
    m = len(v)
    vv, ff = np.concatenate([v, v]), np.concatenate([f, f])
    above0, below0 = ratio_sides(order, v, f, np.zeros(m), alpha=alpha, sequence=sequence)
    above_t, below_t = ratio_sides(order, v, f, np.full(m, top), alpha=alpha, sequence=sequence)
    # lower edge: the first θ not surely below the ratio; upper edge: the first θ surely above it (edge() of the
    # package)
    fixed = np.concatenate(
        [np.where(~above0, 0.0, np.where(above_t, top, np.nan)), np.where(below0, 0.0, np.where(~below_t, top, np.nan))]
    )
    a, b = np.zeros(2 * m), np.full(2 * m, top)
    is_lower = np.arange(2 * m) < m
    while b[0] - a[0] > tolerance:
        mid = (a + b) / 2
        above, below = ratio_sides(order, vv, ff, mid, alpha=alpha, sequence=sequence)
        excluded = np.where(is_lower, ~above, below)
        a, b = np.where(excluded, a, mid), np.where(excluded, mid, b)
    edge = np.where(np.isnan(fixed), (a + b) / 2, fixed)
    return edge[:m], edge[m:]
