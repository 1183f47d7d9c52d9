"""The adaptive design's order under weighted draws (evaluation.adaptive.allocation 'weighted'): seeded, every
problem once, spread across the pooled benchmarks, each draw's scale the allocation's; its confidence sequences
cover the fixed design's value at every look over random orders of planted populations and close on it at the end;
its running estimate is the mean of each benchmark's answered problems; and it reaches ±2 points on fewer problems
than proportional draws where the benchmarks' sizes differ."""

from __future__ import annotations

import math

import numpy as np
import pytest

from grrr_stream.stats.anytime import Thresholds, decide, retention_interval, running_score, score_path
from grrr_stream.stats.order import benchmark_mean, problem_order

pytestmark = pytest.mark.timeout(300)

PAPER_SIZES = {"math500": 500, "aime24": 30, "amc23": 40, "minerva_math": 272, "olympiadbench": 675}
# one benchmark answered in full first (20 problems, a quarter of the score), three pooled ones of unequal size
SMALL = {"tiny": 20, "a": 300, "b": 150, "c": 90}


def _fixed(order, values_by_bench: dict) -> float:
    """The fixed design's score: the plain mean over benchmarks of each benchmark's mean, in float64."""
    return float(np.mean([np.mean(v, dtype=np.float64) for v in values_by_bench.values()]))


def _in_order(order, values_by_bench: dict) -> np.ndarray:
    return np.array([values_by_bench[b][i] for b, i in order.items])


def test_a_weighted_order_is_seeded_complete_and_draws_each_benchmark_equally_at_first():
    o = problem_order(PAPER_SIZES, seed=3, allocation="weighted")
    assert o.allocation == "weighted" and o.census == ("aime24", "amc23") and o.census_end == 70
    assert sorted(o.items) == sorted((b, i) for b, n in PAPER_SIZES.items() for i in range(n))
    assert o.items[:70] == problem_order(PAPER_SIZES, seed=3).items[:70]  # the census as before
    assert problem_order(PAPER_SIZES, seed=3, allocation="weighted") == o
    assert problem_order(PAPER_SIZES, seed=4, allocation="weighted").items != o.items
    head = [b for b, _ in o.items[70:220]]  # each pooled benchmark weighs 1/5: about 50 of each in the first 150
    assert all(35 <= head.count(b) <= 65 for b in ("math500", "minerva_math", "olympiadbench")), head
    # each draw's scale, from the counts left before it: N' Σ_l (w_l left_l / N_l) / Σ_l left_l, w_l = 1/3
    left = {b: PAPER_SIZES[b] for b in o.weight}
    pooled = sum(left.values())
    for t, (b, _) in enumerate(o.items[70:]):
        want = pooled * sum(left[k] / (3 * PAPER_SIZES[k]) for k in left) / sum(left.values())
        assert o.scale[t] == pytest.approx(want, rel=1e-12)
        left[b] -= 1
    assert max(o.scale) <= o.max_weight + 1e-12
    # within a benchmark the problems come in a random order, not by position
    minerva = [i for b, i in o.items if b == "minerva_math"]
    assert minerva != sorted(minerva)


def test_weighted_draws_of_benchmarks_of_one_size_are_the_proportional_order():
    sizes = {"x": 120, "y": 120}
    assert problem_order(sizes, seed=5, allocation="weighted") == problem_order(sizes, seed=5)
    assert problem_order({"sums": 400}, seed=3, allocation="weighted").allocation == "proportional"
    with pytest.raises(ValueError, match="weighted, proportional|proportional, weighted"):
        problem_order(sizes, allocation="neyman")


def _population(rng, kind: str):
    """Per-benchmark 0/1 correctness of full and a variant on SMALL: 'close' flips 5 % of full's answers; 'opposite'
    makes the variant better on the largest pooled benchmark and worse on the smallest (the benchmarks pull the
    weighted mean in opposite directions)."""
    full, variant = {}, {}
    for j, (b, n) in enumerate(SMALL.items()):
        f = (rng.random(n) < 0.3 + 0.15 * j).astype(float)
        if kind == "close":
            v = np.where(rng.random(n) < 0.05, 1 - f, f)
        else:
            v = np.where(rng.random(n) < 0.12, 1.0 if b == "a" else 0.0 if b == "c" else f, f)
        full[b], variant[b] = f, v
    return variant, full


