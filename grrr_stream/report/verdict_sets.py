"""The verdict box's claims over sets of transitions (a rate, a median, "generally above", a bound on every RL
step): this sweep's count or values against the paper's by an exact test (:mod:`grrr_stream.stats.exact`), so
that a sweep of a few transitions can still contradict the paper, with one row per transition of the set.

Verdicts: **consistent** (the test does not reject at α, with its p and the exact interval of this sweep's rate
or median), **contradicts** (it rejects), **too few to tell** (no outcome at this set's size could reject: 0 of 1
against 24 of 25 gives p = 0.077), **not resolved** (the count or the sides, over the interval over problems of
each transition, reach both a p below α and one above). A count's interval over problems comes from the claims
row (its two ends tested); a median's sides from each transition's interval.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from ..geometry.metrics import PAPER_COLUMNS
from ..stats.claims import TIE
from ..stats.exact import ALPHA, finite, median_ci, rate_test, side, sign_counts, sign_floor, sign_test
from .paper_claims import PaperClaim
from .verdict_rows import (
    CONSISTENT,
    CONTRADICTS,
    FAILS,
    HOLDS,
    NOT_COMPARABLE,
    TOO_FEW,
    UNRESOLVED,
    Member,
    Verdict,
    direction,
    interval_text,
    p_text,
    plural,
)

NAMES = {"offnull": "OffNull", "diag": "Diag", "null": "Null", "off": "Off", "full": "Full", "proj": "proj"}


def paper_count(c: PaperClaim) -> tuple[int, int]:
    """The paper's k of n behind a rate claim ("24 of 25"; "all 17" is 17 of 17)."""
    n = int(c.paper_n or 0)
    return (n, n) if c.test == "at_most_all" else (round(c.target * n), n)


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
    """A transition's interval against a threshold: the claim holds for it, does not, or its interval reaches both."""
    ok_lo, ok_hi = (lo >= t - TIE, hi >= t - TIE) if at_least else (hi <= t + TIE, lo <= t + TIE)
    return HOLDS if ok_lo and ok_hi else FAILS if not (ok_lo or ok_hi) else UNRESOLVED


def count_members(c: PaperClaim, rows: Sequence[dict], threshold: float) -> list[Member]:
    """Each transition of a count's set with its value, its interval over problems and whether it meets the claim."""
    stat, variant, ref = c.statistic[:3]
    out = []
    for r in rows:
        if stat == "within_k":
            lo, hi = r.get("minus_full_ci_lo"), r.get("minus_full_ci_hi")
            text = interval_text(r["minus_full"], lo, hi, sign=True) + " points"
            lo, hi = (lo, hi) if finite(lo, hi) else (r["minus_full"],) * 2
            outcome = _meets(lo, hi, True, -threshold)
        else:
            v, lo, hi = _retention(r)
            text = interval_text(v, lo, hi, unit=" %") if finite(v) else "—"
            outcome = _meets(lo, hi, stat != "at_most_ceiling", threshold) if finite(lo, hi) else NOT_COMPARABLE
        out.append(Member(f"{NAMES.get(variant, variant)} vs {NAMES.get(ref, ref)} on {r['name']}", text, outcome))
    return out


def rate_verdict(c: PaperClaim, k: int, n: int, lo, hi) -> tuple[str, str, str]:
    """(verdict, reason, test) of this sweep's k of n (its interval over problems lo–hi) against the paper's
    count, by Fisher's exact test (one-sided: a lower rate contradicts)."""
    pk, pn = paper_count(c)
    at = rate_test(k, n, pk, pn)
    lo_, hi_ = (int(round(lo)), int(round(hi))) if finite(lo, hi) else (k, k)
    p_lo, p_hi = rate_test(lo_, n, pk, pn).p, rate_test(hi_, n, pk, pn).p
    where = f"{100 * k / n:.0f} % vs the paper's {100 * pk / pn:.0f} %: " + direction(100 * k / n, 100 * pk / pn)
    test = (
        f"Fisher's exact test of {k} of {n} against {pk} of {pn}, one-sided (a lower rate contradicts): "
        f"{p_text(at.p)}; this sweep's rate "
        f"{100 * k / n:.0f} %, exact 95 % CI {100 * at.ci[0]:.0f}–{100 * at.ci[1]:.0f} %"
    )
    if at.floor >= ALPHA:
        return TOO_FEW, f"{where}; even 0 of {n} gives {p_text(at.floor)}", test
    if p_hi < ALPHA:
        return CONTRADICTS, f"{where}, {p_text(at.p)}", test
    if p_lo >= ALPHA:
        return CONSISTENT, f"{where}, {p_text(at.p)}", test
    return UNRESOLVED, f"{where}; p {p_hi:.2g} to {p_lo:.2g} over the count's interval {lo_}–{hi_}", test


