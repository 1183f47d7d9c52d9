"""Per-matrix analyses beyond the paper: principal bands of P, principal subspace angles between
W0 and W1, checkpoint-precision sparsity of the update, and how much of each component survives a
round trip through a narrower dtype. Pure torch, no I/O, like :mod:`grrr_stream.frame`."""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from .frame import Frame, Projection

DEFAULT_BAND_EDGES = (16, 64, 256)


def band_energies(P: torch.Tensor, edges: Sequence[int]) -> dict[str, float]:
    """Energy of diag and off of P by principal band, for each band edge k (absolute, float64).

    Rows and columns of P follow σ(W0) in descending order; the top-k block holds the update
    among the k principal directions on both sides. Per k: ``diag_principal`` = Σ_{i<k} P_ii²,
    ``diag_tail`` = Σ_{i≥k} P_ii², ``off_principal`` = the off-diagonal energy of P[:k, :k],
    ``off_mixed`` = ‖P[:k, k:]‖² + ‖P[k:, :k]‖², ``off_tail`` = the off-diagonal energy of
    P[k:, k:]. They sum to ‖diag P‖² + ‖P − diag P‖² for every k (k ≥ r: everything principal).
    """
    r = P.shape[0]
    sq = P.double().square()
    d = torch.diagonal(sq).clone()
    sq.diagonal().zero_()
    out: dict[str, float] = {}
    for edge in edges:
        k = min(int(edge), r)  # named by the edge asked for: the same columns for every matrix
        out[f"{edge}_diag_principal"] = float(d[:k].sum())
        out[f"{edge}_diag_tail"] = float(d[k:].sum())
        out[f"{edge}_off_principal"] = float(sq[:k, :k].sum())
        out[f"{edge}_off_mixed"] = float(sq[:k, k:].sum() + sq[k:, :k].sum())
        out[f"{edge}_off_tail"] = float(sq[k:, k:].sum())
    return out


