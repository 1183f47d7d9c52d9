"""Per-matrix analyses beyond the paper: principal bands of P, principal subspace angles between
W0 and W1, checkpoint-precision sparsity of the update, and how much of each component survives a
round trip through a narrower dtype. Pure torch, no I/O, like :mod:`grrr_stream.geometry.frame`."""

from __future__ import annotations

import math
import statistics
from typing import Optional, Sequence

import numpy as np
import torch

from ..dtypes import name_of
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


ANGLE_TOL = 1e-2        # stop when no reported angle quantity changes by more than this share between blocks
ANGLE_MAX_BLOCKS = 12   # a cap far above the 4 blocks that power-law spectra without a gap need
ANGLE_OVERSAMPLE = 16   # block size k + 16

# (left max°, left mean cos²), (right max°, right mean cos²) for one k
AnglePair = tuple[tuple[float, float], tuple[float, float]]


def principal_angles_in_frame(frame: Frame, proj: Projection, ks: Sequence[int]) -> tuple[dict[int, AnglePair], int]:
    """Angles between the top-k singular subspaces of W0 and W1 from the projection, in W0's frame (for an
    untruncated core, r = min(m, n)). Returns ({k: angles}, Krylov blocks used).

    Oriented so that m ≥ n (transposed otherwise, the sides swapped back at the end), V0 is complete
    and W1 = U0 (Σ0 + P) V0ᵀ + N with U0ᵀN = 0: W1 = [U0 Q]·B·V0ᵀ with B = [[Σ0 + P], [R]], NV0 = QR. So
    σ(W1) = σ(B), W1's right singular vectors are V0 times B's and its left ones [U0 Q] times B's: the
    cosines of the top-k angles are the singular values of the first k coordinates of B's top-k
    singular vectors. B is never formed: B y = (Σ0y + Py, N·V0y), Σ0 applied elementwise in float64,
    P, N and V0 in the compute dtype, so rounding is relative to ‖ΔW‖ rather than ‖W0‖ — which lets a
    float32 run resolve the angles of a 3e-4 update (an SVD of W1 in float32 could not: its own
    rounding, eps·σ₁ over the gaps of a spectrum without a gap, is as large as those angles)."""
    U, S, V, P, N = frame.U, frame.S, frame.V, proj.P, proj.null
    flip = N.shape[0] < N.shape[1]
    if flip:
        U, V, P, N = V, U, P.mT, N.mT
    r, wd = V.shape[1], P.dtype
    s = S[:r].double()[:, None]
    null = None if proj.null_is_structural_zero else N
    q = min(max(ks) + ANGLE_OVERSAMPLE, r)
    start = torch.eye(r, q, dtype=torch.float64, device=P.device)

    def forward(y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if y is start:  # the first q unit vectors: columns, no products
            top = s * y + P[:, :q].double()
            return (top,) if null is None else (top, null @ V[:, :q])
        top = s * y + (P @ y.to(wd)).double()
        return (top,) if null is None else (top, null @ (V @ y.to(wd)))

    def adjoint(parts: tuple[torch.Tensor, ...]) -> torch.Tensor:
        out = s * parts[0] + (P.mT @ parts[0].to(wd)).double()
        if null is not None:
            out += (V.mT @ (null.mT @ parts[1])).double()
        return out

    got, blocks = _block_krylov_angles(forward, adjoint, start, ks, left=lambda X0, k: X0[:k],
                                       right=lambda Y, k: Y[:k])
    return ({k: (a[1], a[0]) for k, a in got.items()} if flip else got), blocks


def principal_angles_of_w1(W1: torch.Tensor, frame: Frame, ks: Sequence[int]) -> tuple[dict[int, AnglePair], int]:
    """The same angles from W1 itself, for a truncated core (W0's tail outside the core is then part of
    W1 but not of the frame): the same Krylov iteration on W1ᵀW1, started from V0's top columns. No
    algorithmic bias either, but rounding relative to ‖W1‖: in float32 the angles of updates below
    about 1e-3 of ‖W0‖ carry the SVD's own rounding error (docs/statistics.md, "Beyond the paper")."""
    U, V, wd = frame.U, frame.V, W1.dtype
    q = min(max(ks) + ANGLE_OVERSAMPLE, V.shape[1])
    return _block_krylov_angles(lambda y: (W1 @ y.to(wd),), lambda parts: (W1.mT @ parts[0]).double(),
                                V[:, :q].double(), ks, left=lambda X0, k: U[:, :k].double().mT @ X0,
                                right=lambda Y, k: V[:, :k].double().mT @ Y)


def _block_krylov_angles(forward, adjoint, start: torch.Tensor, ks: Sequence[int], *, left, right
                         ) -> tuple[dict[int, AnglePair], int]:
    """Block Krylov (Musco & Musco 2015) on BᵀB from ``start`` (orthonormal columns, float64), with
    Rayleigh–Ritz after each block from the second, until every angle quantity changes by at most
    ANGLE_TOL of itself.
    ``forward(y)`` gives the parts of B·y (‖By‖² = Σ‖part‖²), ``adjoint(parts)`` Bᵀ of them; ``left(X0,
    k)`` the coordinates on W0's top-k left vectors of X0 = the first part of B·Y, ``right(Y, k)`` those
    of Y on its top-k right vectors. Krylov instead of subspace iteration: its error falls with √gap
    per block, which is what a spectrum without a gap at k needs (2 subspace iterations left 1 − cos²
    1–13 % low). The Gram matrix (BK)ᵀ(BK) grows by one block row per block, each part's products in
    its own dtype (the null residual's in the compute dtype: it is small next to Σ0)."""
    K, blocks, blk = start, [], start
    G = torch.zeros(0, 0, dtype=torch.float64, device=start.device)
    prev: Optional[dict[int, AnglePair]] = None
    for count in range(1, ANGLE_MAX_BLOCKS + 1):
        parts = forward(blk)
        cross = [sum((x.mT @ y).double() for x, y in zip(old, parts)) for old in blocks + [parts]]
        blocks.append(parts)
        col = torch.cat(cross, 0)
        G = torch.cat([torch.cat([G, col[:-blk.shape[1]]], 1), col.mT], 0)
        full = K.shape[1] + start.shape[1] > K.shape[0]  # the next block would fill the whole space
        if count > 1 or full:  # (the start alone is never settled: its Rayleigh–Ritz would only cost)
            got = _ritz_angles(G, K, blocks, ks, left, right)
            if full or (prev is not None and all(_settled(prev[k], got[k]) for k in ks)):
                return got, count  # settled, or exact: the Krylov space is the whole space
            prev = got
        nxt = adjoint(parts)
        for _ in range(2):  # twice is enough (Giraud et al.), and keeps K orthonormal to rounding
            nxt -= K @ (K.mT @ nxt)
        blk, _ = torch.linalg.qr(nxt)
        K = torch.cat([K, blk], 1)
    return prev, ANGLE_MAX_BLOCKS


def _ritz_angles(G: torch.Tensor, K: torch.Tensor, blocks: list, ks: Sequence[int], left, right
                 ) -> dict[int, AnglePair]:
    """Rayleigh–Ritz on the Krylov space K with Gram matrix G = (BK)ᵀ(BK): the angles of each k."""
    kmax = max(ks)
    lam, Z = torch.linalg.eigh(G)
    order = torch.argsort(lam, descending=True)[:kmax]
    lam, Z = lam[order].clamp_min(torch.finfo(torch.float64).tiny), Z[:, order]
    Y = K @ Z                                                  # Ritz right vectors, orthonormal
    X0 = torch.cat([bl[0] for bl in blocks], 1).double() @ Z   # first part of B·Y = Ritz left vectors × σ
    got = {}
    for k in ks:
        cl = torch.linalg.svdvals(left(X0[:, :k], k) / lam[:k].sqrt())
        cr = torch.linalg.svdvals(right(Y[:, :k], k))
        got[k] = (_angle_pair(cl), _angle_pair(cr))
    return got


def _angle_pair(c: torch.Tensor) -> tuple[float, float]:
    """(largest angle in degrees, mean cos²) from the cosines."""
    c = c.clamp(0.0, 1.0)
    return math.degrees(math.acos(float(c.min()))), float((c * c).mean())


def _settled(a: AnglePair, b: AnglePair) -> bool:
    """Whether the largest angle and 1 − mean cos² of both sides changed by at most ANGLE_TOL of themselves."""
    return all(abs(x[0] - y[0]) <= ANGLE_TOL * y[0] and abs(x[1] - y[1]) <= ANGLE_TOL * (1.0 - y[1])
               for x, y in zip(a, b))


def subspace_angles(A: torch.Tensor, B: torch.Tensor) -> tuple[float, float]:
    """(largest principal angle in degrees, mean cos² of the principal angles) between the column
    spans of two matrices with orthonormal columns (cosines = singular values of AᵀB)."""
    c = torch.linalg.svdvals((A.T @ B).double()).clamp(0.0, 1.0)
    if c.numel() == 0:
        return 0.0, 1.0
    return math.degrees(math.acos(float(c.min()))), float((c * c).mean())


def angle_columns(angles: dict[int, AnglePair]) -> dict[str, float]:
    """The metric columns angle{k}_{left,right}_{max_deg,cos2}."""
    out: dict[str, float] = {}
    for k, sides in angles.items():
        for side, (worst, cos2) in zip(("left", "right"), sides):
            out[f"angle{k}_{side}_max_deg"] = worst
            out[f"angle{k}_{side}_cos2"] = cos2
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
_UINTS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _ordered(bits: np.ndarray) -> np.ndarray:
    """Float bit patterns (as signed integers) mapped to integers in the order of their values, one step
    per representable value, with +0 and −0 both mapped to 0: a pattern with the sign bit set (sign s =
    −1 from the arithmetic shift) has its magnitude bits flipped, −1 − mag, then + 1: −mag. In the
    patterns' own width: nothing overflows (numpy arrays wrap silently). A new array; ``bits`` is not
    modified. numpy rather than torch: its integer loops and count_nonzero made update_sparsity 2.6–5× cheaper
    in CPU seconds (docs/benchmarks.md)."""
    sign = bits >> (8 * bits.itemsize - 1)  # −1 where the sign bit is set, else 0 (arithmetic shift)
    key = bits ^ (sign & np.iinfo(bits.dtype).max)
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
    unsigned = _UINTS[torch.finfo(common).bits // 8]
    for i in range(0, n, step):  # blocks: bounded temporaries (the upcast of a mixed pair included)
        x, y = (t[i:i + step].to(common).view(ints).cpu().numpy() for t in (a, b))  # may view the inputs: read only
        bitwise += int(np.count_nonzero(x == y))
        d = _ordered(x)
        d -= _ordered(y)  # may wrap; see the docstring
        d += 1  # d + 1 ∈ {0, 1, 2}: it wraps only from the largest integer, to a negative one
        same += int(np.count_nonzero(d == 1))
        within += int(np.count_nonzero(d.view(unsigned) <= 2))  # 0 ≤ d ≤ 2: as unsigned, negatives are huge
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

