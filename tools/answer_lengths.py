#!/usr/bin/env python3
"""The demo's answer lengths: generated tokens per answer of the tiny chain's evaluation (vLLM, greedy).

Decomposes the shipped tiny chain's base → sft and sft → rl (seconds), evaluates the variants named by
--variant of each on its arith benchmark with the demo's engine settings (max_new_tokens 64, float32), and prints
one JSON line per transition: tokens_mean per variant (the accuracy table's column,
grrr_stream/evaluation/tables.py diagnostics) and their mean. grrr_stream/forecast/answer_lengths.py takes the arith
length from here.

    python tools/answer_lengths.py [--out bench_out/answer_lengths] [--variant base,full,offnull]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench_out/answer_lengths"))
    ap.add_argument("--variant", default="base,full,offnull")
    args = ap.parse_args()
    from grrr_stream.fixtures.tinychain_shipped import SHIPPED

    here = str(Path(__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYTHONPATH": here,
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_LOGGING_LEVEL": "WARNING",
        "HF_HUB_OFFLINE": "1",
    }
    cli = [sys.executable, "-m", "grrr_stream.cli"]
    for w0, w1 in (("base", "sft"), ("sft", "rl")):
        store, out = args.out / f"{w0}-{w1}", args.out / f"eval-{w0}-{w1}"
        if not (store / "zarr.json").is_file():
            subprocess.run(
                [
                    *cli,
                    "decompose",
                    "--base",
                    str(SHIPPED / w0),
                    "--post",
                    str(SHIPPED / w1),
                    "--store",
                    str(store),
                    "--no-progress",
                    "--no-track",
                ],
                check=True,
                env=env,
                capture_output=True,
            )
        subprocess.run(
            [
                *cli,
                "evaluate",
                "--store",
                str(store),
                *[a for v in args.variant.split(",") for a in ("--variant", v)],
                "--benchmark",
                "arith",
                "--bench-dir",
                str(SHIPPED / "benchmarks"),
                "--out",
                str(out),
                "--max-new-tokens",
                "64",
                "--engine-dtype",
                "float32",
                "--enforce-eager",
                "--no-progress",
                "--no-track",
            ],
            check=True,
            env=env,
            capture_output=True,
        )
        table = next(out.rglob("accuracy.csv"))
        with table.open() as f:
            rows = {r["variant"]: float(r["tokens_mean"]) for r in csv.DictReader(f)}
        print(
            json.dumps(
                {
                    "transition": f"{w0}->{w1}",
                    "tokens_mean": rows,
                    "mean": round(sum(rows.values()) / len(rows), 2),
                    "table": str(table),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