def top_singular_subspaces(X: torch.Tensor, k: int, *, start: Optional[torch.Tensor] = None, oversample: int = 16,
                           iters: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Approximate top-k left and right singular vectors of X (m×k, n×k), without a full SVD.

    Block subspace iteration (Halko, Martinsson & Tropp 2011): ``iters`` power iterations of a block
    of k + ``oversample`` columns, re-orthonormalised each time, then Rayleigh–Ritz on the small
    projected matrix. Cost about (2·iters + 2)·m·n·(k + oversample). ``start`` (n×j, j ≤ k +
    oversample) seeds the block — for W1, the top right singular vectors of W0, which a post-training
    update moves little — and seeded Gaussian columns fill the rest. From a start that close the error
    left after the iterations is a small fraction of the true angle, even where the spectrum has no gap
    at k (a random start leaves an error of its own size there).
    """
    m, n = X.shape
    q = min(k + oversample, m, n)
    gen = torch.Generator(device=X.device).manual_seed(seed)
    block = torch.randn(n, q, generator=gen, device=X.device, dtype=X.dtype)
    if start is not None:
        j = min(start.shape[1], q)
        block[:, :j] = start[:, :j].to(X.dtype)
    Y = X @ block
    Q, _ = torch.linalg.qr(Y)
    for _ in range(iters):
        Z, _ = torch.linalg.qr(X.T @ Q)
        Q, _ = torch.linalg.qr(X @ Z)
    B = Q.T @ X  # q×n
    Ub, _, Vh = torch.linalg.svd(B, full_matrices=False)
    k = min(k, q)
    return (Q @ Ub[:, :k]).contiguous(), Vh[:k].T.contiguous()


def subspace_angles(A: torch.Tensor, B: torch.Tensor) -> tuple[float, float]:
    """(largest principal angle in degrees, mean cos² of the principal angles) between the column
    spans of two matrices with orthonormal columns (cosines = singular values of AᵀB)."""
    c = torch.linalg.svdvals((A.T @ B).double()).clamp(0.0, 1.0)
    if c.numel() == 0:
        return 0.0, 1.0
    return math.degrees(math.acos(float(c.min()))), float((c * c).mean())


def principal_angles(frame: Frame, U1: torch.Tensor, V1: torch.Tensor, edges: Sequence[int]) -> dict[str, float]:
    """For each k: the angles between the top-k left (right) singular subspaces of W0 and W1."""
    out: dict[str, float] = {}
    r = min(frame.U.shape[1], U1.shape[1])
    for k in edges:
        if k > r:  # beyond the core or the computed subspace: not measured
            continue
        for side, A, B in (("left", frame.U, U1), ("right", frame.V, V1)):
            worst, cos2 = subspace_angles(A[:, :k].to(B.dtype), B[:, :k])
            out[f"{k}_{side}_max_deg"] = worst
            out[f"{k}_{side}_cos2"] = cos2
    return out


def update_sparsity(w0: torch.Tensor, w1: torch.Tensor) -> dict[str, float]:
    """In the checkpoints' own dtype: the fraction of entries bitwise unchanged, and the fraction that
    moved by at most one representable step (a neighbour in the dtype: one ulp; unchanged included).

    Floats of one sign are ordered like their bit patterns, so a neighbour differs by 1 as an integer;
    with the sign bit set the other way round, by 1 as well. Integer work only: a 14M-entry matrix in
    well under a second."""
    if w0.dtype != w1.dtype:
        raise TypeError("the two tensors must share their checkpoint dtype")
    n = w0.numel()
    if n == 0:
        return {"frac_unchanged": 1.0, "frac_within_ulp": 1.0}
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[w0.element_size()]
    a, b = w0.reshape(-1).view(ints), w1.reshape(-1).view(ints)
    step = 1 << 22
    same = within = 0
    for i in range(0, n, step):  # blocks: bounded temporaries, in the patterns' own width
        x, y = a[i:i + step], b[i:i + step]
        same += int((x == y).sum())
        # same sign bit, at most one step apart. With equal signs x − y cannot overflow; with unequal
        # ones it may wrap (even to the minimum, whose abs stays negative), but the sign test masks it
        within += int((((x ^ y) >= 0) & ((x - y).abs() <= 1)).sum())
    return {"frac_unchanged": same / n, "frac_within_ulp": within / n}


def round_trip_survival(w0_rows: torch.Tensor, components: dict[str, torch.Tensor],
                        dtype: torch.dtype = torch.bfloat16) -> dict[str, float]:
    """How much of each component survives W0 + component stored in ``dtype``: the share of its energy
    that is left once the rounding error is taken out, max(0, 1 − ‖realised − c‖² / ‖c‖²) with realised
    = cast(W0 + c) − W0 (1 for a zero component). ``w0_rows`` and each component: the same sample of
    entries (rows or columns) of W0 and of the component.

    Why this and not ⟨realised, c⟩²/‖c‖⁴: the error realised − c has a part along c (a component of
    0.6 ulp per entry is realised as 1 ulp: overshoot, which the projection counted as more than
    everything kept) and a part orthogonal to c (noise the projection ignored); ‖realised − c‖²
    counts both. It is 1 − fidelity² of the variants' fidelity report (fidelity = ‖error‖/‖c‖),
    clipped at 0 where the error is as large as the component itself.

    W0 + c is formed in float64 when W0 is wider than float32 or c is float64, else in float32 (the
    sums are accumulated in float64 either way): rounding W0 + c to float32 before ``dtype`` can
    change a 16-bit result only at an exact tie, far below what this share resolves."""
    wide = w0_rows.dtype == torch.float64 or any(c.dtype == torch.float64 for c in components.values())
    work = torch.float64 if wide else torch.float32
    base = w0_rows.to(work)
    out = {}
    for name, c in components.items():
        c = c.to(work)
        realised = (base + c).to(dtype).to(work) - base  # nearby floats: exact or nearly
        cc = float(torch.sum((c * c).double()))
        err = float(torch.sum((realised.double() - c.double()).square()))
        out[name] = max(0.0, 1.0 - err / cc) if cc > 0 else 1.0
    return out

def survival_sample(shape: tuple[int, int], target: int = 256) -> tuple[int, torch.Tensor]:
    """(axis, indices): an evenly spaced sample of at most ``target`` rows (axis 0) or columns (axis 1)
    along the longer side, on which component survival is estimated (all of them when fewer). 256
    rows of a matrix are ≥ 256·min(m, n) entries, plenty for an energy share; 1024 made the estimate
    cost as much as a small model's SVDs (tools/bench_decompose.py)."""
    m, n = shape
    axis, size = (0, m) if m >= n else (1, n)
    step = max(1, -(-size // target))
    return axis, torch.arange(0, size, step)


def component_samples(proj: Projection, frame: Frame, axis: int, idx: torch.Tensor,
                       delta_sample: torch.Tensor) -> dict[str, torch.Tensor]:
    """ΔW_diag, ΔW_off and ΔW_null on the sampled rows (axis 0) or columns (axis 1), given ΔW there.

    One rank-r product (the diagonal part); the off-diagonal part is what remains of ΔW, ΔW − diag −
    null, instead of U_s (P − diag P) Vᵀ: two products fewer, which on small models (where the sample
    is the whole matrix) cost as much as the frame's SVD. Its rounding is relative to ‖ΔW‖ (float32
    eps), far below the bf16 round trip it is used to measure."""
    U, V, P = frame.U, frame.V, proj.P
    p = torch.diagonal(P)
    idx = idx.to(U.device)
    if axis == 0:
        diag = (U[idx] * p) @ V.T
        null = proj.null[idx]
    else:
        diag = U @ (p[:, None] * V[idx].T)
        null = proj.null[:, idx]
    if proj.null_is_structural_zero:
        null = torch.zeros_like(null)
    return {"diag": diag, "off": delta_sample - diag - null, "null": null}

