"""Where intervals lie against a number, and the counts a set of them can reach: what the verdict box's set
tests (:mod:`grrr_stream.stats.predictive`) take at both ends of the intervals over problems.

A paper's whole percent is a band ([v − 0.5, v + 0.5]); an interval lies above it, below it, at it ('tie'), or
reaches several of these ('above|tie'), and :func:`sign_counts` gives every (above, below) that values on such
sides can give, so that a verdict can say whether the problems leave a test open.
"""

from __future__ import annotations

import math
from typing import Iterable

ALPHA = 0.05  # the project's significance level (ComparisonSettings.alpha's default)


def side(lo: float, hi: float, low: float, high: float) -> str:
    """Where an interval [lo, hi] lies against the band [low, high]: 'above', 'below', 'tie', or the sides it
    reaches joined by '|'."""
    out = []
    if hi > high:
        out.append("above")
    if lo < low:
        out.append("below")
    if lo <= high and hi >= low:
        out.append("tie")
    return "|".join(out) if out else "tie"


def sign_counts(sides: Iterable[str]) -> set[tuple[int, int]]:
    """Every (above, below) that values on ``sides`` can give: per value 'above', 'below', 'tie', or a set of
    them written with '|' ('above|tie': its interval reaches both); a tie adds to neither."""
    reach = {(0, 0)}
    for s in sides:
        options = set(s.split("|"))
        reach = {
            (a + (o == "above"), b + (o == "below"))
            for a, b in reach
            for o in options
            if o in ("above", "below", "tie")
        }
    return reach


def finite(*xs) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in xs)
