"""The report's verdict box: per headline claim of the paper (:mod:`.paper_claims`), this sweep's value with its
interval and the set it is over, and whether the claim holds here.

Verdicts:
- **holds** / **does not hold**: the test of the claim (:mod:`.paper_claims`) passes / fails for the whole interval
  (for a claim without interval, for the value);
- **not resolved**: the interval reaches both sides of the paper's number;
- **not comparable**: this sweep cannot speak to the claim, with the reason: fewer than half as many transitions
  as the paper's set ("3 transitions, paper 28"), none at all, or (for cosines) an isotropic band at this model
  size wider than the paper's bound.

Each value says what its interval rests on: claims statistics resample the problems with the transitions fixed
(their spread over transitions is not in the interval); cosines resample the matrices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ..plots import cosine_label
from .paper_claims import CLAIMS, DIAG_MEDIAN_ALL, PaperClaim

HOLDS, FAILS, UNRESOLVED, NOT_COMPARABLE = "holds", "does not hold", "not resolved", "not comparable"


@dataclass
class Verdict:
    claim: PaperClaim
    value: str  # this sweep's value with its interval ('—' when there is none)
    set: str  # the set it is over
    basis: str  # what the interval rests on
    verdict: str
    reason: str = ""

    @property
    def css(self) -> str:
        return {HOLDS: "holds", FAILS: "fails", UNRESOLVED: "unresolved"}.get(self.verdict, "nc")


def _finite(*xs) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in xs)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _too_few(n: int, claim: PaperClaim) -> str:
    """'' when n transitions can speak to the claim, else why not."""
    if n == 0:
        return "no such transition evaluated here"
    if claim.paper_n and n < claim.paper_n / 2:
        return f"{_plural(n, 'transition')}, paper {claim.paper_n}"
    return ""


def _three_way(ok_lo: bool, ok_hi: bool) -> str:
    """The verdict from the test at both ends of the interval."""
    return HOLDS if ok_lo and ok_hi else FAILS if not (ok_lo or ok_hi) else UNRESOLVED


def _group_set(group: str, set_name: str, n: int) -> str:
    what = "step" if group == "all" else f"{group} step"
    pre = "informative " if set_name == "informative" else "evaluated "
    return f"{n} {pre}{what}{'' if n == 1 else 's'}"


PROBLEMS = "CI over problems"
ANYTIME = "anytime-valid per transition (sequential design)"


def _from_claims(c: PaperClaim, rows: dict, level: float) -> Verdict:
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
    if c.test == "at_least_fraction":
        text = f"{v:.0f} of {n}" + (f" [{lo:.0f}–{hi:.0f}]" if _finite(lo, hi) else "")
        lo_, hi_ = (lo, hi) if _finite(lo, hi) else (v, v)
        verdict = _three_way(lo_ / n >= c.target - 1e-9, hi_ / n >= c.target - 1e-9)
    elif c.test == "contains":
        text = f"{v:.1f} %" + (f" [{lo:.1f}, {hi:.1f}]" if _finite(lo, hi) else "")
        # the paper prints whole percents: its 99 % is anything in [98.5, 99.5)
        half = 0.5
        lo_, hi_ = (lo, hi) if _finite(lo, hi) else (v, v)
        verdict = HOLDS if lo_ - half <= c.target < hi_ + half else FAILS
    else:
        raise ValueError(f"claim {c.id}: test {c.test} does not take a claims statistic")
    if not _finite(v):
        return Verdict(c, "—", where, basis, NOT_COMPARABLE, "undefined here (a reference scores 0)")
    too_few = _too_few(n, c)
    return Verdict(c, text, where, basis, NOT_COMPARABLE if too_few else verdict, too_few or _why(verdict, c))


def _missing(c: PaperClaim, rows: dict) -> str:
    """Why a claims statistic has no row: no such variant, no step in the set, or only multi-step transitions."""
    from ..stats.claims_sets import MULTI_STEP

    stat, variant, ref, set_name, group = c.statistic
    if not any(k[1] == variant and k[2] == ref for k in rows):
        return f"variant {variant} not evaluated here"
    multi = rows.get((stat, variant, ref, set_name, MULTI_STEP))
    what = {"all": "", "SFT": "SFT ", "RL": "RL "}.get(group, "")
    pre = "informative" if set_name == "informative" else "evaluated"
    reason = f"no {pre} {what}step here"
    if multi:
        reason += (
            f"; {_plural(int(multi['transitions']), 'multi-step transition')} (e.g. base → RL after an SFT) "
            "kept apart, as the paper does not evaluate them"
        )
    elif set_name == "informative":
        reason += " (Full − Base below the informative threshold)"
    return reason


def _why(verdict: str, c: PaperClaim) -> str:
    if verdict == UNRESOLVED:
        return f"the interval reaches both sides of the paper's {c.paper_value}"
    if c.test == "contains":
        return f"the paper's {c.paper_value} is {'inside' if verdict == HOLDS else 'outside'} the interval"
    return ""


def _above_other(c: PaperClaim, rows: dict, level: float) -> Verdict:
    a, b = rows.get(c.statistic), rows.get(DIAG_MEDIAN_ALL)
    if a is None or b is None:
        return Verdict(c, "—", "—", "—", NOT_COMPARABLE, "not evaluated here (null or diag missing)")
    n = int(a["transitions"])
    text = (
        f"null {a['value']:.1f} % [{a['ci_lo']:.1f}, {a['ci_hi']:.1f}] vs diag {b['value']:.1f} % "
        f"[{b['ci_lo']:.1f}, {b['ci_hi']:.1f}]"
    )
    verdict = HOLDS if a["ci_lo"] > b["ci_hi"] else FAILS if a["ci_hi"] < b["ci_lo"] else UNRESOLVED
    too_few = _too_few(n, c)
    reason = too_few or ("the two intervals overlap" if verdict == UNRESOLVED else "")
    return Verdict(
        c,
        text,
        _group_set("all", "all evaluated", n),
        f"{level:.0%} {PROBLEMS}",
        NOT_COMPARABLE if too_few else verdict,
        reason,
    )


def _energy(
    c: PaperClaim, transitions: Sequence[dict], group_of: Callable[[dict], Optional[str]], steps: set
) -> Verdict:
    mine = [
        r for r in transitions if r["transition"] in steps and group_of(r) == "RL" and _finite(r.get("f_diag_mean"))
    ]
    n = len(mine)
    where = _plural(n, "decomposed RL step")
    if not mine:
        return Verdict(c, "—", where, "—", NOT_COMPARABLE, "no RL step decomposed here")
    worst = max(mine, key=lambda r: r["f_diag_mean"])
    ok = sum(1 for r in mine if r["f_diag_mean"] <= c.bound[0])
    text = f"{ok} of {n} ≤ {c.bound[0]:g} (largest {worst['f_diag_mean']:.3g}, {worst['transition']})"
    verdict = HOLDS if ok == n else FAILS
    too_few = _too_few(n, c)
    return Verdict(c, text, where, "means over matrices, no CI", NOT_COMPARABLE if too_few else verdict, too_few)


def _cosines(c: PaperClaim, comparisons: Sequence[dict], level: float) -> Verdict:
    kind = "sequential" if c.source == "sequential" else "independent"
    mine = [r for r in comparisons if r.get("kind") == kind and _finite(r.get("median_cos_off"))]
    where = _plural(len(mine), f"{kind} pair")
    basis = f"{level:.0%} CI over matrices"
    if not mine:
        return Verdict(c, "—", where, "—", NOT_COMPARABLE, f"no {kind} comparison here")
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
    text = "; ".join(f"{r['median_cos_off']:.3g} [{r['ci_lo']:.3g}, {r['ci_hi']:.3g}]" for r in mine)
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
) -> list[Verdict]:
    """One verdict per claim of :data:`.paper_claims.CLAIMS`, in that order. ``claim_rows``: the main suite's
    claims rows (:func:`grrr_stream.stats.claims_sets.claims_rows`); ``transitions``, ``comparisons``: the sweep
    report's rows; ``group_of``: a transitions row → 'SFT' / 'RL' / None; ``steps``: the ids of the transitions
    that are one training step (W0 the model the child was trained from)."""
    rows = {(r["statistic"], r["variant"], r["reference"], r["set"], r["group"]): r for r in claim_rows}
    out = []
    for c in CLAIMS:
        if c.source == "claims":
            out.append(_above_other(c, rows, level) if c.test == "above_other" else _from_claims(c, rows, level))
        elif c.source == "energy":
            out.append(_energy(c, transitions, group_of, steps))
        else:
            out.append(_cosines(c, comparisons, level))
    return out
