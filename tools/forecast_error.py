#!/usr/bin/env python3
"""The forecast's error on tools/bench_decompose.py's shapes: estimated vs measured decomposition seconds.

For each shape set, synthetic checkpoints are written (base and two posts), the forecast of a first
transition (W0's frames computed) and of a second one from the same base (frames read from the cache) is
made exactly as `sweep --dry-run` makes it (calibration included, cached), and both transitions are then
run in fresh subprocesses as bench_decompose does. Prints one JSON line per shape set.

With ``--channels``, also the residual-channel units on the same shapes: the channels unit of the base
(``grrr-stream channels`` with the ablation: 5 forward passes of --sequences × --seq-len tokens, the
synthetic models' byte tokens) and the channel-stats unit of the first transition's store (--draws), each
forecast as `sweep --dry-run` does (the channels unit as a sweep's first, which pays the imports of
transformers and accelerate) and run in a fresh subprocess, timed from after `import torch` (a sweep has
torch loaded); the peak RSS of the channels child next to the forecast RAM.

With ``--published``, no run: the generation model of ``--forecast-for`` (grrr_stream/forecast/generation.py)
against published vLLM throughput on GPUs (:data:`grrr_stream.forecast.published.ROWS`, each with its source),
one JSON line each.

    python tools/forecast_error.py [--shapes smollm2-135m,qwen25-1.5b] [--layers N] [--out forecast_out]
                                   [--channels [--sequences 32 --seq-len 128 --draws 2000]]
    python tools/forecast_error.py --published
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decompose import CHILD, PEAK_RSS, presets, run_child  # noqa: E402

from grrr_stream.fixtures.synthetic import Update, write_model  # noqa: E402
from grrr_stream.forecast import work  # noqa: E402
from grrr_stream.forecast.calibrate import calibrate  # noqa: E402
from grrr_stream.forecast.shapes import from_checkpoint  # noqa: E402
from grrr_stream.sweep.kinds.channel_stats import seconds as channel_stats_seconds  # noqa: E402
from grrr_stream.sweep.kinds.channels import seconds as channels_seconds  # noqa: E402
from grrr_stream.sweep.kinds.decompose import OVERHEAD_S as DECOMPOSE_OVERHEAD_S  # noqa: E402

SEEDS = (0, 1, 2)
CHANNELS_CHILD = (
    PEAK_RSS
    + """
import json, sys, time
import torch  # noqa: F401 - loaded in a sweep's process already: not timed
t = time.perf_counter()
from pathlib import Path
from grrr_stream.channels.analysis import run_channels
from grrr_stream.channels.rule import OutlierRule
model, out, sequences, seq_len = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
r = run_channels(Path(model), Path(out), rule=OutlierRule(threshold=1.0), sequences=sequences, seq_len=seq_len,
                 do_ablate=True, ablation_seeds=(0, 1, 2))
print(json.dumps({"wall_s": time.perf_counter() - t, "maxrss_mib": peak_rss_mib(),
                  "offloaded": r["base"]["offloaded"], "channels": len(r["base"]["channels"])}))
