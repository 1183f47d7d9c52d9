"""The verdict box's claims over sets of transitions (a rate, a median, "generally above", a bound on every RL
step), each tested on one value per chain against the paper's count read the same way
(:mod:`grrr_stream.stats.predictive`), before the box adjusts them as one family (:mod:`.verdict_family`).

A chain is the transitions that share a base model (:mod:`grrr_stream.stats.chains`): its value is their mean, its
interval over problems the mean of their ends. A claim's p is taken at the point estimates and at both ends of
what the chains' intervals allow (``p_low``, the most against the paper; ``p_high``, the least), so that a verdict
can say "not resolved" when the problems leave it open.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence

from ..stats.chains import ChainValue, per_chain, sizes
from ..stats.claims import TIE
from ..stats.predictive import FIXED, POWER, SAMPLE, Reference, count_test, detectable
from ..stats.sides import finite, side, sign_counts
from .paper_claims import PaperClaim
from .verdict_rows import FAILS, HOLDS, UNRESOLVED, Member, direction, interval_text, p_text

NAMES = {"offnull": "OffNull", "diag": "Diag", "null": "Null", "off": "Off", "full": "Full", "proj": "proj"}


@dataclass
class SetTest:
    """A claim over a set, tested on one value per chain; the box's family decides its word (:mod:`.verdict_family`)."""

    where: str  # '6 transitions in 3 chains'
    value: str  # this sweep's value as the row shows it
    reason: str  # how far from the paper, and which way
    test: str  # the test in words, with its p as tested
    members: list[Member] = field(default_factory=list)
    p: float = 1.0  # at the point estimates
    p_low: float = 1.0  # the smallest p the chains' intervals over problems allow
    p_high: float = 1.0  # the largest
    floor: float = 1.0  # the smallest p any outcome at this many chains can give
    detect: Callable[[float], str] = lambda level: ""  # level → what this many chains would have detected


def paper_reference(c: PaperClaim, paper_side: str = FIXED, rate: Optional[float] = None) -> Reference:
    """The paper's side of a claim: its rate ("all 17" is a rate of 1; a median: half above it), taken as fixed, or
    as seen in its independent units (``paper_side`` 'sample'; a claim stated without a count is fixed either way)."""
    if rate is None:
        rate = 1.0 if c.test == "at_most_all" else 0.5 if c.test == "contains" else float(c.target)
    return Reference(rate, c.paper_units if paper_side == SAMPLE else None)


def members(
    c: PaperClaim,
    differences: Sequence[dict],
    informative: Sequence[dict],
    group_of: Callable[[dict], Optional[str]],
    steps: set,
    names: Optional[dict] = None,
) -> list[dict]:
    """The difference rows of a claims statistic's set: its variant against its reference, over the evaluated steps
    of its group (the informative ones for an informative set), as :mod:`grrr_stream.stats.claims_sets` pools
    them; each with its transition's ``name`` as people read it (``names``: id → name, e.g. 'base → sft')."""
    _, variant, ref, set_name, group = c.statistic
    inf = {r["transition"] for r in informative if r.get("informative") in (True, "True", 1)}
    out = []
    for r in differences:
        t = r["transition"]
        if r["variant"] != variant or t not in steps or (set_name == "informative" and t not in inf):
            continue
        if group != "all" and group_of(r) != group:
            continue
        out.append({**r, "name": (names or {}).get(t, t)})
    return out if ref == "full" else []


def _retention(r: dict) -> tuple[float, float, float]:
    v = r.get("retention_full_pct")
    lo, hi = r.get("retention_full_ci_lo"), r.get("retention_full_ci_hi")
    return (v, lo, hi) if finite(lo, hi) else (v, v, v)


def _meets(lo, hi, at_least: bool, t: float) -> str:
    """A chain's interval against a threshold: the claim holds for it, does not, or its interval reaches both."""
    ok_lo, ok_hi = (lo >= t - TIE, hi >= t - TIE) if at_least else (hi <= t + TIE, lo <= t + TIE)
    return HOLDS if ok_lo and ok_hi else FAILS if not (ok_lo or ok_hi) else UNRESOLVED


def _chain_member(ch: ChainValue, label: str, text: str, outcome: str, gains: Mapping[str, float]) -> Member:
    """One chain's row: its transitions, its value (the mean of theirs) and how it meets the claim."""
    kept = [gains[m] for m in ch.members if finite(gains.get(m))]
    gain = f" · keeps {sum(kept) / len(kept):.0f} % of the gain over base" if kept else ""
    return Member(f"{label} on chain {ch.chain} ({', '.join(ch.members)})", text + gain, outcome)


def _gains(rows: Sequence[dict]) -> dict[str, float]:
    return {r["name"]: r["gain_retention_pct"] for r in rows if finite(r.get("gain_retention_pct"))}


