#!/usr/bin/env python3
"""GPU readiness check: one command for whoever has a CUDA machine (tools/gpu_check.sh runs it).

1. decomposes a Qwen2.5-1.5B-shaped synthetic pair (hidden 1536, MLP 8960, 12/2 heads of 128;
   --layers, default 2) with --device cuda, phases timed with device synchronisation;
2. compares a subset of its matrices (--check, default 7: one layer) against a CPU float64
   reference computed here with numpy (max abs error of f_diag, f_off, f_null);
3. times cuSOLVER's SVD drivers (gesvd, gesvdj, gesvda, and torch's default) on the largest
   shapes (1.5B MLP 8960×1536, 14B MLP 17408×5120) and picks the fastest whose reconstruction
   and orthogonality errors meet --tol: pass it as `svd_driver` to decompositions;
4. runs one in-engine vLLM weight swap on the GPU (the tiny chain's model: the swap path, not
   its speed at scale), when vLLM is installed;
5. prints one table (and --json FILE writes it as JSON).

It fails loudly, exit 2, when torch sees no CUDA GPU. Usage:

    bash tools/gpu_check.sh [--layers 2] [--check 7] [--tol 1e-4] [--out gpu_check_out] [--json table.json]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch

DRIVERS = (None, "gesvd", "gesvdj", "gesvda")  # None: torch's own choice
SHAPES = {"qwen25-1.5b mlp": (8960, 1536), "qwen3-14b mlp": (17408, 5120)}


def require_cuda() -> torch.device:
    if not torch.cuda.is_available():
        sys.stderr.write(
            "gpu_check: FAILED: torch sees no CUDA GPU (torch.cuda.is_available() is False; torch "
            f"{torch.__version__}, CUDA build: {torch.version.cuda or 'none'}). Run it on a machine "
            "with an NVIDIA GPU and a CUDA build of torch.\n"
        )
        sys.exit(2)
    return torch.device("cuda")


# ---------------------------------------------------------------------------- accuracy


def float64_reference(w0: np.ndarray, w1: np.ndarray) -> dict[str, float]:
    """The energy fractions of ΔW in W0's frame, independently in float64 numpy."""
    w0, w1 = w0.astype(np.float64), w1.astype(np.float64)
    D = w1 - w0
    U, _, Vt = np.linalg.svd(w0, full_matrices=False)
    P = U.T @ D @ Vt.T
    d2 = float(np.sum(D * D))
    diag = float(np.sum(np.diag(P) ** 2))
    null = D - U @ P @ Vt
    return {"f_diag": diag / d2, "f_off": (float(np.sum(P * P)) - diag) / d2, "f_null": float(np.sum(null * null)) / d2}


def max_fraction_error(store: Path, names: Sequence[str]) -> tuple[float, dict]:
    """Max abs error of the stored f_diag/f_off/f_null against the float64 reference, over ``names``."""
    from grrr_stream.checkpoints.reader import Checkpoint
    from grrr_stream.store.transition_store import StoredTransition

    t = StoredTransition(store)
    base = Checkpoint.open(Path(t.manifest["base_folder"]))
    post = Checkpoint.open(Path(t.manifest["post_folder"]))
    worst, where = 0.0, {}
    for name in names:
        ref = float64_reference(base.read(name).double().numpy(), post.read(name).double().numpy())
        got = t.matrices[name]["metrics"]
        for k, v in ref.items():
            err = abs(float(got[k]) - v)
            if err >= worst:
                worst, where = err, {"matrix": name, "metric": k, "stored": float(got[k]), "reference": v}
    return worst, where


# ---------------------------------------------------------------------------- SVD drivers


