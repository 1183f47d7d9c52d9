#!/usr/bin/env python3
"""Simulated studies shaped like the paper's, for the adaptive evaluation design (grrr_stream.stats.anytime):

    designs   the adaptive design against the fixed one: problems answered, interval coverage, claims' verdicts
    betting   a prototype hedged betting confidence sequence against the package's empirical-Bernstein one
    allocation  the pooled benchmarks drawn in proportion to size against weighted draws (grrr_stream.stats.allocation)

A study = the paper's 28 evaluated transitions (11 SFT, 17 RL) × 12 variants × 1,517 problems (math500 500,
aime24 30, amc23 40, minerva_math 272, olympiadbench 675). The fixed design answers every problem; the
adaptive one answers in the seeded order and stops each variant at the first boundary (every ``--chunk``
problems after the census) where its thresholds are decided, its difference to full is within ±precision, or
the problems run out. Full answers as many problems as the longest of its variants.

The model of a study:
- Accuracies (mean over the five benchmarks). The 12 rows the paper shows (``PAPER_ROWS``: Table 5 SFT C1, C2,
  C3, C5, C6, C7; Table 6 RL DeepScaleR, Nemotron, Klear, UniReason, zephyr, DPO; base/full/diag/off/null/offnull)
  are used as printed. The other 16 (5 SFT, 11 RL) are drawn anew in each study: a shown row of the same group
  picked uniformly, its six accuracies moved on the logit scale by one shift g ~ N(0, 0.5²) common to the row and
  one η_v ~ N(0, 0.2²) per variant.
- Variants the paper does not tabulate: proj = full + N(0, 0.5²) points; randrm-j = full + Δ + N(0, 1²) points,
  Δ per transition ~ U(−15, −3) for SFT (Table 8: −5.0 and −15.2 on C1/C2 SFT) and −|N(0, 1.5²)| for RL;
  off-principal-64 and no-off-principal-64 = off + u (full − off), u ~ U(0, 1) each. Every accuracy is clipped to
  [0.5 %, 97 %].
- Per-problem correctness, paired: problem i of benchmark b has a latent difficulty z_i ~ N(0, 1) shared by all
  variants of a transition; variant v answers it correctly when a_v − δ_b > √ρ z_i + √(1−ρ) e_vi, e_vi ~ N(0, 1)
  its own. So a variant's expected accuracy on b is Φ(a_v − δ_b); a_v is solved so that the mean over the five
  benchmarks is the row's accuracy. δ_b (``DIFFICULTY``): math500 −0.8, minerva_math 0.4, olympiadbench 0.6,
  amc23 0.5, aime24 1.5 (a model at 50 % scores ≈ 89 / 52 / 44 / 48 / 15 %). ρ (``--coupling``) = 0.9: two
  variants of equal accuracy agree on ≈ 86 % of problems at 50 % accuracy; the sensitivity run uses ρ = 0.6
  (≈ 70 %). Problems are exchangeable within a benchmark, so one seeded order serves every study.

The adaptive verdicts, the fixed ones, and what is compared: see docs/evaluation.md, "Adaptive design:
simulation". Run:

    python tools/simulate.py designs                        # 1,000 studies, ρ = 0.9, precision 2, 3, 4, 5
    python tools/simulate.py designs --coupling 0.6 --json sim_weak.json
    python tools/simulate.py designs --quick                # 40 studies, a smoke run
    python tools/simulate.py designs --disagreement 0.046   # flip-rate scenario (or: measured), not the ρ model
    python tools/simulate.py betting --paths 112            # the prototype sequence on 112 near-equal pairs
    python tools/simulate.py allocation --paths 400         # proportional against weighted draws, a close pair
    python tools/simulate.py verdicts --studies 1000        # the verdict box's error rates (simulate_verdicts.py)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Optional

import numpy as np
from scipy.special import ndtr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package, whatever is installed
from grrr_stream.config import ClaimSettings  # noqa: E402
from grrr_stream.evaluation.settings import AdaptiveSettings  # noqa: E402
from grrr_stream.report import paper_rows  # noqa: E402
from grrr_stream.report.paper_claims import CLAIMS  # noqa: E402
from grrr_stream.stats.allocation import ALLOCATIONS as ALLOCATION_KINDS  # noqa: E402
from grrr_stream.stats.allocation import draw_order, pooled_cs  # noqa: E402
from grrr_stream.stats.anytime import Thresholds, bet_target, ratio_sides, running_score, score_path  # noqa: E402
from grrr_stream.stats.claims import TIE  # noqa: E402
from grrr_stream.stats.empirical_bernstein import eb_wor_cs  # noqa: E402
from grrr_stream.stats.order import Order, problem_order  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the verdicts command and tool_args live beside this file
import simulate_verdicts  # noqa: E402
from tool_args import COUNT, PROBABILITY, SEED, InputError, Number, fail, numbers, os_error, out_file  # noqa: E402

# ---- the planted populations

SIZES = {"math500": 500, "aime24": 30, "amc23": 40, "minerva_math": 272, "olympiadbench": 675}
DIFFICULTY = {"math500": -0.8, "minerva_math": 0.4, "olympiadbench": 0.6, "amc23": 0.5, "aime24": 1.5}
VARIANTS = ("base", "full", "proj", "diag", "off", "null", "offnull", "randrm-0", "randrm-1", "randrm-2")
VARIANTS += ("off-principal-64", "no-off-principal-64")
TABULATED = ("base", "full", "diag", "off", "null", "offnull")
# GRRR's visible rows of Tables 5 (SFT) and 6 (RL), as the package carries them (grrr_stream/report/paper_rows.py):
# (group, row, accuracies in points base / full / diag / off / null / offnull)
PAPER_ROWS = tuple((group, row, values) for group, _, row, values in paper_rows.ROWS)
HIDDEN = {"SFT": 5, "RL": 11}  # the paper's 11 SFT and 17 RL rows less the shown ones
GROUPS = tuple(["SFT"] * 11 + ["RL"] * 17)


def _logit(p):
    return np.log(p / (1 - p))


def accuracies(rng: np.random.Generator) -> np.ndarray:
    """One study's accuracies (fractions), transitions × VARIANTS, in GROUPS' order."""
    rows = []
    for group in ("SFT", "RL"):
        shown = [np.array(r) / 100 for g, _, r in PAPER_ROWS if g == group]
        rows += shown
        for _ in range(HIDDEN[group]):
            pick = shown[rng.integers(len(shown))]
            rows.append(1 / (1 + np.exp(-(_logit(pick) + rng.normal(0, 0.5) + rng.normal(0, 0.2, pick.size)))))
    tab = 100 * np.array(rows)
    acc = np.zeros((len(tab), len(VARIANTS)))
    for j, v in enumerate(TABULATED):
        acc[:, VARIANTS.index(v)] = tab[:, j]
    full, off = tab[:, 1], tab[:, 3]
    sft = np.array([g == "SFT" for g in GROUPS])
    acc[:, VARIANTS.index("proj")] = full + rng.normal(0, 0.5, len(tab))
    shift = np.where(sft, rng.uniform(-15, -3, len(tab)), -np.abs(rng.normal(0, 1.5, len(tab))))
    for j in range(3):
        acc[:, VARIANTS.index(f"randrm-{j}")] = full + shift + rng.normal(0, 1.0, len(tab))
    for v in ("off-principal-64", "no-off-principal-64"):
        acc[:, VARIANTS.index(v)] = off + rng.uniform(0, 1, len(tab)) * (full - off)
    return np.clip(acc, 0.5, 97.0) / 100


def ability(acc: np.ndarray) -> np.ndarray:
    """a_v with mean over benchmarks of Φ(a_v − δ_b) = acc (bisection, elementwise)."""
    delta = np.array(list(DIFFICULTY.values()))
    lo, hi = np.full(acc.shape, -8.0), np.full(acc.shape, 8.0)
    for _ in range(50):
        mid = (lo + hi) / 2
        above = ndtr(mid[..., None] - delta).mean(axis=-1) > acc
        lo, hi = np.where(above, lo, mid), np.where(above, mid, hi)
    return (lo + hi) / 2


def draw_correct(rng, acc: np.ndarray, order, coupling: float) -> np.ndarray:
    """Correctness (bool), studies × transitions × variants × problems in the order's order."""
    delta = np.array([DIFFICULTY[b] for b, _ in order.items], dtype=np.float32)
    a = ability(acc).astype(np.float32)
    s, t, v = acc.shape
    z = rng.standard_normal((s, t, 1, order.total), dtype=np.float32)
    e = rng.standard_normal((s, t, v, order.total), dtype=np.float32)
    return (a[..., None] - delta) > (math.sqrt(coupling) * z + math.sqrt(1 - coupling) * e)


