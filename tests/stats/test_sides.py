"""Where intervals lie against a band, and the (above, below) counts a set of them can reach (stats/sides.py)."""

from __future__ import annotations

from grrr_stream.stats.sides import side, sign_counts


def test_sides_and_the_counts_they_reach():
    assert side(100.0, 101.0, 98.5, 99.5) == "above" and side(90.0, 92.0, 98.5, 99.5) == "below"
    assert side(98.0, 100.0, 98.5, 99.5) == "above|below|tie" and side(99.0, 99.2, 98.5, 99.5) == "tie"
    assert sign_counts(["above", "above|below", "below|tie"]) == {(1, 1), (1, 2), (2, 0), (2, 1)}
    assert sign_counts([]) == {(0, 0)}
