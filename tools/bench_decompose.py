#!/usr/bin/env python3
"""Benchmark of `grrr-stream decompose` on a synthetic pair with Qwen3-14B layer shapes.

Prints, from one run on this machine:
  1. wall time of the decompose command vs the bare SVD(W0) + svdvals(W1) time of the
     same matrices (target ratio ≤ 1.15),
  2. wall time of a second transition from the same base (cached frames) vs the first
     (target ≤ 0.5),
  3. peak RSS of the decompose process (target ≤ 3 GiB).

Each decompose runs in a fresh subprocess (tracking off: MLflow logging is a constant
few seconds, reported separately by the tests, not a per-matrix cost). Usage:

    python tools/bench_decompose.py [--layers 2] [--out bench_out] [--small]

``--small`` uses a reduced shape (hidden 1024) for a quick smoke run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch

from grrr_stream.checkpoint import Checkpoint
from grrr_stream.synthetic import ModelShape, Update, qwen3_14b_like, write_model

CHILD = textwrap.dedent("""
    import json, resource, sys, time
    from grrr_stream.config import build_config
    from grrr_stream.decompose import run_transition
    base, post, store, frames = sys.argv[1:5]
    extra = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    t = time.perf_counter()
    res = run_transition(build_config({"base": base, "post": post, "store": store, "frame_cache": frames,
                                       "progress": False, "tracking": {"enabled": False}, **extra}))
    wall = time.perf_counter() - t
    print(json.dumps({"wall_s": wall, "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "computed": res.computed, "frames_reused": res.frames_reused}))
""")

BARE = textwrap.dedent("""
    import json, sys, time, torch
    from grrr_stream.checkpoint import Checkpoint
    from grrr_stream.arch import STANDARD_PATTERN, select_matrices
    from grrr_stream.config import DEFAULT_MODULES
    b, p = Checkpoint.open(sys.argv[1]), Checkpoint.open(sys.argv[2])
    total = 0.0
    for m in select_matrices(b.tensors, STANDARD_PATTERN, DEFAULT_MODULES):
        w0, w1 = b.read(m.name).float(), p.read(m.name).float()
        t = time.perf_counter()
        torch.linalg.svd(w0, full_matrices=False)
        torch.linalg.svdvals(w1)
        total += time.perf_counter() - t
        del w0, w1
    print(json.dumps({"bare_s": total}))
""")


def _child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("bench_out"))
    ap.add_argument("--small", action="store_true", help="hidden 1024 instead of Qwen3-14B shapes")
    ap.add_argument("--shapes", choices=["qwen3-14b", "qwen25-1.5b", "smollm2-135m"], default="qwen3-14b",
                    help="layer shapes of the synthetic pair (default qwen3-14b)")
    ap.add_argument("--analyses-cost", action="store_true",
                    help="also decompose the first transition without the analyses beyond the paper (bands, "
                         "subspace angles, bf16 survival) into its own frame cache, and print the cost ratio")
    ap.add_argument("--keep", action="store_true", help="keep generated checkpoints and stores")
    args = ap.parse_args()
    presets = {"qwen3-14b": qwen3_14b_like(args.layers),
               "qwen25-1.5b": ModelShape(hidden=1536, intermediate=8960, layers=args.layers, heads=12, kv_heads=2,
                                         head_dim=128, vocab=1024),
               "smollm2-135m": ModelShape(hidden=576, intermediate=1536, layers=args.layers, heads=9, kv_heads=3,
                                          head_dim=64, vocab=1024)}
    shape = (ModelShape(hidden=1024, intermediate=3456, layers=args.layers, heads=8, kv_heads=2, head_dim=128)
             if args.small else presets[args.shapes])
    out = args.out
    models = out / "models"
    t = time.perf_counter()
    for name, updates in (("base", ()), ("post_a", (Update(r_delta=1e-2),)), ("post_b", (Update(r_delta=3e-3),))):
        if not (models / name / "config.json").is_file():
            write_model(models / name, shape, family="qwen3", dtype="bfloat16", seed=0, updates=updates,
                        max_shard_bytes=2 * 2**30, overwrite=True)
    print(f"generated checkpoints in {time.perf_counter() - t:.0f} s", flush=True)
    n = len([x for x in Checkpoint.open(models / "base").tensors if x.endswith("_proj.weight")])
    for d in ("stores", "frames"):
        shutil.rmtree(out / d, ignore_errors=True)

    bare = _child(BARE, str(models / "base"), str(models / "post_a"))["bare_s"]
    print(f"bare SVD(W0)+svdvals(W1): {bare:.1f} s", flush=True)
    first = _child(CHILD, str(models / "base"), str(models / "post_a"), str(out / "stores" / "a"), str(out / "frames"))
    print(f"first transition: {first}", flush=True)
    second = _child(CHILD, str(models / "base"), str(models / "post_b"), str(out / "stores" / "b"), str(out / "frames"))
    print(f"second transition (same base): {second}", flush=True)
    plain = None
    if args.analyses_cost:
        off = json.dumps({"band_edges": [], "angle_edges": [], "survival_dtype": None})
        plain = _child(CHILD, str(models / "base"), str(models / "post_a"), str(out / "stores" / "plain"),
                       str(out / "frames_plain"), off)
        print(f"first transition without the analyses beyond the paper: {plain}", flush=True)
        no_angles = _child(CHILD, str(models / "base"), str(models / "post_a"), str(out / "stores" / "no_angles"),
                           str(out / "frames_no_angles"), json.dumps({"angle_edges": []}))
        print(f"first transition without the subspace angles only: {no_angles}", flush=True)

    figures = {
        "shape": f"hidden {shape.hidden}, intermediate {shape.intermediate}, heads {shape.heads}/{shape.kv_heads}"
                 f" x {shape.hd}, {shape.layers} layers, {n} matrices, bf16",
        "torch_threads": torch.get_num_threads(),
        "bare_svd_s": round(bare, 2),
        "decompose_s": round(first["wall_s"], 2),
        "ratio_decompose_to_bare": round(first["wall_s"] / bare, 3),
        "second_transition_s": round(second["wall_s"], 2),
        "ratio_second_to_first": round(second["wall_s"] / first["wall_s"], 3),
        "peak_rss_first_gib": round(first["maxrss_mib"] / 1024, 3),
        "peak_rss_second_gib": round(second["maxrss_mib"] / 1024, 3),
    }
    if plain is not None:
        figures["decompose_without_analyses_s"] = round(plain["wall_s"], 2)
        figures["analyses_cost_pct"] = round(100 * (first["wall_s"] / plain["wall_s"] - 1), 1)
        figures["angles_cost_pct"] = round(100 * (first["wall_s"] - no_angles["wall_s"]) / plain["wall_s"], 1)
    print(json.dumps(figures, indent=2))
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
