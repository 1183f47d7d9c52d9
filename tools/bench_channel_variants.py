#!/usr/bin/env python3
"""Benchmark of channel variants against the component variants (issue 24, §4).

Builds (streams, no folder written) proj, offnull and the channel variants of one synthetic transition
(DEMO shape: hidden 256, 4 layers, bfloat16 checkpoints, float32 variants) in one process, each --repeats
times, and prints the median seconds, the ratio to offnull, the channel share and the cast fidelity. The
outlier set is every 20th channel (13 of 256, ~5 %). Ratios within one run are what to compare.

    python tools/bench_channel_variants.py [--repeats 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

NAMES = (
    "proj",
    "offnull",
    "channels-outlier",
    "channels-rest",
    "channels-outlier-offnull",
    "channels-rest-offnull",
    "channels-outlier-diag",
)


def main() -> None:
    from grrr_stream.config import build_config
    from grrr_stream.decompose.run import run_transition
    from grrr_stream.fixtures.synthetic import DEMO, Update, make_transition
    from grrr_stream.variants.builder import VariantBuilder
    from grrr_stream.variants.spec import parse_variant

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", type=Path)
    args = ap.parse_args()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench_channel_variants_"))
    base, post = make_transition(
        root / "pair", DEMO, family="qwen2", dtype="bfloat16", update=Update(r_delta=1e-2, plant=(0.2, 0.5, 0.3))
    )
    store = root / "store"
    if not store.exists():
        run_transition(
            build_config(
                {
                    "base": str(base),
                    "post": str(post),
                    "store": str(store),
                    "device": "cpu",
                    "tracking": {"enabled": False},
                    "progress": False,
                }
            )
        )
    channels = root / "channels.json"
    channels.write_text(json.dumps({"base": {"channels": list(range(0, DEMO.hidden, 20)), "hidden_size": DEMO.hidden}}))
    seconds: dict[str, list[float]] = {n: [] for n in NAMES}
    summaries = {}
    for _ in range(args.repeats):
        for n in NAMES:  # interleaved: a slow moment of a shared machine hits every variant alike
            t = time.perf_counter()
            b = VariantBuilder(store, parse_variant(n), channels=channels, device="cpu")
            for _ in b.tensors():
                pass
            seconds[n].append(time.perf_counter() - t)
            summaries[n] = b.report.summary()
    ref = statistics.median(seconds["offnull"])
    print(f"{'variant':<26} {'median s':>9} {'/offnull':>9} {'channel share':>14} {'cast error':>11}")
    for n in NAMES:
        s, med = summaries[n], statistics.median(seconds[n])
        share = f"{s['channel_share']:.4f}" if "channel_share" in s else "-"
        print(f"{n:<26} {med:>9.2f} {med / ref:>9.2f} {share:>14} {s['fidelity']:>11.2e}")


if __name__ == "__main__":
    main()
