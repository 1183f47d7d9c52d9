"""Pure GRRR math on tensors: SVD frames, projection, the three-way split, metrics.

No I/O. Shapes: W0, W1, ΔW are m×n; the frame holds U0 (m×r), V0 (n×r) and the
full spectrum σ(W0) (min(m, n)); P = U0ᵀ ΔW V0 is r×r.

Everything here runs in the dtype of its inputs (float32 or float64, on CPU or
GPU); the caller upcasts checkpoint tensors before calling. Scalar metrics are
returned as Python floats computed in float64 from the spectra and norms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

import numpy as np
import torch

from .phases import NO_TIMER, PhaseTimer


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


def svdvals(X: torch.Tensor, driver: Optional[str] = None) -> torch.Tensor:
    """Singular values, computed on the tall orientation (faster in LAPACK, same values)."""
    X = X.mT if X.shape[0] < X.shape[1] else X
    return torch.linalg.svdvals(X, **_driver(X, driver))


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


def compute_frame(W0: torch.Tensor, core_rel_threshold: Optional[float] = None,
                  driver: Optional[str] = None) -> Frame:
    """Thin SVD of W0 with canonical signs; optionally keep only σ_i > threshold·σ_1 in the core.
    ``driver`` picks cuSOLVER's routine on a GPU (tools/gpu_check.py times them)."""
    if W0.shape[0] < W0.shape[1]:
        # LAPACK is 2-3x faster on tall than on wide inputs (measured on CPU); the
        # SVD of W0ᵀ gives the same frame with U and V swapped.
        V, S, Uh = torch.linalg.svd(W0.mT, full_matrices=False, **_driver(W0, driver))
        U = Uh.mT
        del Uh
    else:
        U, S, Vh = torch.linalg.svd(W0, full_matrices=False, **_driver(W0, driver))
        V = Vh.mT
        del Vh
    U, V = canonical_signs(U, V)
    if core_rel_threshold is not None and S.numel():
        r = int((S > core_rel_threshold * S[0]).sum().item())
        U, V = U[:, :r].contiguous(), V[:, :r].contiguous()
    return Frame(U=U.contiguous(), S=S, V=V.contiguous())


def spectral_norm(X: torch.Tensor, *, tol: Optional[float] = None, max_steps: int = 300,
                  exact_below: int = 512, seed: int = 0) -> float:
    """‖X‖₂ by Golub–Kahan–Lanczos bidiagonalisation with full reorthogonalisation.

    A full ``svdvals`` of a large ΔW would cost as much as the frame SVD itself;
    Lanczos needs a few dozen mat-vecs (convergence depends on √gap rather than the
    gap as in power iteration, which matters for noise-like updates whose top
    singular values are close). Small matrices (min side ≤ ``exact_below``) use
    ``svdvals`` directly. ``tol`` is the relative change between checks at which
    the estimate is accepted (default 1e-7 in float32, 1e-12 in float64).
    """
    m, n = X.shape
    k_max = min(m, n)
    if k_max == 0:
        return 0.0
    if k_max <= exact_below:
        return float(torch.linalg.svdvals(X)[0].item()) if X.any() else 0.0
    if tol is None:
        tol = 1e-12 if X.dtype == torch.float64 else 1e-7
    steps = min(max_steps, k_max)
    gen = torch.Generator(device=X.device).manual_seed(seed)
    v = torch.randn(n, generator=gen, device=X.device, dtype=X.dtype)
    v /= torch.linalg.vector_norm(v)
    Us = torch.zeros(m, steps, device=X.device, dtype=X.dtype)
    Vs = torch.zeros(n, steps + 1, device=X.device, dtype=X.dtype)
    Vs[:, 0] = v
    alphas: list[float] = []
    betas: list[float] = []
    u_prev = None
    beta = 0.0
    last = -1.0
    for j in range(steps):
        u = X @ Vs[:, j]
        if u_prev is not None:
            u -= beta * u_prev
        if j:  # full reorthogonalisation: cheap next to the mat-vecs, and keeps σ_max honest
            u -= Us[:, :j] @ (Us[:, :j].T @ u)
        alpha = float(torch.linalg.vector_norm(u).item())
        if alpha == 0.0:
            break
        u /= alpha
        Us[:, j] = u
        alphas.append(alpha)
        w = X.T @ u - alpha * Vs[:, j]
        w -= Vs[:, : j + 1] @ (Vs[:, : j + 1].T @ w)
        beta = float(torch.linalg.vector_norm(w).item())
        if j % 4 == 3 or beta == 0.0 or j == steps - 1:
            B = np.diag(alphas) + np.diag(betas, 1)
            est = float(np.linalg.svd(B, compute_uv=False)[0])
            if beta == 0.0 or abs(est - last) <= tol * est:
                return est
            last = est
        if beta == 0.0:
            break
        betas.append(beta)
        Vs[:, j + 1] = w / beta
        u_prev = u
    B = np.diag(alphas) + np.diag(betas[: len(alphas) - 1], 1)
    return float(np.linalg.svd(B, compute_uv=False)[0]) if alphas else 0.0