def rate_detect(n: int, ref: Reference, what: str) -> Callable[[float], str]:
    def say(level: float) -> str:
        found = detectable(n, ref, level)
        if found is None or not math.isfinite(found[0]):
            return f"at {n} chain{'s' if n != 1 else ''} no rate would be detected at level {level:.2g}"
        return (
            f"at {n} chains, a rate of {what} ≤ {100 * found[0]:.0f} % (the paper's {100 * ref.rate:.0f} %) would "
            f"have been detected with {100 * POWER:.0f} % power at level {level:.2g}"
        )

    return say


def rate_set(
    c: PaperClaim, rows: Sequence[dict], chain_of: Mapping[str, str], threshold: float, paper_side: str = FIXED
) -> SetTest:
    """A count claim ("24 of 25 within 4.3 points"): the chains whose value meets it against the paper's rate."""
    stat, variant, ref_name = c.statistic[:3]
    if stat == "within_k":
        vals = [(r["transition"], r["name"], r["minus_full"], r.get("minus_full_ci_lo"), r.get("minus_full_ci_hi"))
                for r in rows]  # fmt: skip
        at_least, t, unit, sign = True, -threshold, " points", True
    else:
        vals = [(r["transition"], r["name"], *_retention(r)) for r in rows]
        at_least, t, unit, sign = stat != "at_most_ceiling", threshold, " %", False
    vals = [(a, b, v, lo if finite(lo) else v, hi if finite(hi) else v) for a, b, v, lo, hi in vals]
    chains = per_chain(vals, chain_of)
    n = len(chains)
    outcomes = [_meets(ch.lo, ch.hi, at_least, t) for ch in chains]
    point = sum(1 for ch in chains if _meets(ch.value, ch.value, at_least, t) == HOLDS)
    sure, reach = outcomes.count(HOLDS), outcomes.count(HOLDS) + outcomes.count(UNRESOLVED)
    ref = paper_reference(c, paper_side)
    label = f"{NAMES.get(variant, variant)} vs {NAMES.get(ref_name, ref_name)}"
    mem = [
        _chain_member(ch, label, interval_text(ch.value, ch.lo, ch.hi, sign=sign, unit=unit), o, _gains(rows))
        for ch, o in zip(chains, outcomes)
    ]
    if not n:
        return SetTest("0 chains", "—", "no transition with a value", "", mem)
    at = count_test(point, n, ref)
    where = f"{100 * point / n:.0f} % of chains vs the paper's {100 * ref.rate:.0f} %: " + direction(
        100 * point / n, 100 * ref.rate
    )
    test = (
        f"{point} of {n} chains meet it; against {ref.describe()} ({c.paper_value} of the paper's transitions), "
        f"{_test_name(ref)}, one-sided (a lower rate contradicts): {p_text(at.p)}"
    )
    shown = f"{point} of {n} chains" + (f" [{sure}–{reach}]" if (sure, reach) != (point, point) else "")
    return count_set(chains, shown, where, test, mem, (point, sure, reach), ref, "chains meeting it")


def count_set(chains, shown: str, reason: str, test: str, mem: list, counts: tuple, ref: Reference, what: str):
    """A count claim's SetTest: ``counts`` the chains meeting it at the point estimates, surely and at most (the ends
    of their intervals), each tested against ``ref``."""
    point, sure, reach = counts
    n = len(chains)
    at = count_test(point, n, ref)
    return SetTest(sizes(chains), shown, reason, test, mem, at.p, count_test(sure, n, ref).p,
                   count_test(reach, n, ref).p, at.floor, rate_detect(n, ref, what))  # fmt: skip


def _median_detect(n: int, ref: Reference, what: str, two_sided: bool) -> Callable[[float], str]:
    def say(level: float) -> str:
        found = detectable(n, ref, level, two_sided)
        if found is None or not any(math.isfinite(x) for x in found):
            return f"at {n} chain{'s' if n != 1 else ''} no share would be detected at level {level:.2g}"
        below, above = found
        sides = " or ".join(
            s
            for s, ok in (
                (f"≥ {100 * above:.0f} %", math.isfinite(above)),
                (f"≤ {100 * below:.0f} %", math.isfinite(below)),
            )
            if ok
        )
        return (
            f"at {n} chains, {what} in {sides} of chains (the paper: {100 * ref.rate:.0f} %) would have been detected "
            f"with {100 * POWER:.0f} % power at level {level:.2g}"
        )

    return say


def _sides_test(sides: Sequence[str], points: Sequence[str], ref: Reference, two_sided: bool) -> tuple:
    """(p at the points, smallest and largest p over the sides the intervals reach, floor, above, below)."""
    above, below = points.count("above"), points.count("below")

    def p_of(a: int, b: int) -> float:
        return count_test(a, a + b, ref, two_sided).p if a + b else 1.0

    ps = [p_of(a, b) for a, b in sign_counts(sides)]
    m = sum(1 for s in sides if s != "tie")  # a sure tie is left out of the test
    floor = count_test(0, m, ref, two_sided).floor if m else 1.0
    return p_of(above, below), min(ps), max(ps), floor, above, below


