#!/usr/bin/env python3
"""Benchmark of `grrr-stream decompose` on synthetic pairs with real model shapes.

For each shape set (SmolLM2-135M, Qwen2.5-1.5B, Qwen3-14B), from one run on this machine:
  1. wall time of the decomposition vs the bare SVD(W0) + svdvals(W1) of the same matrices
     (tall orientation, float32, one process, the same torch threads),
  2. with --peer: the whole-model-load approach (load both checkpoints into memory, then
     SVD, svdvals, P and null per matrix, nothing stored), its time and peak RSS,
  3. a second transition from the same base (cached frames) vs the first,
  4. peak RSS of each decompose process,
  5. where the time goes: wall seconds / the thread's CPU seconds per phase (reader thread: read, digest, checks,
     frame_read, sparsity_sample; compute thread: upcast, svdvals_w1, svd_w0, angles, delta,
     spectral_norm, projection, analyses, wait_read, wait_write; writer thread:
     frame_write, store_write (encode + compress + write), fsync; then tables, and figures when the profile draws them).
     The three threads overlap, so the phases add up to more than the wall time.
  6. what zstd (the store's codec) gains on P and null: ratio and MB/s.

Every run is a fresh subprocess (tracking off: MLflow logging is a constant few seconds, not a
per-matrix cost). Usage:

    python tools/bench_decompose.py [--shapes smollm2-135m,qwen25-1.5b,qwen3-14b] [--layers N]
                                    [--peer] [--analyses-cost] [--out bench_out]
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

from grrr_stream.checkpoints.reader import Checkpoint
from grrr_stream.fixtures.synthetic import ModelShape, Update, qwen3_14b_like, write_model

# Each child's own peak RSS: VmHWM, the high-water mark of the process's address space since its exec.
# Not getrusage's ru_maxrss: Linux carries the parent's high-water mark over into the child at fork/exec
# (exec_mmap records the old mm's hiwater_rss in signal->maxrss), so a child of this script, which
# generated the checkpoints and so peaked at their size, reported at least that peak (14B shapes: 3.26 GiB
# against the 2.40 GiB /usr/bin/time measured for decompose started from a shell).
PEAK_RSS = textwrap.dedent("""
    def peak_rss_mib():
        try:
            with open("/proc/self/status") as f:
                return next(int(x.split()[1]) for x in f if x.startswith("VmHWM:")) / 1024
        except (OSError, StopIteration):
            import resource
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
""")

CHILD = PEAK_RSS + textwrap.dedent("""
    import json, sys, time
    from grrr_stream.config import build_config
    from grrr_stream.decompose.run import run_transition
    base, post, store, frames = sys.argv[1:5]
    extra = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    t, c = time.perf_counter(), time.process_time()
    res = run_transition(build_config({"base": base, "post": post, "store": store, "frame_cache": frames,
                                       "progress": False, "tracking": {"enabled": False}, **extra}))
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "maxrss_mib": peak_rss_mib(),
                      "computed": res.computed, "frames_reused": res.frames_reused, "phases": res.timings,
                      "cpu_phases": res.cpu_timings}))
""")

# The bare SVDs and the floor, per matrix with the pair already in RAM (reading is not timed): svd(W0) and
# svdvals(W1) in the tall orientation (bare), then ΔW, P = U0ᵀ ΔW V0 and the null residual ΔW − U0 U0ᵀ ΔW
# (V0 is complete in the tall orientation): what the method itself needs (the floor).
BARE = textwrap.dedent("""
    import json, sys, time, torch
    from grrr_stream.checkpoints.reader import Checkpoint
    from grrr_stream.checkpoints.arch import STANDARD_PATTERN, select_matrices
    from grrr_stream.config import DEFAULT_MODULES
    b, p = Checkpoint.open(sys.argv[1]), Checkpoint.open(sys.argv[2])
    bare = rest = bare_cpu = rest_cpu = 0.0
    for m in select_matrices(b.tensors, STANDARD_PATTERN, DEFAULT_MODULES):
        w0, w1 = b.read(m.name).float(), p.read(m.name).float()
        if w0.shape[0] < w0.shape[1]:
            w0, w1 = w0.T, w1.T
        t, c = time.perf_counter(), time.process_time()
        U, S, Vh = torch.linalg.svd(w0, full_matrices=False)
        s1 = torch.linalg.svdvals(w1)
        t1, c1 = time.perf_counter(), time.process_time()
        d = w1 - w0
        A = U.T @ d
        P = A @ Vh.T
        null = d - U @ A
        rest += time.perf_counter() - t1
        rest_cpu += time.process_time() - c1
        bare += t1 - t
        bare_cpu += c1 - c
        del w0, w1, U, S, Vh, s1, d, A, P, null
    print(json.dumps({"bare_s": bare, "floor_s": bare + rest, "bare_cpu_s": bare_cpu,
                      "floor_cpu_s": bare_cpu + rest_cpu}))
