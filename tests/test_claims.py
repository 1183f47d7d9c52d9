"""Accuracy statistics against known answers: paired bootstrap over problems, the informative set,
the headline claims, and the retention / removal tables."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from grrr_stream import claims
from grrr_stream.evaluation.tables import retention_tables


def answers(n: int, correct: int, *, offset: int = 0) -> np.ndarray:
    """n problems, the ``correct`` ones starting at ``offset`` (cyclically) answered right."""
    out = np.zeros(n, dtype=bool)
    out[(offset + np.arange(correct)) % n] = True
    return out


def test_identical_answers_give_a_zero_width_interval_at_zero():
    a = answers(300, 120)
    ts = claims.transition_scores({"full": {"m": a}, "base": {"m": answers(300, 30)}, "twin": {"m": a.copy()}},
                                  resamples=3000, seed=1)
    row = next(r for r in claims.difference_rows(ts) if r["variant"] == "twin")
    assert (row["minus_full"], row["minus_full_ci_lo"], row["minus_full_ci_hi"]) == (0.0, 0.0, 0.0)
    assert row["retention_full_pct"] == 100.0


@pytest.mark.parametrize("n,d", [(200, 14), (500, 100)])
def test_planted_difference_has_its_exact_proportion_and_binomial_interval(n, d):
    """A variant right on d more problems than full, and otherwise the same: the difference is 100·d/n
    exactly, and its bootstrap distribution is Binomial(n, d/n)/n (each resampled problem differs with
    probability d/n), so the interval's ends are the binomial's quantiles, to one problem."""
    full = answers(n, n // 4)
    better = full.copy()
    better[np.flatnonzero(~full)[:d]] = True
    ts = claims.transition_scores({"full": {"m": full}, "better": {"m": better}}, resamples=10_000, seed=0)
    row = next(r for r in claims.difference_rows(ts) if r["variant"] == "better")
    assert row["minus_full"] == pytest.approx(100.0 * d / n, abs=1e-12)
    lo, hi = (100.0 * sps.binom.ppf(q, n, d / n) / n for q in (0.025, 0.975))
    print(f"n={n}, d={d}: bootstrap [{row['minus_full_ci_lo']:.2f}, {row['minus_full_ci_hi']:.2f}], "
          f"binomial [{lo:.2f}, {hi:.2f}]")
    assert abs(row["minus_full_ci_lo"] - lo) <= 100.0 / n + 1e-9
    assert abs(row["minus_full_ci_hi"] - hi) <= 100.0 / n + 1e-9


def test_score_is_the_unweighted_mean_of_benchmark_accuracies_and_resamples_within_benchmarks():
    # 30 problems at 10/30 and 500 at 400/500: the paper's average is (33.3 + 80) / 2, not pooled
    full = {"small": answers(30, 10), "big": answers(500, 400)}
    ts = claims.transition_scores({"full": full}, resamples=2000, seed=3)
    assert ts.score("full") == pytest.approx(100 * (10 / 30 + 400 / 500) / 2, abs=1e-12)
    # the replicates' spread is the small benchmark's: var = (p(1-p)/30 + q(1-q)/500) / 4 · 100²
    sd = 100 * np.sqrt((1 / 3 * 2 / 3 / 30 + 0.8 * 0.2 / 500) / 4)
    assert ts.rep("full").std() == pytest.approx(sd, rel=0.08)
    assert ts.n_problems == {"big": 500, "small": 30}
    # the same seed gives the same replicates whatever the order of variants and benchmarks
    again = claims.transition_scores({"x": {"big": full["big"], "small": full["small"]}, "full": full},
                                     resamples=2000, seed=3)
    assert np.array_equal(again.rep("full"), ts.rep("full"))
    with pytest.raises(ValueError, match="different or zero problem counts"):
        claims.transition_scores({"full": {"m": answers(10, 3)}, "base": {"m": answers(11, 3)}})


def test_bits_strings_equal_boolean_arrays():
    a = answers(40, 17, offset=5)
    bits = "".join("1" if x else "0" for x in a)
    x = claims.transition_scores({"full": {"m": bits}}, resamples=500)
    y = claims.transition_scores({"full": {"m": a}}, resamples=500)
    assert x.score("full") == y.score("full") and np.array_equal(x.reps, y.reps)


def _transition(name: str, n: int, base: int, full: int, variants: dict[str, int], seed: int = 0):
    """A transition whose variants answer the first k problems right (so they are nested and paired)."""
    correct = {"base": {"m": answers(n, base)}, "full": {"m": answers(n, full)}}
    correct.update({v: {"m": answers(n, k)} for v, k in variants.items()})
    return claims.transition_scores(correct, transition=name, kind="cumulative", resamples=4000, seed=seed)


def test_claims_over_transitions_with_known_answers():
    n = 2000
    scores = [
        _transition("t1", n, 400, 1200, {"offnull": 1190, "diag": 500}),   # 60 → 59.5 / 25
        _transition("t2", n, 300, 1000, {"offnull": 960, "diag": 700}),    # 50 → 48 / 35
        _transition("t3", n, 200, 800, {"offnull": 600, "diag": 790}),     # 40 → 30 / 39.5
        _transition("t4", n, 500, 510, {"offnull": 100, "diag": 100}),     # gain 0.5: not informative
    ]
    s = claims.summarise(scores, within_points=4.3)
    info = {r["transition"]: r for r in s["informative"]}
    assert [info[t]["informative"] for t in ("t1", "t2", "t3", "t4")] == [True, True, True, False]
    assert info["t1"]["gain"] == pytest.approx(40.0) and info["t1"]["gain_ci_lo"] > 35
    assert s["counts"] == {"transitions": 4, "informative": 3, "informative_within_ci": 0}
    rows = {(r["variant"], r["reference"]): r for r in s["claims"]}
    off = rows[("offnull", "full")]
    # within 4.3 points: t1 (−0.5) and t2 (−2.0) but not t3 (−10); far from the boundary, so no doubt
    assert (off["transitions"], off["within_k"], off["within_k_ci_lo"], off["within_k_ci_hi"]) == (3, 2, 2, 2)
    ret = [100 * 1190 / 1200, 100 * 960 / 1000, 100 * 600 / 800]
    assert off["retention_median_pct"] == pytest.approx(np.median(ret))
    assert (off["retention_min_pct"], off["retention_max_pct"]) == pytest.approx((min(ret), max(ret)))
    assert off["at_floor"] == 2  # 99.2 % and 96 % reach 95 %; 75 % does not
    assert off["retention_median_ci_lo"] <= off["retention_median_pct"] <= off["retention_median_ci_hi"]
    diag = rows[("diag", "full")]
    assert (diag["within_k"], diag["at_floor"]) == (1, 1)  # only t3 (39.5 of 40)
    assert "within 4.3 points of full in 2 of 3" in claims.sentence(off, 3)


def test_informative_by_less_than_its_interval_is_flagged():
    # 1.5 points on 200 problems: informative by the rule, but the interval reaches far below 1 point
    ts = _transition("close", 200, 80, 83, {})
    (row,) = claims.informative_rows([ts])
    assert row["informative"] and row["informative_within_ci"] and row["gain_ci_lo"] < 1.0


def test_retention_and_removal_tables():
    acc = [{"variant": v, "average": a} for v, a in
           (("base", 10.0), ("full", 50.0), ("proj", 40.0), ("diag", 20.0), ("offnull", 30.0),
            ("randrm-0", 45.0), ("randrm-1", 43.0), ("half", 35.0))]
    t56, t8, info = retention_tables(acc, rest_from="base")
    ret = {r["variant"]: r for r in t56}
    assert list(ret) == ["base", "full", "proj", "diag", "offnull", "half"]
    assert ret["offnull"]["retention_pct"] == pytest.approx(60.0)
    assert ret["offnull"]["retention_proj_pct"] == pytest.approx(75.0)
    (row,) = t8
    # Table 8: Δ = remove − full, negative when removal hurts (as the paper writes it)
    assert row["delta_diag"] == pytest.approx(-20.0) and row["delta_rand"] == pytest.approx(-6.0)
    assert row["delta_diag_proj"] == pytest.approx(-10.0) and row["remove_random_seeds"] == 2
    assert info["gain"] == 40.0 and info["informative"] and info["full_minus_proj"] == 10.0
    assert "note" not in info
    assert "proj equals full" in retention_tables(acc, rest_from="post")[2]["note"]