def svd_errors(A: torch.Tensor, U: torch.Tensor, S: torch.Tensor, Vh: torch.Tensor) -> tuple[float, float]:
    """(‖A − U S Vᵀ‖/‖A‖, max of ‖UᵀU − I‖, ‖VᵀV − I‖ (Frobenius)), computed in float64."""
    A, U, S, Vh = A.double(), U.double(), S.double(), Vh.double()
    recon = float(torch.linalg.matrix_norm(A - (U * S) @ Vh) / torch.linalg.matrix_norm(A))
    eye = torch.eye(S.numel(), dtype=torch.float64, device=A.device)
    orth = max(float(torch.linalg.matrix_norm(U.T @ U - eye)), float(torch.linalg.matrix_norm(Vh @ Vh.T - eye)))
    return recon, orth


def time_drivers(
    shapes: dict[str, tuple[int, int]],
    device: torch.device,
    drivers=DRIVERS,
    sync: Callable[[], None] = lambda: None,
    seed: int = 0,
) -> list[dict]:
    """One row per (shape, driver): seconds of a thin float32 SVD and its errors. The test matrix
    has a decaying spectrum like a pretrained weight's (σ_i ∝ 1/√(1+i) plus noise)."""
    rows = []
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for label, (m, n) in shapes.items():
        A = torch.randn(m, n, generator=gen) / math.sqrt(n)
        A = A * (1.0 / torch.sqrt(1.0 + torch.arange(n, dtype=torch.float32)))
        A = A.to(device)
        for d in drivers:
            kw = {"driver": d} if d is not None else {}
            try:
                torch.linalg.svd(A[:64, :32], full_matrices=False, **kw)  # warm-up (handles, workspace)
                sync()
                t = time.perf_counter()
                U, S, Vh = torch.linalg.svd(A, full_matrices=False, **kw)
                sync()
                secs = time.perf_counter() - t
                recon, orth = svd_errors(A, U, S, Vh)
                rows.append(
                    {
                        "shape": label,
                        "m": m,
                        "n": n,
                        "driver": d or "default",
                        "seconds": secs,
                        "recon_err": recon,
                        "orth_err": orth,
                    }
                )
                del U, S, Vh
            except (RuntimeError, torch.linalg.LinAlgError) as e:
                rows.append(
                    {
                        "shape": label,
                        "m": m,
                        "n": n,
                        "driver": d or "default",
                        "seconds": math.nan,
                        "recon_err": math.nan,
                        "orth_err": math.nan,
                        "error": str(e).splitlines()[0][:120],
                    }
                )
    return rows


