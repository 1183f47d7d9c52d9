#!/usr/bin/env python3
"""A prototype, not used by the package: the hedged betting confidence sequence for sampling without replacement
(I. Waudby-Smith and A. Ramdas, "Confidence sequences for sampling without replacement", NeurIPS 2020, §3.2; the
hedged capital of "Estimating means of bounded random variables by betting", JRSS-B 2024, §4), against the
package's empirical-Bernstein one (grrr_stream.stats.sequential.eb_wor_cs), on the paired differences of the
simulation's near-equal variants (tools/simulate_designs.py: proj against full). Printed: after how many problems
each sequence's difference interval is first within ±2 / ±3 points at the design's looks, and the mean half-widths.

    python tools/sim_betting.py [--paths 100] [--coupling 0.9]

For a grid of candidate means m, the capital K±_t(m) = Π (1 ± λ±_i (x_i − μ_i(m))), μ_i(m) = (N m − S_{i−1}) /
(N − i + 1) the mean of what is left were m the population's mean; λ±_i the package's predictable plug-in bet,
truncated at 1/2 of what keeps the capital positive; m is excluded once (K⁺ + K⁻)/2 reaches 1/α (running
intersection). The grid (step 1/2000 of the value range) is the interval's resolution.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

# this checkout's package and the tool's siblings, whatever grrr_stream the environment has installed
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
import simulate_designs as sd  # noqa: E402

from grrr_stream.stats.order import problem_order  # noqa: E402
from grrr_stream.stats.sequential import eb_wor_cs  # noqa: E402


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--paths", type=int, default=100)
    ap.add_argument("--coupling", type=float, default=0.9)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    order = problem_order(sd.SIZES, seed=0)
    end, cmax, pooled = order.census_end, order.max_weight, len(order.weight)
    weight = np.array([order.weight[b] for b, _ in order.items[end:]])
    to_points = 100 * pooled * cmax * 2 / len(order.sizes)  # a half-width in z units → points of the score
    looks = np.array(order.boundaries(64)) - 1 - end
    first = {"eb": {2: [], 3: []}, "hedged": {2: [], 3: []}}
    widths = {"eb": [], "hedged": []}
    studies = max(1, args.paths // 28)
    acc = np.stack([sd.accuracies(rng) for _ in range(studies)])
    correct = sd.draw_correct(rng, acc, order, args.coupling)
    pairs = correct[:, :, [sd.VARIANTS.index("proj"), sd.VARIANTS.index("full")]].reshape(-1, 2, order.total)
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


if __name__ == "__main__":
    main()
