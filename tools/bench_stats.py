#!/usr/bin/env python3
"""Benchmark of the statistics (issue: cross-transition geometry).

1. Bootstrap with 10 000 resamples plus a 10 000-draw isotropic null over 280 matrices
   (a 40-layer model's worth) — target under 10 s on 2 cores.
2. Off-diagonal cosine comparison of two stored transitions from the same base, read
   chunk-wise from Zarr, with the peak RSS of the process — target under 3 GiB for
   Qwen3-14B shapes. Pass the two stores written by
   `python tools/bench_decompose.py --layers 2 --keep --out bench_out`:

    python tools/bench_stats.py [--stores bench_out/stores/a bench_out/stores/b]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np

from grrr_stream.stats import comparisons
from grrr_stream.stats import summaries as stats
from grrr_stream.store.transition_store import StoredTransition


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", nargs=2, type=Path, help="two finished stores from the same base")
    ap.add_argument("--scheduler", default="threads")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    sizes = [5120, 1024, 1024, 5120, 5120, 5120, 5120] * 40
    cos = rng.normal(0.0, 1e-3, size=len(sizes))
    t = time.perf_counter()
    ci = stats.bootstrap_ci(cos, resamples=10_000, seed=0, scheduler=args.scheduler)
    null = stats.median_cosine_null(
        float(np.median(cos)), [r * r - r for r in sizes], draws=10_000, seed=0, scheduler=args.scheduler
    )
    figures = {
        "bootstrap_10k_plus_null_10k_280_matrices_s": round(time.perf_counter() - t, 2),
        "median_ci": [float(ci["median"][0]), float(ci["median"][1])],
        "p_value": null.p_value,
    }
    if args.stores:
        a, b = (StoredTransition(p) for p in args.stores)
        t = time.perf_counter()
        comp = comparisons.compare(
            a, b, "independent", resamples=10_000, null_draws=10_000, seed=0, scheduler=args.scheduler
        )
        figures.update(
            {
                "compare_matrices": len(comp.rows),
                "compare_largest_P": max(a.dask_array(n, "P").shape[0] for n in a.matrices),
                "compare_s": round(time.perf_counter() - t, 2),
                "compare_peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
                "median_cos_off": comp.median,
                "verdict": comp.null.verdict,
            }
        )
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
