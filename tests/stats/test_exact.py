"""The exact tests of grrr_stream/stats/exact.py against probabilities computed here by hand from binomial
coefficients (hypergeometric tails for Fisher's test, binomial tails for the sign test and the order-statistic
interval of a median). Fast."""

from __future__ import annotations

from math import comb

import pytest

from grrr_stream.stats.exact import ALPHA, median_ci, rate_test, side, sign_counts, sign_floor, sign_test


def fisher_less(k: int, n: int, pk: int, pn: int) -> float:
    """P(X ≤ k), X the successes among this sweep's n when the k + pk successes fall at random among n + pn."""
    total, hits = n + pn, k + pk
    return sum(comb(hits, j) * comb(total - hits, n - j) for j in range(0, k + 1)) / comb(total, n)


def test_one_of_three_is_unlikely_under_twenty_four_of_twenty_five():
    t = rate_test(1, 3, 24, 25)
    # by hand: 25 successes among 28, 3 drawn: P(0) = 1/3276, P(1) = 25·3/3276
    assert t.p == pytest.approx(76 / 3276, rel=1e-12) == pytest.approx(fisher_less(1, 3, 24, 25))
    assert t.p < ALPHA
    # the most extreme outcome, 0 of 3: 24 successes among 28, none of them among the 3 drawn
    assert t.floor == pytest.approx(4 / 3276)


def test_three_of_three_and_the_exact_interval():
    t = rate_test(3, 3, 24, 25)
    assert t.p == pytest.approx(1.0)
    # Clopper–Pearson at k = n: the lower end solves p^3 = 0.025
    assert t.ci[0] == pytest.approx(0.025 ** (1 / 3), rel=1e-9) and t.ci[1] == 1.0


@pytest.mark.parametrize("pk,pn", [(24, 25), (22, 28), (6, 11), (17, 17)])
def test_at_one_transition_no_outcome_can_contradict(pk, pn):
    t = rate_test(0, 1, pk, pn)
    # 0 of 1: the probability that the one transition drawn from the pooled 1 + pn is a failure
    assert t.floor == t.p == pytest.approx((pn - pk + 1) / (pn + 1))
    assert t.floor >= ALPHA


def test_fisher_agrees_with_the_hand_tail_on_a_grid():
    for n in (2, 5, 9):
        for k in range(n + 1):
            for pk, pn in ((24, 25), (6, 11), (17, 17)):
                assert rate_test(k, n, pk, pn).p == pytest.approx(fisher_less(k, n, pk, pn), rel=1e-9, abs=1e-15)


def test_sign_test_and_its_floor():
    # two-sided, all 6 on one side: 2 · (1/2)^6
    assert sign_test(0, 6) == pytest.approx(2 / 64) and sign_floor(6) == pytest.approx(2 / 64)
    assert sign_floor(5) == pytest.approx(2 / 32) and sign_floor(5) >= ALPHA  # at n ≤ 5 no median can be rejected
    # 2 above, 7 below, one-sided 'less': P(B ≤ 2), B ~ Bin(9, 1/2)
    assert sign_test(2, 7, "less") == pytest.approx(sum(comb(9, j) for j in range(3)) / 2**9)
    assert sign_test(0, 0) == 1.0


def test_order_statistic_interval_of_the_median():
    assert median_ci([3.0, 1.0, 2.0, 5.0, 4.0]) is None  # the range covers 1 − 2/32 < 95 %
    lo, hi, cov = median_ci([6, 1, 5, 2, 4, 3])
    assert (lo, hi) == (1, 6) and cov == pytest.approx(1 - 2 / 64)
    xs = list(range(1, 21))  # n = 20: j = 6 covers 1 − 2·P(B ≤ 5) = 0.9586; j = 7 covers 0.8847
    lo, hi, cov = median_ci(xs)
    assert (lo, hi) == (6, 15) and cov == pytest.approx(1 - 2 * sum(comb(20, j) for j in range(6)) / 2**20)


def test_sides_and_the_counts_they_reach():
    assert side(100.0, 101.0, 98.5, 99.5) == "above" and side(90.0, 92.0, 98.5, 99.5) == "below"
    assert side(98.0, 100.0, 98.5, 99.5) == "above|below|tie"
    assert sign_counts(["above", "above|below", "below|tie"]) == {(1, 1), (1, 2), (2, 0), (2, 1)}
