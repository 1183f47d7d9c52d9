"""Pure GRRR math on tensors: the SVD frame of W0, ΔW projected into it, the three-way split.

No I/O. Shapes: W0, W1, ΔW are m×n; the frame holds U0 (m×r), V0 (n×r) and the
full spectrum σ(W0) (min(m, n)); P = U0ᵀ ΔW V0 is r×r.

Everything here runs in the dtype of its inputs (float32 or float64, on CPU or
GPU); the caller upcasts checkpoint tensors before calling. The analyses beyond the
paper are in :mod:`grrr_stream.geometry.analyses`, the scalar metrics in :mod:`grrr_stream.geometry.metrics`,
and one matrix pair's whole treatment in :mod:`grrr_stream.geometry.kernel`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ..config import DEGENERATE_GAP
from . import lapack
from .degenerate import clusters_above_floor, resolve_clusters


@dataclass(frozen=True)
class Frame:
    """Singular frame of a reference matrix: W0 ≈ U diag(S[:r]) Vᵀ."""

    U: torch.Tensor  # m×r, orthonormal columns
    S: torch.Tensor  # min(m, n) singular values of W0, descending (full spectrum, not truncated)
    V: torch.Tensor  # n×r, orthonormal columns

    @property
    def rank(self) -> int:
        return self.U.shape[1]


def _driver(X: torch.Tensor, driver: Optional[str]) -> dict:
    """torch's ``driver=`` (cuSOLVER's gesvd, gesvdj or gesvda) on CUDA tensors; CPU LAPACK has one."""
    return {"driver": driver} if driver is not None and X.is_cuda else {}


def all_finite(t: torch.Tensor) -> bool:
    """Whether every entry of ``t`` is finite. A finite sum means every entry is (a NaN or ±Inf entry makes the
    sum NaN or ±Inf): one reduction without a mask, 50x cheaper than ``isfinite().all()`` (3.5 MB float32: 0.05
    against 2.5 ms on one thread). A sum that merely overflows takes the exact path and is found finite there."""
    wide = torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype
    if t.numel() == 0 or bool(torch.isfinite(t.sum(dtype=wide))):
        return True
    return bool(torch.isfinite(t).all())


def svdvals(X: torch.Tensor, driver: Optional[str] = None) -> torch.Tensor:
    """Singular values, computed on the tall orientation (faster in LAPACK, same values); on one CPU thread
    by SciPy's LAPACK where it is the faster (:mod:`grrr_stream.geometry.lapack`)."""
    X = X.mT if X.shape[0] < X.shape[1] else X
    fast = lapack.svdvals(X)
    return fast if fast is not None else torch.linalg.svdvals(X, **_driver(X, driver))


