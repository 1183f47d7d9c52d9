#!/usr/bin/env python3
"""Two levers of issue 26, timed per shape class on synthetic pairs (float32, this process's threads).

1. σ(W1) from the 2r×r matrix B = [[Σ0 + P], [R]], N V0 = Q R (N the null residual, which decompose
   computes anyway), against svdvals(W1) in the tall orientation. For a full-rank core (r = n after
   orienting tall), σ(W1) = σ(B); the extra cost is N V0 and its QR, the saving a smaller svdvals.
   A square matrix has N = 0: B = Σ0 + P, the same size as W1.
2. The Lanczos ‖ΔW‖₂ (grrr_stream.geometry.frame.spectral_norm): seconds at its tolerance, and the share of
   its time a warm start from P's top right singular vector would have to save to pay for itself.

Prints the process's CPU seconds per call (median of --repeat; on a machine shared with other jobs run it
with OMP_NUM_THREADS=1, where CPU seconds are the work, unlike wall seconds) and the largest relative difference of
σ(B) vs σ(W1).

    python tools/bench_levers.py [--shapes smollm2-135m,qwen25-1.5b] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from grrr_stream.geometry.frame import compute_frame, project, spectral_norm, svdvals

SHAPES = {  # (rows, cols) as stored: MLP up (tall), k/v (wide, GQA), q/o (square)
    "smollm2-135m": {"mlp": (1536, 576), "kv": (192, 576), "qo": (576, 576)},
    "qwen25-1.5b": {"mlp": (8960, 1536), "kv": (256, 1536), "qo": (1536, 1536)},
}


def pair(m: int, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A power-law spectrum W0 and W1 = W0 + a 1e-2-relative dense update."""
    g = torch.Generator().manual_seed(seed)
    k = min(m, n)
    U, _ = torch.linalg.qr(torch.randn(m, k, generator=g))
    V, _ = torch.linalg.qr(torch.randn(n, k, generator=g))
    w0 = (U * torch.arange(1, k + 1).float().pow(-0.6)) @ V.T
    d = torch.randn(m, n, generator=g)
    return w0, w0 + d * (1e-2 * w0.norm() / d.norm())


def timed(fn, repeat: int) -> tuple[float, object]:
    out, ts = None, []
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        ts.append(time.process_time() - t)
    return statistics.median(ts), out


def sigma_from_b(frame, proj) -> torch.Tensor:
    """σ(W1) as σ(B), oriented tall (m ≥ n, r = n)."""
    S, V, P, N = frame.S, frame.V, proj.P, proj.null
    if N.shape[0] < N.shape[1]:
        V, P, N = frame.U, P.mT, N.mT
    top = torch.diag(S[: V.shape[1]]) + P
    if proj.null_is_structural_zero:
        return torch.linalg.svdvals(top)
    R = torch.linalg.qr(N @ V, mode="r")[1]
    return torch.linalg.svdvals(torch.cat([top, R], 0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="smollm2-135m,qwen25-1.5b")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"torch threads {torch.get_num_threads()}")
    print(
        "| shape | class | m×n | svdvals(W1) | via B (N V0, QR, svdvals) | B / W1 | max rel diff σ "
        "| Lanczos ‖ΔW‖₂ | svdvals(P) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for key in args.shapes.split(","):
        for cls, (m, n) in SHAPES[key].items():
            w0, w1 = pair(m, n)
            frame = compute_frame(w0)
            delta = w1 - w0
            proj = project(delta.clone(), frame)
            t_w1, s_w1 = timed(lambda: svdvals(w1), args.repeat)
            t_b, s_b = timed(lambda: sigma_from_b(frame, proj), args.repeat)
            rel = float(((s_b - s_w1).abs() / s_w1[0]).max())
            t_l, _ = timed(lambda: spectral_norm(delta), args.repeat)
            t_p, _ = timed(lambda: torch.linalg.svdvals(proj.P), args.repeat)
            print(
                f"| {key} | {cls} | {m}×{n} | {t_w1 * 1e3:.1f} ms | {t_b * 1e3:.1f} ms | {t_b / t_w1:.2f} "
                f"| {rel:.1e} | {t_l * 1e3:.1f} ms | {t_p * 1e3:.1f} ms |",
                flush=True,
            )


if __name__ == "__main__":
    main()