def median_set(c: PaperClaim, rows: Sequence[dict], chain_of: Mapping[str, str], paper_side: str = FIXED) -> SetTest:
    """A median claim (99 %): the chains above and below the paper's median (its whole percent: ±0.5) against
    half of the paper's units above it, two-sided."""
    lo_t, hi_t = c.target - 0.5, c.target + 0.5
    vals = [(r["transition"], r["name"], *_retention(r)) for r in rows if finite(r.get("retention_full_pct"))]
    chains = per_chain(vals, chain_of)
    sides = [side(ch.lo, ch.hi, lo_t, hi_t) for ch in chains]
    points = [side(ch.value, ch.value, lo_t, hi_t) for ch in chains]
    variant = NAMES.get(c.statistic[1], c.statistic[1])
    mem = [
        _chain_member(ch, f"{variant} retention", interval_text(ch.value, ch.lo, ch.hi, unit=" %"), _word(s, c), {})
        for ch, s in zip(chains, sides)
    ]
    if not chains:
        return SetTest("0 chains", "—", "no per-transition retention to test", "", mem)
    ref = paper_reference(c, paper_side)
    p, p_low, p_high, floor, above, below = _sides_test(sides, points, ref, two_sided=True)
    med = statistics.median(ch.value for ch in chains)
    test = (
        f"{above} chains above {c.paper_value}, {below} below; against half above the paper's median "
        f"({ref.describe()}), {_test_name(ref, median=True)}, two-sided: {p_text(p)}"
    )
    where = f"median over chains {med:.1f} % vs the paper's {c.paper_value}: " + direction(med, c.target)
    return SetTest(
        sizes(chains),
        f"{med:.1f} % (median of {len(chains)} chain{'s' if len(chains) != 1 else ''})",
        where,
        test,
        mem,
        p,
        p_low,
        p_high,
        floor,
        _median_detect(len(chains), ref, f"values above {c.paper_value}", True),
    )


def _test_name(ref: Reference, median: bool = False) -> str:
    if ref.units is not None:
        return "the beta-binomial predictive test"
    return "the sign test" if median else "the exact binomial test"


def _word(s: str, c: PaperClaim) -> str:
    if "|" in s:
        return UNRESOLVED
    return {"above": f"above {c.paper_value}", "below": f"below {c.paper_value}"}.get(s, f"at {c.paper_value}")


def _paired(r: dict, d: dict) -> Optional[tuple[float, float, float, str]]:
    """null − diag in points with its interval: paired over the same problems when the row has it (the fixed
    design), else from the two retentions' intervals (the adaptive design: each variant on its own problems)."""
    if finite(r.get("minus_diag"), r.get("minus_diag_ci_lo"), r.get("minus_diag_ci_hi")):
        return r["minus_diag"], r["minus_diag_ci_lo"], r["minus_diag_ci_hi"], "points, paired over problems"
    if not finite(r.get("retention_full_pct"), d.get("retention_full_pct")):
        return None
    (v, lo, hi), (w, wlo, whi) = _retention(r), _retention(d)
    return v - w, lo - whi, hi - wlo, "retention points, from the two intervals (not paired)"


def above_set(c: PaperClaim, null_rows: Sequence[dict], diag_rows: Sequence[dict], chain_of) -> SetTest:
    """Null-only above diag-only "generally": per chain the paired difference null − diag; "generally" has no
    count, so it is read as at least half the chains, a fixed rate: fewer above than that, beyond chance,
    contradicts (one-sided)."""
    diag = {r["transition"]: r for r in diag_rows}
    vals, basis = [], set()
    for r in null_rows:
        d = diag.get(r["transition"])
        got = _paired(r, d) if d is not None else None
        if got is not None:
            vals.append((r["transition"], r["name"], *got[:3]))
            basis.add(got[3])
    chains = per_chain(vals, chain_of)
    sides = [side(ch.lo, ch.hi, 0.0, 0.0) for ch in chains]
    points = [side(ch.value, ch.value, 0.0, 0.0) for ch in chains]
    unit = " points" if basis == {"points, paired over problems"} else " retention points"
    mem = [
        _chain_member(
            ch,
            "Null − Diag",
            interval_text(ch.value, ch.lo, ch.hi, sign=True, unit=unit),
            {"above": HOLDS, "below": FAILS, "tie": "tie (left out)"}.get(s, UNRESOLVED),
            {},
        )
        for ch, s in zip(chains, sides)
    ]
    if not chains:
        return SetTest("0 chains", "—", "no transition with both null and diag", "", mem)
    ref = paper_reference(c, FIXED, rate=0.5)  # "generally": no count to read as a sample
    p, p_low, p_high, floor, above, below = _sides_test(sides, points, ref, two_sided=False)
    test = (
        f"null above diag on {above} chains, below on {below} ({'; '.join(sorted(basis))}); 'generally' taken as a "
        f"fixed rate of one half, sign test one-sided (more below than above contradicts): {p_text(p)}"
    )
    return SetTest(
        sizes(chains),
        f"null above diag on {above} of {above + below} chains",
        f"null above diag on {above} of {above + below} untied chains",
        test,
        mem,
        p,
        p_low,
        p_high,
        floor,
        _median_detect(above + below, ref, "null above diag", False),
    )
