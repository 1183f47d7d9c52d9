"""The paper's headline statistics over sets of evaluated transitions, with joint bootstrap intervals.

The paper states its claims over two sets (GRRR, §5 and the appendix summary):
- **informative** (full − base ≥ ``informative_points``, fixed at the point estimates): "OffNull
  stays within 4.3 points of Full in 24 of 25" (``within_k``);
- **all evaluated**: retention = 100 · variant / reference, its median, mean and range, how many
  transitions reach ``retention_floor_pct`` (95) and ``retention_second_floor_pct`` (92), and how
  many retain at most ``retention_ceiling_pct`` (25: "in 6 of 11 SFT chains the diagonal alone
  retains at most 25 %").
Each statistic is given for the group ``all`` and for the groups ``SFT`` and ``RL`` (:func:`method_group`),
over the evaluated transitions that are one training step each (``TransitionScores.step``), as the paper
evaluates them. A transition that spans more than one step (the cumulative base → RL of an RL model that follows
an SFT) is a different kind of update: it is never pooled with the steps, and its statistics come in the group
``multi-step`` of their own.

Intervals: every transition answers the same benchmark problems, so one bootstrap replicate of a
statistic across transitions draws one resample of problem indices per benchmark and applies it to
every transition and variant (:func:`joint_replicates`). Resampling each transition on its own would
treat shared problem difficulty as independent noise and give too narrow an interval.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Optional, Sequence

import numpy as np

from ..config import DEFAULT_SFT_METHODS, ClaimSettings
from . import bootstrap
from .bootstrap import interval, ratio
from .claims import TIE, TransitionScores, difference_rows, informative_rows, is_informative

SETS = ("informative", "all evaluated")
GROUPS = ("all", "SFT", "RL")
MULTI_STEP = "multi-step"  # the group of evaluated transitions that span more than one training step


def method_group(method: Optional[str], sft_methods: Sequence[str] = DEFAULT_SFT_METHODS) -> Optional[str]:
    """'SFT' when the method is one of ``sft_methods`` (case and surrounding spaces ignored), 'RL' for
    any other named method (DPO, PPO, GRPO, GPPO, PRIME, …, as the paper counts them), None without one."""
    m = (method or "").strip().lower()
    if not m:
        return None
    return "SFT" if m in {s.strip().lower() for s in sft_methods} else "RL"


def joint_replicates(scores: Sequence[TransitionScores], *, resamples: int, seed: int) -> list[np.ndarray]:
    """Per transition, its (R, V) scores on problems resampled jointly: replicate j draws one resample of
    each benchmark's problems (stream ``joint:{benchmark}:{n}``) and every transition with that benchmark
    and problem count, and every variant, is scored on it. Transitions whose copies of a benchmark have
    different problem counts are different problem sets: each count gets its own draw (see
    :func:`resampling_note`)."""
    for ts in scores:
        if set(ts.per_problem) != set(ts.benchmarks):
            raise ValueError(f"{ts.transition}: no per-problem values kept, cannot resample it jointly")
    reps = bootstrap.joint_replicates(
        [{b: ts.per_problem[b] for b in ts.benchmarks} for ts in scores], resamples=resamples, seed=seed, prefix="joint"
    )
    return [100.0 * r / len(ts.benchmarks) for r, ts in zip(reps, scores)]


def resampling_note(scores: Sequence[TransitionScores]) -> str:
    """'joint', or which benchmarks could not be resampled jointly because their problem counts differ."""
    counts: dict[str, set[int]] = {}
    for ts in scores:
        for b, n in ts.n_problems.items():
            counts.setdefault(b, set()).add(n)
    split = {b: sorted(ns) for b, ns in sorted(counts.items()) if len(ns) > 1}
    if not split:
        return "joint"
    return (
        "joint per problem count ("
        + "; ".join(f"{b}: n = {', '.join(map(str, ns))}" for b, ns in split.items())
        + "): transitions with different counts of a benchmark are resampled independently there"
    )


# statistic → (set, function of (variant, reference, base) scores along the last axis → value, threshold setting)
def _statistics(cs: ClaimSettings) -> list[tuple[str, str, Optional[float], Callable]]:
    def count(mask):
        return np.sum(mask, axis=-1)

    def ret(v, r):
        return ratio(v, r)

    def nanstat(f, of=ret):
        def g(v, r, b):
            x = of(v, r) if of is ret else of(v, r, b)
            with np.errstate(all="ignore"), warnings.catch_warnings():  # all-NaN slices give NaN, quietly
                warnings.simplefilter("ignore", RuntimeWarning)
                return f(np.where(np.isfinite(x), x, np.nan), axis=-1)

        return g

    def gain(v, r, b):  # the share of the gain kept: NaN where the reference does not gain over base
        return np.where(r - b > TIE, ratio(v - b, r - b), np.nan)

    k, f1, f2, c = (cs.within_points, cs.retention_floor_pct, cs.retention_second_floor_pct, cs.retention_ceiling_pct)
    return [
        ("within_k", "informative", k, lambda v, r, b: count(v - r >= -k - TIE)),
        ("retention_median_pct", "all evaluated", None, nanstat(np.nanmedian)),
        ("retention_mean_pct", "all evaluated", None, nanstat(np.nanmean)),
        ("retention_min_pct", "all evaluated", None, nanstat(np.nanmin)),
        ("retention_max_pct", "all evaluated", None, nanstat(np.nanmax)),
        ("at_floor", "all evaluated", f1, lambda v, r, b: count(ret(v, r) >= f1 - TIE)),
        ("at_second_floor", "all evaluated", f2, lambda v, r, b: count(ret(v, r) >= f2 - TIE)),
        ("at_most_ceiling", "all evaluated", c, lambda v, r, b: count(ret(v, r) <= c + TIE)),
        ("gain_retention_median_pct", "informative", None, nanstat(np.nanmedian, of=gain)),
    ]


_COUNTS = ("within_k", "at_floor", "at_second_floor", "at_most_ceiling")
_NO_INTERVAL = ("retention_min_pct", "retention_max_pct")  # a percentile bootstrap of an extreme is no interval


def claims_rows(
    scores: Sequence[TransitionScores], settings: Optional[ClaimSettings] = None, *, selector: str = ""
) -> list[dict]:
    """One row per statistic, variant, reference (full, as the paper, and proj), set and group: the
    statistic at the point estimates, its joint bootstrap interval, how many transitions it is over,
    its threshold, the evaluated set's ``selector`` and how the problems were resampled."""
    cs = settings or ClaimSettings()
    scores = list(scores)
    if not scores:
        return []
    reps = joint_replicates(scores, resamples=cs.resamples, seed=cs.seed)
    groups = GROUPS + (MULTI_STEP,)
    members = {(s, g): [] for s in SETS for g in groups}
    for i, ts in enumerate(scores):
        group = method_group(ts.method, cs.sft_methods)
        for s in SETS:
            if s == "informative" and not is_informative(ts, cs.informative_points):
                continue
            if not ts.step:  # never pooled with the single steps the paper's sets hold
                members[(s, MULTI_STEP)].append(i)
                continue
            members[(s, "all")].append(i)
            if group:
                members[(s, group)].append(i)
    variants = list(dict.fromkeys(v for ts in scores for v in ts.variants if v not in ("base", "full")))
    rows = []
    for v in variants:
        for ref in ("full", "proj"):
            if v == ref:
                continue
            for stat, set_name, threshold, fn in _statistics(cs):
                if stat.startswith("gain_") and ref != "full":
                    continue
                for group in groups:
                    needs = (v, ref, "base") if stat.startswith("gain_") else (v, ref)
                    have = [i for i in members[(set_name, group)] if all(scores[i].has(x) for x in needs)]
                    if have:
                        rows.append(
                            _row(stat, set_name, group, v, ref, threshold, fn, scores, reps, have, cs, selector)
                        )
    return rows