# ---- the disagreement scenario (--disagreement): accuracies per benchmark like an independent simulation's, and
# each variant's answers drawn as full's with a share of them flipped (not the latent ρ model above)

# the demo's measured flip rates against full (docs/evaluation.md, "The disagreement, measured": means over the three
# chains' evaluations); the principal bands were not measured: off's rate; base not either: the scenario's default
MEASURED_FLIPS = {"proj": 0.010, "randrm-*": 0.011, "offnull": 0.022, "off": 0.090, "null": 0.238, "diag": 0.290}
MEASURED_FLIPS |= {"off-principal-*": 0.090, "no-off-principal-*": 0.090, "base": 0.046}
CLOSE_POINTS = 5.0  # the close variants: full ± U(−5, 5) points on every benchmark


def scenario_accuracies(rng: np.random.Generator) -> np.ndarray:
    """One study's accuracies (fractions) in the disagreement scenario, transitions × VARIANTS × benchmarks (SIZES'
    order): full ~ U(0.3, 0.8) per benchmark (aime24 U(0.1, 0.4)); diag = full × U(0.2, 0.5) per transition; base =
    full − U(1, 20) points per transition; every other variant a close one, full + U(−5, 5) points per variant and
    transition. Clipped to [0.5 %, 97 %]."""
    t, b = len(GROUPS), len(SIZES)
    low = np.array([0.1 if name == "aime24" else 0.3 for name in SIZES])
    full = low + rng.uniform(0, 1, (t, b)) * (np.where(low == 0.1, 0.4, 0.8) - low)
    acc = full[:, None, :] + rng.uniform(-CLOSE_POINTS, CLOSE_POINTS, (t, len(VARIANTS), 1)) / 100
    acc[:, VARIANTS.index("full")] = full
    acc[:, VARIANTS.index("diag")] = full * rng.uniform(0.2, 0.5, (t, 1))
    acc[:, VARIANTS.index("base")] = full - rng.uniform(1, 20, (t, 1)) / 100
    return np.clip(acc, 0.005, 0.97)


def flip_rates(disagreement) -> np.ndarray:
    """Each variant's target share of problems on which it and full disagree: one rate for all, or a dict of
    variant patterns (MEASURED_FLIPS) → rate; full 0."""
    from fnmatch import fnmatch

    if isinstance(disagreement, dict):
        rate = [next((r for pat, r in disagreement.items() if fnmatch(v, pat)), np.nan) for v in VARIANTS]
    else:
        rate = [float(disagreement)] * len(VARIANTS)
    rate[VARIANTS.index("full")] = 0.0
    if np.isnan(rate).any():
        raise ValueError(f"no flip rate for {[v for v, r in zip(VARIANTS, rate) if np.isnan(r)]}")
    return np.array(rate)


def draw_flipped(rng, acc_b: np.ndarray, order, disagreement) -> np.ndarray:
    """Correctness (bool), studies × transitions × variants × problems in the order's order: full answers problem i
    of benchmark b right with probability p_f; variant v copies full's answer and flips it with the probabilities
    that keep its accuracy p_v and make it disagree with full on a share D = max(d_v, |p_v − p_f|) of the problems
    (a variant further from full than d_v disagrees only where it must), D at most min(p_v + p_f, 2 − p_v − p_f):
    full right → wrong with probability (D + p_f − p_v)/(2 p_f), full wrong → right with
    (D − p_f + p_v)/(2 (1 − p_f))."""
    names = list(SIZES)
    bench = np.array([names.index(b) for b, _ in order.items])
    f_i = VARIANTS.index("full")
    p = acc_b[..., bench]  # S × T × V × problems
    pf, pv = p[:, :, f_i : f_i + 1], p
    d = np.maximum(flip_rates(disagreement)[None, None, :, None], np.abs(pv - pf))
    d = np.minimum(d, np.minimum(pv + pf, 2 - pv - pf))
    lose, gain = (d + pf - pv) / (2 * pf), (d - pf + pv) / (2 * (1 - pf))
    full = rng.random(pf.shape, dtype=np.float32) < pf
    flip = rng.random(p.shape, dtype=np.float32) < np.where(full, lose, gain)
    out = full ^ flip
    out[:, :, f_i] = full[:, :, 0]
    return out


def parse_disagreement(text: str):
    """--disagreement: None (the ρ model), a rate, or 'measured' (MEASURED_FLIPS)."""
    if not text:
        return None
    if text == "measured":
        return dict(MEASURED_FLIPS)
    try:
        rate = float(text)
    except ValueError:
        rate = math.nan
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"--disagreement must be in [0, 1) or 'measured' (got {text!r})")
    return rate


