"""The report's verdict box: per headline claim of the paper (:mod:`.paper_claims`), this sweep's value with its
interval and the set it is over, and whether the claim holds here.

Verdicts of a claim over a set of transitions (a rate, a median, "generally above", f_diag on every RL step), by an
exact test of this sweep's count or values against the paper's (:mod:`.verdict_sets`), with a row per transition:
- **consistent** / **contradicts**: the test does not reject / rejects at α = 0.05, with its p;
- **too few to tell**: no outcome at this set's size could reject (0 of 1 against 24 of 25);
- **not resolved**: over the interval over problems, the test reaches both sides of α.
Verdicts of a claim on each member (cosines, the step size):
- **holds** / **does not hold**: the test of the claim (:mod:`.paper_claims`) passes / fails for the whole interval
  (for a claim without interval, for the value);
- **not resolved**: the interval reaches both sides of the paper's number.
Either may be **not comparable**: this sweep cannot speak to the claim, with the reason: no such transition, a
value undefined here, or (for cosines) an isotropic band at this model size wider than the paper's bound.

Each value says what its interval rests on: claims statistics resample the problems with the transitions fixed
(their spread over transitions is not in the interval); cosines resample the matrices.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

from ..plots import cosine_label
from ..stats.claims_sets import MULTI_STEP
from ..stats.comparisons import STEPWISE, kind_label
from .paper_claims import CLAIMS, DIAG_MEDIAN_ALL, PaperClaim
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
    plural,
)
from .verdict_sets import above_verdict, count_members, energy_verdict, median_verdict, members, rate_verdict

__all__ = [
    "CONSISTENT",
    "CONTRADICTS",
    "FAILS",
    "HOLDS",
    "NOT_COMPARABLE",
    "TOO_FEW",
    "UNRESOLVED",
    "Member",
    "Verdict",
    "verdicts",
]


def _finite(*xs) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in xs)


def _group_set(group: str, set_name: str, n: int) -> str:
    what = "step" if group == "all" else f"{group} step"
    pre = "informative " if set_name == "informative" else "evaluated "
    return f"{n} {pre}{what}{'' if n == 1 else 's'}"


PROBLEMS = "CI over problems"
ANYTIME = "anytime-valid per transition (adaptive design)"


def _from_claims(c: PaperClaim, rows: dict, level: float, mine: Sequence[dict]) -> Verdict:
    """A count or a median over a set of transitions, tested exactly against the paper's (:mod:`.verdict_sets`)."""
    stat, _, _, set_name, group = c.statistic
    r = rows.get(c.statistic)
    if r is None:
        return Verdict(c, "—", "—", "—", NOT_COMPARABLE, _missing(c, rows))
    n = int(r["transitions"])
    v, lo, hi = r["value"], r.get("ci_lo"), r.get("ci_hi")
    basis = (
        f"{level:.0%} {ANYTIME}" if str(r.get("resampling", "")).startswith("anytime") else f"{level:.0%} {PROBLEMS}"
    )
    where = _group_set(group, set_name, n)
    if not _finite(v):
        return Verdict(c, "—", where, basis, NOT_COMPARABLE, "undefined here (a reference scores 0)")
    if c.test == "at_least_fraction":
        text = f"{v:.0f} of {n}" + (f" [{lo:.0f}–{hi:.0f}]" if _finite(lo, hi) else "")
        verdict, reason, test = rate_verdict(c, int(round(v)), n, lo, hi)
        threshold = r.get("threshold")
        mem = count_members(c, mine, float(threshold) if _finite(threshold) else math.nan)
        return Verdict(c, text, where, basis, verdict, reason, mem, test)
    if c.test == "contains":
        text = f"{v:.1f} %" + (f" [{lo:.1f}, {hi:.1f}]" if _finite(lo, hi) else "")
        verdict, reason, test, mem = median_verdict(c, r, mine)
        return Verdict(c, text, where, basis, verdict, reason, mem, test)
    raise ValueError(f"claim {c.id}: test {c.test} does not take a claims statistic")


def _missing(c: PaperClaim, rows: dict) -> str:
    """Why a claims statistic has no row: no such variant, no step in the set, or only multi-step transitions."""
    stat, variant, ref, set_name, group = c.statistic
    if not any(k[1] == variant and k[2] == ref for k in rows):
        return f"variant {variant} not evaluated here"
    multi = rows.get((stat, variant, ref, set_name, MULTI_STEP))
    what = {"all": "", "SFT": "SFT ", "RL": "RL "}.get(group, "")
    pre = "informative" if set_name == "informative" else "evaluated"
    reason = f"no {pre} {what}step here"
    if multi:
        reason += (
            f"; {plural(int(multi['transitions']), 'multi-step transition')} (e.g. base → RL after an SFT) "
            "kept apart, as the paper does not evaluate them"
        )
    elif set_name == "informative":
        reason += " (Full − Base below the informative threshold)"
    return reason


def _above_other(c: PaperClaim, rows: dict, level: float, null_rows, diag_rows) -> Verdict:
    a, b = rows.get(c.statistic), rows.get(DIAG_MEDIAN_ALL)
    if a is None or b is None:
        return Verdict(c, "—", "—", "—", NOT_COMPARABLE, "not evaluated here (null or diag missing)")
    n = int(a["transitions"])
    text = (
        f"null {a['value']:.1f} % [{a['ci_lo']:.1f}, {a['ci_hi']:.1f}] vs diag {b['value']:.1f} % "
        f"[{b['ci_lo']:.1f}, {b['ci_hi']:.1f}]"
    )
    verdict, reason, test, mem = above_verdict(c, a, b, null_rows, diag_rows)
    where = _group_set("all", "all evaluated", n)
    return Verdict(c, text, where, f"{level:.0%} {PROBLEMS}", verdict, reason, mem, test)