@dataclass(frozen=True)
class Projection:
    """ΔW in the frame: P (r×r) and the explicit null residual (m×n)."""

    P: torch.Tensor
    null: torch.Tensor
    # True when U0 and V0 span the whole domain and range (square W0, untruncated
    # core): the null part is then zero by construction and ``null`` is rounding noise.
    null_is_structural_zero: bool


def project(delta: torch.Tensor, frame: Frame, *, in_place: bool = False) -> Projection:
    """P = U0ᵀ ΔW V0 and ΔW_null = ΔW − U0 P V0ᵀ, the latter computed explicitly.

    With ``in_place`` the null residual overwrites ``delta`` (saves one m×n buffer).
    When one side of the frame is a complete basis the residual simplifies
    (e.g. V0 square ⇒ U0 P V0ᵀ = U0 U0ᵀ ΔW), which saves a matmul without
    changing the result beyond rounding.
    """
    U, V = frame.U, frame.V
    m, n = delta.shape
    r = U.shape[1]
    out = delta if in_place else delta.clone()
    if m >= n:
        A = U.T @ delta  # r×n
        P = A @ V
        if r == n:  # V complete: U P Vᵀ = U A
            out.addmm_(U, A, alpha=-1)
        else:
            out.addmm_(U, P @ V.T, alpha=-1)
    else:
        B = delta @ V  # m×r
        P = U.T @ B
        if r == m:  # U complete: U P Vᵀ = B Vᵀ
            out.addmm_(B, V.T, alpha=-1)
        else:
            out.addmm_(U @ P, V.T, alpha=-1)
    return Projection(P=P, null=out, null_is_structural_zero=(r == m == n))


def split_energies(P: torch.Tensor, null: torch.Tensor) -> tuple[float, float, float]:
    """(‖diag P‖², ‖P − diag P‖², ‖ΔW_null‖²), each summed directly (no differences of squares)."""
    d = torch.diagonal(P)
    e_diag = float(torch.dot(d, d).item())
    sq = P.square()
    sq.diagonal().zero_()
    e_off = float(sq.sum(dtype=torch.float64).item())
    e_null = float(torch.linalg.vector_norm(null).item()) ** 2
    return e_diag, e_off, e_null


# ---------------------------------------------------------------------------
# beyond the paper: principal bands of P, principal subspace angles, checkpoint-precision sparsity

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


def principal_angles(frame: "Frame", U1: torch.Tensor, V1: torch.Tensor, edges: Sequence[int]) -> dict[str, float]:
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


@dataclass(frozen=True)
class MatrixMetrics:
    """Descriptive metrics of one matrix update (all float64 Python scalars)."""

    rows: int
    cols: int
    rank: int  # size of the pretrained core r
    w0_fro: float
    delta_fro: float
    r_delta: float
    e_diag: float
    e_off: float
    e_null: float
    f_diag: float
    f_off: float
    f_null: float
    sv_cos: float
    delta_max: float
    sr_w0: float
    sr_delta: float
    sr_w1: float
    dsr_pct: float
    alpha: float
    rank_w0: dict  # threshold (as str) → numerical rank
    rank_w1: dict
    # beyond the paper (column name → value): band{k}_{diag,off}_{principal,mixed,tail} as fractions of
    # ‖ΔW‖², angle{k}_{left,right}_{max_deg,cos2}, {dtype}_kept_{diag,off,null}
    extra: dict = field(default_factory=dict)

    def as_row(self) -> dict:
        row = {k: v for k, v in self.__dict__.items() if not isinstance(v, dict)}
        for t, v in self.rank_w0.items():
            row[f"nrank_w0_{t}"] = v
        for t, v in self.rank_w1.items():
            row[f"nrank_w1_{t}"] = v
        row.update(self.extra)
        return row


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def numerical_rank(s: np.ndarray, rel: float) -> int:
    return int((s > rel * s[0]).sum()) if s.size and s[0] > 0 else 0


