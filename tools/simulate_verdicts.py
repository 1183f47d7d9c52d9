#!/usr/bin/env python3
"""The verdict box's error rates on planted studies (``python tools/simulate.py verdicts``; issue 63).

Each study plants per-transition values for the box's set claims, observes them with noise over problems, and
runs the package's own verdict code (grrr_stream.report.verdict.verdicts) on the rows it would read. Two
structures: the demo's (3 chains × an SFT step, an SFT sibling and an RL step on the SFT) and the paper's
(configs/paper.yaml's 28 evaluated transitions from 10 bases, 11 SFT and 17 RL).

The planted population (every claim at its boundary, "the paper's values"):
- OffNull retention R: quantiles 0 → 80, 0.04 → 91.4, 0.214 → 95, 0.5 → 99, 1 → 104 (piecewise linear), full at
  50 points, so OffNull − Full = (R − 100) / 2: within 4.3 points in 96 % (24 of 25), R ≥ 95 in 78.6 % (22 of
  28), median 99 %;
- Diag retention, SFT: 0 → 5, 0.5 → 23, 0.545 → 25, 1 → 95 (median 23 %, ≤ 25 % in 6 of 11); RL: 0 → 40,
  0.5 → 79, 1 → 115 (median 79 %);
- Null − Diag (paired, points): 0 → −20, 0.5 → 0, 1 → 30: null above diag in exactly half, the least favourable
  reading of "generally above";
- f_diag of an RL step over its isotropic value: 0 → 1, 0.8 → 5, 1 → 25, inside every reading of the paper's
  bound (26–81×).
Within a chain the values are correlated: a Gaussian copula with correlation ``--within`` (0.8) between the
transitions of one chain, none between chains. Each value is then observed with noise over problems (``--noise``
scales the standard errors: retention 2.5 %, a difference 1.25 points, f_diag exact) and a 95 % interval.

A violation scenario moves one quantity (``VIOLATIONS``) and reports each claim's share of "contradicts": its
power. Run:

    python tools/simulate.py verdicts --studies 1000
    python tools/simulate.py verdicts --studies 200 --within 0.95 --noise 2
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from scipy.stats import norm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's package, whatever is installed
from grrr_stream.report.paper_claims import CLAIMS  # noqa: E402
from grrr_stream.report.verdict import CONTRADICTS, verdicts  # noqa: E402

SET_CLAIMS = tuple(c.id for c in CLAIMS if c.source in ("claims", "energy"))
FULL, BASE = 50.0, 30.0  # every transition's full and base accuracy (points): informative, a gain of 20

# quantity → its quantile function's points (u, value)
HOLDING = {
    "offnull": ((0, 80), (0.04, 91.4), (0.214, 95), (0.5, 99), (1, 104)),
    "diag_SFT": ((0, 5), (0.5, 23), (0.545, 25), (1, 95)),
    "diag_RL": ((0, 40), (0.5, 79), (1, 115)),
    "null_minus_diag": ((0, -20), (0.5, 0), (1, 30)),
    "fdiag_ratio": ((0, 1), (0.8, 5), (1, 25)),
}
# a scenario name → the quantity it moves and its new quantile points
VIOLATIONS = {
    "offnull 8 points lower": ("offnull", ((0, 72), (0.04, 83.4), (0.214, 87), (0.5, 91), (1, 96))),
    "diag (SFT) median 60 %": ("diag_SFT", ((0, 30), (0.5, 60), (1, 95))),
    "diag (RL) median 40 %": ("diag_RL", ((0, 10), (0.5, 40), (1, 80))),
    "null below diag in 85 %": ("null_minus_diag", ((0, -30), (0.85, 0), (1, 10))),
    "f_diag 100-300× isotropic": ("fdiag_ratio", ((0, 100), (1, 300))),
}
SE = {"retention": 2.5, "difference": 1.25}


def quantile(points, u: np.ndarray) -> np.ndarray:
    xs, ys = zip(*points)
    return np.interp(u, xs, ys)


def structure(name: str) -> list[tuple[str, str, str]]:
    """(transition id, chain, group) of each evaluated transition."""
    if name == "demo":
        steps = (("sft", "SFT"), ("sibling", "SFT"), ("rl", "RL"))
        return [(f"{k}{c}", f"base{c}", g) for c in range(3) for k, g in steps]
    from grrr_stream.report.build import chains_of
    from grrr_stream.stats.claims_sets import method_group
    from grrr_stream.sweep import plan_sweep
    from grrr_stream.sweep.config import load_sweep_config

    cfg = load_sweep_config(ROOT / "configs" / "paper.yaml")
    plan = plan_sweep(cfg)
    chains = chains_of(plan)
    evaluated = [u.params.transition for u in plan.units if u.kind == "evaluate" and u.params.suite is None]
    return [(t, chains[t], method_group(plan.transitions[t].method, cfg.claims.sft_methods)) for t in evaluated]


def draw(rng, layout, within: float) -> np.ndarray:
    """One uniform per transition, correlated ``within`` inside a chain (a Gaussian copula)."""
    chains = sorted({c for _, c, _ in layout})
    shared = dict(zip(chains, rng.standard_normal(len(chains))))
    z = np.array([np.sqrt(within) * shared[c] + np.sqrt(1 - within) * rng.standard_normal() for _, c, _ in layout])
    return norm.cdf(z)


def _observed(rng, value: float, se: float) -> tuple[float, float, float]:
    v = value + rng.normal(0.0, se) if se > 0 else value
    return v, v - 1.96 * se, v + 1.96 * se


# the isotropic f_diag of a transition's matrices (geometry/isotropic.py): the demo's 128-wide ones, and about the
# paper's (0.00042 at 1.5B, 0.00018 at 7B)
ISO = {"demo": 0.00558, "paper": 0.0002}


def study(rng, layout, population: dict, within: float, noise: float, iso: float) -> tuple[list, list, list]:
    """(difference rows, informative rows, transitions rows) of one planted study."""
    u = {q: draw(rng, layout, within) for q in population}
    diffs, info, trs = [], [], []
    se_r, se_d = SE["retention"] * noise, SE["difference"] * noise
    for i, (t, _, group) in enumerate(layout):
        on = float(quantile(population["offnull"], u["offnull"][i]))
        dg = float(quantile(population[f"diag_{group}"], u[f"diag_{group}"][i]))
        nd = float(quantile(population["null_minus_diag"], u["null_minus_diag"][i]))
        rows = {}
        for variant, ret in (("offnull", on), ("diag", dg), ("null", dg + nd)):
            r, lo, hi = _observed(rng, ret, se_r)
            m = FULL * (r - 100) / 100
            rows[variant] = {
                "transition": t,
                "variant": variant,
                "retention_full_pct": r,
                "retention_full_ci_lo": lo,
                "retention_full_ci_hi": hi,
                "minus_full": m,
                "minus_full_ci_lo": FULL * (lo - 100) / 100,
                "minus_full_ci_hi": FULL * (hi - 100) / 100,
                "gain_retention_pct": 100 * (FULL + m - BASE) / (FULL - BASE),
            }
        d, lo, hi = _observed(rng, FULL * nd / 100, se_d)
        rows["null"].update(minus_diag=d, minus_diag_ci_lo=lo, minus_diag_ci_hi=hi)
        diffs += rows.values()
        info.append({"transition": t, "informative": True})
        if group == "RL":
            ratio = float(quantile(population["fdiag_ratio"], u["fdiag_ratio"][i]))
            trs.append({"transition": t, "f_diag_mean": ratio * iso, "f_diag_iso": iso, "f_diag_vs_iso": ratio})
    return diffs, info, trs


THRESHOLDS = {"within_k": 4.3, "at_floor": 95.0, "at_most_ceiling": 25.0}  # the paper's (ClaimSettings' defaults)


def claim_rows(layout) -> list[dict]:
    """The claims table's rows the box looks up (their values are shown, not tested)."""
    groups = Counter(g for _, _, g in layout)
    keys = [c.statistic for c in CLAIMS if c.source == "claims"]
    keys.append(("retention_median_pct", "diag", "full", "all evaluated", "all"))  # null-above-diag's comparand
    rows = []
    for stat, variant, ref, set_name, group in keys:
        n = len(layout) if group == "all" else groups[group]
        rows.append(
            dict(statistic=stat, variant=variant, reference=ref, set=set_name, group=group, value=0.0, ci_lo=0.0,
                 ci_hi=0.0, transitions=n, threshold=THRESHOLDS.get(stat))
        )  # fmt: skip
    return rows