""")

# The whole-model-load approach of the closest public code: both state dicts in memory, then per
# matrix SVD(W0), svdvals(W1), P = U0ᵀ ΔW V0 and the null residual; nothing written. Loading uses
# safetensors directly (cheaper than building transformers models, so the peer is not handicapped).
# The same script charged for what decompose writes: P and the null residual of every matrix as float32
# .npy files in argv[3], each fsynced (decompose fsyncs its store); their seconds are timed apart, so one
# run gives both the peer and the peer with writes.
PEER = PEAK_RSS + textwrap.dedent("""
    import json, os, sys, time, numpy as np, torch
    from pathlib import Path
    from safetensors.torch import load_file
    from grrr_stream.checkpoints.arch import STANDARD_PATTERN, select_matrices
    from grrr_stream.config import DEFAULT_MODULES
    out = Path(sys.argv[3]); out.mkdir(parents=True, exist_ok=True)
    t, c = time.perf_counter(), time.process_time()
    sd = [{}, {}]
    for i, folder in enumerate(sys.argv[1:3]):
        for f in sorted(Path(folder).glob("*.safetensors")):
            sd[i].update(load_file(f))
    load_s = time.perf_counter() - t
    write_s = 0.0
    for m in select_matrices(sd[0], STANDARD_PATTERN, DEFAULT_MODULES):
        w0, w1 = sd[0][m.name].float(), sd[1][m.name].float()
        U, S, Vh = torch.linalg.svd(w0, full_matrices=False)
        s1 = torch.linalg.svdvals(w1)
        d = w1 - w0
        P = U.T @ d @ Vh.T
        null = d - U @ P @ Vh
        e = (P.diagonal().square().sum(), P.square().sum(), null.square().sum())
        tw = time.perf_counter()
        for key, a in (("P", P), ("null", null)):
            with open(out / f"{m.name}.{key}.npy", "wb") as f:
                np.save(f, a.numpy())
                f.flush()
                os.fsync(f.fileno())
        write_s += time.perf_counter() - tw
    wall = time.perf_counter() - t
    print(json.dumps({"cpu_s": time.process_time() - c, "wall_s": wall - write_s, "wall_with_writes_s": wall,
                      "load_s": load_s, "write_s": write_s, "maxrss_mib": peak_rss_mib()}))
""")

# What the store's codec gains on the arrays it stores: ratio and throughput of blosc-zstd-1 with
# byte shuffle on P and the null residual of one MLP matrix, against writing them raw.
CODEC = textwrap.dedent("""
    import json, sys, time, numpy as np, zarr
    store = sys.argv[1]
    g = zarr.open_group(store, mode="r")["matrices"]
    name = sorted(g.group_keys(), key=lambda k: -np.prod(g[k].attrs["shape"]))[0]
    from zarr.codecs import BloscCodec
    import numcodecs
    out = {"matrix": name}
    for key in ("P", "null"):
        if key not in g[name]:
            continue
        a = np.ascontiguousarray(g[name][key][...])
        codec = numcodecs.Blosc(cname="zstd", clevel=1, shuffle=numcodecs.Blosc.SHUFFLE)
        t = time.perf_counter(); c = codec.encode(a); dt = time.perf_counter() - t
        out[key] = {"mb": round(a.nbytes / 1e6, 1), "ratio": round(a.nbytes / len(c), 3),
                    "compress_mb_s": round(a.nbytes / 1e6 / dt, 0)}
    print(json.dumps(out))
