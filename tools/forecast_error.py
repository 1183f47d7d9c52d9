#!/usr/bin/env python3
"""The forecast's error on tools/bench_decompose.py's shapes: estimated vs measured decomposition seconds.

For each shape set, synthetic checkpoints are written (base and two posts), the forecast of a first
transition (W0's frames computed) and of a second one from the same base (frames read from the cache) is
made exactly as `sweep --dry-run` makes it (calibration included, cached), and both transitions are then
run in fresh subprocesses as bench_decompose does. Prints one JSON line per shape set.

    python tools/forecast_error.py [--shapes smollm2-135m,qwen25-1.5b] [--layers N] [--out forecast_out]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decompose import CHILD, presets, run_child  # noqa: E402

from grrr_stream.fixtures.synthetic import Update, write_model  # noqa: E402
from grrr_stream.forecast import work  # noqa: E402
from grrr_stream.forecast.calibrate import calibrate  # noqa: E402
from grrr_stream.forecast.shapes import from_checkpoint  # noqa: E402
from grrr_stream.sweep.forecast import DECOMPOSE_OVERHEAD_S  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="smollm2-135m,qwen25-1.5b")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("forecast_out"))
    args = ap.parse_args()
    keys = args.shapes.split(",")
    shapes = presets({k: args.layers for k in ("smollm2-135m", "qwen25-1.5b", "qwen3-14b")})
    for key in keys:
        models = args.out / key
        for name, updates in (("base", ()), ("post_a", (Update(r_delta=1e-2),)), ("post_b", (Update(r_delta=3e-3),))):
            write_model(models / name, shapes[key], family="qwen3", dtype="float32", seed=0, updates=updates,
                        overwrite=True)
        facts = from_checkpoint(models / "base")
        t = time.perf_counter()
        rates = calibrate(max(facts.shapes, key=work.decompose_flops))
        calib_s = time.perf_counter() - t
        est = [sum(work.decompose_flops(s, frame_cached=c) for s in facts.shapes) / rates.decompose_flops_s
               + DECOMPOSE_OVERHEAD_S for c in (False, True)]
        frames = str(models / "frames")
        for old in ("frames", "store_post_a", "store_post_b"):  # a rerun must measure, not resume
            shutil.rmtree(models / old, ignore_errors=True)
        measured = [run_child(CHILD, str(models / "base"), str(models / post), str(models / f"store_{post}"),
                              frames)["wall_s"] for post in ("post_a", "post_b")]
        print(json.dumps({"shapes": key, "layers": args.layers, "matrices": len(facts.shapes),
                          "calibration": rates.describe(), "calibration_s": round(calib_s, 1),
                          "first": {"forecast_s": round(est[0], 1), "measured_s": round(measured[0], 1),
                                    "ratio": round(est[0] / measured[0], 2)},
                          "second": {"forecast_s": round(est[1], 1), "measured_s": round(measured[1], 1),
                                     "ratio": round(est[1] / measured[1], 2)}}), flush=True)


if __name__ == "__main__":
    main()
