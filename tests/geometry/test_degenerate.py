"""Near-degenerate clusters resolved by a small float64 problem, checked against the float64 SVD of the
whole stored matrix (an independent computation: LAPACK in float64, no windows, no Schur complement)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import grrr_stream.geometry.frame as frame_mod
from grrr_stream.geometry.degenerate import clusters_above_floor, resolve_clusters
from grrr_stream.geometry.frame import _thin_svd, compute_frame

# (index, gap / σ₁) of each planted cluster: the top pair, pairs deep in a bulk whose spacing is ~2e-3·σ₁,
# one 1.8e-9 apart (float32 rotates it at random), and a triple
PLANTED = [(0, 5e-7), (150, 1e-8), (300, 3e-7), (420, 2e-9), (470, 4e-7), (471, 3e-7)]


def _planted(m: int, n: int, seed: int) -> torch.Tensor:
    """A float32 matrix (m×n, any orientation) with a Marchenko–Pastur-like bulk and the PLANTED clusters."""
    big, small = max(m, n), min(m, n)
    g = np.random.default_rng(seed)
    U = np.linalg.qr(g.standard_normal((big, small)))[0]
    V = np.linalg.qr(g.standard_normal((small, small)))[0]
    s = np.linalg.svd(g.standard_normal((big, small)) / np.sqrt(big), compute_uv=False)
    for i, gap in PLANTED:
        s[i + 1] = s[i] - gap * s[0]
    W = torch.from_numpy((U * s) @ V.T).float()
    return W if m >= n else W.T.contiguous()


def _in_cluster_rotation(A: torch.Tensor, B: torch.Tensor) -> float:
    """Largest off-diagonal |cos| between the columns of two bases of one cluster (0: same vectors)."""
    M = (A.double().T @ B.double()).abs()
    return float((M - torch.diag(torch.diag(M))).max())


@pytest.mark.parametrize("shape", [(1024, 512), (512, 1024)])
def test_resolved_clusters_are_the_float64_vectors(shape):
    W0 = _planted(*shape, seed=0)
    U, S, V = _thin_svd(W0, None)
    clusters = clusters_above_floor(S, 1e-6)
    assert clusters == [(0, 2), (150, 152), (300, 302), (420, 422), (470, 473)]
    resolved = resolve_clusters(W0, U, S, V, clusters)
    assert resolved is not None
    Ur, Sr, Vr = resolved
    U6, S6, V6 = _thin_svd(W0.double(), None)
    worst_float32 = 0.0
    for a, b in clusters:
        assert _in_cluster_rotation(Ur[:, a:b], U6[:, a:b]) < 1e-5, (a, b)
        assert _in_cluster_rotation(Vr[:, a:b], V6[:, a:b]) < 1e-5, (a, b)
        worst_float32 = max(worst_float32, _in_cluster_rotation(U[:, a:b], U6[:, a:b]))
        assert float((Sr[a:b].double() - S6[a:b]).abs().max()) < 1e-7 * float(S6[0])
    assert worst_float32 > 0.1  # float32's own vectors are rotated inside the clusters: the check can fail
    r = S.numel()
    for X in (Ur, Vr):
        assert float((X.double().T @ X.double() - torch.eye(r, dtype=torch.float64)).abs().max()) < 1e-5
    inside = torch.zeros(r, dtype=torch.bool)
    for a, b in clusters:
        inside[a:b] = True
    assert torch.equal(Ur[:, ~inside], U[:, ~inside]) and torch.equal(Vr[:, ~inside], V[:, ~inside])
    assert torch.equal(Sr[~inside], S[~inside])


def _float64_svds(monkeypatch) -> list:
    """Record the dtype of every thin SVD compute_frame runs."""
    seen, real = [], frame_mod._thin_svd

    def spy(W, driver):
        seen.append(W.dtype)
        return real(W, driver)

    monkeypatch.setattr(frame_mod, "_thin_svd", spy)
    return seen


def test_compute_frame_resolves_without_a_float64_svd(monkeypatch):
    W0 = _planted(1024, 512, seed=1)
    seen = _float64_svds(monkeypatch)
    frame = compute_frame(W0)
    assert seen == [torch.float32]
    U6 = _thin_svd(W0.double(), None)[0]
    assert _in_cluster_rotation(frame.U[:, 420:422], U6[:, 420:422]) < 1e-5


def test_exactly_degenerate_pair_falls_back_to_the_float64_svd(monkeypatch):
    """σ_5 = σ_6 exactly (a diagonal float32 matrix): no rotation is better than another, the estimate
    cannot vouch for one, and the whole SVD is redone in float64, as before the small problem existed."""
    s = torch.linspace(1.0, 0.1, 64)
    s[5] = s[4]
    W0 = torch.zeros(96, 64)
    W0[:64, :64] = torch.diag(s)
    U, S, V = _thin_svd(W0, None)
    assert resolve_clusters(W0, U, S, V, clusters_above_floor(S, 1e-6)) is None
    seen = _float64_svds(monkeypatch)
    frame = compute_frame(W0)
    assert seen == [torch.float32, torch.float64]
    assert torch.allclose(frame.U.T @ frame.U, torch.eye(64), atol=1e-6)


def test_too_many_windows_fall_back():
    W0 = _planted(1024, 512, seed=2)
    U, S, V = _thin_svd(W0, None)
    clusters = clusters_above_floor(S, 1e-6)
    assert resolve_clusters(W0, U, S, V, clusters, max_window=64) is None
    assert resolve_clusters(W0, U, S, V, clusters) is not None


@pytest.mark.parametrize("shape", [(1024, 512), (512, 512)])
def test_pair_near_the_floor_is_resolved_or_redone_in_float64(shape):
    """A pair 1e-9·σ₁ apart at 3e-5·σ₁, near the floor, where the eigenvalue 0 of the tall case's
    rest is closer than any other singular value: the frame's pair is float64's, by whichever path."""
    W0 = _planted(*shape, seed=3).double()
    U, s, Vh = torch.linalg.svd(W0, full_matrices=False)
    s[400:] = s[0] * torch.logspace(-4, -6, s.numel() - 400, dtype=torch.float64)
    s[430] = s[429] - 1e-9 * s[0]
    W0 = ((U * s) @ Vh).float()
    U6 = _thin_svd(W0.double(), None)[0]
    S32 = _thin_svd(W0, None)[1]
    assert (429, 431) in clusters_above_floor(S32, 1e-6)
    frame = compute_frame(W0)
    assert _in_cluster_rotation(frame.U[:, 429:431], U6[:, 429:431]) < 1e-5