def canonical_signs(U: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Flip (u_i, v_i) pairs so the largest-magnitude entry of each u_i is positive.

    SVD fixes singular vectors only up to a joint sign; fixing it makes stored
    frames (and the signs of off-diagonal P entries) reproducible across LAPACK
    builds and devices. Diagonal entries of P are sign-invariant anyway.
    """
    idx = U.abs().argmax(dim=0)
    signs = torch.sign(U.gather(0, idx.unsqueeze(0))).squeeze(0)
    signs[signs == 0] = 1
    return U * signs, V * signs


def _thin_svd(W0: torch.Tensor, driver: Optional[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(U, S, V) of W0, computed on the tall orientation; on one CPU thread by SciPy's LAPACK where it is the
    faster (:func:`grrr_stream.geometry.lapack.svd`)."""
    # LAPACK is 2-3x faster on tall than on wide inputs (measured on CPU); the SVD of W0ᵀ gives the same
    # frame with U and V swapped.
    wide = W0.shape[0] < W0.shape[1]
    X = W0.mT if wide else W0
    usv = lapack.svd(X)
    U, S, Vh = usv if usv is not None else torch.linalg.svd(X, full_matrices=False, **_driver(W0, driver))
    return (Vh.mT, S, U) if wide else (U, S, Vh.mT)


def compute_frame(
    W0: torch.Tensor,
    core_rel_threshold: Optional[float] = None,
    driver: Optional[str] = None,
    degenerate_gap: Optional[float] = DEGENERATE_GAP,
) -> Frame:
    """Thin SVD of W0 with canonical signs; optionally keep only σ_i > threshold·σ_1 in the core.
    ``driver`` picks cuSOLVER's routine on a GPU (tools/gpu_check.py times them).

    A float32 W0 whose core (above DEGENERATE_FLOOR·σ₁) has neighbouring singular values within
    ``degenerate_gap``·σ₁ (None: never) gets those clusters' vectors as float64 would have them:
    float32's SVD fixes such a pair's vectors only up to an arbitrary rotation, which moves P's energy
    between diag and off. :func:`~grrr_stream.geometry.degenerate.resolve_clusters` finds each cluster's
    rotation from a small float64 problem; where its error estimate does not vouch for the result, all
    of W0 is decomposed again in float64 (resolving gaps down to about 1e-13·σ₁) and stored back in
    float32. The rule looks at W0 alone, so every transition from one base shares the frame (and the
    frame cache)."""
    U, S, V = _thin_svd(W0, driver)
    if W0.dtype == torch.float32:
        clusters = clusters_above_floor(S, degenerate_gap)
        if clusters:
            resolved = resolve_clusters(W0, U, S, V, clusters)
            if resolved is None:
                resolved = tuple(x.to(torch.float32) for x in _thin_svd(W0.double(), driver))
            U, S, V = resolved
    U, V = canonical_signs(U, V)
    if core_rel_threshold is not None and S.numel():
        r = int((S > core_rel_threshold * S[0]).sum().item())
        U, V = U[:, :r].contiguous(), V[:, :r].contiguous()
    return Frame(U=U.contiguous(), S=S, V=V.contiguous())


def spectral_norm(
    X: torch.Tensor, *, tol: Optional[float] = None, max_steps: int = 300, exact_below: int = 512, seed: int = 0
) -> float:
    """‖X‖₂ by Lanczos on the Gram matrix G = XᵀX, with full reorthogonalisation of the Lanczos vectors;
    ‖X‖₂ = √λmax(G).

    A full ``svdvals`` of a large ΔW would cost as much as the frame SVD itself;
    Lanczos needs a few dozen products with G (convergence depends on √gap rather than the
    gap as in power iteration, which matters for noise-like updates whose top
    singular values are close). Small matrices (min side ≤ ``exact_below``) use
    ``svdvals`` directly. ``tol`` is the relative change between checks (every other step) at which
    the estimate is accepted (default 1e-7 in float32, 1e-12 in float64).

    Mathematically the same iteration as Golub–Kahan bidiagonalisation of X (the same Krylov space, the same
    steps), but each product G v = Xᵀ(X v) is taken a block of X's rows at a time (:func:`_gram_mv`), so that X
    is read from memory once per step instead of twice: the iteration is bound by that reading on an MLP's ΔW
    (8960 × 1536 float32: 55 MB a pass). G is XᵀX as stored, also for a wide X: XXᵀ would be smaller, but its
    product in one pass needs blocks of columns, strided in memory (1536 × 8960: 279 ms against 181 ms for
    Golub–Kahan); the longer vectors cost 4·j·n flops a step against the product's 4·m·n. On one thread,
    Golub–Kahan → this: 8960 × 1536 243 → 179 ms, 1536² 44 → 32 ms, 1536 × 576 11.5 → 7.5 ms (errors against
    float64 within 5e-8). λmax(G) carries a relative rounding error of about eps, so ‖X‖₂ of about eps/2: only the
    smallest singular values suffer from squaring, never the largest. The Lanczos vectors are kept
    orthonormal (reorthogonalised twice a step), so the tridiagonal is VᵀGV up to rounding and its largest
    eigenvalue cannot exceed λmax beyond rounding.
    """
    m, n = X.shape
    if min(m, n) == 0:
        return 0.0
    if min(m, n) <= exact_below:
        return float(svdvals(X)[0].item()) if X.any() else 0.0
    if tol is None:
        tol = 1e-12 if X.dtype == torch.float64 else 1e-7
    return _lanczos_top(X, tol=tol, steps=min(max_steps, m, n), seed=seed)


def _lanczos_top(X: torch.Tensor, *, tol: float, steps: int, seed: int) -> float:
    """The Lanczos iteration of :func:`spectral_norm` on G = XᵀX for at most ``steps`` steps (the Krylov space's
    dimension is at most X's rank), started from a normal vector drawn with ``seed``: √λmax(G) once the estimate
    changes by at most ``tol`` (relative) between two checks."""
    n = X.shape[1]
    gen = torch.Generator(device=X.device).manual_seed(seed)
    Vs = torch.empty(steps + 1, n, device=X.device, dtype=X.dtype)  # one contiguous row per Lanczos vector
    v = torch.randn(n, generator=gen, device=X.device, dtype=X.dtype)
    torch.div(v, torch.linalg.vector_norm(v), out=Vs[0])
    w = torch.empty(n, device=X.device, dtype=X.dtype)
    alphas: list[float] = []
    betas: list[float] = []
    last = -1.0
    for j in range(steps):
        _gram_mv(X, Vs[j], w)
        alphas.append(float(torch.dot(w, Vs[j]).item()))
        done = Vs[: j + 1]
        # full reorthogonalisation, twice (it removes α v_j and β v_{j−1} too): once is not enough here, as G
        # amplifies what is left of the earlier vectors (in float32 it doubled each step until the estimate
        # was 12x too large); the second pass costs 2·j·n flops, next to the product's 4·m·n
        for _ in range(2):
            w.addmv_(done.mT, torch.mv(done, w), alpha=-1)
        beta = float(torch.linalg.vector_norm(w).item())
        if j % 2 == 1 or beta == 0.0 or j == steps - 1:
            est = _top_ritz(alphas, betas)
            if beta == 0.0 or abs(est - last) <= tol * est:
                return est
            last = est
        if beta == 0.0:
            break
        betas.append(beta)
        torch.div(w, beta, out=Vs[j + 1])
    return _top_ritz(alphas, betas[: len(alphas) - 1]) if alphas else 0.0


def _top_ritz(alphas: list[float], betas: list[float]) -> float:
    """√ of the largest eigenvalue of the Lanczos tridiagonal (α on the diagonal, β beside it), in float64."""
    T = np.diag(alphas) + np.diag(betas, 1) + np.diag(betas, -1)
    return math.sqrt(max(0.0, float(np.linalg.eigvalsh(T)[-1])))


GRAM_BLOCK_BYTES = 1 << 20  # rows of X per product: they stay in the core's cache between their two reads


def _gram_mv(X: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> None:
    """out = Xᵀ(X v). On a CPU a block of X's rows at a time: X_bᵀ(X_b v) summed over the blocks reads each
    block once from memory and once from the cache. On a GPU one product each way."""
    if X.device.type != "cpu":
        torch.mv(X.mT, torch.mv(X, v), out=out)
        return
    out.zero_()
    step = max(16, GRAM_BLOCK_BYTES // (X.element_size() * X.shape[1]))
    for a in range(0, X.shape[0], step):
        Xb = X[a : a + step]
        out.addmv_(Xb.mT, torch.mv(Xb, v))


@dataclass(frozen=True)
class Projection:
    """ΔW in the frame: P (r×r) and the explicit null residual (m×n)."""

    P: torch.Tensor
    null: torch.Tensor
    # True when U0 and V0 span the whole domain and range (square W0, untruncated
    # core): the null part is then zero by construction and ``null`` is rounding noise.
    null_is_structural_zero: bool
    # With project(lift=axis), where the frame's side along that axis is complete: V0 Pᵀ (n×r, = (U0ᵀ ΔW)ᵀ) for
    # the columns, U0 P (m×r, = ΔW V0) for the rows; the projection's own intermediate, so
    # grrr_stream.geometry.channel_energy needs no product with P (see there). None otherwise.
    lifted: Optional[torch.Tensor] = None


def project(delta: torch.Tensor, frame: Frame, *, in_place: bool = False, lift: Optional[int] = None) -> Projection:
    """P = U0ᵀ ΔW V0 and ΔW_null = ΔW − U0 P V0ᵀ, the latter computed explicitly.

    With ``in_place`` the null residual overwrites ``delta`` (saves one m×n buffer).
    When one side of the frame is a complete basis the residual simplifies
    (e.g. V0 square ⇒ U0 P V0ᵀ = U0 U0ᵀ ΔW), which saves a matmul without
    changing the result beyond rounding. ``lift`` (an axis: 1 columns, 0 rows) keeps the intermediate that
    equals V0 Pᵀ or U0 P where that side is complete (``Projection.lifted``); for a square ΔW it also picks
    which of the two equally costly orders is taken.
    """
    U, V = frame.U, frame.V
    m, n = delta.shape
    r = U.shape[1]
    out = delta if in_place else delta.clone()
    lifted = None
    if m > n or (m == n and lift != 0):
        A = U.T @ delta  # r×n
        P = A @ V
        if r == n:  # V complete: U P Vᵀ = U A, and V Pᵀ = V Vᵀ Aᵀ = Aᵀ
            out.addmm_(U, A, alpha=-1)
            lifted = A.mT if lift == 1 else None
        else:
            out.addmm_(U, P @ V.T, alpha=-1)
    else:
        B = delta @ V  # m×r
        P = U.T @ B
        if r == m:  # U complete: U P Vᵀ = B Vᵀ, and U P = U Uᵀ B = B
            out.addmm_(B, V.T, alpha=-1)
            lifted = B if lift == 0 else None
        else:
            out.addmm_(U @ P, V.T, alpha=-1)
    return Projection(P=P, null=out, null_is_structural_zero=(r == m == n), lifted=lifted)


def split_energies(P: torch.Tensor, null: torch.Tensor) -> tuple[float, float, float]:
    """(‖diag P‖², ‖P − diag P‖², ‖ΔW_null‖²), each summed directly (no differences of squares)."""
    d = torch.diagonal(P)
    e_diag = float(torch.dot(d, d).item())
    sq = P.square()
    sq.diagonal().zero_()
    e_off = float(sq.sum(dtype=torch.float64).item())
    e_null = float(torch.linalg.vector_norm(null).item()) ** 2
    return e_diag, e_off, e_null


def random_core_coefficients(
    r: int,
    norm: float,
    generator: torch.Generator,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Q: standard Gaussian r×r scaled to Frobenius norm ``norm``.

    R = U0 Q V0ᵀ is then a random component of exactly that norm lying entirely inside
    span(U0) ⊗ span(V0) (‖U0 Q V0ᵀ‖_F = ‖Q‖_F for orthonormal U0, V0): the control
    for removing the diagonal part, with ``norm`` = ‖diag P‖.
    """
    Q = torch.randn(r, r, generator=generator, dtype=torch.float64)
    q = float(torch.linalg.matrix_norm(Q))
    Q *= (norm / q) if q > 0 else 0.0
    return Q.to(device=device, dtype=dtype)
