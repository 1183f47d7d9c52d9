#!/usr/bin/env python3
"""Benchmark of variant building (issue: ablated variants).

Prints, for one finished store (default: the one `tools/bench_decompose.py --keep` leaves,
a Qwen3-14B-shaped 2-layer pair), in one run:
  - the in-engine swap without the engine: each of --swap's variants streamed in turn in one
    process (what Engine.load_weights consumes), its seconds, the ratio to reading both
    checkpoints (target ≤ 2), the builder's phases, and the rank-r product's FLOP rate,
  - time to read both checkpoints (every tensor of base and post),
  - time to build and write one variant folder (default `offnull`, float32),
  - their ratio (target ≤ 2) and the peak RSS of the building process (target ≤ 3 GiB).
Each measurement runs in a fresh subprocess.

    python tools/bench_variants.py [--store bench_out/stores/a] [--variant offnull]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

READ = textwrap.dedent("""
    import json, sys, time
    from grrr_stream.checkpoints.reader import Checkpoint
    from grrr_stream.store.transition_store import StoredTransition
    m = StoredTransition(sys.argv[1]).manifest
    t = time.perf_counter()
    for folder in (m["base_folder"], m["post_folder"]):
        ck = Checkpoint.open(folder)
        for name in ck.tensors:
            ck.read(name)
    print(json.dumps({"read_s": time.perf_counter() - t}))
""")

BUILD = textwrap.dedent("""
    import json, resource, sys, time
    from grrr_stream.variants.spec import parse_variant
    from grrr_stream.variants.builder import VariantBuilder, write_variant
    t = time.perf_counter()
    s = write_variant(VariantBuilder(sys.argv[1], parse_variant(sys.argv[2]), dtype=sys.argv[4]), sys.argv[3])
    print(json.dumps({"build_s": time.perf_counter() - t, "fidelity": s["fidelity"],
                      "maxrss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))
""")


# The in-engine swap without the engine: stream each variant's tensors (what Engine.load_weights
# consumes) in one process, as an evaluation does, and time each, with the builder's phases.
SWAP = textwrap.dedent("""
    import json, sys, time
    from grrr_stream.store.transition_store import StoredTransition
    from grrr_stream.variants.spec import parse_variant
    from grrr_stream.variants.builder import VariantBuilder
    out = []
    t = StoredTransition(sys.argv[1])
    flops = sum(2 * a["shape"][0] * a["shape"][1] * a["rank"] for a in t.matrices.values())
    for name in sys.argv[3].split(","):
        b = VariantBuilder(sys.argv[1], parse_variant(name), dtype=sys.argv[2])
        t0 = time.perf_counter()
        n = sum(x.numel() for _, x in b.tensors())
        out.append({"variant": name, "stream_s": time.perf_counter() - t0,
                    "phases": {k: round(v, 3) for k, v in b.timer.seconds().items()}})
    print(json.dumps({"variants": out, "rank_r_gflop": flops / 1e9}))
""")


def _child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, default=Path("bench_out/stores/a"))
    ap.add_argument("--variant", default="offnull")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument(
        "--swap",
        default="full,diag,off,offnull",
        help="variants streamed one after another in one process, as an evaluation swaps them",
    )
    args = ap.parse_args()
    read = _child(READ, str(args.store))["read_s"]
    swap = _child(SWAP, str(args.store), args.dtype, args.swap)
    for v in swap["variants"]:
        print(
            f"swap {v['variant']}: {v['stream_s']:.2f} s = {v['stream_s'] / read:.2f} x reading both checkpoints; "
            f"phases {v['phases']}",
            flush=True,
        )
    diag = next((v for v in swap["variants"] if v["variant"] == "diag"), None)
    if diag is not None and diag["phases"].get("rank_r_product"):
        gf = swap["rank_r_gflop"]
        print(
            f"rank-r product of 'diag' (U diag(p) Vᵀ, 2·m·n·r flop per matrix): {gf:.1f} GFLOP in "
            f"{diag['phases']['rank_r_product']:.2f} s = {gf / diag['phases']['rank_r_product']:.1f} GFLOP/s",
            flush=True,
        )
    out = Path(tempfile.mkdtemp(dir=args.store.parent)) / args.variant
    try:
        build = _child(BUILD, str(args.store), args.variant, str(out), args.dtype)
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
    print(
        json.dumps(
            {
                "swaps": {v["variant"]: round(v["stream_s"], 2) for v in swap["variants"]},
                "ratio_swap_to_read": {v["variant"]: round(v["stream_s"] / read, 2) for v in swap["variants"]},
                "variant": args.variant,
                "dtype": args.dtype,
                "read_both_s": round(read, 2),
                "build_s": round(build["build_s"], 2),
                "ratio_build_to_read": round(build["build_s"] / read, 2),
                "peak_rss_gib": round(build["maxrss_gib"], 3),
                "fidelity": build["fidelity"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
