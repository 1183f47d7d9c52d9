"""How far the adaptive design answers ahead (grrr_stream/stats/lookahead.py): the projection keeps what was
answered and fills each benchmark from its own answered pairs, and the stop it foresees from the first chunk is
close to where the rule really stops on planted close pairs at the paper's sizes."""

from __future__ import annotations

from collections import Counter

import numpy as np

from grrr_stream.stats.anytime import Thresholds, decide
from grrr_stream.stats.lookahead import batch_end, projected
from grrr_stream.stats.order import problem_order

PAPER = {"math500": 500, "aime24": 30, "amc23": 40, "minerva_math": 272, "olympiadbench": 675}


def test_the_projection_keeps_the_answers_and_cycles_each_benchmarks_own_pairs():
    order = problem_order(PAPER, seed=0)
    rng = np.random.default_rng(3)
    have = order.census_end + 64
    v, f = rng.random(have), rng.random(have)  # distinct values: each names its problem
    pv, pf = projected(order, v, f)
    assert len(pv) == len(pf) == order.total
    assert (pv[:have] == v).all() and (pf[:have] == f).all()
    where = {x: i for i, x in enumerate(v)}
    by_bench: dict[str, Counter] = {}
    for i in range(have, order.total):
        j = where[pv[i]]  # the answered problem it copies: the pair travels together, from the same benchmark
        assert pf[i] == f[j] and order.items[j][0] == order.items[i][0]
        by_bench.setdefault(order.items[i][0], Counter())[j] += 1
    for bench, uses in by_bench.items():
        answered = [i for i in range(have) if order.items[i][0] == bench]
        assert set(uses) == set(answered) or sum(uses.values()) < len(answered)
        assert max(uses.values()) - min(uses.values()) <= 1  # in turn: no pair used twice before all once


def _close_pair(rng, order, accuracy, flips):
    """Full correct with probability ``accuracy`` per problem; the variant full's answers with ``flips`` of them
    flipped, half each way (its accuracy kept)."""
    full = (rng.random(order.total) < accuracy).astype(float)
    flip = rng.random(order.total) < flips
    return np.where(flip, 1.0 - full, full), full


def test_from_the_first_chunk_it_foresees_about_where_the_rule_stops():
    order = problem_order(PAPER, seed=0)
    rng = np.random.default_rng(11)
    rule = dict(chunk=64, precision_points=2.0, bets="tuned")
    have = order.census_end + 64
    ratios = []
    for _ in range(12):
        variant, full = _close_pair(rng, order, rng.uniform(0.3, 0.7), 0.046)
        stop = decide(order, variant, full, Thresholds(), **rule).problems
        ahead = batch_end(order, variant[:have], full[:have], Thresholds(), end=order.total, slack=1.0, **rule)
        ratios.append((ahead - order.census_end) / (stop - order.census_end))
    assert 0.6 <= np.median(ratios) <= 1.4, ratios
    assert max(ratios) <= 2.5, ratios
