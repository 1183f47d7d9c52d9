#!/usr/bin/env python3
"""Simulation of the sequential evaluation design (grrr_stream.stats.sequential) against the fixed one.

A study = the paper's 28 evaluated transitions (11 SFT, 17 RL) × 12 variants × 1,517 problems (math500 500,
aime24 30, amc23 40, minerva_math 272, olympiadbench 675). The fixed design answers every problem; the
sequential one answers in the seeded order and stops each variant at the first boundary (every ``--chunk``
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

The sequential verdicts, the fixed ones, and what is compared: see docs/evaluation.md, "Sequential design:
simulation". Run:

    python tools/simulate_designs.py                        # 1,000 studies, ρ = 0.9, precision 2, 3, 4, 5
    python tools/simulate_designs.py --coupling 0.6 --json sim_weak.json
    python tools/simulate_designs.py --quick                # 40 studies, a smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
from scipy.special import ndtr

# this checkout's package and the tool's siblings, whatever grrr_stream the environment has installed
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from sim_claims import CLAIM_IDS, claim_verdicts  # noqa: E402  (the tool's sibling module)
from sim_sequential import decide_many, retention_many, score_estimate  # noqa: E402

from grrr_stream.config import ClaimSettings  # noqa: E402
from grrr_stream.evaluation.settings import SequentialSettings  # noqa: E402
from grrr_stream.stats.order import problem_order  # noqa: E402
from grrr_stream.stats.sequential import Thresholds  # noqa: E402

SIZES = {"math500": 500, "aime24": 30, "amc23": 40, "minerva_math": 272, "olympiadbench": 675}
DIFFICULTY = {"math500": -0.8, "minerva_math": 0.4, "olympiadbench": 0.6, "amc23": 0.5, "aime24": 1.5}
VARIANTS = (
    "base",
    "full",
    "proj",
    "diag",
    "off",
    "null",
    "offnull",
    "randrm-0",
    "randrm-1",
    "randrm-2",
    "off-principal-64",
    "no-off-principal-64",
)
TABULATED = ("base", "full", "diag", "off", "null", "offnull")
# GRRR (J. Qi, H. Tang, Z. Zhu, cs.LG 2026), Tables 5 (SFT) and 6 (RL): accuracy in points averaged over the five
# benchmarks, base / full / diag / off / null / offnull, as the team's PAPER_FACTS.md ("Rows visible") copies them
PAPER_ROWS = (
    ("SFT", "C1", (31.3, 49.2, 6.4, 31.3, 18.5, 28.9)),
    ("SFT", "C2", (21.2, 60.4, 14.0, 9.5, 9.7, 56.1)),
    ("SFT", "C3", (17.2, 49.1, 28.0, 54.3, 55.7, 45.8)),
    ("SFT", "C5", (3.6, 5.7, 1.9, 5.8, 6.2, 5.7)),
    ("SFT", "C6", (35.8, 43.5, 38.8, 49.7, 48.0, 42.1)),
    ("SFT", "C7", (5.0, 8.6, 7.9, 9.0, 9.8, 7.5)),
    ("RL", "C1 DeepScaleR (GRPO)", (49.2, 51.8, 41.0, 43.8, 51.7, 54.4)),
    ("RL", "C1 Nemotron (GRPO)", (49.2, 61.3, 40.3, 57.6, 59.2, 62.7)),
    ("RL", "C2 KlearReasoner (GPPO)", (60.4, 71.7, 58.6, 69.8, 69.0, 72.6)),
    ("RL", "C3 UniReason (GRPO)", (49.1, 66.5, 75.1, 64.2, 65.9, 65.0)),
    ("RL", "C5 zephyr-beta (DPO)", (5.7, 3.1, 5.2, 5.3, 4.7, 3.7)),
    ("RL", "C6 DPO", (43.5, 49.7, 41.2, 45.0, 48.5, 49.8)),
)
HIDDEN = {"SFT": 5, "RL": 11}  # the paper's 11 SFT and 17 RL rows less the shown ones
GROUPS = tuple(["SFT"] * 11 + ["RL"] * 17)
CLAIM_VARIANTS = ("base", "full", "offnull", "diag", "null")
RETENTION_VARIANTS = ("offnull", "diag", "null")
REASONS = ("thresholds", "precision", "exhausted")


# the design before the controls' coarser precision (--uniform): every variant at the precision target, diag
# against its ceiling alone
UNIFORM = SequentialSettings(
    variant_precision_points={},
    difference_points={"offnull": (-4.3,), "base": (-1.0,)},
    retention_pct={"offnull": (95.0, 92.0), "diag": (25.0,)},
)


def design(seq: SequentialSettings) -> dict[str, Thresholds]:
    """Each variant's thresholds, as the product's sequential settings give them (the defaults: offnull against
    'within 4.3' and the two retention floors, diag against 'within 4.3', ≥ 95 % and its ceiling, base against
    'informative'); the others stop on precision alone."""
    return {v: seq.thresholds(v) for v in VARIANTS if v != "full"}


def own_precisions(seq: SequentialSettings, variant: str, targets) -> dict[float, Optional[float]]:
    """Per precision target (the settings' ``precision_points``), the precision ``variant`` stops at (None: its
    thresholds alone)."""
    return {p: seq.model_copy(update={"precision_points": p}).precision(variant) for p in targets}


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


def run_batch(rng, studies: int, order, settings: dict, retention: bool) -> dict:
    """One batch of studies: fixed scores, their bootstrap replicates, and the sequential decisions per
    precision target (with retention intervals when ``retention``)."""
    acc = np.stack([accuracies(rng) for _ in range(studies)])
    correct = draw_correct(rng, acc, order, settings["coupling"])
    s, t, nv, n = correct.shape
    flat = correct.reshape(-1, n).astype(np.float32)
    counts = (flat @ bench_matrix(order)).astype(np.float64)  # correct answers per benchmark: exact integers
    fixed = 100 * (counts / np.array(list(SIZES.values()))).mean(-1).reshape(s, t, nv)
    cv = [VARIANTS.index(v) for v in CLAIM_VARIANTS]
    boot = 100 * (
        correct[:, :, cv].reshape(-1, n).astype(np.float32) @ bootstrap_weights(rng, order, settings["resamples"])
    ).reshape(s, t, len(cv), -1)
    full = correct[:, :, VARIANTS.index("full")].reshape(s * t, n).astype(np.float64)
    full_est = score_estimate(order, full)
    out = {"fixed": fixed, "boot": boot.astype(np.float64), "seq": {}}
    for p in settings["precisions"]:
        out["seq"][p] = {}
    for v, th in settings["design"].items():
        x = correct[:, :, VARIANTS.index(v)].reshape(s * t, n).astype(np.float64)
        x_est = score_estimate(order, x)
        own = own_precisions(settings["sequential"], v, settings["precisions"])
        decided = decide_many(
            order,
            x,
            full,
            th,
            chunk=settings["chunk"],
            precisions=list(dict.fromkeys(own.values())),
            retention_points=settings.get("retention_precision", {}).get(v),
        )
        for p in settings["precisions"]:
            d = dict(decided[own[p]])
            # the floor for what stops on precision alone; what has thresholds keeps its own count
            d["oracle"] = oracle_problems(order, x, full, own[p]) if not th.labels else d["problems"]
            i = d["problems"] - 1
            rows = np.arange(s * t)
            with np.errstate(divide="ignore", invalid="ignore"):
                d["retention"] = 100 * x_est[rows, i] / full_est[rows, i]
            if v in RETENTION_VARIANTS and retention:
                d["ret_lo"], d["ret_hi"] = retention_many(
                    order, x, full, d["problems"], tolerance=settings["tolerance"]
                )
            out["seq"][p][v] = {k: a.reshape((s, t) + a.shape[1:]) for k, a in d.items()}
    return out


def summarise_batch(res: dict, settings: dict, acc: dict) -> None:
    """Add one batch's coverage, agreement, problems and reasons to the running totals ``acc``."""
    fixed, n_all = res["fixed"], sum(SIZES.values())
    f_full = fixed[..., VARIANTS.index("full")]
    for p, seq in res["seq"].items():
        a = acc.setdefault(
            p,
            {
                "cover": [0, 0],
                "cover_ret": [0, 0],
                "problems": {},
                "reasons": np.zeros(3),
                "agree": {},
                "side_agree": {},
                "holds_fixed": {},
            },
        )
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
        a["studies"] = a.get("studies", 0) + fixed.shape[0]
        a["n_all"] = n_all
        verdicts = claim_verdicts(fixed, res["boot"], seq, settings, VARIANTS, CLAIM_VARIANTS, GROUPS)
        for cid, (seq_point, seq_rule, fix_point, fix_boot) in verdicts["claims"].items():
            have = ~np.isnan(seq_rule)
            g = a["agree"].setdefault(cid, [0, 0, 0, 0, 0])
            g[0] += int((seq_point == fix_point)[have].sum())
            g[1] += int((seq_rule == fix_boot)[have].sum())
            g[2] += int(have.sum())
            g[3] += int((fix_point == 1)[have].sum())
            g[4] += int((fix_boot == 0)[have].sum())
        for key, (same, total) in verdicts["sides"].items():
            s_ = a["side_agree"].setdefault(key, [0, 0])
            s_[0] += same
            s_[1] += total


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
            "stop_reasons": dict(zip(REASONS, (a["reasons"] / a["reasons"].sum()).tolist())),
            "claims": {
                cid: {
                    "agree_point": g[0] / g[2],
                    "agree_report_rule": g[1] / g[2],
                    "studies": g[2],
                    "holds_fixed_point": g[3] / g[2],
                    "unresolved_fixed_report_rule": g[4] / g[2],
                }
                for cid, g in a["agree"].items()
                if g[2]
            },
            "threshold_sides_agree": {k: s[0] / s[1] for k, s in a["side_agree"].items()},
        }
    return out


