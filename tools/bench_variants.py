#!/usr/bin/env python3
"""Benchmark of variant building (issue: ablated variants).

Prints, for one finished store (default: the one `tools/bench_decompose.py --keep` leaves,
a Qwen3-14B-shaped 2-layer pair), in one run:
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
    from grrr_stream.checkpoint import Checkpoint
    from grrr_stream.store import StoredTransition
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
    from grrr_stream.variants import VariantBuilder, parse_variant, write_variant
    t = time.perf_counter()
    s = write_variant(VariantBuilder(sys.argv[1], parse_variant(sys.argv[2]), dtype=sys.argv[4]), sys.argv[3])
    print(json.dumps({"build_s": time.perf_counter() - t, "fidelity": s["fidelity"],
                      "maxrss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))
""")


def _child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, default=Path("bench_out/stores/a"))
    ap.add_argument("--variant", default="offnull")
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    read = _child(READ, str(args.store))["read_s"]
    out = Path(tempfile.mkdtemp(dir=args.store.parent)) / args.variant
    try:
        build = _child(BUILD, str(args.store), args.variant, str(out), args.dtype)
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
    print(json.dumps({"variant": args.variant, "dtype": args.dtype, "read_both_s": round(read, 2),
                      "build_s": round(build["build_s"], 2), "ratio_build_to_read": round(build["build_s"] / read, 2),
                      "peak_rss_gib": round(build["maxrss_gib"], 3), "fidelity": build["fidelity"]}, indent=2))


if __name__ == "__main__":
    main()