def _energy(
    c: PaperClaim, transitions: Sequence[dict], group_of: Callable[[dict], Optional[str]], steps: set, names: dict
) -> Verdict:
    mine = [
        {**r, "name": names.get(r["transition"], r["transition"])}
        for r in transitions
        if r["transition"] in steps and group_of(r) == "RL" and _finite(r.get("f_diag_mean"))
    ]
    return energy_verdict(c, mine)


def _cosines(c: PaperClaim, comparisons: Sequence[dict], level: float) -> Verdict:
    kind = STEPWISE if c.source == "stepwise" else "independent"
    mine = [r for r in comparisons if r.get("kind") == kind and _finite(r.get("median_cos_off"))]
    where = plural(len(mine), f"{kind_label(kind)} pair")
    basis = f"{level:.0%} CI over matrices"
    if not mine:
        return Verdict(c, "—", where, "—", NOT_COMPARABLE, f"no {kind_label(kind)} comparison here")
    if c.test == "ratio_within":
        have = [r for r in mine if _finite(r.get("norm_incr"), r.get("norm_sft")) and r["norm_sft"] > 0]
        if not have:
            return Verdict(c, "—", where, "—", NOT_COMPARABLE, "no update norms recorded")
        ratios = [r["norm_incr"] / r["norm_sft"] for r in have]
        text = ", ".join(f"{x:.3g}×" for x in ratios)
        ok = all(c.bound[0] <= x <= c.bound[1] for x in ratios)
        return Verdict(
            c,
            text,
            where,
            "‖ΔW_incr‖/‖ΔW_SFT‖, no CI",
            HOLDS if ok else FAILS,
            "" if ok else f"outside {c.bound[0]:g}–{c.bound[1]:g}",
        )
    text = "; ".join(f"{r['median_cos_off']:#.3g} [{r['ci_lo']:#.3g}, {r['ci_hi']:#.3g}]" for r in mine)
    if c.test == "within_all":
        wide = max(abs(r["null_hi"]) for r in mine)
        if wide >= c.bound[1]:
            return Verdict(
                c,
                text,
                where,
                basis,
                NOT_COMPARABLE,
                f"the isotropic band at this model size (±{wide:.2g}) is wider than the paper's bound {c.bound[1]:g}",
            )
        ok_lo = all(c.bound[0] < r["ci_lo"] and r["ci_hi"] < c.bound[1] for r in mine)
        ok_hi = all(c.bound[0] < r["median_cos_off"] < c.bound[1] for r in mine)
        verdict = HOLDS if ok_lo else UNRESOLVED if ok_hi else FAILS
        reason = {
            UNRESOLVED: f"the median is within ±{c.bound[1]:g}, its CI over matrices reaches beyond",
            FAILS: f"a median beyond ±{c.bound[1]:g}",
        }.get(verdict, "")
        return Verdict(c, text, where, basis, verdict, reason)
    # above_band: the median above the null's upper 2σ edge, and its interval too
    ok_all = all(r["ci_lo"] > r["null_hi"] for r in mine)
    ok_pt = all(r["median_cos_off"] > r["null_hi"] for r in mine)
    verdict = HOLDS if ok_all else UNRESOLVED if ok_pt else FAILS
    # the pairs that do not clear the band, with what their reading rests on
    reason = "; ".join(
        f"{r.get('label') or r.get('comparison')}: {cosine_label(r)}" for r in mine if not r["ci_lo"] > r["null_hi"]
    )
    return Verdict(c, text, where, basis, verdict, reason)


def verdicts(
    claim_rows: Sequence[dict],
    transitions: Sequence[dict],
    comparisons: Sequence[dict],
    *,
    group_of: Callable[[dict], Optional[str]],
    steps: set,
    level: float = 0.95,
    differences: Sequence[dict] = (),
    informative: Sequence[dict] = (),
    names: Optional[dict] = None,
) -> list[Verdict]:
    """One verdict per claim of :data:`.paper_claims.CLAIMS`, in that order. ``claim_rows``: the main suite's
    claims rows (:func:`grrr_stream.stats.claims_sets.claims_rows`); ``transitions``, ``comparisons``: the sweep
    report's rows; ``group_of``: a row with a 'transition' → 'SFT' / 'RL' / None; ``steps``: the ids of the
    transitions that are one training step (W0 the model the child was trained from); ``differences``,
    ``informative``: the main suite's per-transition rows, the members of each claim's set (a median is tested on
    them: without them it is not comparable); ``names``: transition id → its name on the page ('base → sft')."""
    rows = {(r["statistic"], r["variant"], r["reference"], r["set"], r["group"]): r for r in claim_rows}
    out = []
    for c in CLAIMS:
        if c.source == "claims" and c.test == "above_other":
            null_rows = members(c, differences, informative, group_of, steps, names)
            diag_rows = members(_diag_all(c), differences, informative, group_of, steps, names)
            out.append(_above_other(c, rows, level, null_rows, diag_rows))
        elif c.source == "claims":
            out.append(_from_claims(c, rows, level, members(c, differences, informative, group_of, steps, names)))
        elif c.source == "energy":
            out.append(_energy(c, transitions, group_of, steps, names or {}))
        else:
            out.append(_cosines(c, comparisons, level))
    return out


def _diag_all(c: PaperClaim) -> PaperClaim:
    """The comparand of null-above-diag: diag-only over the same set (not a claim of its own)."""
    from dataclasses import replace

    return replace(c, id="diag-median-all", statistic=DIAG_MEDIAN_ALL)