def print_report(out: dict, settings: dict) -> None:
    print(
        f"coupling ρ = {settings['coupling']}, chunk {settings['chunk']}, α = 0.05, "
        f"{settings['resamples']} bootstrap resamples for the fixed design's report rule"
    )
    for p, r in out.items():
        print(
            f"\n== precision ±{p} points: {r['studies']} studies; problems answered / fixed design: "
            f"{r['ratio_total']:.3f} ({'meets' if r['ratio_total'] <= 1 / 3 else 'does NOT meet'} ≤ 1/3)"
        )
        print(
            f"difference CI coverage {r['difference_coverage']:.4f}; retention CI coverage "
            + (
                f"{r['retention_coverage']:.4f} over {r['retention_intervals_over']}"
                if r["retention_coverage"] is not None
                else "not computed"
            )
        )
        print(
            f"floor for any valid design with the same thresholds and ±{p} (oracle fixed-size normal interval "
            f"on the precision-only variants): {r['oracle_floor_ratio']:.3f}"
        )
        print("stop reasons: " + ", ".join(f"{k} {v:.3f}" for k, v in r["stop_reasons"].items()))
        print("ratio per variant: " + ", ".join(f"{v} {x:.3f}" for v, x in r["ratio_per_variant"].items()))
        print(
            f"{'claim':24s} {'agree (point)':>14s} {'agree (report)':>15s} {'fixed holds':>12s} "
            f"{'fixed unres.':>13s} {'studies':>8s}"
        )
        for cid in CLAIM_IDS:
            c = r["claims"].get(cid)
            if c:
                print(
                    f"{cid:24s} {c['agree_point']:14.3f} {c['agree_report_rule']:15.3f} "
                    f"{c['holds_fixed_point']:12.3f} {c['unresolved_fixed_report_rule']:13.3f} {c['studies']:8d}"
                )
        print(
            "per-transition threshold sides agree: "
            + ", ".join(f"{k} {v:.3f}" for k, v in r["threshold_sides_agree"].items())
        )


