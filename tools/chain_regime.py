#!/usr/bin/env python3
"""Is a tiny chain in the paper's post-training regime? Per transition: r_Δ, SV cosine and δ_max (means over the
decomposed matrices), the RL increment's size against its SFT's, and greedy accuracy of full against proj.

Examples:
    python tools/chain_regime.py grrr_stream/fixtures/tinychain_seed0 --label "shipped (seed 0)"
    python tools/chain_regime.py /tmp/chain-s1 /tmp/chain-s2 --label "seed 1" --label "seed 2"

Prints a markdown table (one row per transition: base → sft, base → sibling, sft → rl) and, per chain, the
targets of docs/tiny-chain.md it misses. One torch thread; about 10 s per chain on a quiet core.
"""

from __future__ import annotations

import argparse
import json

from tool_args import InputError, fail, folder, os_error, out_file

from grrr_stream.fixtures.tinychain_recipe import MODELS
from grrr_stream.fixtures.tinychain_regime import markdown, misses, regime

# what regime() reads of a chain folder
CHAIN_FILES = ("benchmarks/arith/test.jsonl",)
CHAIN_FILES += tuple(f"{m}/{f}" for m in MODELS for f in ("config.json", "model.safetensors"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("chains", type=folder, nargs="+", help="chain folders (as tools/train_tiny_chain.py writes them)")
    ap.add_argument("--label", action="append", default=[], help="a label per chain (default: the folder name)")
    ap.add_argument("--json", type=out_file, help="also write the results here")
    args = ap.parse_args()
    if len(args.label) > len(args.chains):
        ap.error(f"--label: {len(args.label)} labels for {len(args.chains)} chain(s)")
    for chain in args.chains:
        if lacks := [f for f in CHAIN_FILES if not (chain / f).is_file()]:
            ap.error(f"argument chains: {chain} is not a tiny chain's folder: no {', '.join(lacks[:3])}")
    try:
        run(args)
    except InputError as e:
        fail(ap, str(e))


def run(args) -> None:
    import torch
    from safetensors import SafetensorError
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()  # one "Loading weights" bar per model evaluated would bury the table
    labels = args.label + [c.name for c in args.chains[len(args.label) :]]
    results, tables, notes = {}, [], []
    for chain, label in zip(args.chains, labels):
        try:
            res = regime(chain)
        except OSError as e:  # an unreadable file of the chain (transformers says which in its own words)
            raise InputError(f"{chain}: {os_error(e)}") from None
        except json.JSONDecodeError as e:
            raise InputError(f"{chain}/benchmarks/arith/test.jsonl: not JSON lines ({e})") from None
        except SafetensorError as e:  # a damaged model.safetensors
            raise InputError(f"{chain}: a model's weights do not load ({e})") from None
        results[label] = res
        table = markdown(res, label)
        tables.append(table if not tables else table.split("\n", 2)[2])
        acc = ", ".join(f"{m} {100 * a:.1f} %" for m, a in res["accuracy"].items())
        missed = misses(res)
        notes.append(f"- {label}: greedy accuracy {acc}; " + ("all targets met" if not missed else "; ".join(missed)))
    print("".join(tables))
    print("\n".join(notes))
    if args.json:
        try:
            args.json.write_text(json.dumps(results, indent=1) + "\n")
        except OSError as e:
            raise InputError(f"--json: {os_error(e, args.json)}") from None


if __name__ == "__main__":
    main()