""")

PHASES = [
    ("reader", ["read", "digest", "checks", "frame_read", "sparsity_sample"]),
    (
        "compute",
        [
            "upcast",
            "svdvals_w1",
            "svd_w0",
            "angles",
            "delta",
            "spectral_norm",
            "projection",
            "analyses",
            "channel_energy",
            "wait_read",
            "wait_write",
        ],
    ),
    ("writer", ["frame_write", "store_write", "fsync"]),
    ("run", ["plan", "matrices_wall", "tables", "figures"]),
]


def run_child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def presets(layers: dict[str, int]) -> dict[str, ModelShape]:
    return {
        "smollm2-135m": ModelShape(
            hidden=576, intermediate=1536, layers=layers["smollm2-135m"], heads=9, kv_heads=3, head_dim=64, vocab=1024
        ),
        "qwen25-1.5b": ModelShape(
            hidden=1536, intermediate=8960, layers=layers["qwen25-1.5b"], heads=12, kv_heads=2, head_dim=128, vocab=1024
        ),
        "qwen3-14b": qwen3_14b_like(layers["qwen3-14b"]),
    }


# Whole models where that fits a run of a few minutes on 2 cores; two layers of the 14B shapes.
DEFAULT_LAYERS = {"smollm2-135m": 30, "qwen25-1.5b": 4, "qwen3-14b": 2}


def breakdown(phases: dict[str, float], cpu: dict[str, float]) -> str:
    """Wall seconds / the phase thread's CPU seconds of each phase."""
    lines = []
    for thread, names in PHASES:
        cells = [f"{n} {phases[n]:.2f}" + (f"/{cpu[n]:.2f}" if n in cpu else "") for n in names if phases.get(n)]
        lines.append(f"    {thread:8s} " + ", ".join(cells))
    return "\n".join(lines)