def disagreement_arg(text: str):
    """--disagreement as an argparse type: :func:`parse_disagreement`, its refusal argparse's one line."""
    try:
        return parse_disagreement(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a rate in [0, 1) or 'measured' (got {text!r})") from None


COUPLING = Number(float, 0.0, 1.0, open_hi=True)  # ρ: √(1 − ρ) scales each variant's own noise
POINTS = Number(float, 0.0, 100.0, open_lo=True)  # a precision target, in points of a score in [0, 100]


def retention_precision_arg(text: str) -> dict:
    """--retention-precision: 'variant=percent,...' (a simulated variant other than full, a percent > 0)."""
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, eq, value = item.partition("=")
        if not eq or name.strip() not in VARIANTS or name.strip() == "full":
            raise argparse.ArgumentTypeError(
                f"takes variant=percent,... with a variant of {', '.join(v for v in VARIANTS if v != 'full')} "
                f"(got {item!r})"
            )
        out[name.strip()] = Number(float, 0.0, open_lo=True)(value)
    return out


# ---- the adaptive design's stopping rule and retention interval over many paths at once: the same arithmetic as
# grrr_stream.stats.anytime.decide and retention_interval (which take one path), built on its score_path, so that
# a thousand studies run in minutes; tests/test_simulate.py checks both against the scalar functions path by path

REASON_CODES = {"thresholds": 0, "precision": 1, "exhausted": 2}
SIDE_NAMES = {1: "above", -1: "below", 0: "open"}


def _side(lo: np.ndarray, hi: np.ndarray, at: float) -> np.ndarray:
    """+1 above, −1 below, 0 open (NaN before the census: open)."""
    return (lo > at).astype(np.int8) - (hi < at).astype(np.int8)


def decide_many(
    order: Order,
    variant,
    full,
    thresholds: Thresholds,
    *,
    chunk: int,
    precisions,
    alpha=0.05,
    sequence="betting",
    retention_points=None,
    bets="plugin",
) -> dict:
    """decide() for every row of ``variant``/``full`` (paths × problems, every problem answered) and each
    precision target: {target: {'problems', 'reason' (REASON_CODES), 'minus_full', 'lo', 'hi' (points), 'sides'
    (paths × thresholds: +1 above, −1 below, 0 open, in Thresholds.labels' order)}}. Tuned ``bets`` make one
    sequence per target; the plug-in one for all."""
    variant, full = np.asarray(variant, dtype=np.float64), np.asarray(full, dtype=np.float64)
    if variant.shape[-1] != order.total:
        raise ValueError(f"{variant.shape[-1]} problems, the order has {order.total}: answer all of them")
    by_target: dict = {}
    for p in precisions:
        by_target.setdefault(bet_target(bets, p), []).append(p)
    out = {}
    for target, ps in by_target.items():
        out |= _decide_paths(order, variant, full, thresholds, chunk, ps, alpha, sequence, retention_points, target)
    return out


def _decide_paths(order, variant, full, thresholds, chunk, precisions, alpha, sequence, retention_points, target):
    marks = np.array(order.boundaries(chunk))
    at = marks - 1
    kw = dict(sequence=sequence, looks=marks, target=target)
    diff = score_path(order, variant - full, -1.0, 1.0, alpha, **kw)
    sides = [_side(diff.lo[:, at], diff.hi[:, at], d / 100) for d in thresholds.difference_points]
    for r in thresholds.retention_pct:
        theta = r / 100
        path = score_path(order, variant - theta * full, -theta, 1.0, alpha, **kw)
        sides.append(_side(path.lo[:, at], path.hi[:, at], 0.0))
    side = np.stack(sides, axis=-1) if sides else np.zeros(diff.lo[:, at].shape + (0,), dtype=np.int8)
    decided = (side != 0).all(axis=-1) if sides else np.zeros(side.shape[:2], dtype=bool)
    exhausted = np.broadcast_to(marks == order.total, decided.shape)
    half = 100 * (diff.hi[:, at] - diff.lo[:, at]) / 2
    narrow = np.ones(half.shape, dtype=bool)
    if retention_points is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            narrow = half <= retention_points * running_score(order, full)[:, at]
    rows = np.arange(variant.shape[0])
    out = {}
    for p in precisions:
        stop = exhausted | (narrow & (decided if p is None else decided | (half <= p)))
        first = np.argmax(stop, axis=1)  # the last mark is the end: every row stops somewhere
        reason = np.where(exhausted[rows, first], 2, np.where(decided[rows, first], 0, 1))
        i = at[first]
        out[p] = {"problems": marks[first], "reason": reason, "minus_full": 100 * diff.estimate[rows, i]}
        out[p] |= {"lo": 100 * diff.lo[rows, i], "hi": 100 * diff.hi[rows, i], "sides": side[rows, first]}
    return out


def retention_many(
    order: Order,
    variant,
    full,
    stops: np.ndarray,
    *,
    alpha=0.05,
    top=10.0,
    tolerance=1e-4,
    sequence="betting",
    target=None,
) -> tuple[np.ndarray, np.ndarray]:
    """retention_interval() of each row after its first ``stops[row]`` problems: (lower, upper) in percent. The
    bisection halves every row's bracket in step, so it takes the scalar loop's exact steps."""
    lower, upper = np.full(len(stops), np.nan), np.full(len(stops), np.nan)
    for k in np.unique(stops):
        rows = np.flatnonzero(stops == k)
        if k <= order.census_end:
            continue
        v, f = np.asarray(variant[rows, :k], dtype=np.float64), np.asarray(full[rows, :k], dtype=np.float64)
        lower[rows], upper[rows] = _bisect(order, v, f, alpha, top, tolerance, sequence, target)
    return 100 * lower, 100 * upper


def _bisect(order, v, f, alpha, top, tolerance, sequence, target):
    m = len(v)
    kw = dict(alpha=alpha, sequence=sequence, target=target)
    vv, ff = np.concatenate([v, v]), np.concatenate([f, f])
    above0, below0 = ratio_sides(order, v, f, np.zeros(m), **kw)
    above_t, below_t = ratio_sides(order, v, f, np.full(m, top), **kw)
    # lower edge: the first θ not surely below the ratio; upper edge: the first θ surely above it (edge() of the
    # package)
    fixed = np.concatenate(
        [np.where(~above0, 0.0, np.where(above_t, top, np.nan)), np.where(below0, 0.0, np.where(~below_t, top, np.nan))]
    )
    a, b = np.zeros(2 * m), np.full(2 * m, top)
    is_lower = np.arange(2 * m) < m
    while b[0] - a[0] > tolerance:
        mid = (a + b) / 2
        above, below = ratio_sides(order, vv, ff, mid, **kw)
        excluded = np.where(is_lower, ~above, below)
        a, b = np.where(excluded, a, mid), np.where(excluded, mid, b)
    edge = np.where(np.isnan(fixed), (a + b) / 2, fixed)
    return edge[:m], edge[m:]


# ---- the verdict box's evaluation claims on simulated studies: each claim's verdict under the fixed design (at the
# point estimates, and by the report's rule with a joint bootstrap over problems) and under the adaptive design (at
# its point estimates, where a side stayed open; and by the report's rule on the intervals stats/claims_adaptive.py
# gives the product's claims: a count from the transitions surely on the claim's side to those possibly on it, a
# median from the median of the lower ends to that of the upper ends), by the interval rule: at_least_fraction
# (three-way on the interval's two ends), contains (the paper's whole percent ± 0.5 inside the interval),
# above_other (one interval wholly above the other). This compares the designs on the intervals alone; the verdict
# box itself tests claims over sets exactly against the paper's counts (grrr_stream/report/verdict_sets.py), which
# these studies do not model. Verdicts are coded 1 holds, −1 does not hold, 0 not resolved, NaN not computed.

CLAIM_VARIANTS = ("base", "full", "offnull", "diag", "null")
RETENTION_VARIANTS = ("offnull", "diag", "null")
_BOX = {c.id: c for c in CLAIMS if c.source == "claims"}
# the paper's "≥ 92 % in 25 of 28": the design decides it (offnull's second floor), the verdict box has no row
EXTRA = {"offnull-floor-92": 25 / 28}
CLAIM_IDS = ("offnull-within", "offnull-median", "offnull-floor", "offnull-floor-92", "diag-median-sft")
CLAIM_IDS += ("diag-median-rl", "diag-ceiling-sft", "null-above-diag")


def _nanmedian(x, axis):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(x, axis=axis)


def _ratio(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b != 0, 100.0 * a / np.where(b != 0, b, 1.0), np.nan)


def at_least(lo, hi, n, target):
    """at_least_fraction by the interval rule: holds when both ends of the count's interval reach the paper's share."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ok_lo, ok_hi = lo / n >= target - 1e-9, hi / n >= target - 1e-9
    v = np.where(ok_lo & ok_hi, 1.0, np.where(~(ok_lo | ok_hi), -1.0, 0.0))
    return np.where(n > 0, v, np.nan)


def contains(lo, hi, target):
    """contains by the interval rule: the paper's whole percent (± 0.5) inside the interval."""
    v = np.where((lo - 0.5 <= target) & (target < hi + 0.5), 1.0, -1.0)
    return np.where(np.isfinite(lo) & np.isfinite(hi), v, np.nan)


def above_other(a_lo, a_hi, b_lo, b_hi):
    v = np.where(a_lo > b_hi, 1.0, np.where(a_hi < b_lo, -1.0, 0.0))
    return np.where(np.isfinite(a_lo + a_hi + b_lo + b_hi), v, np.nan)


def _point_booleans(base_minus_full, off_minus_full, off_retention, diag_retention, cs):
    """Per transition, at point estimates (points, percent): informative, within, ≥ floor, ≥ second floor,
    ≤ ceiling."""
    return {
        "informative": base_minus_full <= -cs.informative_points + TIE,
        "within": off_minus_full >= -cs.within_points - TIE,
        "floor": off_retention >= cs.retention_floor_pct - TIE,
        "floor92": off_retention >= cs.retention_second_floor_pct - TIE,
        "ceiling": diag_retention <= cs.retention_ceiling_pct + TIE,
    }


def _fixed_booleans(sc, cs):
    """The fixed design's booleans from scores (…, T, variant) in CLAIM_VARIANTS' order (points)."""
    b, f, o, d = sc[..., 0], sc[..., 1], sc[..., 2], sc[..., 3]
    return _point_booleans(b - f, o - f, _ratio(o, f), _ratio(d, f), cs)


def _sides(d_off, d_diag, d_base=None):
    """Per transition, the side each threshold's sequence decided, as the claim reads it: +1 on the claim's side,
    −1 off it, 0 open (diag: its last threshold, whatever it is compared with before it)."""
    informative = {} if d_base is None else {"informative": -d_base["sides"][..., 0]}
    off = {k: d_off["sides"][..., i] for i, k in enumerate(("within", "floor", "floor92"))}
    return informative | off | {"ceiling": -d_diag["sides"][..., -1]}


def _per_transition(seq, cs):
    """The adaptive design's per-transition booleans: the side its sequence decided, else its point estimate's."""
    off, diag = seq["offnull"], seq["diag"]
    point = _point_booleans(seq["base"]["minus_full"], off["minus_full"], off["retention"], diag["retention"], cs)
    return {k: np.where(s == 0, point[k], s == 1) for k, s in _sides(off, diag, seq["base"]).items()}


def _per_transition_ends(d_off, d_diag):
    """The adaptive design's per-transition sides as the product's claims read them (stats/claims_adaptive.py):
    a count runs from the transitions whose interval lies wholly on the claim's side ('surely') to those whose
    interval reaches it ('possibly')."""
    sides = _sides(d_off, d_diag)
    return {k: s == 1 for k, s in sides.items()}, {k: s >= 0 for k, s in sides.items()}


# the medians of retention over transitions that the claims read: key → (variant, the transitions: a group or all)
MEDIANS = {"offnull": ("offnull", None), "diag-sft": ("diag", "SFT"), "diag-rl": ("diag", "RL")}
MEDIANS |= {"null": ("null", None), "diag": ("diag", None)}


def _median(x, group):
    """The median of ``x`` over the transitions (its last axis) of ``group`` (None: all)."""
    return _nanmedian(x if group is None else x[..., np.array(GROUPS) == group], -1)


def _medians(sc):
    """The fixed design's medians, from scores (…, T, variant) in CLAIM_VARIANTS' order."""
    r = {v: _ratio(sc[..., CLAIM_VARIANTS.index(v)], sc[..., 1]) for v in ("offnull", "diag", "null")}
    return {key: _median(r[v], group) for key, (v, group) in MEDIANS.items()}


def _seq_medians(seq):
    """The adaptive design's: (median of the point estimates, of the lower ends, of the upper ends); NaN where the
    retention intervals were not computed."""
    out = {}
    for key, (v, group) in MEDIANS.items():
        d = seq[v]
        if "ret_lo" in d:
            out[key] = tuple(_median(d[k], group) for k in ("retention", "ret_lo", "ret_hi"))
        else:
            out[key] = (np.full(d["retention"].shape[0], np.nan),) * 3
    return out


def _counts(bools, inf, sft):
    return {
        "offnull-within": ((bools["within"] & inf).sum(-1), inf.sum(-1)),
        "offnull-floor": (bools["floor"].sum(-1), bools["floor"].shape[-1]),
        "offnull-floor-92": (bools["floor92"].sum(-1), bools["floor92"].shape[-1]),
        "diag-ceiling-sft": (bools["ceiling"][..., sft].sum(-1), int(sft.sum())),
    }


def _target(cid):
    return EXTRA[cid] if cid in EXTRA else _BOX[cid].target


def claim_verdicts(fixed, boot, seq, settings) -> dict:
    """Per study, each claim's verdicts (adaptive at its point estimates, adaptive by the report's rule, fixed at
    its point estimates, fixed by the report's rule), like compared with like,
    and per threshold how many (study, transition) pairs the two designs put on the same side."""
    cs = settings["claim_settings"]
    sft = np.array([g == "SFT" for g in GROUPS])
    pts = fixed[..., [VARIANTS.index(v) for v in CLAIM_VARIANTS]]  # S × T × 5
    reps = np.moveaxis(boot, -1, 1)  # S × R × T × 5
    fb_pt, fb_rep = _fixed_booleans(pts, cs), _fixed_booleans(reps, cs)
    inf = fb_pt["informative"]
    sb = _per_transition(seq, cs)
    surely, possibly = _per_transition_ends(seq["offnull"], seq["diag"])
    out = {}
    c_pt, c_seq = _counts(fb_pt, inf, sft), _counts(sb, sb["informative"], sft)
    c_lo, c_hi = (_counts(ends, sb["informative"], sft) for ends in (surely, possibly))
    c_rep = _counts(fb_rep, inf[:, None], sft)
    for cid in c_pt:
        lo, hi = np.percentile(c_rep[cid][0], [2.5, 97.5], axis=1)
        n_seq, n_fix, t = np.asarray(c_seq[cid][1]), np.asarray(c_pt[cid][1]), _target(cid)
        out[cid] = (
            at_least(c_seq[cid][0], c_seq[cid][0], n_seq, t),
            at_least(c_lo[cid][0], c_hi[cid][0], n_seq, t),
            at_least(c_pt[cid][0], c_pt[cid][0], n_fix, t),
            at_least(lo, hi, n_fix, t),
        )
    m_pt, m_rep = _medians(pts), _medians(reps)
    m_ci = {k: np.nanpercentile(v, [2.5, 97.5], axis=1) for k, v in m_rep.items()}
    seq_med = _seq_medians(seq)
    for cid, key in (("offnull-median", "offnull"), ("diag-median-sft", "diag-sft"), ("diag-median-rl", "diag-rl")):
        t = _target(cid)
        est, lo, hi = seq_med[key]
        out[cid] = (
            contains(est, est, t),
            np.where(np.isnan(est), np.nan, contains(lo, hi, t)),
            contains(m_pt[key], m_pt[key], t),
            contains(m_ci[key][0], m_ci[key][1], t),
        )
    s_null, s_diag = seq_med["null"], seq_med["diag"]
    out["null-above-diag"] = (
        above_other(s_null[0], s_null[0], s_diag[0], s_diag[0]),
        above_other(s_null[1], s_null[2], s_diag[1], s_diag[2]),
        above_other(m_pt["null"], m_pt["null"], m_pt["diag"], m_pt["diag"]),
        above_other(m_ci["null"][0], m_ci["null"][1], m_ci["diag"][0], m_ci["diag"][1]),
    )
    sides = {k: (int((sb[k] == fb_pt[k]).sum()), sb[k].size) for k in sb}
    return {"claims": out, "sides": sides}


# ---- designs: the adaptive design against the fixed one

# the design before the controls' coarser precision (--uniform): every variant at the precision target, diag
# against its ceiling alone
UNIFORM = AdaptiveSettings(
    variant_precision_points={},
    difference_points={"offnull": (-4.3,), "base": (-1.0,)},
    retention_pct={"offnull": (95.0, 92.0), "diag": (25.0,)},
)


def design(seq: AdaptiveSettings) -> dict[str, Thresholds]:
    """Each variant's thresholds, as the product's adaptive settings give them (the defaults: offnull against
    'within 4.3' and the two retention floors, diag against 'within 4.3', ≥ 95 % and its ceiling, base against
    'informative'); the others stop on precision alone."""
    return {v: seq.thresholds(v) for v in VARIANTS if v != "full"}


def own_precisions(seq: AdaptiveSettings, variant: str, targets) -> dict[float, Optional[float]]:
    """Per precision target (the settings' ``precision_points``), the precision ``variant`` stops at (None: its
    thresholds alone)."""
    return {p: seq.model_copy(update={"precision_points": p}).precision(variant) for p in targets}


def bench_matrix(order) -> np.ndarray:
    """problems × benchmarks (SIZES' order): 1 where the problem is of b, so that correctness @ it counts."""
    names = list(SIZES)
    m = np.zeros((order.total, len(names)), dtype=np.float32)
    for i, (b, _) in enumerate(order.items):
        m[i, names.index(b)] = 1.0
    return m


def bootstrap_weights(rng, order, resamples: int) -> np.ndarray:
    """problems × resamples: the weight of each problem in one joint resample of every benchmark's problems."""
    w = np.zeros((order.total, resamples), dtype=np.float32)
    pos = {b: [i for i, (bb, _) in enumerate(order.items) if bb == b] for b in SIZES}
    for b, idx in pos.items():
        counts = rng.multinomial(len(idx), np.full(len(idx), 1 / len(idx)), size=resamples)
        w[idx] = counts.T / (len(SIZES) * len(idx))
    return w


def oracle_problems(order, variant: np.ndarray, full: np.ndarray, precision: float) -> np.ndarray:
    """A floor under the problems any valid design needs to bring a variant's difference to full within
    ±``precision`` points: the census plus the smallest m at which a fixed-size normal 95 % interval, looked at once
    and knowing the study's own spread of weighted paired differences over the pooled problems (without
    replacement: the finite-population factor), is that narrow. An anytime-valid sequence is wider than that
    interval at every m, so no stopping rule that keeps ±precision valid answers fewer. paths × problems → paths."""
    end, n = order.census_end, variant.shape[-1]
    pooled = n - end
    weight = np.array([order.weight[b] for b, _ in order.items[end:n]])
    spread = (weight * (variant[..., end:] - full[..., end:])).var(axis=-1)  # the population's, over its M problems
    scale = 1.959964 * len(order.weight) / len(order.sizes)  # z₀.₉₇₅ × the pooled part's share of the score
    with np.errstate(divide="ignore"):
        slack = (precision / 100) ** 2 * (pooled - 1) / (scale**2 * spread)  # (M − m)/m may be at most this
    return end + np.where(spread > 0, np.ceil(pooled / (1 + slack)), 1).astype(np.int64)


ALLOCATIONS = ("proportional", "equal", "neyman")


def allocation_problems(order, variant, full, precision: float, allocation: str, *, split: bool = False):
    """The problems a one-look normal 95 % interval needs for the unweighted mean over benchmarks of a pair's
    difference to be within ±``precision`` points, knowing each benchmark's spread S_b² of the paired differences
    (an oracle), with the draws n_b per benchmark, without replacement (variance Σ_b S_b² (1/n_b − 1/N_b) / B²):
    ``proportional`` n_b ∝ N_b, ``equal`` n_b the same for every benchmark, ``neyman`` n_b ∝ (1/B) S_b (the
    allocation of least variance for a given total); each capped at N_b (what a capped benchmark cannot take goes to
    the others). paths × problems (every problem, in the order's order) → paths (``split``: paths × benchmarks)."""
    names = list(order.sizes)
    bench = np.array([names.index(b) for b, _ in order.items])
    size = np.array([order.sizes[b] for b in names], dtype=np.float64)
    diff = np.asarray(variant, dtype=np.float64) - np.asarray(full, dtype=np.float64)
    var = np.stack([diff[..., bench == j].var(axis=-1, ddof=1) for j in range(len(names))], axis=-1)
    bound = (precision / 100 / 1.959964) ** 2 * len(names) ** 2  # Σ_b S_b² (1/n_b − 1/N_b) may be at most this
    shape = {"proportional": size, "equal": np.ones_like(size)}.get(allocation)
    if allocation == "neyman":
        shape = np.sqrt(var)
    elif shape is None:
        raise ValueError(f"allocation {allocation!r}: one of {', '.join(ALLOCATIONS)}")
    shape = np.broadcast_to(shape, var.shape)

    def draws(lam):
        return np.minimum(np.ceil(lam[..., None] * shape - 1e-9), size)

    def ok(n):
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.where(var > 0, var * (1 / n - 1 / size), 0.0)
        return np.where((var > 0) & (n == 0), np.inf, v).sum(-1) <= bound * (1 + 1e-12)

    lo = np.zeros(var.shape[:-1])
    with np.errstate(divide="ignore"):
        hi = np.max(np.where(shape > 0, size / np.where(shape > 0, shape, 1), 0), axis=-1)  # every n_b = N_b
    for _ in range(60):
        mid = (lo + hi) / 2
        good = ok(draws(mid))
        lo, hi = np.where(good, lo, mid), np.where(good, mid, hi)
    n = draws(hi)
    return n.astype(np.int64) if split else n.sum(-1).astype(np.int64)


def run_batch(rng, studies: int, order, settings: dict, retention: bool) -> dict:
    """One batch of studies: fixed scores, their bootstrap replicates, and the adaptive decisions per
    precision target (with retention intervals when ``retention``)."""
    if settings.get("disagreement") is None:
        acc = np.stack([accuracies(rng) for _ in range(studies)])
        correct = draw_correct(rng, acc, order, settings["coupling"])
    else:
        acc_b = np.stack([scenario_accuracies(rng) for _ in range(studies)])
        correct = draw_flipped(rng, acc_b, order, settings["disagreement"])
    s, t, nv, n = correct.shape
    flips = (correct != correct[:, :, VARIANTS.index("full") : VARIANTS.index("full") + 1]).mean(axis=(0, 1, 3))
    flat = correct.reshape(-1, n).astype(np.float32)
    counts = (flat @ bench_matrix(order)).astype(np.float64)  # correct answers per benchmark: exact integers
    fixed = 100 * (counts / np.array(list(SIZES.values()))).mean(-1).reshape(s, t, nv)
    cv = [VARIANTS.index(v) for v in CLAIM_VARIANTS]
    boot = 100 * (
        correct[:, :, cv].reshape(-1, n).astype(np.float32) @ bootstrap_weights(rng, order, settings["resamples"])
    ).reshape(s, t, len(cv), -1)
    full = correct[:, :, VARIANTS.index("full")].reshape(s * t, n).astype(np.float64)
    full_est = running_score(order, full)
    out = {"fixed": fixed, "boot": boot.astype(np.float64), "seq": {p: {} for p in settings["precisions"]}}
    out["flips"] = flips
    for v, th in settings["design"].items():
        x = correct[:, :, VARIANTS.index(v)].reshape(s * t, n).astype(np.float64)
        x_est = running_score(order, x)
        own = own_precisions(settings["adaptive"], v, settings["precisions"])
        targets, ret = list(dict.fromkeys(own.values())), settings["retention_precision"].get(v)
        bets = settings["adaptive"].bets
        decided = decide_many(
            order, x, full, th, chunk=settings["chunk"], precisions=targets, retention_points=ret, bets=bets
        )
        for p in settings["precisions"]:
            d = dict(decided[own[p]])
            # the floor for what stops on precision alone; what has thresholds keeps its own count
            d["oracle"] = oracle_problems(order, x, full, own[p]) if not th.labels else d["problems"]
            # the one-look oracles by allocation, for every variant with a precision (one with thresholds too: the
            # fewer of its adaptive count and the oracle's); proportional = today's floor's (census, then the
            # pooled benchmarks in proportion to their size)
            for kind in ALLOCATIONS:
                if own[p] is None:
                    m = d["problems"]
                elif kind == "proportional":
                    m = oracle_problems(order, x, full, own[p])
                else:
                    m = allocation_problems(order, x, full, own[p], kind)
                d[f"oracle_{kind}"] = np.minimum(m, d["problems"]) if th.labels else m
            i = d["problems"] - 1
            rows = np.arange(s * t)
            with np.errstate(divide="ignore", invalid="ignore"):
                d["retention"] = 100 * x_est[rows, i] / full_est[rows, i]
            if v in RETENTION_VARIANTS and retention:
                d["ret_lo"], d["ret_hi"] = retention_many(
                    order, x, full, d["problems"], tolerance=settings["tolerance"], target=bet_target(bets, own[p])
                )
            out["seq"][p][v] = {k: a.reshape((s, t) + a.shape[1:]) for k, a in d.items()}
    return out


def summarise_batch(res: dict, settings: dict, acc: dict) -> None:
    """Add one batch's coverage, agreement, problems and reasons to the running totals ``acc``."""
    fixed, n_all = res["fixed"], sum(SIZES.values())
    f_full = fixed[..., VARIANTS.index("full")]
    for p, seq in res["seq"].items():
        a = acc.setdefault(p, {"cover": [0, 0], "cover_ret": [0, 0], "problems": {}, "reasons": np.zeros(3)})
        agree, side_agree = a.setdefault("agree", {}), a.setdefault("side_agree", {})
        longest = np.zeros(fixed.shape[:2], dtype=np.int64)
        oracle_longest = np.zeros(fixed.shape[:2], dtype=np.int64)
        for v, d in seq.items():
            truth = fixed[..., VARIANTS.index(v)] - f_full
            inside = (d["lo"] - 1e-9 <= truth) & (truth <= d["hi"] + 1e-9)
            a["cover"][0] += int(inside.sum())
            a["cover"][1] += inside.size
            if "ret_lo" in d:
                with np.errstate(divide="ignore", invalid="ignore"):
                    r = 100 * fixed[..., VARIANTS.index(v)] / f_full
                ok = np.isfinite(r)
                # the ends are known to the bisection's tolerance (in θ, so ×100 in percent): an interval that
                # closed on the exact ratio (every problem answered) is its midpoint within that
                slack = 100 * settings["tolerance"]
                a["cover_ret"][0] += int(((d["ret_lo"] - slack <= r) & (r <= d["ret_hi"] + slack))[ok].sum())
                a["cover_ret"][1] += int(ok.sum())
            a["problems"][v] = a["problems"].get(v, 0) + int(d["problems"].sum())
            a["oracle"] = a.get("oracle", 0) + int(d["oracle"].sum())
            oracle_longest = np.maximum(oracle_longest, d["oracle"])
            a["reasons"] += np.bincount(d["reason"].ravel(), minlength=3)
            longest = np.maximum(longest, d["problems"])
        a["problems"]["full"] = a["problems"].get("full", 0) + int(longest.sum())
        a["oracle"] += int(oracle_longest.sum())
        # per transition: the problems full answers (its longest variant's), adaptively and by each oracle
        per = a.setdefault("per_transition", {})
        per.setdefault("adaptive", []).append((longest / n_all).ravel())
        for kind in ALLOCATIONS:
            most = np.max([d[f"oracle_{kind}"] for d in seq.values()], axis=0)
            per.setdefault(f"oracle_{kind}", []).append((most / n_all).ravel())
        a["flips"] = a.get("flips", 0) + res["flips"] * fixed.shape[0]
        a["studies"] = a.get("studies", 0) + fixed.shape[0]
        a["n_all"] = n_all
        verdicts = claim_verdicts(fixed, res["boot"], seq, settings)
        for cid, (seq_point, seq_rule, fix_point, fix_boot) in verdicts["claims"].items():
            have = ~np.isnan(seq_rule)
            g = agree.setdefault(cid, [0, 0, 0, 0, 0])
            g[0] += int((seq_point == fix_point)[have].sum())
            g[1] += int((seq_rule == fix_boot)[have].sum())
            g[2] += int(have.sum())
            g[3] += int((fix_point == 1)[have].sum())
            g[4] += int((fix_boot == 0)[have].sum())
        for key, (same, total) in verdicts["sides"].items():
            s_ = side_agree.setdefault(key, [0, 0])
            s_[0] += same
            s_[1] += total


CLAIM_FIGURES = ("agree_point", "agree_report_rule", "studies", "holds_fixed_point", "unresolved_fixed_report_rule")


def report(acc: dict, settings: dict) -> dict:
    """The JSON-able figures, per precision target."""
    out = {}
    for p, a in acc.items():
        studies, n_all = a["studies"], a["n_all"]
        per_variant = {v: a["problems"][v] / (studies * len(GROUPS) * n_all) for v in VARIANTS}
        out[str(p)] = {
            "studies": studies,
            "difference_coverage": a["cover"][0] / a["cover"][1],
            "retention_coverage": a["cover_ret"][0] / a["cover_ret"][1] if a["cover_ret"][1] else None,
            "retention_intervals_over": a["cover_ret"][1],
            "ratio_total": sum(a["problems"].values()) / (studies * len(GROUPS) * len(VARIANTS) * n_all),
            "ratio_per_variant": per_variant,
            "oracle_floor_ratio": a["oracle"] / (studies * len(GROUPS) * len(VARIANTS) * n_all),
            "stop_reasons": dict(zip(REASON_CODES, (a["reasons"] / a["reasons"].sum()).tolist())),
            "claims": {
                cid: dict(zip(CLAIM_FIGURES, (g[0] / g[2], g[1] / g[2], g[2], g[3] / g[2], g[4] / g[2])))
                for cid, g in a["agree"].items()
                if g[2]
            },
            "threshold_sides_agree": {k: s[0] / s[1] for k, s in a["side_agree"].items()},
            "per_transition": {k: _quantiles(np.concatenate(v)) for k, v in a["per_transition"].items()},
            "flip_rate_per_variant": dict(zip(VARIANTS, (a["flips"] / studies).round(4).tolist())),
        }
    return out


def _quantiles(x: np.ndarray) -> dict:
    """Per-transition shares of the problems: mean, median, 90th percentile, share of transitions at ≤ 1/3."""
    return {
        "mean": float(x.mean()),
        "median": float(np.median(x)),
        "p90": float(np.percentile(x, 90)),
        "at_most_third": float((x <= 1 / 3 + 1e-12).mean()),
    }


def _listing(label: str, figures: dict) -> str:
    return label + ", ".join(f"{k} {v:.3f}" for k, v in figures.items())


def print_report(out: dict, settings: dict) -> None:
    what = settings.get("disagreement")
    model = f"coupling ρ = {settings['coupling']}" if what is None else f"disagreement scenario, flip rates {what}"
    print(
        f"{model}, {settings.get('allocation', 'proportional')} draws, {settings.get('bets')} bets, "
        f"chunk {settings['chunk']}, α = 0.05, "
        f"{settings['resamples']} bootstrap resamples for the fixed design's report rule"
    )
    for p, r in out.items():
        print(
            f"\n== precision ±{p} points: {r['studies']} studies; problems answered / fixed design: "
            f"{r['ratio_total']:.3f} ({'meets' if r['ratio_total'] <= 1 / 3 else 'does NOT meet'} ≤ 1/3)"
        )
        over = r["retention_intervals_over"]
        ret = "not computed" if r["retention_coverage"] is None else f"{r['retention_coverage']:.4f} over {over}"
        print(f"difference CI coverage {r['difference_coverage']:.4f}; retention CI coverage {ret}")
        print(
            f"floor for any valid design with the same thresholds and ±{p} (oracle fixed-size normal interval "
            f"on the precision-only variants): {r['oracle_floor_ratio']:.3f}"
        )
        print("per transition (full = its longest variant), share of the problems over studies × transitions:")
        for k, q in r["per_transition"].items():
            print(f"  {k:20s} " + _listing("", q))
        print(_listing("flip rate against full per variant: ", r["flip_rate_per_variant"]))
        print(_listing("stop reasons: ", r["stop_reasons"]))
        print(_listing("ratio per variant: ", r["ratio_per_variant"]))
        heads = ("agree (point)", "agree (report)", "fixed holds", "fixed unres.", "studies")
        print(f"{'claim':24s} " + " ".join(f"{h:>{len(h) + 1}s}" for h in heads))
        for cid in CLAIM_IDS:
            if c := r["claims"].get(cid):
                print(
                    f"{cid:24s} {c['agree_point']:14.3f} {c['agree_report_rule']:15.3f} "
                    f"{c['holds_fixed_point']:12.3f} {c['unresolved_fixed_report_rule']:13.3f} {c['studies']:8d}"
                )
        print(_listing("per-transition threshold sides agree: ", r["threshold_sides_agree"]))


def make_settings(
    seq=None,
    *,
    coupling=0.9,
    precisions=(2.0, 3.0, 4.0, 5.0),
    chunk=64,
    resamples=200,
    tolerance=1e-3,
    retention_precision: Optional[dict] = None,
    disagreement=None,
    bets: Optional[str] = None,
    allocation: Optional[str] = None,
) -> dict:
    """What a batch runs under: the simulation's knobs, the product's adaptive settings ``seq`` (default: its
    defaults; ``bets`` and ``allocation`` replace its own) with the design they give, and the claims' settings."""
    seq = AdaptiveSettings() if seq is None else seq
    seq = seq.model_copy(update={k: v for k, v in (("bets", bets), ("allocation", allocation)) if v is not None})
    return {
        "coupling": coupling,
        "precisions": tuple(float(p) for p in precisions),
        "chunk": chunk,
        "resamples": resamples,
        "tolerance": tolerance,
        "adaptive": seq,
        "design": design(seq),
        "claim_settings": ClaimSettings(),
        "retention_precision": dict(retention_precision or {}),
        "disagreement": disagreement,
    }


def simulate(studies: int, *, batch=25, retention_studies=250, seed=0, progress=False, uniform=False, **knobs) -> dict:
    """Run ``studies`` simulated studies in batches; the figures per precision target (:func:`report`). ``knobs``:
    :func:`make_settings`' keywords."""
    settings = make_settings(UNIFORM if uniform else None, **knobs)
    seq = settings["adaptive"]
    order = problem_order(SIZES, seed, seq.max_weight, seq.allocation)
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    acc: dict = {}
    done = 0
    while done < studies:
        size = min(batch, studies - done)
        res = run_batch(rng, size, order, settings, retention=done < retention_studies)
        summarise_batch(res, settings, acc)
        done += size
        if progress:
            print(f"{done} studies, {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return {
        "settings": {
            **{k: v for k, v in settings.items() if k not in ("design", "claim_settings", "adaptive")},
            "variant_precision_points": seq.variant_precision_points,
            "bets": seq.bets,
            "allocation": seq.allocation,
        },
        "results": report(acc, settings),
    }


def run_designs(args, ap: argparse.ArgumentParser) -> None:
    studies = 40 if args.quick else args.studies
    t = time.perf_counter()
    out = simulate(
        studies,
        coupling=args.coupling,
        precisions=args.precisions,
        chunk=args.chunk,
        retention_studies=studies if args.quick else args.retention_studies,
        seed=args.seed,
        progress=True,
        retention_precision=args.retention_precision,
        uniform=args.uniform,
        disagreement=args.disagreement,
        bets=args.bets,
        allocation=args.allocation,
    )
    out["seconds"] = round(time.perf_counter() - t, 1)
    print_report(out["results"], out["settings"])
    print(f"\n{studies} studies in {out['seconds']} s")
    if args.json:
        try:
            args.json.write_text(json.dumps(out, indent=1))
        except OSError as e:
            raise InputError(f"--json: {os_error(e, args.json)}") from None


# ---- betting: a prototype, not used by the package: the hedged betting confidence sequence for sampling without
# replacement (I. Waudby-Smith and A. Ramdas, "Confidence sequences for sampling without replacement", NeurIPS 2020,
# §3.2; the hedged capital of "Estimating means of bounded random variables by betting", JRSS-B 2024, §4), against
# the package's empirical-Bernstein one (grrr_stream.stats.empirical_bernstein.eb_wor_cs), on the paired
# differences of the studies' near-equal variants (proj against full). For a grid of candidate means m, the capital
# K±_t(m) = Π (1 ± λ±_i (x_i − μ_i(m))), μ_i(m) = (N m − S_{i−1}) / (N − i + 1) the mean of what is left were m the
# population's mean; λ±_i the package's predictable plug-in bet, truncated at 1/2 of what keeps the capital
# positive; m is excluded once (K⁺ + K⁻)/2 reaches 1/α (running intersection). The grid (step 1/2000 of the value
# range) is the interval's resolution.


def hedged_wor_cs(x: np.ndarray, population: int, alpha: float = 0.05, grid: int = 2001):
    """(lo, hi) after each draw of ``x`` (values in [0, 1], one path), on a grid of candidate means."""
    n = len(x)
    t = np.arange(1, n + 1, dtype=np.float64)
    cum = np.cumsum(x)
    before = cum - x
    mean_after = (0.5 + cum) / (t + 1)
    var_before = (0.25 + np.cumsum((x - mean_after) ** 2) - (x - mean_after) ** 2) / t
    lam = np.sqrt(2 * math.log(2 / alpha) / (var_before * t * np.log1p(t)))
    m = np.linspace(0, 1, grid)[:, None]
    mu = (population * m - before) / (population - t + 1)  # grid × draws
    possible = np.cumprod((mu >= 0) & (mu <= 1), axis=1).astype(bool)
    mu_c = np.clip(mu, 1e-12, 1 - 1e-12)
    up, down = np.minimum(lam, 0.5 / mu_c), np.minimum(lam, 0.5 / (1 - mu_c))
    with np.errstate(invalid="ignore"):
        log_up = np.cumsum(np.log1p(up * (x - mu_c)), axis=1)
        log_down = np.cumsum(np.log1p(-down * (x - mu_c)), axis=1)
    capital = np.logaddexp(log_up, log_down) - math.log(2)
    excluded = np.maximum.accumulate(~possible | (capital >= math.log(1 / alpha)), axis=1)
    alive = ~excluded
    grid_m = m[:, 0]
    step = 1 / (grid - 1)  # the set of surviving means between grid points is known to a grid step
    lo = np.where(alive.any(0), grid_m[np.argmax(alive, axis=0)] - step, np.nan)
    hi = np.where(alive.any(0), grid_m[grid - 1 - np.argmax(alive[::-1], axis=0)] + step, np.nan)
    return np.maximum(lo, 0.0), np.minimum(hi, 1.0)


BETTING_PATHS_MAX = 10_000  # the betting run draws all its studies at once: about 0.1 MB a path


def run_betting(args, ap: argparse.ArgumentParser) -> None:
    """After how many problems each sequence's difference interval is first within ±2 / ±3 points at the design's
    looks, and the mean half-widths."""
    rng = np.random.default_rng(1)
    order = problem_order(SIZES, seed=0)
    end, cmax, pooled = order.census_end, order.max_weight, len(order.weight)
    weight = np.array([order.weight[b] for b, _ in order.items[end:]])
    to_points = 100 * pooled * cmax * 2 / len(order.sizes)  # a half-width in z units → points of the score
    looks = np.array(order.boundaries(64)) - 1 - end
    first = {"eb": {2: [], 3: []}, "hedged": {2: [], 3: []}}
    widths = {"eb": [], "hedged": []}
    studies = max(1, args.paths // 28)
    acc = np.stack([accuracies(rng) for _ in range(studies)])
    correct = draw_correct(rng, acc, order, args.coupling)
    pairs = correct[:, :, [VARIANTS.index("proj"), VARIANTS.index("full")]].reshape(-1, 2, order.total)
    for v, f in pairs[: args.paths].astype(np.float64):
        z = (weight * (v - f)[end:] + cmax) / (2 * cmax)
        left = order.total - end
        for name, (lo, hi) in (("eb", eb_wor_cs(z, left)), ("hedged", hedged_wor_cs(z, left))):
            half = to_points * (hi - lo) / 2
            widths[name].append(half[looks])
            for p in (2, 3):
                k = np.flatnonzero(half[looks] <= p)
                first[name][p].append((looks[k[0]] + 1 + end) if len(k) else order.total)
    for name in ("eb", "hedged"):
        print(
            f"{name:7s} first look within ±2: median {np.median(first[name][2]):.0f} problems "
            f"({np.median(first[name][2]) / order.total:.3f}), within ±3: median {np.median(first[name][3]):.0f} "
            f"({np.median(first[name][3]) / order.total:.3f}); half-width at 1/3 of the problems: "
            f"{np.mean(np.array(widths[name])[:, np.searchsorted(looks, order.total // 3 - end)]):.2f} points"
        )


def allocation_paths(paths: int, disagreement: float, precision: float, chunk: int, seed: int) -> dict:
    """Close pairs (full at 0.3-0.8 per pooled benchmark, the variant its answers with ``disagreement`` flipped)
    on the pooled benchmarks, after the census of aime24 and amc23: per allocation, the share of the 1,517
    problems at the first look where the interval is within ±``precision`` points, and whether any look's
    interval (every ``chunk`` draws, never stopping) missed the fixed design's value."""
    pooled = [b for b in SIZES if b not in ("aime24", "amc23")]
    sizes = [SIZES[b] for b in pooled]
    weights = [1 / len(SIZES)] * len(pooled)  # each benchmark's share of the five-benchmark mean
    census, n = sum(SIZES.values()) - sum(sizes), sum(sizes)
    looks = np.arange(chunk, n + 1, chunk)
    strata = np.repeat(np.arange(len(sizes)), sizes)
    rng = np.random.default_rng(seed)
    out = {a: {"share": [], "missed": []} for a in ALLOCATION_KINDS}
    for _ in range(paths):
        full = rng.random(n) < rng.uniform(0.3, 0.8, len(sizes))[strata]
        diff = np.where(rng.random(n) < disagreement, ~full, full).astype(float) - full
        truth = sum(w * diff[strata == k].mean() for k, w in enumerate(weights))
        for a in ALLOCATION_KINDS:
            draws = draw_order(sizes, weights, rng, a)
            lo, hi = pooled_cs(diff[draws.items], draws, sizes, weights, looks=looks, target=precision / 100)
            within = np.flatnonzero((hi - lo) / 2 <= precision / 100)
            out[a]["share"].append((census + (looks[within[0]] if len(within) else n)) / (census + n))
            out[a]["missed"].append(bool(((lo > truth + 1e-9) | (hi < truth - 1e-9)).any()))
    return out


def run_allocation(args, ap: argparse.ArgumentParser) -> None:
    start = time.perf_counter()
    out = allocation_paths(args.paths, args.disagreement, args.precision, args.chunk, args.seed)
    print(
        f"{args.paths} close pairs, {args.disagreement:.3f} of the answers flipped, ±{args.precision:g} points, "
        f"looks every {args.chunk} pooled draws, α = 0.05, {time.perf_counter() - start:.0f} s"
    )
    for a, r in out.items():
        x = np.array(r["share"])
        print(
            f"  {a:12s} share of the 1,517 problems: median {np.median(x):.3f}, p90 {np.percentile(x, 90):.3f}, "
            f"≤ 1/3 in {np.mean(x <= 1 / 3 + 1e-12):.3f}; any look missed the truth: {np.mean(r['missed']):.4f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = ap.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--coupling", type=COUPLING, default=0.9, help="ρ: the share of the latent shared by variants, in [0, 1)"
    )
    what = "the adaptive design against the fixed one: problems answered, coverage, claims' verdicts"
    d = commands.add_parser("designs", parents=[common], help=what, description=what)
    d.set_defaults(run=run_designs)
    d.add_argument("--studies", type=COUNT, default=1000)
    d.add_argument("--quick", action="store_true", help="40 studies, retention intervals on all of them")
    d.add_argument(
        "--precisions",
        type=numbers(POINTS),
        default="2,3,4,5",
        help="precision targets in points, in (0, 100]; the first is the default",
    )
    d.add_argument("--chunk", type=COUNT, default=64, help="problems between two looks (≥ 1)")
    d.add_argument(
        "--retention-studies",
        type=Number(int, 0),
        default=250,
        help="the first N studies get retention intervals (retention coverage, the median claims)",
    )
    d.add_argument("--seed", type=SEED, default=0)
    d.add_argument(
        "--retention-precision",
        type=retention_precision_arg,
        default="",
        help="variant=percent,...: those variants stop only once their retention is within ±percent",
    )
    d.add_argument(
        "--uniform",
        action="store_true",
        help="every variant at the precision target and diag against its ceiling alone (the design before "
        "the controls' ±4 and diag's thresholds-only defaults)",
    )
    d.add_argument(
        "--disagreement",
        type=disagreement_arg,
        default="",
        help="the disagreement scenario in place of the ρ model: each variant's answers are full's with this share "
        "flipped (accuracy kept), full at 0.3-0.8 per benchmark (aime24 0.1-0.4), diag at 20-50 %% of full, the "
        "others within ±5 points; 'measured': the demo's per-variant flip rates",
    )
    d.add_argument(
        "--bets",
        choices=("tuned", "plugin"),
        help="the betting sequence's bets (default: the product's, evaluation.adaptive.bets)",
    )
    d.add_argument(
        "--allocation",
        choices=ALLOCATION_KINDS,
        help="how the pooled benchmarks are drawn (default: the product's, evaluation.adaptive.allocation)",
    )
    d.add_argument("--json", type=out_file, help="write the figures here")
    what = "a prototype hedged betting sequence against the empirical-Bernstein one, on near-equal pairs"
    b = commands.add_parser("betting", parents=[common], help=what, description=what)
    b.set_defaults(run=run_betting)
    b.add_argument(
        "--paths",
        type=Number(int, 1, BETTING_PATHS_MAX),
        default=100,
        help=f"near-equal pairs (proj, full), 28 per study, drawn at once (at most {BETTING_PATHS_MAX})",
    )
    what = "the pooled benchmarks drawn in proportion to size against weighted draws, on close pairs"
    a = commands.add_parser("allocation", parents=[common], help=what, description=what)
    a.set_defaults(run=run_allocation)
    a.add_argument("--paths", type=COUNT, default=400)
    a.add_argument(
        "--disagreement", type=PROBABILITY, default=0.046, help="the share of full's answers flipped, in [0, 1]"
    )
    a.add_argument(
        "--precision", type=POINTS, default=2.0, help="the half-width in points the bets aim at, in (0, 100]"
    )
    a.add_argument("--chunk", type=COUNT, default=64, help="pooled draws between two looks (≥ 1)")
    a.add_argument("--seed", type=SEED, default=0)
    what = "the verdict box's family false-contradiction rate and power on planted studies (simulate_verdicts.py)"
    v = commands.add_parser("verdicts", help=what, description=what)
    simulate_verdicts.add_arguments(v)
    v.set_defaults(run=simulate_verdicts.run_verdicts, coupling=0.0)
    args = ap.parse_args()
    parser = commands.choices[args.command]
    try:
        args.run(args, parser)
    except InputError as e:
        fail(parser, str(e))


if __name__ == "__main__":
    main()