def simulate(
    studies: int,
    *,
    coupling: float = 0.9,
    precisions=(2.0, 3.0, 4.0, 5.0),
    chunk: int = 64,
    batch: int = 25,
    resamples: int = 200,
    retention_studies: int = 250,
    tolerance: float = 1e-3,
    seed: int = 0,
    progress: bool = False,
    retention_precision: Optional[dict] = None,
    uniform: bool = False,
) -> dict:
    """Run ``studies`` simulated studies in batches; the figures per precision target (:func:`report`)."""
    settings = {
        "coupling": coupling,
        "precisions": tuple(float(p) for p in precisions),
        "chunk": chunk,
        "resamples": resamples,
        "tolerance": tolerance,
        "sequential": UNIFORM if uniform else SequentialSettings(),
        "design": design(UNIFORM if uniform else SequentialSettings()),
        "claim_settings": ClaimSettings(),
        "retention_precision": dict(retention_precision or {}),
    }
    order, start = problem_order(SIZES, seed=seed), time.perf_counter()
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
            **{k: v for k, v in settings.items() if k not in ("design", "claim_settings", "sequential")},
            "variant_precision_points": settings["sequential"].variant_precision_points,
        },
        "results": report(acc, settings),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--studies", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="40 studies, retention intervals on all of them")
    ap.add_argument("--coupling", type=float, default=0.9, help="ρ: the share of the latent shared by variants")
    ap.add_argument("--precisions", default="2,3,4,5", help="precision targets in points; the first is the default")
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument(
        "--retention-studies",
        type=int,
        default=250,
        help="the first N studies get retention intervals (retention coverage, the median claims)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--retention-precision",
        default="",
        help="variant=percent,...: those variants stop only once their retention is within ±percent",
    )
    ap.add_argument(
        "--uniform",
        action="store_true",
        help="every variant at the precision target and diag against its ceiling alone (the design before the "
        "controls' ±4 and diag's thresholds-only defaults)",
    )
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    studies = 40 if args.quick else args.studies
    if studies < 1 or not 0.0 <= args.coupling < 1.0:
        ap.error("--studies must be ≥ 1 and --coupling in [0, 1)")
    t = time.perf_counter()
    out = simulate(
        studies,
        coupling=args.coupling,
        precisions=[float(x) for x in args.precisions.split(",")],
        chunk=args.chunk,
        retention_studies=studies if args.quick else args.retention_studies,
        seed=args.seed,
        progress=True,
        retention_precision={k: float(v) for k, v in (x.split("=") for x in args.retention_precision.split(",") if x)},
        uniform=args.uniform,
    )
    out["seconds"] = round(time.perf_counter() - t, 1)
    print_report(out["results"], out["settings"])
    print(f"\n{studies} studies in {out['seconds']} s")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
