"""Per-matrix analyses beyond the paper: principal bands of P, principal subspace angles between
W0 and W1, checkpoint-precision sparsity of the update, and how much of each component survives a
round trip through a narrower dtype. Pure torch, no I/O, like :mod:`grrr_stream.frame`."""

from __future__ import annotations

import math
import statistics
from typing import Optional, Sequence

import torch

from .dtypes import name_of
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


def common_dtype(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    """The narrowest float dtype that holds every value of ``a`` and of ``b`` exactly: one of them when it
    holds the other (bfloat16 → float32: float32), else float32 (float16 and bfloat16: neither holds the
    other — float16 lacks bfloat16's range, bfloat16 float16's precision), float64 beyond that; for two
    8-bit floats the 16-bit one that holds both (float16 first).
    A dtype X holds Y when X's precision is at least Y's (eps), its largest value at least Y's and its
    smallest subnormal at most Y's: every IEEE-style value of Y is then a value of X."""
    def holds(x: torch.dtype, y: torch.dtype) -> bool:
        fx, fy = torch.finfo(x), torch.finfo(y)
        return (fx.eps <= fy.eps and fx.max >= fy.max
                and fx.smallest_normal * fx.eps <= fy.smallest_normal * fy.eps)

    candidates = {a, b, torch.float16, torch.bfloat16, torch.float32, torch.float64}
    for cand in sorted(candidates, key=lambda d: (torch.finfo(d).bits, torch.finfo(d).eps)):  # ties: finer first
        if holds(cand, a) and holds(cand, b):
            return cand
    raise TypeError(f"no float dtype holds both {a} and {b} exactly")


def sparsity_compare(base: torch.dtype, post: torch.dtype) -> str:
    """How :func:`update_sparsity` compares a pair, as recorded with its numbers: the dtype the values are
    compared in, and for a pair whose checkpoints differ in dtype which two were upcast to it
    ('bfloat16'; 'float32 (bfloat16→float32)'; 'float32 (float16→bfloat16)')."""
    common = name_of(common_dtype(base, post))
    return common if base == post else f"{common} ({name_of(base)}→{name_of(post)})"


_INTS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _ordered(bits: torch.Tensor) -> torch.Tensor:
    """Float bit patterns (as signed integers) mapped to integers in the order of their values, one step
    per representable value, with +0 and −0 both mapped to 0: a pattern with the sign bit set (sign s =
    −1 from the arithmetic shift) has its magnitude bits flipped, −1 − mag, then + 1: −mag. In the
    patterns' own width: nothing overflows. A new tensor; ``bits`` is not modified."""
    sign = bits >> (torch.iinfo(bits.dtype).bits - 1)  # −1 where the sign bit is set, else 0
    key = bits ^ (sign & torch.iinfo(bits.dtype).max)
    key -= sign
    return key


def update_sparsity(w0: torch.Tensor, w1: torch.Tensor) -> dict:
    """How many entries the update left alone, compared as VALUES in the common dtype: the narrowest
    float dtype that holds both checkpoints' values exactly (:func:`common_dtype`; the pair's own dtype
    when they share one, float32 for bfloat16 vs float32 or vs float16). Both are upcast to it, which is
    exact, so for a bf16 W0 and a float32 W1 an entry is unchanged when W1 equals W0 upcast.

    - ``frac_unchanged``: entries with W1 == W0 as values (+0 and −0 are equal, as in sparsity_in_rl);
    - ``frac_bitwise_unchanged``: entries whose bit patterns in the common dtype are identical (+0 → −0
      counts as changed here);
    - ``frac_within_ulp``: entries that moved by at most one representable step of the COMMON dtype (a
      neighbouring value, unchanged ones included; ±0 are one value, so +0 to the smallest negative
      subnormal is one step). For a mixed pair that is a float32 (or float64) ulp, not the narrower one's;
    - ``sparsity_compare``: which comparison was made (:func:`sparsity_compare`).

    Values, not NaNs: the pipeline refuses non-finite matrices before this. Integer work only, in
    blocks (a 14M-entry matrix in well under a second): ordered as in :func:`_ordered`, the values
    differ by d = key(W0) − key(W1); computed with wrap-around in the patterns' width, d ∈ {−1, 0, 1}
    exactly when the true difference is (the true one never reaches ±(2^w − 1))."""
    common = common_dtype(w0.dtype, w1.dtype)
    out = {"sparsity_compare": sparsity_compare(w0.dtype, w1.dtype)}
    n = w0.numel()
    if n == 0:
        return {"frac_unchanged": 1.0, "frac_bitwise_unchanged": 1.0, "frac_within_ulp": 1.0, **out}
    ints = _INTS[torch.finfo(common).bits // 8]
    a, b = w0.reshape(-1), w1.reshape(-1)
    step = 1 << 22
    same = bitwise = within = 0
    for i in range(0, n, step):  # blocks: bounded temporaries (the upcast of a mixed pair included)
        x, y = (t[i:i + step].to(common).view(ints) for t in (a, b))
        bitwise += int((x == y).sum())
        d = _ordered(x)
        d -= _ordered(y)  # may wrap; see the docstring
        d += 1  # d + 1 ∈ {0, 1, 2}: it wraps only from the largest integer, to a negative one
        same += int((d == 1).sum())
        within += int(((d >= 0) & (d <= 2)).sum())
    return {"frac_unchanged": same / n, "frac_bitwise_unchanged": bitwise / n, "frac_within_ulp": within / n, **out}


# update_sparsity's fractions; a transition reports them pooled over entries (pooled_sparsity)
SPARSITY_FRACTIONS = ("frac_unchanged", "frac_bitwise_unchanged", "frac_within_ulp")


def pooled_sparsity(rows: Sequence[dict]) -> dict:
    """The figures of a set of matrices (a transition, a module): for each sparsity fraction, ``{k}_pooled``
    = Σ entries counted / Σ entries over the matrices (as sparsity_in_rl pools over the model: a large
    MLP matrix weighs more than a small k_proj, unlike a mean of per-matrix fractions), and its per-matrix
    spread ``{k}_min``, ``{k}_median``, ``{k}_max``. ``rows``: metrics rows with ``rows`` and ``cols``.
    Each count is recovered exactly as round(fraction · entries): the stored fraction is count/entries
    correctly rounded, off by far less than half an entry below 2^52 entries. ``sparsity_compare``: the
    comparisons made (one, unless the matrices' dtypes differ), joined by "; "."""
    out: dict = {}
    compared = sorted({str(r["sparsity_compare"]) for r in rows if r.get("sparsity_compare")})
    if compared:
        out["sparsity_compare"] = "; ".join(compared)
    for k in SPARSITY_FRACTIONS:
        have = [r for r in rows if r.get(k) is not None]
        if not have:
            continue
        sizes = [int(r["rows"]) * int(r["cols"]) for r in have]
        counted = sum(round(float(r[k]) * n) for r, n in zip(have, sizes))  # Python ints: exact
        fractions = [float(r[k]) for r in have]
        out[f"{k}_pooled"] = counted / sum(sizes) if sum(sizes) else 1.0
        out[f"{k}_min"] = min(fractions)
        out[f"{k}_median"] = float(statistics.median(fractions))
        out[f"{k}_max"] = max(fractions)
    return out


def round_trip_survival(w0_rows: torch.Tensor, components: dict[str, torch.Tensor],
                        dtype: torch.dtype = torch.bfloat16) -> dict[str, float]:
    """How much of each component survives W0 + component stored in ``dtype``: the share of its energy
    kept, ⟨realised, c⟩² / ‖c‖⁴ with realised = cast(W0 + c) − W0, as the variants' fidelity report
    defines it (1 for a zero component). ``w0_rows`` and each component: the same sample of entries
    (rows or columns) of W0 and of the component.

    W0 + c is formed in float64 when W0 is wider than float32 or c is float64, else in float32 (the
    sums are accumulated in float64 either way): rounding W0 + c to float32 before ``dtype`` can
    change a 16-bit result only at an exact tie, far below what this share resolves."""
    wide = w0_rows.dtype == torch.float64 or any(c.dtype == torch.float64 for c in components.values())
    work = torch.float64 if wide else torch.float32
    base = w0_rows.to(work)
    out = {}
    for name, c in components.items():
        c = c.to(work)
        realised = (base + c).to(dtype).to(work) - base
        cc = float(torch.sum((c * c).double()))
        dot = float(torch.sum((realised * c).double()))
        out[name] = dot * dot / (cc * cc) if cc > 0 else 1.0
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

