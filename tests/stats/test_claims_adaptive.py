"""Claims over adaptive evaluations: values at the point estimates, intervals from the per-transition
anytime-valid intervals (planted rows with known counts and medians)."""

import math

import pytest

from grrr_stream.config import ClaimSettings
from grrr_stream.stats.claims_adaptive import AdaptiveEvaluation, summarise


def _evaluation(name, method, offnull, gain=10.0):
    """offnull: (retention, lo, hi) in percent; its difference to full is retention − 100 points (full at 100)."""
    r, lo, hi = offnull
    rows = {
        "full": {"variant": "full", "problems": 500},
        "offnull": {
            "variant": "offnull",
            "retention_full_pct": r,
            "retention_full_ci_lo": lo,
            "retention_full_ci_hi": hi,
            "minus_full": r - 100,
            "minus_full_ci_lo": lo - 100,
            "minus_full_ci_hi": hi - 100,
            "problems": 300,
        },
        "proj": {"variant": "proj", "minus_full": -1.0, "minus_full_ci_lo": -3.0, "minus_full_ci_hi": 0.5},
    }
    return AdaptiveEvaluation(
        name,
        "cumulative",
        method,
        True,
        rows,
        {
            "gain": gain,
            "gain_ci_lo": gain - 2,
            "gain_ci_hi": gain + 2,
            "informative": gain >= 1,
            "informative_within_ci": False,
        },
    )


def test_counts_and_medians_with_their_interval_bounds():
    evs = [
        _evaluation("a", "SFT", (99.0, 97.0, 101.0)),
        _evaluation("b", "GRPO", (96.0, 93.0, 98.0)),
        _evaluation("c", "GRPO", (90.0, 80.0, 96.0)),
        _evaluation("d", "SFT", (94.0, 90.0, 99.0), gain=0.5),
    ]
    s = summarise(evs, ClaimSettings())
    rows = {(r["statistic"], r["set"], r["group"]): r for r in s["claims"] if r["variant"] == "offnull"}
    floor = rows[("at_floor", "all evaluated", "all")]  # ≥ 95: a, b at the points; a surely; a, b, c, d reach it
    assert (floor["value"], floor["ci_lo"], floor["ci_hi"], floor["transitions"]) == (2, 1, 4, 4)
    within = rows[("within_k", "informative", "all")]  # d is not informative; −4.3 points: a, b at the points
    assert (within["value"], within["ci_lo"], within["ci_hi"], within["transitions"]) == (2, 1, 3, 3)
    median = rows[("retention_median_pct", "all evaluated", "RL")]
    assert (median["value"], median["ci_lo"], median["ci_hi"]) == (93.0, 86.5, 97.0)
    ceiling = rows[("at_most_ceiling", "all evaluated", "all")]
    assert (ceiling["value"], ceiling["ci_lo"], ceiling["ci_hi"]) == (0, 0, 0)
    assert all(r["reference"] == "full" and r["resampling"].startswith("anytime") for r in s["claims"])
    info = {r["transition"]: r for r in s["informative"]}
    assert info["a"]["full_minus_proj"] == 1.0 and (
        info["a"]["full_minus_proj_ci_lo"],
        info["a"]["full_minus_proj_ci_hi"],
    ) == (-0.5, 3.0)
    assert s["counts"] == {"transitions": 4, "informative": 3, "informative_within_ci": 0}
    assert math.isnan(rows[("retention_min_pct", "all evaluated", "all")]["ci_lo"])  # no interval for an extreme
    assert rows[("retention_mean_pct", "all evaluated", "SFT")]["value"] == pytest.approx(96.5)
