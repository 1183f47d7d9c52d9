#!/usr/bin/env python3
"""Benchmark of evaluation (issue: vLLM evaluation).

On the tiny trained chain (built or reused under --work), in one process:
  - engine swap per variant (stream the variant into the running engine) vs engine
    restart per variant (write the folder, start a fresh engine), as a ratio;
  - generated tokens per second of greedy decoding on the chain's benchmark;
  - with --batches: one generate call's time by its number of prompts (the same problems, greedy), fitted as
    seconds = per call + per problem × problems: what an adaptive evaluation pays for each call it adds.

    python tools/bench_evaluate.py [--work bench_out/eval] [--variants 3] [--prompts 200] [--quick]
    python tools/bench_evaluate.py --batches 25,50,100,200 [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("bench_out/eval"))
    ap.add_argument("--variants", type=int, default=3, help="variants to swap in / restart for")
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="the quick chain (120 problems, ~85 s to build)")
    ap.add_argument("--batches", help="comma-separated prompt counts: time one generate call of each")
    ap.add_argument("--repeats", type=int, default=3, help="with --batches: calls of each size (the median is kept)")
    args = ap.parse_args()
    if args.batches:
        return batches(args)

    from grrr_stream.config import build_config
    from grrr_stream.decompose.run import run_transition
    from grrr_stream.evaluation.benchmarks import load_benchmark
    from grrr_stream.evaluation.engine import Engine
    from grrr_stream.evaluation.settings import EngineSettings
    from grrr_stream.fixtures.tinychain import build_chain
    from grrr_stream.variants.builder import VariantBuilder, write_variant
    from grrr_stream.variants.spec import parse_variant

    models = build_chain(args.work / "chain", quick=args.quick, progress=False)
    store = args.work / "store"
    run_transition(
        build_config(
            {
                "base": str(models["base"]),
                "post": str(models["sft"]),
                "store": store,
                "progress": False,
                "tracking": {"enabled": False},
            }
        )
    )
    settings = EngineSettings(max_new_tokens=64, enforce_eager=True, max_model_len=512)
    bench = load_benchmark("arith", models["benchmark"], limit=args.prompts)
    names = ["diag", "off", "offnull", "null", "base"][: args.variants]

    t = time.perf_counter()
    engine = Engine(models["sft"], settings)
    start_s = time.perf_counter() - t
    prompts = engine.prompts(bench.problems)
    t = time.perf_counter()
    outs = engine.generate(prompts)
    gen_s = time.perf_counter() - t
    tokens = sum(answers[0].tokens for answers in outs)
    t = time.perf_counter()
    for v in names:
        engine.load_weights(VariantBuilder(store, parse_variant(v)).tensors())
    swap_s = (time.perf_counter() - t) / len(names)
    engine.close()

    t = time.perf_counter()
    for v in names:
        folder = args.work / "restart" / v
        write_variant(VariantBuilder(store, parse_variant(v)), folder, overwrite=True)
        Engine(folder, settings).close()
        shutil.rmtree(folder)
    restart_s = (time.perf_counter() - t) / len(names)
    print(
        json.dumps(
            {
                "engine_first_start_s": round(start_s, 2),
                "swap_per_variant_s": round(swap_s, 3),
                "restart_per_variant_s": round(restart_s, 2),
                "ratio_restart_to_swap": round(restart_s / swap_s, 1),
                "prompts": len(prompts),
                "generated_tokens": tokens,
                "generated_tokens_per_s": round(tokens / gen_s, 1),
            },
            indent=2,
        )
    )


def batches(args) -> None:
    """One generate call's time by its size, on the chain's sft model, sizes interleaved over the repeats."""
    import numpy as np

    from grrr_stream.evaluation.benchmarks import load_benchmark
    from grrr_stream.evaluation.engine import Engine
    from grrr_stream.evaluation.settings import EngineSettings
    from grrr_stream.fixtures.tinychain import build_chain

    sizes = [int(s) for s in args.batches.split(",")]
    models = build_chain(args.work / "chain", quick=args.quick, progress=False)
    bench = load_benchmark("arith", models["benchmark"], limit=max(sizes))
    engine = Engine(models["sft"], EngineSettings(max_new_tokens=64, enforce_eager=True, max_model_len=512))
    prompts = engine.prompts(bench.problems)
    engine.generate(prompts[:8])  # warm-up
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(args.repeats):
        for n in sizes:
            t = time.perf_counter()
            engine.generate(prompts[:n])
            times[n].append(time.perf_counter() - t)
    engine.close()
    med = {n: float(np.median(v)) for n, v in times.items()}
    slope, per_call = np.polyfit(sizes, [med[n] for n in sizes], 1)
    print(
        json.dumps(
            {
                "seconds_by_prompts": {n: round(med[n], 3) for n in sizes},
                "fit_per_call_s": round(float(per_call), 3),
                "fit_per_problem_s": round(float(slope), 5),
                "break_even_prompts": round(float(per_call / slope), 1) if slope > 0 else None,
            },
            indent=2,
        )
    )
    if slope > 0:
        print(
            f"one more call costs as much as {per_call / slope:.0f} more problems: an adaptive evaluation on this "
            f"engine gains time only from calls at least that large (evaluation.adaptive.min_batch)"
        )


if __name__ == "__main__":
    main()
