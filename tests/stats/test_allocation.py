"""Weighted draws over the pooled benchmarks (grrr_stream.stats.allocation): the observation's mean given the past is
the mean of what is left, checked by enumeration; anytime coverage on planted populations; the interval closes on
the weighted mean at the last draw; weighted beats proportional draws where the benchmarks' sizes differ."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from grrr_stream.stats.allocation import draw_order, pooled_cs, scale_of
from grrr_stream.stats.betting import betting_wor_cs

pytestmark = pytest.mark.timeout(120)


def _weighted_mean(values, sizes, weights):
    """θ = Σ_k w_k mean_k(v), in float64 from the population's blocks."""
    edges = np.concatenate([[0], np.cumsum(sizes)])
    return sum(w * np.mean(values[a:b], dtype=np.float64) for w, a, b in zip(weights, edges[:-1], edges[1:]))


def test_a_weighted_draws_mean_given_the_past_is_the_mean_of_what_is_left():
    """For every set of problems already drawn from a tiny population, the expected observation of the next draw,
    enumerated over the problems left with p_j ∝ w_k / N_k, equals the mean over what is left of
    z_j = N w_k v_j / N_k: what the without-replacement martingale needs."""
    sizes, weights = np.array([3, 2, 4]), np.array([0.5, 0.3, 0.2])
    rng = np.random.default_rng(3)
    v = rng.uniform(-1, 1, sizes.sum())
    stratum = np.repeat(np.arange(3), sizes)
    total = sizes.sum()
    z = total * weights[stratum] * v / sizes[stratum]
    for r in range(0, total):
        for drawn in itertools.combinations(range(total), r):
            rest = [j for j in range(total) if j not in drawn]
            left = np.array([sum(stratum[j] == k for j in rest) for k in range(3)], dtype=float)
            p = np.array([weights[stratum[j]] / sizes[stratum[j]] for j in rest])
            p /= p.sum()
            expected = sum(pj * scale_of(left, sizes, weights) * v[j] for pj, j in zip(p, rest))
            assert expected == pytest.approx(z[rest].mean(), rel=1e-12, abs=1e-12), drawn


def test_draws_are_seeded_and_every_problem_is_drawn_once():
    sizes, weights = (50, 20, 70), (0.2, 0.2, 0.2)
    a = draw_order(sizes, weights, np.random.default_rng(7), "weighted")
    b = draw_order(sizes, weights, np.random.default_rng(7), "weighted")
    c = draw_order(sizes, weights, np.random.default_rng(8), "weighted")
    assert np.array_equal(a.items, b.items) and np.array_equal(a.scale, b.scale)
    assert not np.array_equal(a.items, c.items)
    assert sorted(a.items) == list(range(140))
    assert np.array_equal(np.searchsorted(np.cumsum(sizes), a.items, side="right"), a.strata)
    # equal weights: the first draws come from each benchmark about equally, not in proportion to size
    first = np.bincount(a.strata[:30], minlength=3)
    assert first.min() >= 5, first
    with pytest.raises(ValueError, match="proportional, weighted"):
        draw_order(sizes, weights, np.random.default_rng(0), "neyman")
    with pytest.raises(ValueError, match="one length"):
        draw_order(sizes, (0.5, 0.5), np.random.default_rng(0), "weighted")


@pytest.mark.parametrize("allocation", ["proportional", "weighted"])
def test_interval_closes_on_the_weighted_mean_at_the_last_draw(allocation):
    sizes, weights = (40, 15, 60), (0.2, 0.2, 0.2)
    rng = np.random.default_rng(11)
    v = (rng.random(sum(sizes)) < 0.1).astype(float) - (rng.random(sum(sizes)) < 0.05)
    draws = draw_order(sizes, weights, rng, allocation)
    lo, hi = pooled_cs(v[draws.items], draws, sizes, weights, target=0.02)
    truth = _weighted_mean(v, sizes, weights)
    assert lo[-1] == pytest.approx(truth, abs=1e-9) and hi[-1] == pytest.approx(truth, abs=1e-9)
    assert (lo <= truth + 1e-9).all() and (hi >= truth - 1e-9).all()


def _planted(rng, sizes, kind):
    """Paired differences in {-1, 0, 1}: close pairs (5 % flipped), or benchmarks moving in opposite directions."""
    stratum = np.repeat(np.arange(len(sizes)), sizes)
    if kind == "close":
        full = rng.random(stratum.size) < rng.uniform(0.3, 0.8, len(sizes))[stratum]
        return np.where(rng.random(stratum.size) < 0.05, ~full, full).astype(float) - full
    sign = np.array([1.0, -1.0, 1.0])[stratum]
    return sign * (rng.random(stratum.size) < rng.uniform(0.0, 0.3, len(sizes))[stratum])


@pytest.mark.parametrize("kind", ["close", "opposite"])
def test_weighted_draws_cover_at_every_look(kind):
    """Over 300 orders of 6 planted populations, the share of orders where any look's interval misses the weighted
    mean stays within α plus 3 binomial standard errors."""
    sizes, weights, alpha, orders = (120, 60, 150), (0.2, 0.2, 0.2), 0.05, 300
    rng = np.random.default_rng(21)
    looks = np.arange(10, sum(sizes) + 1, 10)
    missed = 0
    for i in range(orders):
        if i % 50 == 0:
            v = _planted(rng, sizes, kind)
            truth = _weighted_mean(v, sizes, weights)
        draws = draw_order(sizes, weights, rng, "weighted")
        lo, hi = pooled_cs(v[draws.items], draws, sizes, weights, alpha=alpha, looks=looks, target=0.02)
        missed += bool(((lo > truth + 1e-9) | (hi < truth - 1e-9)).any())
    assert missed / orders <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / orders), missed


def test_weighted_draws_need_fewer_problems_where_the_benchmarks_sizes_differ():
    """The paper's pooled sizes, equal weights, close pairs: the median number of draws until the interval is
    within ±2 points is smaller with weighted draws (uniform draws weigh a Minerva problem 2.5× an OlympiadBench
    one, which widens the spread of what each draw observes)."""
    sizes, weights = (500, 272, 675), (0.2, 0.2, 0.2)
    rng = np.random.default_rng(5)
    looks = np.arange(32, sum(sizes) + 1, 32)
    first = {"proportional": [], "weighted": []}
    for _ in range(24):
        v = _planted(rng, sizes, "close")
        for allocation, out in first.items():
            draws = draw_order(sizes, weights, rng, allocation)
            lo, hi = pooled_cs(v[draws.items], draws, sizes, weights, looks=looks, target=0.02)
            out.append(looks[np.argmax((hi - lo) / 2 <= 0.02)])
    assert np.median(first["weighted"]) < np.median(first["proportional"]), first


def test_removed_values_default_to_the_draws_and_must_match_their_shape():
    rng = np.random.default_rng(2)
    x = rng.random(40)
    plain = betting_wor_cs(x, 100, looks=[10, 40], target=0.05)
    same = betting_wor_cs(x, 100, looks=[10, 40], target=0.05, removed=x)
    assert all(np.array_equal(a, b) for a, b in zip(plain, same))
    with pytest.raises(ValueError, match="removed has shape"):
        betting_wor_cs(x, 100, removed=x[:-1])
