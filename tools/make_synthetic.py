#!/usr/bin/env python3
"""Write a synthetic base/post checkpoint pair in real Hugging Face layout.

Examples:
    python tools/make_synthetic.py --out /tmp/pair --preset tiny --plant 0.2,0.5,0.3 --dtype float32
    python tools/make_synthetic.py --out /tmp/q14 --preset qwen3-14b --layers 2 --r-delta 3e-4

The post model is base + ΔW per projection, with ‖ΔW‖ = r_Δ‖W0‖ and, with --plant,
the given (diag, off, null) shares of ‖ΔW‖² planted in W0's own SVD frame (written
to post/synthetic.json). Other tensors drift by --rest-drift.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from grrr_stream.fixtures.synthetic import DEMO, TINY, ModelShape, Update, make_transition, qwen3_14b_like

PRESETS = {"tiny": TINY, "demo": DEMO, "qwen3-14b": qwen3_14b_like(2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder; base/ and post/ are written inside")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--layers", type=int, help="override the preset's layer count")
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--intermediate", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int)
    ap.add_argument("--head-dim", type=int)
    ap.add_argument("--family", default="qwen2", choices=["llama", "mistral", "qwen2", "qwen3", "olmo2"])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32", "float64"])
    ap.add_argument("--r-delta", type=float, default=1e-2, help="‖ΔW‖/‖W0‖ per projection")
    ap.add_argument("--plant", help="diag,off,null shares of ‖ΔW‖², e.g. 0.2,0.5,0.3 (default: isotropic)")
    ap.add_argument("--rest-drift", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shard-mb", type=float, default=2048, help="maximum shard size in MiB")
    ap.add_argument("--overwrite", action="store_true")
    a = ap.parse_args()
    shape: ModelShape = PRESETS[a.preset]
    overrides = {
        k: v
        for k, v in {
            "layers": a.layers,
            "hidden": a.hidden,
            "intermediate": a.intermediate,
            "heads": a.heads,
            "kv_heads": a.kv_heads,
            "head_dim": a.head_dim,
        }.items()
        if v is not None
    }
    shape = replace(shape, **overrides)
    plant = tuple(float(x) for x in a.plant.split(",")) if a.plant else None
    if plant is not None and (len(plant) != 3 or abs(sum(plant) - 1) > 1e-9 or min(plant) < 0):
        ap.error("--plant needs three non-negative shares that sum to 1")
    base, post = make_transition(
        a.out,
        shape,
        family=a.family,
        dtype=a.dtype,
        seed=a.seed,
        update=Update(r_delta=a.r_delta, plant=plant, rest_drift=a.rest_drift),
        max_shard_bytes=int(a.shard_mb * 2**20),
        overwrite=a.overwrite,
    )
    print(f"base: {base}\npost: {post}")


if __name__ == "__main__":
    main()