def _row(stat, set_name, group, v, ref, threshold, fn, scores, reps, have, cs, selector) -> dict:
    b = "base" if all(scores[i].has("base") for i in have) else ref  # only the gain's statistic reads base
    pt_v, pt_r, pt_b = (np.array([scores[i].score(x) for i in have]) for x in (v, ref, b))
    rp_v, rp_r, rp_b = (np.stack([reps[i][:, scores[i].variants.index(x)] for i in have], axis=1) for x in (v, ref, b))
    value = fn(pt_v, pt_r, pt_b)
    value = int(value) if stat in _COUNTS else float(value)
    lo = hi = math.nan
    if stat not in _NO_INTERVAL:
        replicates = np.asarray(fn(rp_v, rp_r, rp_b), dtype=np.float64)
        lo, hi = interval(replicates[np.isfinite(replicates)], cs.level)
    return {
        "selector": selector,
        "set": set_name,
        "group": group,
        "statistic": stat,
        "variant": v,
        "reference": ref,
        "transitions": len(have),
        "threshold": threshold,
        "value": value,
        "ci_lo": lo,
        "ci_hi": hi,
        "resampling": resampling_note([scores[i] for i in have]),
    }


def sentences(rows: Sequence[dict], reference: str = "full") -> list[str]:
    """The claims rows against ``reference`` as the paper writes them: per variant, the within-k count
    over the informative transitions, then the retention statistics over all evaluated transitions for
    each group that has any."""
    by = {(r["variant"], r["set"], r["group"], r["statistic"]): r for r in rows if r["reference"] == reference}
    out = []
    for v in dict.fromkeys(r["variant"] for r in rows if r["reference"] == reference):
        w = by.get((v, "informative", "all", "within_k"))
        if w:
            out.append(
                f"{v}: within {w['threshold']:g} points of {reference} in {w['value']:.0f} of "
                f"{w['transitions']} informative transitions {_ci(w, '.0f', '–')}"
            )
        g = by.get((v, "informative", "all", "gain_retention_median_pct"))
        if g and math.isfinite(g["value"]):
            out.append(
                f"{v}: keeps a median {g['value']:.1f} % {_ci(g, '.1f', ', ')} of the gain over base "
                f"(({v} − base) / ({reference} − base)) over {g['transitions']} informative transitions"
            )
        for g in GROUPS:
            med = by.get((v, "all evaluated", g, "retention_median_pct"))
            if not med:
                continue
            n = med["transitions"]
            stat = lambda name: by[(v, "all evaluated", g, name)]  # noqa: E731
            counts = ", ".join(
                f"{sign} {stat(name)['threshold']:g} % in {stat(name)['value']:.0f} of {n} "
                f"{_ci(stat(name), '.0f', '–')}"
                for name, sign in (("at_floor", "≥"), ("at_second_floor", "≥"), ("at_most_ceiling", "≤"))
            )
            who = f"all {n} evaluated transitions" if g == "all" else f"the {n} evaluated {g} transitions"
            out.append(
                f"{v}: retention vs {reference} over {who}: median {med['value']:.1f} % "
                f"{_ci(med, '.1f', ', ')}, mean {stat('retention_mean_pct')['value']:.1f} % "
                f"{_ci(stat('retention_mean_pct'), '.1f', ', ')}, range "
                f"{stat('retention_min_pct')['value']:.1f}–{stat('retention_max_pct')['value']:.1f} %; "
                f"{counts}"
            )
    return out


def _ci(row: dict, fmt: str, sep: str) -> str:
    return f"[{row['ci_lo']:{fmt}}{sep}{row['ci_hi']:{fmt}}]"


def summarise(scores: Sequence[TransitionScores], settings=None, *, selector: str = "", **overrides) -> dict:
    """All three tables at once: differences, informative, claims (:func:`claims_rows`).

    ``settings``: a :class:`grrr_stream.config.ClaimSettings` (default: the paper's thresholds);
    ``overrides`` replace its fields (``within_points=…``); ``selector`` names the evaluated set."""
    cs = (settings or ClaimSettings()).model_copy(update=overrides)
    diffs = [r for ts in scores for r in difference_rows(ts, level=cs.level)]
    info = informative_rows(scores, informative_points=cs.informative_points, level=cs.level)
    claims = claims_rows(scores, cs, selector=selector)
    n_inf = sum(1 for r in info if r.get("informative"))
    return {
        "differences": diffs,
        "informative": info,
        "claims": claims,
        "selector": selector,
        "counts": {
            "transitions": len(scores),
            "informative": n_inf,
            "informative_within_ci": sum(1 for r in info if r.get("informative_within_ci")),
        },
    }