def median_verdict(c: PaperClaim, row: dict, rows: Sequence[dict]) -> tuple[str, str, str, list[Member]]:
    """(verdict, reason, test, members) of a median claim: the exact sign test of this sweep's transitions above and
    below the paper's median (its whole percent: ±0.5), at each transition's interval over problems."""
    lo_t, hi_t = c.target - 0.5, c.target + 0.5
    vals = [(r, *_retention(r)) for r in rows if finite(r.get("retention_full_pct"))]
    sides = [side(lo, hi, lo_t, hi_t) for _, _, lo, hi in vals]
    points = [side(v, v, lo_t, hi_t) for _, v, _, _ in vals]
    variant = NAMES.get(c.statistic[1], c.statistic[1])
    mem = [
        Member(f"{variant} retention on {r['name']}", interval_text(v, lo, hi, unit=" %"), _side_word(s, c))
        for (r, v, lo, hi), s in zip(vals, sides)
    ]
    n = len(vals)
    where = f"median {row['value']:.1f} % vs the paper's {c.paper_value}: " + direction(row["value"], c.target)
    ci = median_ci([v for _, v, _, _ in vals])
    ci_text = (
        f"distribution-free 95 % CI of the median over these transitions {ci[0]:.1f}–{ci[1]:.1f} %"
        if ci
        else f"no distribution-free 95 % CI of a median from {plural(n, 'transition')}"
    )
    if n == 0:
        return NOT_COMPARABLE, "no per-transition retention to test", "", mem
    above, below = points.count("above"), points.count("below")
    p = sign_test(above, below)
    test = f"sign test, two-sided: {above} above {c.paper_value}, {below} below, {p_text(p)}; {ci_text}"
    m = sum(1 for x in sides if x != "tie")  # a sure tie is left out of the test
    floor = sign_floor(m)
    if floor >= ALPHA:
        return TOO_FEW, f"{where}; even all {m} on one side give {p_text(floor)}", test, mem
    ps = [sign_test(a, b) for a, b in sign_counts(sides)]
    if max(ps) < ALPHA:
        return CONTRADICTS, f"{where}, {p_text(p)}", test, mem
    if min(ps) >= ALPHA:
        return CONSISTENT, f"{where}, {p_text(p)}", test, mem
    return UNRESOLVED, f"{where}; p {min(ps):.2g} to {max(ps):.2g} over the intervals over problems", test, mem


def _side_word(s: str, c: PaperClaim) -> str:
    if "|" in s:
        return UNRESOLVED
    return {"above": f"above {c.paper_value}", "below": f"below {c.paper_value}"}.get(s, f"at {c.paper_value}")


def above_verdict(c: PaperClaim, a: dict, b: dict, null_rows, diag_rows) -> tuple[str, str, str, list[Member]]:
    """null-only above diag-only, "generally": per transition null's retention against diag's (sides from their
    intervals over problems), tested one-sided: fewer above than below, beyond chance, contradicts."""
    diag = {r["transition"]: r for r in diag_rows}
    mem, sides, points = [], [], []
    for r in null_rows:
        d = diag.get(r["transition"])
        if d is None or not finite(r.get("retention_full_pct"), d.get("retention_full_pct")):
            continue
        (v, lo, hi), (w, wlo, whi) = _retention(r), _retention(d)
        # the sides null's interval can take against diag's: equal points are a tie, which the sign test drops
        s = "|".join(k for k, ok in (("above", hi > wlo), ("below", lo < whi), ("tie", lo <= whi and hi >= wlo)) if ok)
        sides.append(s)
        points.append("above" if v > w else "below" if v < w else "tie")
        mem.append(
            Member(
                f"Null vs Diag on {r['name']}",
                f"{interval_text(v, lo, hi, unit=' %')} vs {interval_text(w, wlo, whi, unit=' %')}",
                {"above": HOLDS, "below": FAILS, "tie": "tie (left out)"}.get(s, UNRESOLVED),
            )
        )
    where = f"medians: null {a['value']:.1f} % vs diag {b['value']:.1f} %: " + direction(a["value"], b["value"], ".1f")
    n = len(points)
    if n == 0:
        return NOT_COMPARABLE, "no transition with both null and diag retention", "", mem
    above, below = points.count("above"), points.count("below")
    p = sign_test(above, below, "less")
    test = (
        f"sign test, one-sided (more below than above contradicts): null above diag on {above}, below on {below}, "
        f"{p_text(p)}"
    )
    m = sum(1 for x in sides if x != "tie")  # a sure tie is left out of the test
    floor = sign_floor(m, "less")
    if floor >= ALPHA:
        return TOO_FEW, f"{where}; even null below diag on all {m} untied gives {p_text(floor)}", test, mem
    ps = [sign_test(x, y, "less") for x, y in sign_counts(sides)]
    if max(ps) < ALPHA or min(ps) >= ALPHA:
        return CONTRADICTS if max(ps) < ALPHA else CONSISTENT, f"{where}, {p_text(p)}", test, mem
    return UNRESOLVED, f"{where}; p {min(ps):.2g} to {max(ps):.2g} over the intervals over problems", test, mem


def energy_verdict(c: PaperClaim, mine: Sequence[dict]) -> Verdict:
    """Every RL step's f_diag ≤ the bound: this sweep's count within it against the paper's (all 17), each step a
    member (means over matrices: no interval)."""
    n = len(mine)
    where = plural(n, "decomposed RL step")
    if not mine:
        return Verdict(c, "—", where, "—", NOT_COMPARABLE, "no RL step decomposed here")
    bound, f_diag = c.bound[0], PAPER_COLUMNS.column("f_diag").headline
    ok = sum(1 for r in mine if r[f_diag] <= bound)
    worst = max(mine, key=lambda r: r[f_diag])
    text = f"{ok} of {n} ≤ {bound:g} (largest {worst[f_diag]:.3g}, {worst.get('name', worst['transition'])})"
    verdict, reason, test = rate_verdict(c, ok, n, None, None)
    mem = [
        Member(
            f"f_diag of {r.get('name', r['transition'])}",
            f"{r[f_diag]:.3g}",
            HOLDS if r[f_diag] <= bound else FAILS,
        )
        for r in mine
    ]
    return Verdict(c, text, where, "means over matrices, no CI", verdict, reason, mem, test)
