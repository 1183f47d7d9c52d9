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

OUT must be new, empty, or a folder this tool wrote (its chain.json, or its OUT/.train_tiny_chain, which marks a
folder while the tool writes it and goes once the chain is complete): the tool replaces OUT's base/, sft/, rl/,
sibling/ and benchmarks/ wholesale, so it refuses any other folder before it writes anything. Files of other
names in a folder of its own are left alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional

from tool_args import SEED, fail, os_error, out_folder

from grrr_stream.errors import GrrrError
from grrr_stream.fixtures.tinychain import MODELS, _chain_ok, build_chain
from grrr_stream.fixtures.tinychain_shipped import BENCHMARKS, MARKER, SUMS, write_checksums

OWNED = ".train_tiny_chain"  # this tool's mark on a folder while it writes a chain there (gone once chain.json is)
WRITES = (*MODELS, BENCHMARKS, MARKER, SUMS)  # what the tool writes in OUT (and replaces there)


def _own_record(out: Path) -> bool:
    """Whether ``out/chain.json`` is a tiny chain's record (this tool's, or a sweep's generate unit's)."""
    try:
        meta = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and {"version", "seed", "quick", "settings"} <= meta.keys()


def refusal(out: Path) -> Optional[str]:
    """Why the tool must not write into ``out`` (None: it may): a folder that is not empty and not its own."""
    if not out.is_dir():
        return None  # out_folder() saw that it can be made
    try:
        empty = next(out.iterdir(), None) is None
    except OSError as e:
        return f"--out: {os_error(e, out)}"
    if empty or (out / OWNED).is_file() or _own_record(out):
        return None
    return (
        f"--out: {out} is not empty and holds no chain this tool wrote (no chain.json of its own); the tool "
        f"replaces {', '.join(WRITES)} there, so pick an empty or new folder"
    )


def write(out: Path, *, seed: int, quick: bool, progress: bool, retrain: bool) -> dict[str, Path]:
    """build_chain() into ``out``, marked as this tool's (OWNED) while anything is written there."""
    if _chain_ok(out, seed, quick, trained=retrain):  # reused as it is: nothing written
        return build_chain(out, seed=seed, quick=quick, progress=progress, retrain=retrain)
    out.mkdir(parents=True, exist_ok=True)
    (out / OWNED).write_text(json.dumps({"tool": "tools/train_tiny_chain.py", "writes": list(WRITES)}) + "\n")
    paths = build_chain(out, seed=seed, quick=quick, progress=progress, retrain=retrain)
    (out / OWNED).unlink()
    sums = out / SUMS
    if sums.is_file() and any(line.endswith(f"  {OWNED}") for line in sums.read_text().splitlines()):
        write_checksums(out)  # a trained chain's checksums, without the mark
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--out",
        type=out_folder,
        required=True,
        help="output folder: new, empty or one this tool wrote (created; any other is refused)",
    )
    ap.add_argument("--seed", type=SEED, default=0)
    ap.add_argument("--quick", action="store_true", help="smaller, faster configuration (for tests)")
    ap.add_argument(
        "--retrain",
        action="store_true",
        help="train the chain on this machine even where the package ships it (seed 0, full)",
    )
    ap.add_argument("--quiet", action="store_true", help="no training progress on stderr")
    args = ap.parse_args()
    if why := refusal(args.out):
        ap.error(why)  # before anything is written or trained
    try:
        paths = write(args.out, seed=args.seed, quick=args.quick, progress=not args.quiet, retrain=args.retrain)
    except GrrrError as e:
        fail(ap, str(e))
    except OSError as e:  # an unwritable or full folder
        fail(ap, os_error(e, args.out))
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
