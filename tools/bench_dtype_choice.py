#!/usr/bin/env python3
"""What resolving `engine.dtype: auto` costs before an evaluation starts its engine.

On a synthetic pair with SmolLM2-135M shapes (bf16 checkpoints, an RL-sized planted update, ‖ΔW‖/‖W0‖ = 3e-4),
decomposed twice, with the default profile (the store holds the per-matrix bf16 survival columns) and with
profile 'paper' (it does not), this prints the wall seconds of:

  1. the decompositions themselves (for scale),
  2. the choice read from a default store's columns (stored),
  3. the choice measured from a 'paper' store and the two checkpoints (measured: a read of both checkpoints,
     the frames from the cache, P and the null residual from the store, one rank-r product on each matrix's
     sample), and how far its shares are from the stored ones.

Usage (one torch thread: on a machine shared with other work, two threads on small tensors wait on each other
and the figures grow several-fold):

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python tools/bench_dtype_choice.py [--layers 4] [--repeats 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from grrr_stream.config import build_config
from grrr_stream.decompose.run import run_transition
from grrr_stream.evaluation.dtype_choice import resolve_engine_dtype
from grrr_stream.evaluation.settings import EngineSettings
from grrr_stream.fixtures.synthetic import ModelShape, Update, make_transition
from grrr_stream.store.transition_store import StoredTransition
from grrr_stream.variants.spec import DEFAULT_VARIANTS, parse_variants
from grrr_stream.variants.survival import COMPONENTS, measured_columns, pooled, stored_columns


def smollm2_135m(layers: int) -> ModelShape:
    return ModelShape(hidden=576, intermediate=1536, layers=layers, heads=9, kv_heads=3, head_dim=64, vocab=1024)


def decompose(base: Path, post: Path, store: Path, **settings) -> float:
    began = time.perf_counter()
    run_transition(
        build_config(
            {
                "base": str(base),
                "post": str(post),
                "store": str(store),
                "device": "cpu",
                "tracking": {"enabled": False},
                "progress": False,
                **settings,
            }
        )
    )
    return time.perf_counter() - began


def timed(fn):
    began = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - began


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4, help="layers of the SmolLM2-135M shapes (the model has 30)")
    ap.add_argument(
        "--repeats", type=int, default=3, help="measurements of the measured shares (the first reads the files cold)"
    )
    ap.add_argument("--out", type=Path, default=Path("bench_dtype_choice"))
    args = ap.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    shape = smollm2_135m(args.layers)
    base, post = make_transition(
        args.out / "m", shape, dtype="bfloat16", update=Update(r_delta=3e-4, plant=(0.3, 0.5, 0.2))
    )
    t_std = decompose(base, post, args.out / "standard")
    t_paper = decompose(base, post, args.out / "paper", profile="paper")
    standard, paper = StoredTransition(args.out / "standard"), StoredTransition(args.out / "paper")
    matrices = len(standard.matrices)
    print(f"SmolLM2-135M shapes, {args.layers} layer(s), {matrices} matrices, bf16 checkpoints, r_delta 3e-4")
    print(f"decompose: default profile {t_std:.2f} s, profile paper {t_paper:.2f} s")
    stored_rows, t_read = timed(lambda: stored_columns(standard, "bfloat16"))
    runs = [timed(lambda: measured_columns(paper, "bfloat16")) for _ in range(args.repeats)]
    measured_rows, t_measure = runs[0][0], min(t for _, t in runs)
    specs, auto = parse_variants(DEFAULT_VARIANTS), EngineSettings(dtype="auto")
    choice_std, t_choice_std = timed(lambda: resolve_engine_dtype(standard, specs, auto))
    choice_paper, t_choice_paper = timed(lambda: resolve_engine_dtype(paper, specs, auto))
    print(
        f"shares read from the store's columns: {t_read:.3f} s; whole choice {t_choice_std:.3f} s ({choice_std.source})"
    )
    print(
        f"shares measured from the store and checkpoints: {t_measure:.2f} s, the fastest of "
        f"{', '.join(f'{t:.2f}' for _, t in runs)} s "
        f"({100 * t_measure / t_paper:.0f} % of the paper-profile decomposition); whole choice "
        f"{t_choice_paper:.2f} s ({choice_paper.source})"
    )
    by_name = {r["name"]: r for r in stored_rows}
    worst = max(abs(r[f"kept_{c}"] - by_name[r["name"]][f"kept_{c}"]) for r in measured_rows for c in COMPONENTS)
    print(f"largest |measured − stored| per-matrix share: {worst:.2e}")
    pooled_std = pooled(stored_rows)
    print(
        "pooled bf16 energy kept: "
        + ", ".join(f"{c} {pooled_std[c].kept:.4f}" for c in COMPONENTS)
        + f" -> auto picks {choice_std.dtype} (floor {auto.auto_min_energy:g})"
    )


if __name__ == "__main__":
    main()
