"""Near-degenerate singular values of W0: finding their clusters, and fixing their vectors as float64 would.

Two neighbouring singular values closer than eps·σ₁ / (wanted accuracy) leave float32's singular vectors of
the pair an arbitrary rotation of each other, which moves P's energy between diag and off
(docs/statistics.md, "Near-degenerate singular values"). Re-decomposing all of W0 in float64 fixes that at
about twice the cost of the float32 SVD (on 14B shapes it doubled decompose's time). :func:`resolve_clusters`
fixes only what float64 changes: the rotation inside each cluster, found from a small float64 problem.

The small problem (tall orientation, W0 m×n, float32 frame U, S, V): the symmetric matrix
H = [[0, W0], [W0ᵀ, 0]] has eigenpairs ±σ_j with vectors (u_j; ±v_j)/√2. Take a window of the float32
frame, the cluster and ``halo`` neighbours on each side, orthonormalised in float64; H restricted to it
is [[0, A], [Aᵀ, 0]] with A = Uwᵀ W0 Vw, exact in float64. Its coupling to the rest of the spectrum
is the float64 residual (Ru; Rv) = ((I − Uw Uwᵀ) W0 Vw; (I − Vw Vwᵀ) W0ᵀ Uw), of the size of float32's
backward error ρ. Eliminating the rest (a Schur complement, with the rest's eigenpairs taken from the float32
frame) gives the window's effective matrix at λ (the cluster's value):

    H_eff = [[0, A], [Aᵀ, 0]] + Σ_{j outside} g⁺g⁺ᵀ/(λ − σ_j) + g⁻g⁻ᵀ/(λ + σ_j)  (+ (0, Rpᵀ Rp/λ) for m > n)

with g^± = (±v_jᵀ Rv; u_jᵀ Ru)/√2 and Rp the part of Ru outside span(U) (eigenvalue 0). The second-order
terms are of size ρ²/gap_out, gap_out being the distance from the cluster to the first singular value
outside the window; what is left out is of order ρ³/gap_out² (the rest's own float32 error) plus
ρ²·spread/gap_out² (H_eff taken at one λ for the whole cluster). The eigenvectors of H_eff near λ are the
cluster's vectors; their rotation is applied to the float32 cluster columns, which stay orthonormal.

Where that error estimate is not below ``accuracy`` times the cluster's smallest inner gap (an exactly
degenerate pair, a crowded spectrum, windows too many to be cheap), the caller falls back to the
float64 SVD of the whole matrix.
"""

from __future__ import annotations

from typing import Optional

import torch

# Below DEGENERATE_FLOOR·σ₁ float32's singular values are rounding noise and the frame stays as it is.
DEGENERATE_FLOOR = 1e-5
HALO = 16  # neighbours on each side of a cluster that the float64 problem treats exactly
MAX_WINDOW = 512  # columns of all windows together; more, and the whole SVD is redone in float64
ACCURACY = 1e-4  # accepted error estimate of a cluster's rotation (radians, about)
_EPS64 = 2.2e-16


def degenerate_clusters(S: torch.Tensor, r: int, gap: Optional[float]) -> list[tuple[int, int]]:
    """[start, end) index ranges of the core's clusters of near-equal singular values: maximal runs of
    σ_1 ≥ … ≥ σ_r whose neighbours differ by at most gap·σ₁ (2 or more values each)."""
    if gap is None or r < 2 or not bool(S[0] > 0):
        return []
    s = S[:r].double()
    close = ((s[:-1] - s[1:]) <= gap * s[0]).tolist()
    out, start = [], None
    for i, c in enumerate(close):
        if c and start is None:
            start = i
        elif not c and start is not None:
            out.append((start, i + 1))
            start = None
    if start is not None:
        out.append((start, r))
    return out


def clusters_above_floor(S: torch.Tensor, gap: Optional[float]) -> list[tuple[int, int]]:
    """The clusters among singular values above DEGENERATE_FLOOR·σ₁ (where float32 still resolves them)."""
    if not S.numel():
        return []
    return degenerate_clusters(S, int((S > DEGENERATE_FLOOR * S[0]).sum()), gap)