"""
)
STATS_CHILD = """
import json, sys, time
import numpy as np
from grrr_stream.channels.enrichment import store_energies
from grrr_stream.store import transition_store  # noqa: F401 - zarr: loaded in a sweep's process already
from grrr_stream.channels.transition_stats import stats_rows
t = time.perf_counter()
energies, records = store_energies(sys.argv[1])
H = energies.shape[1]
rows = stats_rows(energies, records, np.arange(0, H, 20), resamples=int(sys.argv[2]), seed=0)
print(json.dumps({"wall_s": time.perf_counter() - t, "rows": len(rows)}))
"""


def channel_errors(models: Path, facts, rates, args) -> dict:
    """Forecast and measured seconds of the channels unit of ``models/base`` and the channel-stats unit of
    ``models/store_post_a`` (every 20th channel as the set: the statistics' cost does not depend on it)."""
    from grrr_stream.channels.activations import parse_bytes

    est = channels_seconds(
        facts.params,
        rates,
        sequences=args.sequences,
        seq_len=args.seq_len,
        batch_size=1,
        ablation_seeds=SEEDS,
        first=True,
    )
    ram = work.calibration_ram(
        facts.params,
        facts.largest,
        facts.vocab,
        batch_size=1,
        seq_len=args.seq_len,
        budget=parse_bytes("1GiB"),
        hidden=facts.hidden,
    )
    got = run_child(
        CHANNELS_CHILD, str(models / "base"), str(models / "channels_out"), str(args.sequences), str(args.seq_len)
    )
    st_est = channel_stats_seconds(len(facts.shapes), facts.hidden, args.draws, rates)
    st = run_child(STATS_CHILD, str(models / "store_post_a"), str(args.draws))
    return {
        "channels": {
            "forecast_s": round(est, 2),
            "measured_s": round(got["wall_s"], 2),
            "ratio": round(est / got["wall_s"], 2),
            "forecast_ram_mib": round(ram / 2**20),
            "peak_rss_mib": round(got["maxrss_mib"]),
            "offloaded": got["offloaded"],
            "tokens": f"5 × {args.sequences}×{args.seq_len}",
        },
        "channel_stats": {
            "forecast_s": round(st_est, 3),
            "measured_s": round(st["wall_s"], 3),
            "ratio": round(st_est / st["wall_s"], 2),
            "draws": args.draws,
        },
    }


def published() -> None:
    """The generation model's steady-state decode rate against each published figure
    (:data:`grrr_stream.forecast.published.ROWS`)."""
    from grrr_stream.forecast.published import BOUND, ROWS, forecast_tok_s, within

    for row in ROWS:
        tok_s, regime = forecast_tok_s(row)
        ratio = tok_s / row.tok_s
        print(
            json.dumps(
                {
                    "case": row.label,
                    "device": row.device,
                    "vllm": row.vllm,
                    "dtype": row.dtype,
                    "running": row.running,
                    "context": row.context,
                    "published_tok_s": round(row.tok_s),
                    "forecast_tok_s": round(tok_s),
                    "forecast/published": round(ratio, 2),
                    "regime": regime,
                    "fitted": row.fitted,
                    "within": within(ratio),
                    "bound": BOUND,
                    "note": row.note,
                    "source": row.source,
                },
                ensure_ascii=False,
            ),
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="smollm2-135m,qwen25-1.5b")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("forecast_out"))
    ap.add_argument("--channels", action="store_true", help="also the channels and channel-stats units")
    ap.add_argument("--sequences", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--published", action="store_true", help="the GPU generation model against published vLLM figures")
    args = ap.parse_args()
    if args.published:
        return published()
    keys = args.shapes.split(",")
    shapes = presets({k: args.layers for k in ("smollm2-135m", "qwen25-1.5b", "qwen3-14b")})
    for key in keys:
        models = args.out / key
        for name, updates in (("base", ()), ("post_a", (Update(r_delta=1e-2),)), ("post_b", (Update(r_delta=3e-3),))):
            write_model(
                models / name, shapes[key], family="qwen3", dtype="float32", seed=0, updates=updates, overwrite=True
            )
        facts = from_checkpoint(models / "base")
        t = time.perf_counter()
        rates = calibrate(max(facts.shapes, key=work.decompose_flops))
        calib_s = time.perf_counter() - t
        est = [
            sum(work.decompose_flops(s, frame_cached=c) for s in facts.shapes) / rates.decompose_flops_s
            + DECOMPOSE_OVERHEAD_S
            for c in (False, True)
        ]
        frames = str(models / "frames")
        for old in ("frames", "store_post_a", "store_post_b", "channels_out"):  # a rerun must measure, not resume
            shutil.rmtree(models / old, ignore_errors=True)
        measured = [
            run_child(CHILD, str(models / "base"), str(models / post), str(models / f"store_{post}"), frames)["wall_s"]
            for post in ("post_a", "post_b")
        ]
        print(
            json.dumps(
                {
                    "shapes": key,
                    "layers": args.layers,
                    "matrices": len(facts.shapes),
                    "calibration": rates.describe(),
                    "calibration_s": round(calib_s, 1),
                    "first": {
                        "forecast_s": round(est[0], 1),
                        "measured_s": round(measured[0], 1),
                        "ratio": round(est[0] / measured[0], 2),
                    },
                    "second": {
                        "forecast_s": round(est[1], 1),
                        "measured_s": round(measured[1], 1),
                        "ratio": round(est[1] / measured[1], 2),
                    },
                    **(channel_errors(models, facts, rates, args) if args.channels else {}),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
