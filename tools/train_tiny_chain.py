#!/usr/bin/env python3
"""Train (or reuse) the tiny arithmetic base → SFT → RL chain and its sibling on this CPU.

Examples:
    python tools/train_tiny_chain.py --out /tmp/tinychain            # about 3 minutes (one CPU thread)
    python tools/train_tiny_chain.py --out /tmp/tinychain-q --quick  # about 80 s

Writes OUT/{base,sft,rl,sibling}/ (Hugging Face folders, float32 safetensors, same
character-level tokenizer), OUT/benchmarks/arith/test.jsonl (held-out problems with
`problem`/`answer`) and OUT/chain.json (settings, greedy accuracies, seconds). A second
run with the same --seed/--quick reuses everything. See grrr_stream/fixtures/tinychain.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from grrr_stream.fixtures.tinychain import MODELS, build_chain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="output folder (created)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="smaller, faster configuration (for tests)")
    ap.add_argument("--quiet", action="store_true", help="no training progress on stderr")
    args = ap.parse_args()

    paths = build_chain(args.out, seed=args.seed, quick=args.quick, progress=not args.quiet)
    meta = json.loads((args.out / "chain.json").read_text())
    for key, path in paths.items():
        print(f"{key:<10} {path}")
    print("greedy accuracy on benchmarks/arith (n = %d):" % meta["benchmark"]["n"])
    for m in MODELS:
        print(f"  {m:<8} {100 * meta['accuracy'][m]:5.1f} %")
    secs = meta["seconds"]
    print("training seconds: " + ", ".join(f"{k} {v}" for k, v in secs.items()))


if __name__ == "__main__":
    main()