def pick_driver(rows: Sequence[dict], tol: float) -> Optional[str]:
    """The driver with the least total time over the shapes among those that meet ``tol`` on every
    shape (reconstruction and orthogonality); None if none does."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["driver"], []).append(r)
    n_shapes = len({r["shape"] for r in rows})
    ok = {
        d: sum(r["seconds"] for r in rs)
        for d, rs in by.items()
        if len(rs) == n_shapes
        and all(math.isfinite(r["seconds"]) and r["recon_err"] <= tol and r["orth_err"] <= tol for r in rs)
    }
    return min(ok, key=ok.get) if ok else None


# ---------------------------------------------------------------------------- the table


def format_table(rows: Sequence[tuple[str, str]]) -> str:
    """Two columns, aligned: what was checked, what came out."""
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def vllm_swap(work: Path) -> str:
    """One in-engine swap of a variant into a running vLLM engine on the GPU (tiny chain)."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        return "skipped (vllm not installed: pip install -e '.[vllm]')"
    from grrr_stream.config import build_config
    from grrr_stream.decompose.run import run_transition
    from grrr_stream.evaluation.benchmarks import load_benchmark
    from grrr_stream.evaluation.engine import Engine
    from grrr_stream.evaluation.settings import EngineSettings
    from grrr_stream.fixtures.tinychain import build_chain
    from grrr_stream.variants.builder import VariantBuilder
    from grrr_stream.variants.spec import parse_variant

    models = build_chain(work / "chain", quick=True, progress=False)
    store = work / "chain_store"
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
    engine = Engine(
        models["base"],
        EngineSettings(max_new_tokens=32, max_model_len=512, gpu_memory_utilization=0.3),
        prompt_format=models["sft"],
    )
    bench = load_benchmark("arith", models["benchmark"], limit=40)
    prompts = engine.prompts(bench.problems)
    t = time.perf_counter()
    engine.load_weights(VariantBuilder(store, parse_variant("full")).tensors())
    swap = time.perf_counter() - t
    gens = engine.generate(prompts)
    engine.close()
    return f"ok: swap {swap:.2f} s, {len(gens)} prompts answered"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--check", type=int, default=7, help="matrices compared with the float64 reference")
    ap.add_argument("--tol", type=float, default=1e-4, help="accuracy bar of an SVD driver (relative)")
    ap.add_argument("--out", type=Path, default=Path("gpu_check_out"))
    ap.add_argument("--json", type=Path, help="also write the table as JSON here")
    ap.add_argument("--skip-vllm", action="store_true")
    args = ap.parse_args()
    device = require_cuda()

    from grrr_stream.config import build_config
    from grrr_stream.decompose.run import run_transition
    from grrr_stream.fixtures.synthetic import ModelShape, Update, write_model

    shape = ModelShape(
        hidden=1536, intermediate=8960, layers=args.layers, heads=12, kv_heads=2, head_dim=128, vocab=1024
    )
    models = args.out / "models"
    for name, updates in (("base", ()), ("post", (Update(r_delta=1e-2),))):
        if not (models / name / "config.json").is_file():
            write_model(models / name, shape, family="qwen2", dtype="bfloat16", seed=0, updates=updates, overwrite=True)
    table: list[tuple[str, str]] = [
        ("GPU", f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    ]
    shutil.rmtree(args.out / "store", ignore_errors=True)
    res = run_transition(
        build_config(
            {
                "base": str(models / "base"),
                "post": str(models / "post"),
                "store": args.out / "store",
                "device": "cuda",
                "sync_timing": True,
                "progress": False,
                "tracking": {"enabled": False},
            }
        )
    )
    ph = res.timings
    table.append(
        (
            f"decompose 1.5B shapes, {args.layers} layers ({len(res.rows)} matrices)",
            f"{ph['total_s']:.1f} s; svd_w0 {ph.get('svd_w0', 0):.1f}, svdvals_w1 {ph.get('svdvals_w1', 0):.1f}, "
            f"store_write {ph.get('store_write', 0):.1f}, read {ph.get('read', 0):.1f} s",
        )
    )
    names = [r["name"] for r in res.rows][: args.check]
    worst, where = max_fraction_error(args.out / "store", names)
    table.append(
        (
            f"max |error| of f_diag/f_off/f_null vs CPU float64 ({len(names)} matrices)",
            f"{worst:.2e} ({where.get('metric')} of {where.get('matrix')})",
        )
    )
    rows = time_drivers(SHAPES, device, sync=lambda: torch.cuda.synchronize(device))
    for r in rows:
        table.append(
            (
                f"svd {r['shape']} {r['m']}x{r['n']} driver {r['driver']}",
                r.get("error") or f"{r['seconds']:.3f} s, recon {r['recon_err']:.1e}, orth {r['orth_err']:.1e}",
            )
        )
    best = pick_driver(rows, args.tol)
    table.append(
        (
            "fastest driver meeting the bar",
            f"{best} (tol {args.tol:g}; pass svd_driver: {best})" if best else f"none meets tol {args.tol:g}",
        )
    )
    table.append(("vLLM in-engine swap on GPU", "skipped (--skip-vllm)" if args.skip_vllm else vllm_swap(args.out)))
    print(format_table(table))
    if args.json:
        args.json.write_text(json.dumps({"table": table, "drivers": rows, "phases": ph}, indent=2))
    ok = worst < 1e-4 and best is not None
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
