#!/usr/bin/env python3
"""Write the tiny arithmetic base → SFT → RL chain and its sibling to a folder: the shipped one, or retrained here.

Examples:
    python tools/train_tiny_chain.py --out /tmp/tinychain                    # the shipped chain, ~1 s
    python tools/train_tiny_chain.py --out /tmp/tinychain --retrain          # train it: minutes (15 at load 10)
    python tools/train_tiny_chain.py --out /tmp/tinychain-q --quick          # shorter RL (trained): minutes
    python tools/train_tiny_chain.py --retrain --out grrr_stream/fixtures/tinychain_seed0   # re-make the shipped one

Writes OUT/{base,sft,rl,sibling}/ (Hugging Face folders, float32 safetensors, same
character-level tokenizer), OUT/benchmarks/arith/test.jsonl (held-out problems with
`problem`/`answer`) and OUT/chain.json (settings, greedy accuracies, seconds, provenance);
a trained chain also gets OUT/SHA256SUMS. The package ships the full chain of seed 0
(grrr_stream/fixtures/tinychain_seed0): without --retrain it is copied, every file checked
against its SHA-256; other seeds and --quick are trained. A second run with the same
--seed/--quick (and --retrain) reuses what OUT holds. See docs/tiny-chain.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grrr_stream.errors import GrrrError
from grrr_stream.fixtures.tinychain import MODELS, build_chain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="output folder (created)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="smaller, faster configuration (for tests)")
    ap.add_argument(
        "--retrain",
        action="store_true",
        help="train the chain on this machine even where the package ships it (seed 0, full)",
    )
    ap.add_argument("--quiet", action="store_true", help="no training progress on stderr")
    args = ap.parse_args()

    try:
        paths = build_chain(args.out, seed=args.seed, quick=args.quick, progress=not args.quiet, retrain=args.retrain)
    except GrrrError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    meta = json.loads((args.out / "chain.json").read_text())
    for key, path in paths.items():
        print(f"{key:<10} {path}")
    print(f"origin: {meta.get('origin', 'trained')}")
    print("greedy accuracy on benchmarks/arith (n = %d):" % meta["benchmark"]["n"])
    for m in MODELS:
        print(f"  {m:<8} {100 * meta['accuracy'][m]:5.1f} %")
    secs = meta["seconds"]
    print("training seconds: " + ", ".join(f"{k} {v}" for k, v in secs.items()))


if __name__ == "__main__":
    main()