@pytest.mark.parametrize("kind", ["close", "opposite"])
def test_weighted_sequences_cover_the_fixed_value_at_every_look(kind):
    """Over S seeded weighted orders of one planted population, the difference's sequence (betting with tuned and
    plug-in bets, and the empirical-Bernstein one) excludes the fixed design's value at some look in at most α of
    the orders, up to 3 binomial standard errors; where it never missed, it closes on that value at the end."""
    rng = np.random.default_rng(sum(map(ord, kind)))
    variant, full = _population(rng, kind)
    truth = _fixed(None, variant) - _fixed(None, full)
    S, alpha = 240, 0.05
    missed = {"tuned": 0, "plugin": 0, "eb": 0}
    for seed in range(S):
        o = problem_order(SMALL, seed=seed, allocation="weighted")
        diff = _in_order(o, variant) - _in_order(o, full)
        looks = o.boundaries(16)
        for name, kw in (("tuned", {"target": 0.03}), ("plugin", {}), ("eb", {"sequence": "eb"})):
            p = score_path(o, diff, -1.0, 1.0, alpha, looks=looks, **kw)
            at = np.array(looks) - 1
            miss = bool(((p.lo[at] > truth + 1e-12) | (p.hi[at] < truth - 1e-12)).any())
            missed[name] += miss
            if not miss:
                assert p.lo[-1] == pytest.approx(truth, abs=1e-4) and p.hi[-1] == pytest.approx(truth, abs=1e-4)
            assert p.estimate[-1] == pytest.approx(truth, abs=1e-12)
    limit = alpha + 3 * math.sqrt(alpha * (1 - alpha) / S)
    assert all(m / S <= limit for m in missed.values()), missed


def test_the_running_estimate_is_the_mean_of_each_benchmarks_answered_problems():
    rng = np.random.default_rng(4)
    o = problem_order(SMALL, seed=2, allocation="weighted")
    values = rng.random(o.total)
    est = running_score(o, values)
    assert np.isnan(est[: o.census_end]).all()
    for k in (o.census_end + 40, 200, 371, o.total):
        assert est[k - 1] == pytest.approx(benchmark_mean(o, values[:k]), rel=1e-12)
    by_bench = {b: [v for (bb, _), v in zip(o.items, values) if bb == b] for b in SMALL}
    assert est[-1] == pytest.approx(np.mean([np.mean(v) for v in by_bench.values()]), rel=1e-12)
    assert np.array_equal(score_path(o, values, 0.0, 1.0, looks=[]).estimate, est, equal_nan=True)


def test_a_weighted_retention_interval_holds_the_ratio_and_closes_at_the_end():
    rng = np.random.default_rng(8)
    variant, full = _population(rng, "close")
    o = problem_order(SMALL, seed=1, allocation="weighted")
    v, f = _in_order(o, variant), _in_order(o, full)
    ratio = 100 * _fixed(o, variant) / _fixed(o, full)
    lo, hi = retention_interval(o, v, f)
    assert lo == pytest.approx(ratio, abs=0.02) and hi == pytest.approx(ratio, abs=0.02)
    lo_half, hi_half = retention_interval(o, v[:300], f[:300])
    assert lo_half < ratio < hi_half


def test_weighted_draws_reach_two_points_on_fewer_problems_than_proportional_at_the_papers_sizes():
    """Close pairs (5 % of full's answers flipped) on the paper's benchmarks: the design's own stopping rule at ±2
    points stops them on fewer problems with weighted draws: on average and at the 90th percentile over 24 orders
    and pairs (the looks come every 64 problems, so the medians tie at 454). Minerva's problems weigh 2.5 times
    OlympiadBench's: drawn in proportion to size, it is sampled too little."""
    rng = np.random.default_rng(0)
    stops = {"weighted": [], "proportional": []}
    for seed in range(24):
        full = {b: (rng.random(n) < rng.uniform(0.3, 0.8)).astype(float) for b, n in PAPER_SIZES.items()}
        variant = {b: np.where(rng.random(len(f)) < 0.046, 1 - f, f) for b, f in full.items()}
        for allocation in stops:
            o = problem_order(PAPER_SIZES, seed=seed, allocation=allocation)
            d = decide(
                o, _in_order(o, variant), _in_order(o, full), Thresholds(), chunk=64, precision_points=2.0, bets="tuned"
            )
            stops[allocation].append(d.problems)
    w, p = np.array(stops["weighted"]), np.array(stops["proportional"])
    assert w.mean() < p.mean() and np.percentile(w, 90) < np.percentile(p, 90), stops
