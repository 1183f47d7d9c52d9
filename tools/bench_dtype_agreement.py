#!/usr/bin/env python3
"""Do bfloat16 and float32 engines agree on the demo chain? And which transitions would `engine.dtype: auto` run
in bfloat16?

Decomposes the demo's four transitions of the shipped tiny chain (grrr_stream/fixtures/tinychain_seed0: base → sft,
base → rl, base → sibling, sft → rl; the default profile, so the stores hold the bf16 survival columns), evaluates
the variants of each with vLLM in float32 and in bfloat16 on the chain's own benchmark (greedy, the demo's engine
settings), and prints per transition and variant the accuracy in each dtype, the difference bf16 − fp32 with a
paired bootstrap 95 % interval over problems (grrr_stream.stats.claims: both dtypes' answers to the same problems
resampled together), how many problems the two grade differently, and what 'auto' picks and why.

Slow and memory-heavy on a CPU (vLLM's CPU backend runs bf16 several times slower than float32): one run at a
time, and --limit keeps it small. Needs the vLLM extra (tools/install.sh). Usage:

    python tools/bench_dtype_agreement.py [--limit 100] [--variants base,full,proj,diag,off,null,offnull]
                                          [--transitions base-sft,base-rl,base-sibling,sft-rl] [--out DIR]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from grrr_stream.config import build_config
from grrr_stream.decompose.run import run_transition
from grrr_stream.evaluation.dtype_choice import resolve_engine_dtype
from grrr_stream.evaluation.pipeline import EvaluationRequest, run_evaluation
from grrr_stream.evaluation.settings import EngineSettings, EvaluationOptions
from grrr_stream.fixtures.tinychain_shipped import BENCHMARKS, SHIPPED
from grrr_stream.stats.bootstrap import interval
from grrr_stream.stats.claims import correctness_of, transition_scores
from grrr_stream.store.transition_store import StoredTransition
from grrr_stream.variants.spec import parse_variants

TRANSITIONS = ("base-sft", "base-rl", "base-sibling", "sft-rl")
# the demo's engine (configs/demo.yaml)
ENGINE = dict(max_new_tokens=64, max_model_len=512, enforce_eager=True, cpu_kv_cache_gib=0.5)


def decomposed(tid: str, out: Path) -> StoredTransition:
    parent, child = tid.split("-")
    store = out / "stores" / tid
    if not (store / "zarr.json").is_file():
        run_transition(
            build_config(
                {
                    "base": str(SHIPPED / parent),
                    "post": str(SHIPPED / child),
                    "store": str(store),
                    "device": "cpu",
                    "tracking": {"enabled": False},
                    "progress": False,
                }
            )
        )
    return StoredTransition(store)


def evaluate(store: Path, out: Path, variants: list[str], limit: int, dtype: str):
    options = EvaluationOptions(engine=EngineSettings(dtype=dtype, **ENGINE), limit=limit)
    began = time.perf_counter()
    res = run_evaluation(
        EvaluationRequest(store, out, variants, ["arith"], SHIPPED / BENCHMARKS, options), log=lambda m: None
    )
    return res, time.perf_counter() - began


def agreement(tid: str, fp32, bf16, variants: list[str], resamples: int) -> list[dict]:
    """Per variant: both accuracies, bf16 − fp32 with its paired interval, problems graded differently."""
    both = {
        f"{v}@{tag}": c
        for tag, res in (("fp32", fp32), ("bf16", bf16))
        for v, c in correctness_of(res.results, variants).items()
    }
    ts = transition_scores(both, transition=f"dtype:{tid}", resamples=resamples)
    rows = []
    for v in variants:
        a, b = f"{v}@fp32", f"{v}@bf16"
        lo, hi = interval(ts.replicates(b) - ts.replicates(a))
        bits = [ts.per_problem["arith"][:, ts.variants.index(x)] for x in (a, b)]
        rows.append(
            {
                "transition": tid,
                "variant": v,
                "fp32": ts.score(a),
                "bf16": ts.score(b),
                "diff": ts.score(b) - ts.score(a),
                "lo": lo,
                "hi": hi,
                "differ": int((bits[0] != bits[1]).sum()),
                "n": len(bits[0]),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=100, help="the first N of the benchmark's 200 problems")
    ap.add_argument("--variants", default="base,full,proj,diag,off,null,offnull")
    ap.add_argument("--transitions", default=",".join(TRANSITIONS))
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--out", type=Path, default=Path("bench_dtype_agreement"))
    args = ap.parse_args()
    variants = args.variants.split(",")
    rows, picks = [], []
    for tid in args.transitions.split(","):
        t = decomposed(tid, args.out)
        choice = resolve_engine_dtype(t, parse_variants(variants), EngineSettings(dtype="auto"))
        picks.append((tid, choice))
        fp32, s32 = evaluate(t.path, args.out / "eval" / tid / "float32", variants, args.limit, "float32")
        bf16, s16 = evaluate(t.path, args.out / "eval" / tid / "bfloat16", variants, args.limit, "bfloat16")
        print(f"{tid}: evaluated in {s32:.0f} s (float32), {s16:.0f} s (bfloat16)", flush=True)
        rows += agreement(tid, fp32, bf16, variants, args.resamples)
    print(
        f"\naccuracy (%) on the first {args.limit} arith problems, greedy; bf16 − fp32 in points with the paired "
        "bootstrap 95 % interval over problems; 'differ': problems graded differently"
    )
    print(f"{'transition':<13} {'variant':<8} {'fp32':>6} {'bf16':>6} {'bf16−fp32':>10} {'95 % CI':>17} {'differ':>7}")
    for r in rows:
        print(
            f"{r['transition']:<13} {r['variant']:<8} {r['fp32']:6.1f} {r['bf16']:6.1f} {r['diff']:+10.1f} "
            f"[{r['lo']:+6.1f}, {r['hi']:+6.1f}] {r['differ']:>4}/{r['n']}"
        )
    print("\nengine.dtype auto (floor 0.999):")
    for tid, c in picks:
        print(f"  {tid}: {c.dtype}; {c.reason}")


if __name__ == "__main__":
    main()