def matrix_metrics(
    s0: Sequence[float] | np.ndarray,
    s1: Sequence[float] | np.ndarray,
    *,
    delta_fro: float,
    delta_spec: float,
    energies: tuple[float, float, float],
    rows: int,
    cols: int,
    rank: int,
    rank_thresholds: Sequence[float],
) -> MatrixMetrics:
    """Metrics from the spectra of W0 and W1, ‖ΔW‖_F, ‖ΔW‖₂ and the split energies.

    Conventions for a zero update (ΔW = 0): fractions, SR(ΔW) and α are 0, never NaN.
    """
    s0 = np.asarray(s0, dtype=np.float64)
    s1 = np.asarray(s1, dtype=np.float64)
    w0_fro = math.sqrt(float(np.dot(s0, s0)))
    w1_fro2 = float(np.dot(s1, s1))
    e_diag, e_off, e_null = energies
    d2 = delta_fro**2
    sr_w0 = _ratio(w0_fro**2, s0[0] ** 2) if s0.size else 0.0
    sr_w1 = _ratio(w1_fro2, s1[0] ** 2) if s1.size else 0.0
    sr_delta = _ratio(d2, delta_spec**2)
    n0, n1 = math.sqrt(float(np.dot(s0, s0))), math.sqrt(w1_fro2)
    return MatrixMetrics(
        rows=rows,
        cols=cols,
        rank=rank,
        w0_fro=w0_fro,
        delta_fro=delta_fro,
        r_delta=_ratio(delta_fro, w0_fro),
        e_diag=e_diag,
        e_off=e_off,
        e_null=e_null,
        f_diag=_ratio(e_diag, d2),
        f_off=_ratio(e_off, d2),
        f_null=_ratio(e_null, d2),
        sv_cos=_ratio(float(np.dot(s0, s1)), n0 * n1),
        delta_max=_ratio(float(np.max(np.abs(s1 - s0))) if s0.size else 0.0, s0[0] if s0.size else 0.0),
        sr_w0=sr_w0,
        sr_delta=sr_delta,
        sr_w1=sr_w1,
        dsr_pct=100.0 * _ratio(sr_w1 - sr_w0, sr_w0),
        alpha=_ratio(sr_w1 - sr_w0, sr_delta) if sr_delta > 0 else 0.0,
        rank_w0={f"{t:g}": numerical_rank(s0, t) for t in rank_thresholds},
        rank_w1={f"{t:g}": numerical_rank(s1, t) for t in rank_thresholds},
    )


def random_core_coefficients(r: int, norm: float, generator: torch.Generator, *,
                             dtype: torch.dtype = torch.float64, device: torch.device | str = "cpu") -> torch.Tensor:
    """Q: standard Gaussian r×r scaled to Frobenius norm ``norm``.

    R = U0 Q V0ᵀ is then a random component of exactly that norm lying entirely inside
    span(U0) ⊗ span(V0) (‖U0 Q V0ᵀ‖_F = ‖Q‖_F for orthonormal U0, V0): the control
    for removing the diagonal part, with ``norm`` = ‖diag P‖.
    """
    Q = torch.randn(r, r, generator=generator, dtype=torch.float64)
    q = float(torch.linalg.matrix_norm(Q))
    Q *= (norm / q) if q > 0 else 0.0
    return Q.to(device=device, dtype=dtype)


@dataclass(frozen=True)
class MatrixResult:
    frame: Frame
    projection: Projection
    sigma1: torch.Tensor
    metrics: MatrixMetrics