def resolve_clusters(
    W0: torch.Tensor,
    U: torch.Tensor,
    S: torch.Tensor,
    V: torch.Tensor,
    clusters: list[tuple[int, int]],
    *,
    halo: int = HALO,
    accuracy: float = ACCURACY,
    max_window: int = MAX_WINDOW,
    block_rows: int = 1024,
) -> Optional[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(U, S, V) of the float32 thin SVD of W0 with every cluster's vectors and values as float64 would
    have them, or None where the error estimate (module docstring) does not vouch for it."""
    if W0.shape[0] < W0.shape[1]:  # the tall orientation: W0ᵀ = V S Uᵀ
        out = resolve_clusters(
            W0.mT, V, S, U, clusters, halo=halo, accuracy=accuracy, max_window=max_window, block_rows=block_rows
        )
        return None if out is None else (out[2], out[1], out[0])
    n = W0.shape[1]
    windows = [(max(0, a - halo), min(n, b + halo)) for a, b in clusters]
    cols = sorted(set().union(*(range(lo, hi) for lo, hi in windows)))
    if len(cols) > max_window:
        return None
    at = {c: i for i, c in enumerate(cols)}
    idx = torch.tensor(cols, device=W0.device)
    Uc, Vc = U[:, idx].double(), V[:, idx].double()
    X, Y = _frame_products(W0, Uc, Vc, block_rows)
    parts = [_window(Uc, Vc, X, Y, [at[c] for c in range(lo, hi)]) for lo, hi in windows]
    alpha, beta, Rp = _rest_coordinates(U, V, parts)
    rotations, start = [], 0
    for (a, b), (lo, hi), part in zip(clusters, windows, parts):
        cols_k = slice(start, start + hi - lo)
        start += hi - lo
        rotation = _cluster_rotation(
            part,
            alpha[:, cols_k],
            beta[:, cols_k],
            None if Rp is None else Rp[:, cols_k],
            S,
            a - lo,
            b - lo,
            lo,
            hi,
            accuracy,
        )
        if rotation is None:
            return None
        rotations.append(rotation)
    return _rotated(U, S, V, clusters, rotations)


def _frame_products(
    W0: torch.Tensor, Uc: torch.Tensor, Vc: torch.Tensor, block_rows: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(W0 Vc, W0ᵀ Uc) in float64 for the float64 columns Uc, Vc, a block of W0's rows at a time (a float64
    copy of a 14B down_proj is 680 MB)."""
    m, n = W0.shape
    f64 = dict(dtype=torch.float64, device=W0.device)
    X = torch.empty(m, Vc.shape[1], **f64)
    Y = torch.zeros(n, Uc.shape[1], **f64)
    for s in range(0, m, block_rows):
        Wb = W0[s : s + block_rows].double()
        X[s : s + block_rows] = Wb @ Vc
        Y += Wb.mT @ Uc[s : s + block_rows]
    return X, Y


def _rest_coordinates(
    U: torch.Tensor, V: torch.Tensor, parts: list[tuple]
) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """(alpha, beta, Rp): the coordinates of every window's residuals Ru, Rv on the float32 U and V, and the part
    of Ru outside span(U) (None when W0 is square), one window's columns after the other. In one product
    with the float32 frame: they enter at second order, so float32 products suffice, and U is read once, not once
    per cluster."""
    Ru = torch.cat([p[3] for p in parts], 1)
    alpha = (U.mT @ Ru.to(U.dtype)).double()
    beta = (V.mT @ torch.cat([p[4] for p in parts], 1).to(V.dtype)).double()
    Rp = Ru - (U @ alpha.to(U.dtype)).double() if U.shape[0] > V.shape[0] else None
    return alpha, beta, Rp


def _rotated(
    U: torch.Tensor, S: torch.Tensor, V: torch.Tensor, clusters: list[tuple[int, int]], rotations: list[tuple]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Copies of (U, S, V) with each cluster's columns rotated by its (Q_U, Q_V) and its values replaced."""
    U, S, V = U.clone(), S.clone(), V.clone()
    for (a, b), (QU, QV, values) in zip(clusters, rotations):
        U[:, a:b] = (U[:, a:b].double() @ QU).to(U.dtype)
        V[:, a:b] = (V[:, a:b].double() @ QV).to(V.dtype)
        S[a:b] = values.to(S.dtype)
    return U, S, V


def _window(Uc, Vc, X, Y, sel):
    """(Uw, Vw, A, Ru, Rv, cluster columns of U, of V) of the window ``sel`` (positions in Uc, Vc): its
    float32 vectors orthonormalised in float64, A = Uwᵀ W0 Vw, and the residuals (I − Uw Uwᵀ) W0 Vw,
    (I − Vw Vwᵀ) W0ᵀ Uw, from X = W0 Vc and Y = W0ᵀ Uc."""
    Uw, RU = torch.linalg.qr(Uc[:, sel])
    Vw, RV = torch.linalg.qr(Vc[:, sel])
    XW = torch.linalg.solve_triangular(RV, X[:, sel], upper=True, left=False)  # W0 Vw
    YW = torch.linalg.solve_triangular(RU, Y[:, sel], upper=True, left=False)  # W0ᵀ Uw
    A = Uw.mT @ XW
    return Uw, Vw, A, XW - Uw @ A, YW - Vw @ A.mT, Uc[:, sel], Vc[:, sel]


def _cluster_rotation(part, alpha, beta, Rp, S, a, b, lo, hi, accuracy):
    """(Q_U, Q_V, σ) for cluster [a, b) of the window [lo, hi) (``a``, ``b`` relative to ``lo``), or None.
    ``alpha``, ``beta``: the window residuals' coordinates on the float32 U and V; ``Rp``: the part of Ru
    outside span(U) (None when W0 is square)."""
    Uw, Vw, A, Ru, Rv, Uk, Vk = part
    m, n = Ru.shape[0], Rv.shape[0]
    k = hi - lo
    out = torch.cat([torch.arange(0, lo), torch.arange(hi, n)]).to(S.device)
    s_out = S[out].double()
    lam = float(S[lo + a : lo + b].double().mean())
    H = torch.zeros(2 * k, 2 * k, dtype=torch.float64, device=S.device)
    H[:k, k:], H[k:, :k] = A, A.mT
    if out.numel():
        al, be = alpha[out], beta[out]
        Bp, Bn = torch.cat([be, al], 1), torch.cat([-be, al], 1)
        H += Bp.mT @ (Bp / (2 * (lam - s_out))[:, None]) + Bn.mT @ (Bn / (2 * (lam + s_out))[:, None])
    if Rp is not None:  # the rest of R^m, outside span(U): eigenvalue 0 of H
        H[k:, k:] += Rp.mT @ Rp / lam
    theta, Z = torch.linalg.eigh(0.5 * (H + H.mT))
    pick = torch.argsort((theta - lam).abs())[: b - a]
    pick = pick[torch.argsort(theta[pick], descending=True)]
    values = theta[pick]

    # the error estimate: the cluster's coupling to the rest (rho_c), each float32 vector's own residual
    # (rho_1, which is how far the rest's float32 eigenpairs are from diagonalising it), and the distance
    # from the cluster to the first value outside the window
    a_c, b_c = Z[:k, pick], Z[k:, pick]
    rho_c = float(torch.sqrt(torch.linalg.matrix_norm(Ru @ b_c) ** 2 + torch.linalg.matrix_norm(Rv @ a_c) ** 2))
    rho_1 = float(torch.maximum(torch.linalg.vector_norm(Ru, dim=0).max(), torch.linalg.vector_norm(Rv, dim=0).max()))
    # distance to the nearest eigenvalue of H outside the window: +σ_j outside it, and λ itself for the −σ_j
    # (at λ + σ_j ≥ λ) and, for m > n, the eigenvalue 0 (which sets it near the floor)
    gap_out = min(float((lam - s_out).abs().min()) if out.numel() else float("inf"), lam)
    spread = float(values[0] - values[-1])
    inner = float((values[:-1] - values[1:]).min())
    error = rho_c**2 * (rho_1 + spread) / gap_out**2 + 4 * _EPS64 * float(S[0]) * (m + n) ** 0.5
    if not inner > 0 or error > accuracy * inner:
        return None

    ua, vb = Uw @ a_c, Vw @ b_c
    ua, vb = ua / torch.linalg.vector_norm(ua, dim=0), vb / torch.linalg.vector_norm(vb, dim=0)
    return _polar(Uk[:, a:b].mT @ ua), _polar(Vk[:, a:b].mT @ vb), values


def _polar(M: torch.Tensor) -> torch.Tensor:
    """The orthogonal factor of M (the rotation closest to it)."""
    L, _, Rh = torch.linalg.svd(M)
    return L @ Rh
