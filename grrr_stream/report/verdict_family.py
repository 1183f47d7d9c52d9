"""The verdict box's claims over sets as one family of tests: their words from p-values adjusted by Holm's
step-down procedure, so that the chance of any false "contradicts" on the page is at most α.

The family is the set claims that could reject at α at their size (a test whose most extreme outcome gives p ≥ α
can never reject: it is "too few to tell", and leaving it out of the family changes no error rate, since which
tests could reject depends on the sizes, not on the values). Each claim's p is adjusted three times over the
family: at the point estimates, and with every claim at the smallest and at the largest p its intervals over
problems allow. Holm's adjustment is monotone in every raw p, so

- **contradicts**: the adjusted p is below α even with every p at its largest;
- **consistent**: it is not, even with every p at its smallest; its row says what its size could have detected
  at Holm's first level α/m (:func:`grrr_stream.stats.predictive.detectable`);
- **not resolved**: in between, the problems leave it open.
"""

from __future__ import annotations

from typing import Mapping

from ..stats.family import ADJUSTMENTS
from ..stats.sides import ALPHA
from .verdict_rows import CONSISTENT, CONTRADICTS, TOO_FEW, UNRESOLVED, p_text
from .verdict_sets import SetTest

# a sweep's ``claims.family``: how the box's set claims are adjusted together, and what the page calls it
RULES = {"holm": "Holm", "bh": "Benjamini–Hochberg"}


def decide(tests: Mapping[str, SetTest], adjust: str = "holm", alpha: float = ALPHA) -> dict[str, tuple[str, str, str]]:
    """claim id → (verdict, its p as tested and adjusted, what it could have detected ('' unless consistent));
    ``adjust``: 'holm' (the family-wise error rate, the default) or 'bh' (the false discovery rate)."""
    family = [i for i, t in tests.items() if t.floor < alpha]
    m = len(family)
    how = ADJUSTMENTS[adjust]
    adjusted = {
        end: dict(zip(family, how([getattr(tests[i], end) for i in family]))) for end in ("p", "p_low", "p_high")
    }
    out = {}
    for i, t in tests.items():
        raw = _span(t.p, t.p_low, t.p_high, "p")
        if i not in adjusted["p"]:
            out[i] = (TOO_FEW, f"{raw}; even the most extreme outcome at this size gives {p_text(t.floor)}", "")
            continue
        lo, pt, hi = adjusted["p_low"][i], adjusted["p"][i], adjusted["p_high"][i]
        shown = f"{raw}, {RULES[adjust]}-adjusted over {m} claim{'s' if m != 1 else ''}: {_span(pt, lo, hi, 'p')}"
        if hi < alpha:
            out[i] = (CONTRADICTS, shown, "")
        elif lo >= alpha:
            out[i] = (CONSISTENT, shown, t.detect(alpha / m))
        else:
            out[i] = (UNRESOLVED, shown + " (below α at one end of the intervals over problems, not the other)", "")
    return out


def _span(p: float, lo: float, hi: float, name: str) -> str:
    """'p = 0.031', or 'p = 0.031 (0.004–0.25 over the intervals over problems)'."""
    if p_text(lo) == p_text(hi):
        return p_text(p, name)
    return f"{p_text(p, name)} ({lo:.2g}–{hi:.2g} over the intervals over problems)"
