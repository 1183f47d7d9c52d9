"""The paper's headline statistics over evaluations run under the adaptive design
(:mod:`grrr_stream.evaluation.designs.adaptive`), in the tables :func:`grrr_stream.stats.claims_sets.summarise`
writes.

Each variant of such an evaluation rests on its own problems and comes with anytime-valid intervals for its
difference to full and for its retention; there is no common resample of problems to bootstrap. A statistic's
value is taken at the point estimates, as under the fixed design, and its interval from the per-transition
intervals: a count runs from the transitions whose whole interval meets the claim to those whose interval reaches
it; a median or mean runs from the median (mean) of the lower ends to that of the upper ends. Each per-transition
interval holds at its level however often it was looked at; they do not hold simultaneously, so neither does the
interval of a statistic over many transitions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from ..config import ClaimSettings
from .claims import TIE
from .claims_sets import GROUPS, MULTI_STEP, SETS, method_group

RESAMPLING = "anytime-valid per transition (not simultaneous)"


@dataclass(frozen=True)
class AdaptiveEvaluation:
    """One evaluated transition of the adaptive design: its difference rows (variant → row, with minus_full,
    retention_full_pct and their ``_ci_lo``/``_ci_hi``) and its evaluation's info (gain, informative)."""

    transition: str
    kind: str
    method: Optional[str]
    step: bool
    rows: dict
    info: dict


def _bounds(e: AdaptiveEvaluation, variant: str, column: str) -> tuple[float, float, float]:
    """(point, lower end, upper end) of 'minus_full' or 'retention_full_pct' in a difference row."""
    r, stem = e.rows[variant], column.removesuffix("_pct")
    return tuple(float(r.get(k, math.nan)) for k in (column, f"{stem}_ci_lo", f"{stem}_ci_hi"))


def _statistics(cs: ClaimSettings) -> list[tuple[str, str, Optional[float], str, Callable]]:
    """statistic → its set, threshold, column, and (values, lower ends, upper ends) → (value, lo, hi)."""
    k, f1, f2, c = (cs.within_points, cs.retention_floor_pct, cs.retention_second_floor_pct, cs.retention_ceiling_pct)

    def count_at_least(t):
        return lambda v, lo, hi: (int(np.sum(v >= t - TIE)), float(np.sum(lo >= t - TIE)), float(np.sum(hi >= t - TIE)))

    def count_at_most(t):
        return lambda v, lo, hi: (int(np.sum(v <= t + TIE)), float(np.sum(hi <= t + TIE)), float(np.sum(lo <= t + TIE)))

    def central(f):
        return lambda v, lo, hi: (float(f(v)), float(f(lo)), float(f(hi)))

    def extreme(f):
        return lambda v, lo, hi: (float(f(v)), math.nan, math.nan)

    return [
        ("within_k", "informative", k, "minus_full", count_at_least(-k)),
        ("retention_median_pct", "all evaluated", None, "retention_full_pct", central(np.median)),
        ("retention_mean_pct", "all evaluated", None, "retention_full_pct", central(np.mean)),
        ("retention_min_pct", "all evaluated", None, "retention_full_pct", extreme(np.min)),
        ("retention_max_pct", "all evaluated", None, "retention_full_pct", extreme(np.max)),
        ("at_floor", "all evaluated", f1, "retention_full_pct", count_at_least(f1)),
        ("at_second_floor", "all evaluated", f2, "retention_full_pct", count_at_least(f2)),
        ("at_most_ceiling", "all evaluated", c, "retention_full_pct", count_at_most(c)),
    ]


def _members(evaluations: Sequence[AdaptiveEvaluation], cs: ClaimSettings) -> dict[tuple[str, str], list[int]]:
    members: dict[tuple[str, str], list[int]] = {(s, g): [] for s in SETS for g in (*GROUPS, MULTI_STEP)}
    for i, e in enumerate(evaluations):
        group = method_group(e.method, cs.sft_methods)
        for s in SETS:
            if s == "informative" and not e.info.get("informative"):
                continue
            if not e.step:
                members[(s, MULTI_STEP)].append(i)
                continue
            members[(s, "all")].append(i)
            if group:
                members[(s, group)].append(i)
    return members


def claims_rows(evaluations: Sequence[AdaptiveEvaluation], cs: ClaimSettings, selector: str = "") -> list[dict]:
    """The claims table (columns of :func:`grrr_stream.stats.claims_sets.claims_rows`), against full only: the
    sequences are paired with full."""
    members = _members(evaluations, cs)
    variants = list(dict.fromkeys(v for e in evaluations for v in e.rows if v not in ("base", "full")))
    rows = []
    for v in variants:
        for stat, set_name, threshold, column, fn in _statistics(cs):
            for group in (*GROUPS, MULTI_STEP):
                have = [evaluations[i] for i in members[(set_name, group)] if v in evaluations[i].rows]
                if not have:
                    continue
                value, lo, hi = fn(*np.array([_bounds(e, v, column) for e in have]).T)
                rows.append(
                    {
                        "selector": selector,
                        "set": set_name,
                        "group": group,
                        "statistic": stat,
                        "variant": v,
                        "reference": "full",
                        "transitions": len(have),
                        "threshold": threshold,
                        "value": value,
                        "ci_lo": lo,
                        "ci_hi": hi,
                        "resampling": RESAMPLING,
                    }
                )
    return rows


def _gain_retention(e: AdaptiveEvaluation, variant: str) -> dict:
    """100 · (v − base) / (full − base) at the point estimates (each variant rests on its own problems: no paired
    interval); absent where full does not gain over base."""
    base = e.rows.get("base", {}).get("minus_full")
    v = e.rows[variant].get("minus_full")
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (base, v)) or -base <= TIE:
        return {}
    return {"gain_retention_pct": 100.0 * (v - base) / -base}


def informative_rows(evaluations: Sequence[AdaptiveEvaluation]) -> list[dict]:
    """Per transition: the gain full − base and full − proj with their anytime-valid intervals."""
    out = []
    for e in evaluations:
        row = {"transition": e.transition, "kind": e.kind}
        if "gain" in e.info:
            row.update(
                {k: e.info[k] for k in ("gain", "gain_ci_lo", "gain_ci_hi", "informative", "informative_within_ci")}
            )
        if "proj" in e.rows:
            d, lo, hi = _bounds(e, "proj", "minus_full")
            row.update(full_minus_proj=-d, full_minus_proj_ci_lo=-hi, full_minus_proj_ci_hi=-lo)
        row["problems"] = int(e.rows.get("full", {}).get("problems", 0))
        out.append(row)
    return out


def summarise(
    evaluations: Sequence[AdaptiveEvaluation], settings: Optional[ClaimSettings] = None, *, selector: str = ""
) -> dict:
    """The three tables (differences, informative, claims) and the counts, as ``claims_sets.summarise``."""
    cs = settings or ClaimSettings()
    diffs = [
        {**r, "transition": e.transition, "kind": e.kind, **_gain_retention(e, v)}
        for e in evaluations
        for v, r in e.rows.items()
    ]
    info = informative_rows(evaluations)
    return {
        "differences": diffs,
        "informative": info,
        "claims": claims_rows(evaluations, cs, selector),
        "selector": selector,
        "design": "sequential",  # the design as results name it (evaluation/settings.py, RECORDED_NAMES)
        "counts": {
            "transitions": len(evaluations),
            "informative": sum(1 for r in info if r.get("informative")),
            "informative_within_ci": sum(1 for r in info if r.get("informative_within_ci")),
        },
    }
