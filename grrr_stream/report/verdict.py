"""The report's verdict box: per headline claim of the paper (:mod:`.paper_claims`), this sweep's value with its
interval and the set it is over, and whether the claim holds here.

Claims over a set of transitions (a rate, a median, "generally above", f_diag on every RL step) are tested on one
value per chain, the transitions that share a base model (:mod:`.verdict_sets`, :mod:`.verdict_energy`), against
the paper's count read the same way, and the box's set claims are one family, adjusted by Holm
(:mod:`.verdict_family`):
- **consistent** / **contradicts**: the adjusted test does not reject / rejects at α = 0.05; "consistent" says what
  its size could have detected, and is not "holds";
- **too few to tell**: no outcome at this many chains could reject (3 chains against the paper's median);
- **not resolved**: over the intervals over problems, the adjusted p reaches both sides of α.
Claims on each member (cosines, the step size):
- **holds** / **does not hold**: the test of the claim passes / fails for the whole interval (for a claim without
  interval, for the value); **holds, outside the paper's range**: it passes, with values the paper never reports;
- **not resolved**: the interval reaches both sides of the paper's number.
Either may be **not comparable**: this sweep cannot speak to the claim, with the reason: no such transition, a
value undefined here, or (for cosines) an isotropic band at this model size wider than the paper's bound.

Each value says what its interval rests on: claims statistics resample the problems with the transitions fixed
(their spread over transitions is not in the interval); cosines resample the matrices.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Mapping, Optional, Sequence

from ..plots import cosine_label
from ..stats.claims_sets import MULTI_STEP
from ..stats.comparisons import STEPWISE, kind_label
from ..stats.predictive import FIXED
from .paper_claims import CLAIMS, DIAG_MEDIAN_ALL, PaperClaim
from .verdict_energy import energy_set, rl_rows
from .verdict_family import decide
from .verdict_rows import (
    CONSISTENT,
    CONTRADICTS,
    FAILS,
    HOLDS,
    NOT_COMPARABLE,
    OUTSIDE,
    TOO_FEW,
    UNRESOLVED,
    Member,
    Verdict,
    plural,
)
from .verdict_sets import SetTest, above_set, median_set, members, rate_set

__all__ = [
    "CONSISTENT",
    "CONTRADICTS",
    "FAILS",
    "HOLDS",
    "NOT_COMPARABLE",
    "OUTSIDE",
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


def _claims_set(
    c: PaperClaim, rows: dict, level: float, mine: Sequence[dict], chains, side: str
) -> "Verdict | SetTest":
    """A count or a median over a set of transitions: the transitions' statistic as the claims table has it, and
    its test on one value per chain."""
    stat, _, _, set_name, group = c.statistic
    r = rows.get(c.statistic)
    if r is None:
        return Verdict(c, "—", "—", "—", NOT_COMPARABLE, _missing(c, rows))
    n = int(r["transitions"])
    v, lo, hi = r["value"], r.get("ci_lo"), r.get("ci_hi")
    if not _finite(v):
        return Verdict(
            c, "—", _group_set(group, set_name, n), "—", NOT_COMPARABLE, "undefined here (a reference scores 0)"
        )
    if c.test == "at_least_fraction":
        shown = f"{v:.0f} of {n} transitions" + (f" [{lo:.0f}–{hi:.0f}]" if _finite(lo, hi) else "")
        threshold = r.get("threshold")
        t = rate_set(c, mine, chains, float(threshold) if _finite(threshold) else math.nan, side)
    elif c.test == "contains":
        shown = f"{v:.1f} % over transitions" + (f" [{lo:.1f}, {hi:.1f}]" if _finite(lo, hi) else "")
        t = median_set(c, mine, chains, side)
    else:
        raise ValueError(f"claim {c.id}: test {c.test} does not take a claims statistic")
    basis = (
        f"{level:.0%} {ANYTIME}" if str(r.get("resampling", "")).startswith("anytime") else f"{level:.0%} {PROBLEMS}"
    )
    return replace(t, value=f"{shown}; {t.value}", where=f"{t.where} · {basis}")


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


def _above_other(c: PaperClaim, rows: dict, level: float, null_rows, diag_rows, chains) -> "Verdict | SetTest":
    if rows.get(c.statistic) is None or rows.get(DIAG_MEDIAN_ALL) is None:
        return Verdict(c, "—", "—", "—", NOT_COMPARABLE, "not evaluated here (null or diag missing)")
    t = above_set(c, null_rows, diag_rows, chains)
    return replace(t, where=f"{t.where} · {level:.0%} {PROBLEMS}")


def _energy(c: PaperClaim, transitions, group_of, steps: set, names: dict, chains, side: str) -> "Verdict | SetTest":
    have, without = rl_rows(transitions, group_of, steps, names)
    if not have:
        reason = (
            "no RL step decomposed here"
            if not without
            else (
                f"{plural(without, 'RL step')} without an isotropic value (its store's summary predates it: "
                "decompose it again into a new store)"
            )
        )
        return Verdict(c, "—", "—", "—", NOT_COMPARABLE, reason)
    t = energy_set(c, have, chains, side)
    where = f"{t.where} · means over matrices against their isotropic value, no CI"
    if without:
        where += f" · left out: {plural(without, 'RL step')} without an isotropic value (decompose it again)"
    return replace(t, where=where)


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
        inside = all(c.bound[0] < r["ci_lo"] and r["ci_hi"] < c.bound[1] for r in mine)
        beyond = [r for r in mine if r["ci_lo"] >= c.bound[1] or r["ci_hi"] <= c.bound[0]]
        verdict = HOLDS if inside else FAILS if beyond else UNRESOLVED
        reason = {
            UNRESOLVED: f"a CI over matrices reaches beyond ±{c.bound[1]:g}, none lies wholly beyond",
            FAILS: f"{plural(len(beyond), 'pair')} with its whole CI over matrices beyond ±{c.bound[1]:g}",
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
    if verdict == HOLDS and c.paper_range:
        verdict, reason = _against_range(c, [r["median_cos_off"] for r in mine])
    return Verdict(c, text, where, basis, verdict, reason)


def _against_range(c: PaperClaim, values: Sequence[float]) -> tuple[str, str]:
    """A claim that holds as tested (above the band), with every value also inside the range the paper reports,
    or said to be outside it, and how far."""
    lo, hi = c.paper_range
    low, high = min(values), max(values)
    if lo <= low and high <= hi:
        return HOLDS, f"within the paper's range {lo:g}–{hi:g}"
    far = f"up to {high / hi:.1f}× the paper's largest {hi:g}" if high > hi else f"down to {low:.3g}, below {lo:g}"
    return OUTSIDE, f"above the band as the paper's are, but {low:.3g}–{high:.3g}: {far} (the paper: {lo:g}–{hi:g})"


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
    left_out: Sequence[dict] = (),
    names: Optional[dict] = None,
    chains: Optional[Mapping[str, str]] = None,
    paper_side: str = FIXED,
    adjust: str = "holm",
) -> list[Verdict]:
    """One verdict per claim of :data:`.paper_claims.CLAIMS`, in that order. ``claim_rows``: the main suite's
    claims rows (:func:`grrr_stream.stats.claims_sets.claims_rows`); ``transitions``, ``comparisons``: the sweep
    report's rows; ``group_of``: a row with a 'transition' → 'SFT' / 'RL' / None; ``steps``: the ids of the
    transitions that are one training step (W0 the model the child was trained from); ``differences``,
    ``informative``: the main suite's per-transition rows, the members of each claim's set (a set claim is tested
    on them: without them it is not comparable); ``names``: transition id → its name on the page ('base → sft');
    ``chains``: transition id → its chain, the base model it shares with others (a transition missing from it is
    a chain of its own); ``paper_side``: the paper's numbers taken as 'fixed' or as a 'sample' of its bases;
    ``adjust``: the family's adjustment, 'holm' or 'bh'; ``left_out``: the evaluated transitions the claims could not
    use, with why (each claim over evaluations names them)."""
    rows = {(r["statistic"], r["variant"], r["reference"], r["set"], r["group"]): r for r in claim_rows}
    chains = chains or {}
    found: dict[str, "Verdict | SetTest"] = {}
    for c in CLAIMS:
        if c.source == "claims" and c.test == "above_other":
            null_rows = members(c, differences, informative, group_of, steps, names)
            diag_rows = members(_diag_all(c), differences, informative, group_of, steps, names)
            found[c.id] = _above_other(c, rows, level, null_rows, diag_rows, chains)
        elif c.source == "claims":
            mine = members(c, differences, informative, group_of, steps, names)
            found[c.id] = _claims_set(c, rows, level, mine, chains, paper_side)
        elif c.source == "energy":
            found[c.id] = _energy(c, transitions, group_of, steps, names or {}, chains, paper_side)
        else:
            found[c.id] = _cosines(c, comparisons, level)
    _name_left_out(found, left_out, names or {})
    for c in CLAIMS:  # a set with no chain to test is no test
        t = found[c.id]
        if isinstance(t, SetTest) and not t.members:
            found[c.id] = Verdict(c, "—", "—", "—", NOT_COMPARABLE, t.reason)
    tests = {i: t for i, t in found.items() if isinstance(t, SetTest)}
    words = decide(tests, adjust)
    out = []
    for c in CLAIMS:
        t = found[c.id]
        if isinstance(t, SetTest):
            word, p, detect = words[c.id]
            t = Verdict(c, t.value, t.where, "", word, t.reason, t.members, t.test, p, detect)
        out.append(t)
    return out


def _name_left_out(found: dict, left_out: Sequence[dict], names: Mapping[str, str]) -> None:
    """A claim over evaluations never silently covers fewer transitions than were evaluated: each names those the
    claims could not use, and why."""
    if not left_out:
        return
    said = "; ".join(f"{names.get(r['transition'], r['transition'])}: {r['why']}" for r in left_out)
    for c in CLAIMS:
        t = found[c.id]
        if c.source == "claims" and isinstance(t, SetTest):
            found[c.id] = replace(t, where=f"{t.where} · left out: {said}")
        elif c.source == "claims":
            found[c.id] = replace(t, set=f"{t.set} · left out: {said}")


def _diag_all(c: PaperClaim) -> PaperClaim:
    """The comparand of null-above-diag: diag-only over the same set (not a claim of its own)."""
    return replace(c, id="diag-median-all", statistic=DIAG_MEDIAN_ALL)
