"""The principal subspace angles' solver: block Davidson on the Gram matrix of W1, in W0's frame or on W1 itself,
stopped by a Davis–Kahan bound (the analysis itself: :mod:`.angles`). ``frame`` and ``proj`` are a
:class:`grrr_stream.geometry.frame.Frame` and :class:`~grrr_stream.geometry.frame.Projection`."""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import torch

# stop when the Davis–Kahan bound on the Ritz subspace's error is below this share of sin(largest angle)
ANGLE_TOL = 2e-3
ANGLE_OVERSAMPLE = 16  # the start: W0's top kmax + 16 directions (more where Weyl lets more reach the top kmax)
ANGLE_DIRECT_SHARE = 0.5  # a search space past half the dimension: one dense eigh of BᵀB instead (cheaper, exact)
ANGLE_MAX_STEPS = 12  # Davidson steps before the dense solve (3–4 on every spectrum tried)

# (left max°, left mean cos²), (right max°, right mean cos²) for one k
AnglePair = tuple[tuple[float, float], tuple[float, float]]


def principal_angles_in_frame(
    frame, proj, ks: Sequence[int], delta_spec: Optional[float] = None
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
    d_norm = float(delta_spec) if delta_spec is not None else _frobenius_bound(P, null)
    kmax = max(ks)
    top = P[:kmax].double()  # the first kmax rows of P: the left coordinates of By
    apply = _gram_product_in_frame(P, s, null, V)

    def dense() -> torch.Tensor:
        return _gram_in_frame(P, s, null, V)

    def measure(Y: torch.Tensor, lam: torch.Tensor, k: int) -> AnglePair:
        left = (s[:k, None] * Y[:k, :k] + top[:k] @ Y[:, :k]) / lam[:k].sqrt()
        return _angle_pair(torch.linalg.svdvals(left)), _angle_pair(torch.linalg.svdvals(Y[:k, :k]))

    q = _start_size(s, kmax, d_norm)
    eps = torch.finfo(wd).eps
    s1 = float(s[0]) if r else 0.0
    # rounding of G's products: eps(compute)·σ₁·‖ΔW‖ from P and N, eps(float64)·σ₁² from Σ0²
    noise = 2.0 * eps * s1 * d_norm + torch.finfo(torch.float64).eps * s1 * s1
    start = torch.eye(r, q, dtype=torch.float64, device=P.device)
    got, how = _top_eigenvectors(apply, dense, start, ks, measure, _sigma_preconditioner(s, q), noise)
    return ({k: (a[1], a[0]) for k, a in got.items()} if flip else got), how


def _frobenius_bound(P: torch.Tensor, null: Optional[torch.Tensor]) -> float:
    """‖ΔW‖_F = √(‖P‖_F² + ‖N‖_F²), the bound on ‖ΔW‖₂ used when none is given."""
    return math.hypot(
        float(torch.linalg.vector_norm(P)), 0.0 if null is None else float(torch.linalg.vector_norm(null))
    )


def _gram_product_in_frame(
    P: torch.Tensor, s: torch.Tensor, null: Optional[torch.Tensor], V: torch.Tensor
) -> Callable[[torch.Tensor], torch.Tensor]:
    """y ↦ G y without forming G: Σ0·t + Pᵀt + V0ᵀNᵀN V0 y with t = Σ0 y + P y, Σ0 (``s``, float64) applied
    elementwise, P, N and V0 in the compute dtype."""
    wd = P.dtype

    def apply(y: torch.Tensor) -> torch.Tensor:
        t = s[:, None] * y + (P @ y.to(wd)).double()
        out = s[:, None] * t + (P.mT @ t.to(wd)).double()
        if null is not None:
            out += (V.mT @ (null.mT @ (null @ (V @ y.to(wd))))).double()
        return out

    return apply


def _sigma_preconditioner(s: torch.Tensor, q: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """(R, λ) ↦ (Σ0² − λ)⁻¹R, the denominators kept at least 1e-3·λ₁ away from 0, and nothing added along W0's
    top ``q`` directions (the start's)."""

    def precondition(R: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
        den = (s * s)[:, None] - lam[None, :]
        floor = 1e-3 * float(lam[0])
        T = R / torch.where(den.abs() < floor, torch.full_like(den, -floor), den)
        T[:q] = 0.0  # W0's top q directions are in the search space already
        return T

    return precondition


def _gram_in_frame(P: torch.Tensor, s: torch.Tensor, null: Optional[torch.Tensor], V: torch.Tensor) -> torch.Tensor:
    """G itself, in float64: (Σ0 + P)ᵀ(Σ0 + P) + (NV0)ᵀ(NV0), the null part's product in the compute dtype."""
    t = P.double() + torch.diag(s)
    G = t.mT @ t
    if null is not None:
        nv = null @ V
        G += (nv.mT @ nv).double()
    return G


def _start_size(s: torch.Tensor, kmax: int, d_norm: float) -> int:
    """How many of W0's top directions start the search space: every one whose σ could still reach the top kmax
    (Weyl: |σ_i(W1) − σ_i(W0)| ≤ ‖ΔW‖₂), so no eigenvector that matters is missed by it, and at least
    kmax + ANGLE_OVERSAMPLE."""
    q, r = kmax + ANGLE_OVERSAMPLE, s.shape[0]
    reach = float(s[kmax - 1]) - 2.0 * d_norm
    while q < r and float(s[q]) > reach:
        q += 1
    return q


def principal_angles_of_w1(W1: torch.Tensor, frame, ks: Sequence[int]) -> tuple[dict[int, AnglePair], str]:
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