def run(layout, population, studies: int, seed: int, within: float, noise: float, side: str, adjust: str,
        iso: float = ISO["paper"]) -> dict:  # fmt: skip
    """claim id → studies in which it said "contradicts"; '_any' → studies with any."""
    rng = np.random.default_rng(seed)
    group = {t: g for t, _, g in layout}
    chains = {t: c for t, c, _ in layout}
    rows = claim_rows(layout)
    counts: Counter = Counter()
    for _ in range(studies):
        diffs, info, trs = study(rng, layout, population, within, noise, iso)
        box = verdicts(rows, trs, [], group_of=lambda r: group.get(r["transition"]), steps=set(group),
                       differences=diffs, informative=info, chains=chains, paper_side=side, adjust=adjust)  # fmt: skip
        said = [v.claim.id for v in box if v.verdict == CONTRADICTS and v.claim.id in SET_CLAIMS]
        counts.update(said)
        counts["_any"] += bool(said)
    return dict(counts)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    run_verdicts(ap.parse_args(argv), ap)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--studies", type=int, default=1000, help="planted studies per structure and scenario")
    ap.add_argument("--within", type=float, default=0.8, help="the correlation of a chain's transitions, in [0, 1)")
    ap.add_argument("--noise", type=float, default=1.0, help="scales the standard errors over problems (≥ 0)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--structures", default="demo,paper", help="demo, paper or both (comma-separated)")
    ap.add_argument("--no-power", action="store_true", help="only the family's false-contradiction rate")
    ap.add_argument("--paper-side", choices=("fixed", "sample"), default="fixed", help="claims.paper_side")
    ap.add_argument("--family", choices=("holm", "bh"), default="holm", help="claims.family")