def bench_shape(key: str, shape: ModelShape, out: Path, args) -> dict:
    models = out / key / "models"
    dtype = args.dtype
    t = time.perf_counter()
    # checkpoints left by an earlier run (--keep, or one interrupted) are reused only for the same shapes and dtype
    spec, spec_file = repr((shape, dtype)), models / "spec.txt"
    if not spec_file.is_file() or spec_file.read_text() != spec:
        shutil.rmtree(models, ignore_errors=True)
    models.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(spec)
    for name, updates in (("base", ()), ("post_a", (Update(r_delta=1e-2),)), ("post_b", (Update(r_delta=3e-3),))):
        if not (models / name / "config.json").is_file():
            write_model(
                models / name,
                shape,
                family="qwen3",
                dtype=dtype,
                seed=0,
                updates=updates,
                max_shard_bytes=2 * 2**30,
                overwrite=True,
            )
    print(f"[{key}] generated checkpoints in {time.perf_counter() - t:.0f} s", flush=True)
    n = len([x for x in Checkpoint.open(models / "base").tensors if x.endswith("_proj.weight")])
    for d in ("stores", "frames", "frames_plain", "frames_no_angles"):
        shutil.rmtree(out / key / d, ignore_errors=True)
    base, post_a, post_b = (str(models / x) for x in ("base", "post_a", "post_b"))
    stores, frames = out / key / "stores", str(out / key / "frames")

    bare_floor = run_child(BARE, base, post_a)
    bare, floor = bare_floor["bare_s"], bare_floor["floor_s"]
    floor_cpu = bare_floor["floor_cpu_s"]
    print(f"[{key}] bare SVD(W0)+svdvals(W1): {bare:.1f} s; floor (+ P and null): {floor:.1f} s", flush=True)
    peer = None
    if args.peer:
        peer = run_child(PEER, base, post_a, str(out / key / "peer_writes"))
        shutil.rmtree(out / key / "peer_writes", ignore_errors=True)
        print(f"[{key}] peer (whole-model load): {peer}", flush=True)
    first = run_child(CHILD, base, post_a, str(stores / "a"), frames, args.config)
    print(
        f"[{key}] first transition: {first['wall_s']:.1f} s, peak RSS {first['maxrss_mib']:.0f} MiB\n"
        + breakdown(first["phases"], first["cpu_phases"]),
        flush=True,
    )
    second = None
    if not args.first_only:
        second = run_child(CHILD, base, post_b, str(stores / "b"), frames, args.config)
        print(
            f"[{key}] second transition (same base): {second['wall_s']:.1f} s, peak RSS "
            f"{second['maxrss_mib']:.0f} MiB\n" + breakdown(second["phases"], second["cpu_phases"]),
            flush=True,
        )
    codec = run_child(CODEC, str(stores / "a"))
    print(f"[{key}] codec: {codec}", flush=True)
    wall, ph = first["wall_s"], first["phases"]
    fig = {
        "shape": f"hidden {shape.hidden}, intermediate {shape.intermediate}, heads {shape.heads}/{shape.kv_heads}"
        f" x {shape.hd}, {shape.layers} layers, {n} matrices, {dtype}",
        "torch_threads": torch.get_num_threads(),
        "bare_svd_s": round(bare, 2),
        "floor_s": round(floor, 2),
        "decompose_s": round(wall, 2),
        "ratio_decompose_to_bare": round(wall / bare, 3),
        "ratio_decompose_to_floor": round(wall / floor, 3),
        # CPU seconds (all threads) against the floor's: the work done, which a machine shared with other
        # jobs changes far less than wall time (run with OMP_NUM_THREADS=1 to keep OpenMP spinning out of it)
        "floor_cpu_s": round(floor_cpu, 2),
        "decompose_cpu_s": round(first["cpu_s"], 2),
        "cpu_ratio_decompose_to_floor": round(first["cpu_s"] / floor_cpu, 3),
        # the compute thread's seconds outside the two LAPACK calls, per matrix: what a matrix costs beyond its SVDs
        "overhead_per_matrix_ms": round(1000 * (wall - ph.get("svd_w0", 0) - ph.get("svdvals_w1", 0)) / n, 1),
        "channel_energy_pct": round(100 * ph.get("channel_energy", 0.0) / wall, 2),
        "angles_pct": round(100 * ph.get("angles", 0.0) / wall, 2),
        "peak_rss_first_gib": round(first["maxrss_mib"] / 1024, 3),
        "phases_first_s": {k: round(v, 2) for k, v in ph.items()},
        "cpu_phases_first_s": {k: round(v, 2) for k, v in first["cpu_phases"].items()},
        # the compute thread's CPU seconds of the per-channel energies against the whole run's (issue 24: < 10 %)
        "channel_energy_cpu_pct": round(100 * first["cpu_phases"].get("channel_energy", 0.0) / first["cpu_s"], 2),
        "codec": codec,
    }
    if second is not None:
        fig.update(
            {
                "second_transition_s": round(second["wall_s"], 2),
                "ratio_second_to_first": round(second["wall_s"] / wall, 3),
                "peak_rss_second_gib": round(second["maxrss_mib"] / 1024, 3),
                "phases_second_s": {k: round(v, 2) for k, v in second["phases"].items()},
            }
        )
    if peer is not None:
        fig.update(
            {
                "peer_s": round(peer["wall_s"], 2),
                "peer_load_s": round(peer["load_s"], 2),
                "peer_writes_s": round(peer["wall_with_writes_s"], 2),
                "peer_peak_rss_gib": round(peer["maxrss_mib"] / 1024, 3),
                "ratio_decompose_to_peer": round(wall / peer["wall_s"], 3),
                "ratio_decompose_to_peer_writes": round(wall / peer["wall_with_writes_s"], 3),
                "peer_cpu_s": round(peer["cpu_s"], 2),
            }
        )
    if args.analyses_cost:  # the first run is the default (standard) profile unless --config says otherwise
        paper = run_child(
            CHILD,
            base,
            post_a,
            str(stores / "paper"),
            str(out / key / "frames_paper"),
            json.dumps({"profile": "paper"}),
        )
        full = run_child(
            CHILD, base, post_a, str(stores / "full"), str(out / key / "frames_full"), json.dumps({"profile": "full"})
        )
        print(
            f"[{key}] profiles: paper {paper['wall_s']:.1f} s ({paper['cpu_s']:.1f} CPU s), first run "
            f"{wall:.1f} s ({first['cpu_s']:.1f}), full {full['wall_s']:.1f} s ({full['cpu_s']:.1f}); "
            f"floor {floor:.1f} s ({floor_cpu:.1f})",
            flush=True,
        )
        fig.update(
            {
                "paper_profile_s": round(paper["wall_s"], 2),
                "full_profile_s": round(full["wall_s"], 2),
                "paper_profile_cpu_s": round(paper["cpu_s"], 2),
                "full_profile_cpu_s": round(full["cpu_s"], 2),
                "ratio_paper_profile_to_floor": round(paper["wall_s"] / floor, 3),
                "ratio_full_profile_to_floor": round(full["wall_s"] / floor, 3),
                # the analyses beyond the paper and the angles, as shares of the paper profile's run
                "analyses_cost_pct": round(100 * (full["wall_s"] / paper["wall_s"] - 1), 1),
                "angles_cost_pct": round(100 * (full["wall_s"] - wall) / paper["wall_s"], 1),
            }
        )
    return fig


