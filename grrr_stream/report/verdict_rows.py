"""The verdict box's rows and their words: one :class:`Verdict` per claim of the paper, with the per-transition
:class:`Member` rows that a claim over a set of transitions rests on, and how numbers are written in them."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..stats.exact import finite
from .paper_claims import PaperClaim

# a claim over each member (a bound per pair, an interval against the paper's number)
HOLDS, FAILS, UNRESOLVED, NOT_COMPARABLE = "holds", "does not hold", "not resolved", "not comparable"
# a claim over a set, decided by an exact test of this sweep's count or median against the paper's
CONSISTENT, CONTRADICTS, TOO_FEW = "consistent", "contradicts", "too few to tell"

WORDS = (CONSISTENT, HOLDS, CONTRADICTS, FAILS, UNRESOLVED, TOO_FEW, NOT_COMPARABLE)  # every verdict, in that order

CSS = {
    HOLDS: "holds",
    CONSISTENT: "holds",
    FAILS: "fails",
    CONTRADICTS: "fails",
    UNRESOLVED: "unresolved",
    TOO_FEW: "unresolved",
}


@dataclass
class Member:
    """One transition (or pair) of a claim's set: what it is, its value with its interval, and how it meets the
    claim's per-transition condition ('holds', 'does not hold', 'not resolved', or a side: 'above 99 %')."""

    name: str
    value: str
    outcome: str

    @property
    def css(self) -> str:
        return CSS.get(self.outcome, "nc")


@dataclass
class Verdict:
    claim: PaperClaim
    value: str  # this sweep's value with its interval ('—' when there is none)
    set: str  # the set it is over
    basis: str  # what the interval rests on
    verdict: str
    reason: str = ""
    members: list[Member] = field(default_factory=list)  # the set's transitions, each with its value
    test: str = ""  # the exact test against the paper and its p ('' for a claim decided per member)

    @property
    def css(self) -> str:
        return CSS.get(self.verdict, "nc")


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def signed(x: float, fmt: str = ".1f") -> str:
    """A difference with its sign ('−' for minus, as the page writes it)."""
    return f"{x:+{fmt}}".replace("-", "−")


def interval_text(v: float, lo, hi, fmt: str = ".1f", sign: bool = False, unit: str = "") -> str:
    """'v [lo, hi]' (or 'v' without a finite interval), rounded for people."""
    f = (lambda x: signed(x, fmt)) if sign else (lambda x: f"{x:{fmt}}")
    return f(v) + unit + (f" [{f(lo)}, {f(hi)}]" if finite(lo, hi) else "")


def p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def direction(value: float, paper: float, fmt: str = ".0f") -> str:
    """How far this sweep's value is from the paper's, and which way ('40 points lower'; values in percent)."""
    d = value - paper
    if abs(d) < 0.5 * 10 ** -int(fmt[1:-1] or 0):
        return "the same"
    return f"{abs(d):{fmt}} points {'higher' if d > 0 else 'lower'}"
