"""How far a running variant answers in its next engine call, ahead of the looks (the adaptive design's
``lookahead``): to where its stopping rule is expected to stop.

The expectation is the rule itself run on a projection: the answered problems, then every unanswered one of each
benchmark taking in turn the (variant, full) pair of one answered before it, cycled in the order answered. That is
the stop :func:`~grrr_stream.stats.anytime.decide` would reach if the rest of each benchmark looked like what has
been seen, with the sequence's own start-up, bets and finite-population end, which no closed form of its width
has: read as 1/√n from the first chunk, the width foresees two to eight times too many problems; as 1/n, still
1.3 × too many for a ±2 target; the projection answers 1.04 × the problems the decisions rest on, at the paper's
size (``tools/simulate_rounds.py``). Deterministic, so a resume asks for the same calls. Answering ahead changes no
decision, which are taken at every boundary from the answers up to it: only how many answers past the stop are
generated, and how large the engine's batches are.
"""

from __future__ import annotations

import numpy as np

from .anytime import Thresholds, decide
from .order import Order


def projected(order: Order, variant: np.ndarray, full: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``variant`` and ``full`` (answered prefixes of one length) over the whole order: each unanswered problem of a
    benchmark takes the pair of the benchmark's answered problems in turn (a benchmark with none answered: the
    problems answered after the census, else all of them)."""
    have = min(len(variant), len(full))
    items = order.items
    seen: dict[str, list[int]] = {}
    for i in range(have):
        seen.setdefault(items[i][0], []).append(i)
    fallback = list(range(order.census_end, have)) or list(range(have))
    source = np.empty(order.total, dtype=np.int64)
    source[:have] = np.arange(have)
    turn: dict[str, int] = {}
    for i in range(have, order.total):
        bench = items[i][0]
        pool = seen.get(bench) or fallback
        k = turn.get(bench, 0)
        turn[bench] = k + 1
        source[i] = pool[k % len(pool)]
    v, f = np.asarray(variant[:have], dtype=np.float64), np.asarray(full[:have], dtype=np.float64)
    return v[source], f[source]


def batch_end(
    order: Order,
    variant: np.ndarray,
    full: np.ndarray,
    thresholds: Thresholds,
    *,
    chunk: int,
    precision_points: float | None,
    end: int,
    slack: float,
    min_batch: int = 1,
    **rule,
) -> int:
    """How far a running variant answers in its next call: the next decision boundary at least ``min_batch``
    problems on (or ``end``), or ``slack`` of the way to the boundary at which the rule (:func:`decide` with
    ``thresholds``, ``chunk``, ``precision_points`` and ``rule``: alpha, sequence, bets, retention_points) stops
    on the projection (:func:`projected`), capped at ``end``. Before anything past the census is answered there
    is nothing to project from: the next boundary."""
    have = min(len(variant), len(full))
    marks = [k for k in order.boundaries(chunk) if have < k <= end]
    if not marks:
        return end
    first = next((k for k in marks if k >= have + min_batch), marks[-1])
    if have <= order.census_end or have == 0 or slack <= 0:
        return first
    v, f = projected(order, variant, full)
    stop = decide(order, v, f, thresholds, chunk=chunk, precision_points=precision_points, **rule).problems
    target = have + max(chunk, slack * (stop - have))
    return max(first, next((k for k in marks if k >= target), marks[-1]))
