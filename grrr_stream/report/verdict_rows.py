"""The verdict box's rows and their words: one :class:`Verdict` per claim of the paper, with the per-transition
:class:`Member` rows that a claim over a set of transitions rests on, and how numbers are written in them."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..stats.sides import finite
from .paper_claims import PaperClaim

# a claim over each member (a bound per pair, an interval against the paper's number)
HOLDS, FAILS, UNRESOLVED, NOT_COMPARABLE = "holds", "does not hold", "not resolved", "not comparable"
# it holds as the test asks (above the isotropic band), but the values lie outside the range the paper reports
OUTSIDE = "holds, outside the paper's range"
# a claim over a set, decided by a test of this sweep's chains against the paper's, one family for the box
CONSISTENT, CONTRADICTS, TOO_FEW = "consistent", "contradicts", "too few to tell"

WORDS = (CONSISTENT, HOLDS, OUTSIDE, CONTRADICTS, FAILS, UNRESOLVED, TOO_FEW, NOT_COMPARABLE)  # every verdict

# "consistent" is not "holds": a test that did not reject at a few chains may have seen nothing, so it has its
# own colour, and its row says what it could have detected
CSS = {
    HOLDS: "holds",
    OUTSIDE: "outside",
    CONSISTENT: "consistent",
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
    members: list[Member] = field(default_factory=list)  # the set's chains, each with its transitions and value
    test: str = ""  # the test against the paper and its p ('' for a claim decided per member)
    p: str = ""  # a set claim's p as tested, then adjusted over the box's family ('' for a claim on each member)
    detect: str = ""  # for "consistent": the smallest departure from the paper this size would have detected

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


def p_text(p: float, name: str = "p") -> str:
    """'p < 0.001', 'p = 0.031', 'p = 0.998' (never rounded up to 1 unless it is 1)."""
    if p < 0.001:
        return f"{name} < 0.001"
    if p >= 1.0:
        return f"{name} = 1"
    return f"{name} = {p:.3f}" if p >= 0.99 else f"{name} = {p:.2g}"


def direction(value: float, paper: float, fmt: str = ".0f") -> str:
    """How far this sweep's value is from the paper's, and which way ('40 points lower'; values in percent)."""
    d = value - paper
    if abs(d) < 0.5 * 10 ** -int(fmt[1:-1] or 0):
        return "the same"
    return f"{abs(d):{fmt}} points {'higher' if d > 0 else 'lower'}"