def goal_table(results: dict) -> str:
    """The issue-26 table: floor, bare SVDs, peer script with and without writes, decompose, and the ratios."""
    lines = [
        "| shape set | floor | bare SVDs | peer | peer + writes | decompose | / floor | / peer + writes "
        "| / bare | CPU s / floor CPU s | channel energy (wall / CPU) | peak RSS |",
        "|---" * 12 + "|",
    ]
    for key, f in results.items():
        peer = f"{f['peer_s']:.1f} s" if "peer_s" in f else "-"
        pw = f"{f['peer_writes_s']:.1f} s" if "peer_writes_s" in f else "-"
        rpw = f"{f['ratio_decompose_to_peer_writes']:.2f}" if "peer_writes_s" in f else "-"
        lines.append(
            f"| {key} | {f['floor_s']:.1f} s | {f['bare_svd_s']:.1f} s | {peer} | {pw} | "
            f"{f['decompose_s']:.1f} s | {f['ratio_decompose_to_floor']:.2f} | {rpw} | "
            f"{f['ratio_decompose_to_bare']:.2f} | {f['cpu_ratio_decompose_to_floor']:.2f} | "
            f"{f['channel_energy_pct']:.1f} % / {f['channel_energy_cpu_pct']:.1f} % | "
            f"{f['peak_rss_first_gib']:.2f} GiB |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--shapes",
        default="qwen3-14b",
        help="comma-separated shape sets: smollm2-135m, qwen25-1.5b, qwen3-14b, or 'all' (default qwen3-14b)",
    )
    ap.add_argument(
        "--layers",
        type=int,
        default=None,
        help="layers of every shape set (default: 30 for smollm2-135m = the whole model, 4 for "
        "qwen25-1.5b, 2 for qwen3-14b)",
    )
    ap.add_argument(
        "--dtype",
        choices=["bfloat16", "float32"],
        default="bfloat16",
        help="checkpoint dtype of the synthetic pairs (default bfloat16)",
    )
    ap.add_argument("--peer", action="store_true", help="also run the whole-model-load approach")
    ap.add_argument("--out", type=Path, default=Path("bench_out"))
    ap.add_argument(
        "--analyses-cost",
        action="store_true",
        help="also decompose the first transition with --profile paper (no analyses beyond the paper) "
        "and --profile full (every analysis, the exact subspace angles too), each into its own "
        "frame cache, and print their times against the floor",
    )
    ap.add_argument(
        "--config",
        default="{}",
        help="JSON of decompose settings for both transitions, e.g. "
        "'{\"cpu_threads\": 2}' (default: none, the defaults)",
    )
    ap.add_argument("--first-only", action="store_true", help="skip the second transition (cached frames)")
    ap.add_argument("--keep", action="store_true", help="keep generated checkpoints and stores")
    args = ap.parse_args()
    keys = list(DEFAULT_LAYERS) if args.shapes == "all" else [s.strip() for s in args.shapes.split(",")]
    unknown = [k for k in keys if k not in DEFAULT_LAYERS]
    if unknown:
        ap.error(f"unknown shape set(s) {unknown}; choose from {list(DEFAULT_LAYERS)}")
    layers = {k: args.layers or v for k, v in DEFAULT_LAYERS.items()}
    shapes = presets(layers)
    results = {k: bench_shape(k, shapes[k], args.out, args) for k in keys}
    print(json.dumps(results, indent=2))
    print(goal_table(results))
    if not args.keep:
        shutil.rmtree(args.out, ignore_errors=True)


if __name__ == "__main__":
    main()