def survival_sample(shape: tuple[int, int], target: int = 256) -> tuple[int, torch.Tensor]:
    """(axis, indices): an evenly spaced sample of at most ``target`` rows (axis 0) or columns (axis 1)
    along the longer side, on which component survival is estimated (all of them when fewer). 256
    rows of a matrix are ≥ 256·min(m, n) entries, plenty for an energy share; 1024 made the estimate
    cost as much as a small model's SVDs (tools/bench_decompose.py)."""
    m, n = shape
    axis, size = (0, m) if m >= n else (1, n)
    step = max(1, -(-size // target))
    return axis, torch.arange(0, size, step)


def _component_samples(proj: "Projection", frame: Frame, axis: int, idx: torch.Tensor,
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


def decompose_matrix(
    W0: torch.Tensor,
    W1: torch.Tensor,
    *,
    frame: Optional[Frame] = None,
    core_rel_threshold: Optional[float] = None,
    rank_thresholds: Sequence[float] = (1e-7, 1e-3),
    band_edges: Sequence[int] = (),
    angle_edges: Sequence[int] = (),
    survival: Optional[tuple[int, torch.Tensor, torch.Tensor, torch.dtype]] = None,
    timer: PhaseTimer = NO_TIMER,
    svd_driver: Optional[str] = None,
) -> MatrixResult:
    """Full GRRR treatment of one matrix pair, given already upcast (float32/64) tensors.

    Consumes ``W1`` (it becomes ΔW, then the null residual) and drops ``W0`` as soon as
    the frame exists, to keep at most a few m×n buffers alive. Pass a cached ``frame``
    to skip the SVD of W0. Beyond the paper, in the same pass: ``band_edges`` splits the
    energy of P by principal band; ``angle_edges`` measures the principal angles between the
    top-k singular subspaces of W0 and W1 for each k (W1's by block subspace iteration, no
    full SVD); ``survival`` = (axis, indices, W0 on those rows/columns in the
    checkpoint dtype, target dtype) estimates how much of each component survives a round
    trip of W0 + component through the target dtype. ``timer`` collects the seconds of each
    step (see :mod:`grrr_stream.phases`).
    """
    if W0.dtype != W1.dtype or W0.dtype not in (torch.float32, torch.float64):
        raise TypeError("decompose_matrix expects two float32 or two float64 tensors")
    with timer.phase("svdvals_w1"):
        sigma1 = svdvals(W1, svd_driver)
    m, n = W1.shape
    # the frame first, while W1 is intact: the same peak memory as forming ΔW first (W1 takes ΔW's place
    # during the SVD), and W1's top-k subspaces can start from W0's
    if frame is None:
        with timer.phase("svd_w0"):
            frame = compute_frame(W0, core_rel_threshold, svd_driver)
    ks = sorted({int(k) for k in angle_edges if int(k) < min(m, n, frame.rank)})
    # (k ≥ min(m, n) is not measured: the longer side's top-k subspaces are then the row or column
    # spaces, which differ between W0 and W1 and would need W1's full SVD)
    top1, angles_failed = None, False
    with timer.phase("angles"):
        try:
            top1 = top_singular_subspaces(W1, ks[-1], start=frame.V[:, :ks[-1] + 16]) if ks else None
        except torch.linalg.LinAlgError:  # products that overflow (weights near the dtype's limit): the angles
            angles_failed = True          # are NaN, and the caller refuses the matrix as non-finite
    with timer.phase("delta"):
        delta = W1.sub_(W0)
        del W1, W0  # W0 freed here when the caller passed it without keeping a reference
        delta_fro = float(torch.linalg.vector_norm(delta).item())
    with timer.phase("spectral_norm"):
        delta_spec = spectral_norm(delta) if delta_fro > 0 else 0.0
    if delta_fro == 0.0:
        # W1 == W0 bit for bit: use the identical spectrum rather than one from another
        # LAPACK routine, so a model compared with itself gives exact zeros.
        sigma1 = frame.S.clone()
    delta_sample = None
    if survival is not None:  # ΔW on the sampled rows or columns, before it becomes the null residual
        axis, idx = survival[0], survival[1].to(delta.device)
        delta_sample = (delta[idx] if axis == 0 else delta[:, idx]).clone()
    with timer.phase("projection"):
        proj = project(delta, frame, in_place=True)
        energies = split_energies(proj.P, proj.null)
    extra: dict[str, float] = {}
    with timer.phase("analyses"):
        if band_edges:
            d2 = delta_fro ** 2
            extra.update({f"band{k}": _ratio(v, d2) for k, v in band_energies(proj.P, band_edges).items()})
        if top1 is not None:
            extra.update({f"angle{k}": v for k, v in principal_angles(frame, top1[0], top1[1], ks).items()})
        elif angles_failed:
            extra.update({f"angle{k}_{side}_max_deg": math.nan for k in ks for side in ("left", "right")})
        if survival is not None:
            axis, idx, w0_sample, target = survival
            kept = round_trip_survival(w0_sample, _component_samples(proj, frame, axis, idx, delta_sample), target)
            tag = str(target).removeprefix("torch.")
            extra.update({f"{tag}_kept_{c}": v for c, v in kept.items()})
    metrics = matrix_metrics(
        frame.S.double().cpu().numpy(),
        sigma1.double().cpu().numpy(),
        delta_fro=delta_fro,
        delta_spec=delta_spec,
        energies=energies,
        rows=m,
        cols=n,
        rank=frame.rank,
        rank_thresholds=rank_thresholds,
    )
    if extra:
        metrics = replace(metrics, extra=extra)
    return MatrixResult(frame=frame, projection=proj, sigma1=sigma1, metrics=metrics)