def run_verdicts(args, ap: argparse.ArgumentParser) -> None:
    if not 1 <= args.studies <= 1_000_000:
        ap.error("--studies must be between 1 and 1000000")
    if not (0.0 <= args.within < 1.0) or not (0.0 <= args.noise <= 100.0):
        ap.error("--within must be in [0, 1) and --noise in [0, 100]")
    if not 0 <= args.seed < 2**63:
        ap.error("--seed must be in [0, 2^63)")
    names = [s.strip() for s in args.structures.split(",") if s.strip()]
    if not names or any(s not in ("demo", "paper") for s in names):
        ap.error("--structures takes demo, paper or both, comma-separated")
    for name in names:
        layout = structure(name)
        n_chains = len({c for _, c, _ in layout})
        how = (args.within, args.noise, args.paper_side, args.family, ISO[name])
        held = run(layout, HOLDING, args.studies, args.seed, *how)
        print(f"structure {name}: family false-contradiction rate {held.get('_any', 0) / args.studies:.3f} "
              f"over {args.studies} studies ({len(layout)} transitions in {n_chains} chains; paper side "
              f"{args.paper_side}, {args.family})")  # fmt: skip
        for cid in SET_CLAIMS:
            print(f"  {cid:18s} contradicts when it holds: {held.get(cid, 0) / args.studies:.3f}")
        if args.no_power:
            continue
        for scenario, (quantity, points) in VIOLATIONS.items():
            got = run(layout, {**HOLDING, quantity: points}, args.studies, args.seed + 1, *how)
            power = ", ".join(f"{cid} {got.get(cid, 0) / args.studies:.2f}" for cid in SET_CLAIMS if got.get(cid))
            print(f"  power under '{scenario}': {power or 'no claim contradicts'}")


if __name__ == "__main__":
    main()
