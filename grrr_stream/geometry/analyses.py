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


ANGLE_TOL = (
    2e-3  # stop when the Davis–Kahan bound on the Ritz subspace's error is below this share of sin(largest angle)
)
ANGLE_OVERSAMPLE = 16  # the start: W0's top kmax + 16 directions (more where Weyl lets more reach the top kmax)
ANGLE_DIRECT_SHARE = 0.5  # a search space past half the dimension: one dense eigh of BᵀB instead (cheaper, exact)
ANGLE_MAX_STEPS = 12  # Davidson steps before the dense solve (3–4 on every spectrum tried)

# (left max°, left mean cos²), (right max°, right mean cos²) for one k
AnglePair = tuple[tuple[float, float], tuple[float, float]]


def principal_angles_in_frame(
    frame: Frame, proj: Projection, ks: Sequence[int], delta_spec: Optional[float] = None
) -> tuple[dict[int, AnglePair], str]:
    """Angles between the top-k singular subspaces of W0 and W1 from the projection, in W0's frame (for an
    untruncated core, r = min(m, n)). Returns ({k: angles}, how they were solved: "davidson:<steps>" or
    "dense"). ``delta_spec``: ‖ΔW‖₂ (default: the bound ‖ΔW‖_F), which sets how far the start reaches.

    Oriented so that m ≥ n (transposed otherwise, the sides swapped back at the end), V0 is complete
    and W1 = U0 (Σ0 + P) V0ᵀ + N with U0ᵀN = 0: W1 = [U0 Q]·B·V0ᵀ with B = [[Σ0 + P], [R]], NV0 = QR. So
    σ(W1) = σ(B), W1's right singular vectors are V0 times B's and its left ones [U0 Q] times B's: the
    cosines of the top-k angles are the singular values of the first k coordinates of B's top-k
    singular vectors (right: of y; left: of By/σ). G = BᵀB = (Σ0 + P)ᵀ(Σ0 + P) + (NV0)ᵀ(NV0) is never formed
    on the iterative path: G y = Σ0·t + Pᵀt + V0ᵀNᵀN V0 y with t = Σ0 y + P y, Σ0 applied elementwise in
    float64, P, N and V0 in the compute dtype, so rounding is relative to ‖ΔW‖ rather than ‖W0‖ — which
    lets a float32 run resolve the angles of a 1e-4 update (an SVD of W1 in float32 could not: its own
    rounding, eps·σ₁ over the gaps of a spectrum without a gap, is as large as those angles).
    The eigenvectors come from :func:`_top_eigenvectors` (Davidson preconditioned by Σ0², stopped by a
    Davis–Kahan bound; a dense eigh of G where that is cheaper or the bound is not reached)."""
    U, S, V, P, N = frame.U, frame.S, frame.V, proj.P, proj.null
    flip = N.shape[0] < N.shape[1]
    if flip:
        U, V, P, N = V, U, P.mT, N.mT
    r, wd = V.shape[1], P.dtype
    s = S[:r].double()
    null = None if proj.null_is_structural_zero else N
    d_norm = (
        float(delta_spec)
        if delta_spec is not None
        else math.hypot(
            float(torch.linalg.vector_norm(P)), 0.0 if null is None else float(torch.linalg.vector_norm(null))
        )
    )
    kmax = max(ks)
    top = P[:kmax].double()  # the first kmax rows of P: the left coordinates of By

    def apply(y: torch.Tensor) -> torch.Tensor:
        t = s[:, None] * y + (P @ y.to(wd)).double()
        out = s[:, None] * t + (P.mT @ t.to(wd)).double()
        if null is not None:
            out += (V.mT @ (null.mT @ (null @ (V @ y.to(wd))))).double()
        return out

    def dense() -> torch.Tensor:
        """G itself, in float64: (Σ0 + P)ᵀ(Σ0 + P) + (NV0)ᵀ(NV0), the null part's product in the compute dtype."""
        t = P.double() + torch.diag(s)
        G = t.mT @ t
        if null is not None:
            nv = null @ V
            G += (nv.mT @ nv).double()
        return G

    def measure(Y: torch.Tensor, lam: torch.Tensor, k: int) -> AnglePair:
        left = (s[:k, None] * Y[:k, :k] + top[:k] @ Y[:, :k]) / lam[:k].sqrt()
        return _angle_pair(torch.linalg.svdvals(left)), _angle_pair(torch.linalg.svdvals(Y[:k, :k]))

    # W0's directions whose σ could still reach the top kmax (Weyl: |σ_i(W1) − σ_i(W0)| ≤ ‖ΔW‖₂) all start
    # in the search space, so no eigenvector that matters is missed by it
    q = kmax + ANGLE_OVERSAMPLE
    reach = float(s[kmax - 1]) - 2.0 * d_norm
    while q < r and float(s[q]) > reach:
        q += 1
    eps = torch.finfo(wd).eps
    s1 = float(s[0]) if r else 0.0
    # rounding of G's products: eps(compute)·σ₁·‖ΔW‖ from P and N, eps(float64)·σ₁² from Σ0²
    noise = 2.0 * eps * s1 * d_norm + torch.finfo(torch.float64).eps * s1 * s1

    def precondition(R: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
        den = (s * s)[:, None] - lam[None, :]
        floor = 1e-3 * float(lam[0])
        T = R / torch.where(den.abs() < floor, torch.full_like(den, -floor), den)
        T[:q] = 0.0  # W0's top q directions are in the search space already
        return T

    start = torch.eye(r, q, dtype=torch.float64, device=P.device)
    got, how = _top_eigenvectors(apply, dense, start, ks, measure, precondition, noise)
    return ({k: (a[1], a[0]) for k, a in got.items()} if flip else got), how


def principal_angles_of_w1(W1: torch.Tensor, frame: Frame, ks: Sequence[int]) -> tuple[dict[int, AnglePair], str]:
    """The same angles from W1 itself, for a truncated core (W0's tail outside the core is then part of
    W1 but not of the frame): the same solver on W1ᵀW1 (the shorter side), started from V0's top columns,
    preconditioned by σ(W0)² in V0's directions and by W0's largest tail value outside them. No algorithmic
    bias either, but rounding relative to ‖W1‖: in float32 the angles of updates below about 1e-3 of ‖W0‖
    carry the SVD's own rounding error (docs/statistics.md, "Beyond the paper")."""
    U, V, S, wd = frame.U, frame.V, frame.S, W1.dtype
    flip = W1.shape[0] < W1.shape[1]
    if flip:
        W1, U, V = W1.mT, V, U
    n, r, kmax = W1.shape[1], V.shape[1], max(ks)
    s = S[:r].double()
    tail = float(S[r]) if S.numel() > r else 0.0
    Vd = V.double()
    Uk = (W1.mT @ U[:, :kmax]).double()  # W1ᵀ U0's top kmax: U0ᵀ W1 Y = (W1ᵀU0)ᵀ Y

    def apply(y: torch.Tensor) -> torch.Tensor:
        return (W1.mT @ (W1 @ y.to(wd))).double()

    def dense() -> torch.Tensor:
        G = torch.zeros(n, n, dtype=torch.float64, device=W1.device)
        for i in range(0, W1.shape[0], 4096):  # float64 in row blocks: no float64 copy of W1
            c = W1[i : i + 4096].double()
            G += c.mT @ c
        return G

    def measure(Y: torch.Tensor, lam: torch.Tensor, k: int) -> AnglePair:
        left = (Uk[:, :k].mT @ Y[:, :k]) / lam[:k].sqrt()
        return _angle_pair(torch.linalg.svdvals(left)), _angle_pair(torch.linalg.svdvals(Vd[:, :k].mT @ Y[:, :k]))

    q = min(kmax + ANGLE_OVERSAMPLE, r)
    eps = torch.finfo(wd).eps
    s1 = float(S[0]) if S.numel() else 0.0
    noise = 2.0 * eps * s1 * s1 * math.sqrt(n)  # rounding of W1ᵀW1 y in the compute dtype

    def precondition(R: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
        floor = 1e-3 * float(lam[0])

        def inv(den: torch.Tensor) -> torch.Tensor:
            return 1.0 / torch.where(den.abs() < floor, torch.full_like(den, -floor), den)

        c = Vd.mT @ R
        T = (R - Vd @ c) * inv(tail * tail - lam)[None, :]
        c = c * inv((s * s)[:, None] - lam[None, :])
        c[:q] = 0.0  # V0's top q are in the search space already
        return T + Vd @ c

    got, how = _top_eigenvectors(apply, dense, Vd[:, :q].contiguous(), ks, measure, precondition, noise)
    return ({k: (a[1], a[0]) for k, a in got.items()} if flip else got), how


def _top_eigenvectors(
    apply, dense, start: torch.Tensor, ks: Sequence[int], measure, precondition, noise: float
) -> tuple[dict[int, AnglePair], str]:
    """The angles of the top-k eigenvectors of a symmetric G (k in ``ks``), by block Davidson from ``start``
    (orthonormal columns, float64), or by one dense eigh.

    ``apply(Y)`` = G·Y (float64), ``dense()`` = G, ``measure(Y, λ, k)`` the AnglePair of the top-k
    eigenvectors Y with eigenvalues λ, ``precondition(R, λ)`` the correction for residuals R at Ritz values
    λ (≈ (D − λ)⁻¹R for D ≈ G, here W0's σ² in its own frame), ``noise`` the rounding level of G·y.

    Each step: Rayleigh–Ritz on the search space K (G's values on K from the stored G·K), residuals
    R = G·Y − Y·Θ of the top kmax + 1 Ritz pairs, then K grows by their preconditioned residuals. Stops by
    a bound, not by a small change: Davis–Kahan's sin Θ theorem bounds the distance between the top-k Ritz
    subspace and G's true one by ‖R_k‖_F / δ_k, with δ_k = θ_k − (θ_{k+1} + ‖r_{k+1}‖) (θ_{k+1} is within
    ‖r_{k+1}‖ of an eigenvalue, which the start, all of W0's directions that can reach the top k, makes
    λ_{k+1}); the same bound holds for the left vectors By/σ (Wedin). A principal angle's sine moves by
    at most that distance, so the iteration stops once it is ≤ ANGLE_TOL·sin(largest angle) on both sides
    for every k — the largest angle then within 0.2 %, 1 − mean cos² within 0.4 % — or once ‖R_k‖ is at
    the rounding level of G's products (an angle of 0, or one at rounding level). Where the search space
    would pass ANGLE_DIRECT_SHARE of the dimension, or the steps run out, G is formed and solved by
    eigh (float64): exact, and then cheaper than more steps."""
    dim, kmax = start.shape[0], max(ks)
    if start.shape[1] + kmax + 1 > ANGLE_DIRECT_SHARE * dim:
        return _dense_angles(dense, ks, measure), "dense"
    K, GK = start, apply(start)
    for step in range(1, ANGLE_MAX_STEPS + 1):
        H = K.mT @ GK
        lam, Z = torch.linalg.eigh((H + H.mT) / 2)
        lam, Z = lam.flip(0)[: kmax + 1], Z.flip(1)[:, : kmax + 1]
        Y = K @ Z
        R = GK @ Z - Y * lam
        rn = torch.linalg.vector_norm(R, dim=0)
        got, settled = {}, True
        for k in ks:
            got[k] = measure(Y, lam.clamp_min(torch.finfo(torch.float64).tiny), k)
            res = float(torch.linalg.vector_norm(rn[:k]))
            gap = float(lam[k - 1] - lam[k] - rn[k])
            sine = min(math.sin(math.radians(side[0])) for side in got[k])
            if not (res <= 8.0 * noise * math.sqrt(k) or (gap > 0 and res <= ANGLE_TOL * sine * gap)):
                settled = False
        if settled:
            return got, f"davidson:{step}"
        T = precondition(R, lam)
        T = T / torch.linalg.vector_norm(T, dim=0).clamp_min(torch.finfo(torch.float64).tiny)
        for _ in range(2):  # twice is enough (Giraud et al.)
            T = T - K @ (K.mT @ T)
        Q, sv, _ = torch.linalg.svd(T, full_matrices=False)
        Q = Q[:, sv > 1e-8]  # what is new beyond K (the unit columns' rounding after projection: ~1e-16)
        if Q.shape[1] == 0 or K.shape[1] + Q.shape[1] > ANGLE_DIRECT_SHARE * dim:
            break
        K, GK = torch.cat([K, Q], 1), torch.cat([GK, apply(Q)], 1)
    return _dense_angles(dense, ks, measure), "dense"


def _dense_angles(dense, ks: Sequence[int], measure) -> dict[int, AnglePair]:
    """The angles from a full eigendecomposition of G (float64)."""
    G = dense()
    lam, Z = torch.linalg.eigh((G + G.mT) / 2)
    lam, Z = lam.flip(0).clamp_min(torch.finfo(torch.float64).tiny), Z.flip(1)
    return {k: measure(Z, lam, k) for k in ks}


def _angle_pair(c: torch.Tensor) -> tuple[float, float]:
    """(largest angle in degrees, mean cos²) from the cosines."""
    c = c.clamp(0.0, 1.0)
    return math.degrees(math.acos(float(c.min()))), float((c * c).mean())


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
        return fx.eps <= fy.eps and fx.max >= fy.max and fx.smallest_normal * fx.eps <= fy.smallest_normal * fy.eps

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

    Values, not NaN or ±Inf: the pipeline refuses non-finite matrices before this. Integer work only, on the
    bit patterns x, y (as signed integers of the common dtype's width w), in blocks (a 14M-entry matrix in
    well under a second). Two values of the same sign are k representable steps apart exactly when their
    patterns differ by ±k, so for them d = x − y (with wrap-around) ∈ {−1, 0, 1} is "within one step" and
    d = 0 "equal". Two finite values of opposite signs never give such a d (their patterns differ by
    2^(w−1) ± a magnitude below 2^(w−1) − 1); of them only ±0 and the smallest subnormals are within one
    step (|x| + |y| ≤ 1 in magnitude bits: +0/−0 equal, ±0 and ∓smallest one step apart), and those pairs are
    found among the few whose magnitude bits are all 0 but the last, and counted apart. numpy rather than
    torch for the integer loops: 2.6–5× cheaper (docs/benchmarks.md)."""
    common = common_dtype(w0.dtype, w1.dtype)
    out = {"sparsity_compare": sparsity_compare(w0.dtype, w1.dtype)}
    n = w0.numel()
    if n == 0:
        return {"frac_unchanged": 1.0, "frac_bitwise_unchanged": 1.0, "frac_within_ulp": 1.0, **out}
    width = torch.finfo(common).bits // 8
    ints, unsigned = _INTS[width], _UINTS[width]
    signed = np.dtype(f"i{width}")
    magnitude = np.iinfo(signed).max  # every bit but the sign
    a, b = w0.reshape(-1), w1.reshape(-1)
    # 64 Ki entries a block, into buffers made once: the inputs' blocks and the temporaries stay in the core's
    # own cache. 8960 × 1536 float32 on one thread (Xeon, 2 MiB L2): 23 ms, against 56 ms in 256 Ki blocks
    # with a new array per operation and 350 ms in 4 Mi blocks.
    step = min(n, 1 << 16)
    d, mask = np.empty(step, signed), np.empty(step, bool)
    same = bitwise = within = 0
    for i in range(0, n, step):  # blocks: bounded temporaries (the upcast of a mixed pair included)
        x, y = (t[i : i + step].to(common).view(ints).cpu().numpy() for t in (a, b))  # may view the inputs: read only
        dk, mk = d[: x.size], mask[: x.size]
        bitwise += int(np.count_nonzero(np.equal(x, y, out=mk)))
        np.subtract(x, y, out=dk)  # wraps silently in the patterns' width; see the docstring
        dk += 1  # d ∈ {−1, 0, 1} ⇔ d + 1 ∈ {0, 1, 2} ⇔ (d + 1) as unsigned ≤ 2 (negatives are huge)
        within += int(np.count_nonzero(np.less_equal(dk.view(unsigned), 2, out=mk)))
        np.bitwise_or(x, y, out=dk)
        dk &= magnitude - 1
        if not np.all(dk):  # some pair has both ±0 or ±smallest subnormal: rare, counted apart
            tiny = np.flatnonzero(dk == 0)
            xs, ys = x[tiny], y[tiny]
            apart = (xs ^ ys) < 0  # opposite signs: counted by neither test above
            steps = (xs & magnitude) + (ys & magnitude)  # 0, 1 or 2 steps apart across zero
            same += int(np.count_nonzero(apart & (steps == 0)))
            within += int(np.count_nonzero(apart & (steps <= 1)))
    same += bitwise  # equal values of one sign have equal patterns
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


def round_trip_survival(
    w0_rows: torch.Tensor, components: dict[str, torch.Tensor], dtype: torch.dtype = torch.bfloat16
) -> dict[str, float]:
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


def component_samples(
    proj: Projection, frame: Frame, axis: int, idx: torch.Tensor, delta_sample: torch.Tensor
) -> dict[str, torch.Tensor]:
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
