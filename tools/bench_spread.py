#!/usr/bin/env python3
"""Benchmark: one transition spread over 1 vs 2 Dask workers (grrr_stream.decompose.spread), as ratios.

On one synthetic pair with real model shapes (the presets of bench_decompose.py), each in a
fresh subprocess with empty store and frame cache (first transition: every SVD is computed):

  threads   the one-process run (reader, compute and writer threads; compute threads as chosen
            by decompose.streaming.compute_layout)
  local:1   a LocalCluster of 1 worker process (all cores): the cost of going through Dask
  local:2   a LocalCluster of 2 worker processes (each half the cores)

The wall time includes starting the LocalCluster (a few seconds), as a user sees it; the
cluster start alone is printed too. Usage:

    python tools/bench_spread.py [--shape smollm2-135m|qwen25-1.5b|qwen3-14b] [--layers N]
                                 [--schedulers threads,local:1,local:2] [--out bench_spread_out]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decompose import CHILD, DEFAULT_LAYERS, presets, run_child  # noqa: E402

from grrr_stream.fixtures.synthetic import Update, write_model  # noqa: E402


def cluster_start_seconds(n: int) -> float:
    from distributed import Client, LocalCluster

    t = time.perf_counter()
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None) as c, Client(c):
        return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="smollm2-135m", choices=sorted(DEFAULT_LAYERS))
    ap.add_argument("--layers", type=int, help="layers of the shape (default: bench_decompose's)")
    ap.add_argument("--schedulers", default="threads,local:1,local:2")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out", type=Path, default=Path("bench_spread_out"))
    args = ap.parse_args()
    layers = dict(DEFAULT_LAYERS)
    if args.layers:
        layers[args.shape] = args.layers
    shape = presets(layers)[args.shape]
    models = args.out / "models"
    if not (models / "post" / "config.json").is_file():
        write_model(models / "base", shape, dtype=args.dtype, seed=0, overwrite=True)
        write_model(models / "post", shape, dtype=args.dtype, seed=0, updates=(Update(r_delta=3e-3),), overwrite=True)
    print(f"{args.shape}: {shape.layers} layers, {shape.layers * 7} matrices, {args.dtype}")
    walls: dict[str, float] = {}
    for sched in args.schedulers.split(","):
        run = args.out / sched.replace(":", "")
        shutil.rmtree(run, ignore_errors=True)
        extra = '{"scheduler": "%s"}' % sched
        r = run_child(CHILD, str(models / "base"), str(models / "post"), str(run / "store"), str(run / "frames"), extra)
        walls[sched] = r["wall_s"]
        print(f"  {sched:>8}: {r['wall_s']:7.1f} s  ({r['computed']} computed)")
    for n in sorted({int(s.split(":")[1]) for s in walls if s.startswith("local:")}):
        print(f"  starting local:{n} alone: {cluster_start_seconds(n):.1f} s")
    if "local:1" in walls and "local:2" in walls:
        print(f"  2 workers / 1 worker: {walls['local:2'] / walls['local:1']:.2f}")
    if "threads" in walls:
        for s, w in walls.items():
            if s != "threads":
                print(f"  {s} / one process: {w / walls['threads']:.2f}")


if __name__ == "__main__":
    main()
