"""The count tests of the verdict box (stats/predictive.py) and one value per chain (stats/chains.py), against
closed forms computed here: the beta-binomial's P(X = 0) = B(a, b + n) / B(a, b), the binomial of a fixed rate,
and the mean of a chain's interval ends."""

from __future__ import annotations

import math

import pytest
from scipy.special import betaln

from grrr_stream.stats.chains import per_chain, sizes
from grrr_stream.stats.predictive import Reference, count_test, detectable


def test_a_fixed_rate_is_the_binomial_test():
    t = count_test(1, 3, Reference(0.96, None))
    assert t.p == pytest.approx(0.04**3 + 3 * 0.96 * 0.04**2) and t.floor == pytest.approx(0.04**3)
    # a median: the two-sided sign test, 0 of 6 above: 2/64; all on one side is the floor
    s = count_test(0, 6, Reference(0.5, None), two_sided=True)
    assert s.p == pytest.approx(2 / 64) and s.floor == pytest.approx(2 / 64)
    assert count_test(3, 6, Reference(0.5, None), two_sided=True).p == 1.0
    # a universal claim read as a rate of 1: one exception is a counterexample
    assert count_test(2, 3, Reference(1.0, None)).p == 0.0 and count_test(3, 3, Reference(1.0, None)).p == 1.0


def test_the_paper_as_a_sample_is_the_beta_binomial_predictive():
    ref = Reference(24 / 25, 10)  # 9.6 of 10 units: Beta(10.1, 0.9)
    a, b = 9.6 + 0.5, 0.4 + 0.5
    for n in (1, 3, 10):
        want = math.exp(betaln(a, b + n) - betaln(a, b))  # P(X = 0)
        assert count_test(0, n, ref).p == pytest.approx(want, rel=1e-9)
    # it is wider than the fixed rate's binomial: a sample of 10 says less than the rate taken as known
    assert count_test(1, 3, ref).p > count_test(1, 3, Reference(24 / 25, None)).p
    with pytest.raises(ValueError, match="no rate"):
        count_test(4, 3, ref)


def test_what_a_size_could_have_detected():
    # alone at 0.05 against a fixed 96 %: rejects at k ≤ 1 of 3; power 3q² − 2q³ = 0.8 at q = 0.7129
    below, above = detectable(3, Reference(0.96, None), 0.05)
    assert below == pytest.approx(1 - 0.71286, abs=2e-4) and math.isnan(above)
    # one unit against a median: nothing rejects
    assert detectable(1, Reference(0.5, None), 0.05, two_sided=True) is None
    # 20 units, two-sided at 0.05: rejects at ≤ 5 or ≥ 15 of 20 above; a share above with 80 % power on each side
    lo, hi = detectable(20, Reference(0.5, None), 0.05, two_sided=True)
    assert 0.1 < lo < 0.25 and hi == pytest.approx(1 - lo, abs=1e-6)


def test_one_value_per_chain_is_the_mean_of_its_transitions():
    rows = [("a1", "A → s", 60.0, 50.0, 70.0), ("a2", "A → t", 58.0, 49.0, 69.0), ("b", "B → s", 40.0, 30.0, 50.0),
            ("c", "C → s", float("nan"), 0.0, 1.0)]  # fmt: skip
    chains = per_chain(rows, {"a1": "A", "a2": "A", "b": "B", "c": "C"})
    assert [(c.chain, c.members) for c in chains] == [("A", ("A → s", "A → t")), ("B", ("B → s",))]
    assert (chains[0].value, chains[0].lo, chains[0].hi) == (59.0, 49.5, 69.5)
    assert sizes(chains) == "3 transitions in 2 chains"
    assert [c.chain for c in per_chain(rows[:3], {})] == ["a1", "a2", "b"]  # no chains given: each its own
