"""Known-answer tests of the pure math in grrr_stream.geometry.frame, against float64 numpy references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grrr_stream.geometry.frame import (
    all_finite,
    canonical_signs,
    compute_frame,
    project,
    spectral_norm,
    split_energies,
)
from grrr_stream.geometry.kernel import MatrixSettings, decompose_matrix
from grrr_stream.geometry.metrics import matrix_metrics

SHAPES = [(48, 20), (20, 48), (32, 32)]


def _rand(shape, seed, scale=1.0):
    g = np.random.default_rng(seed)
    return g.standard_normal(shape) * scale


def _numpy_reference(W0, D, r=None):
    U, s, Vt = np.linalg.svd(W0, full_matrices=False)
    if r is not None:
        U, Vt = U[:, :r], Vt[:r]
    P = U.T @ D @ Vt.T
    null = D - U @ P @ Vt
    return U, s, Vt.T, P, null


@pytest.mark.parametrize("shape", SHAPES)
def test_projection_matches_float64_reference(shape):
    W0 = _rand(shape, 0)
    D = _rand(shape, 1, 1e-2)
    _, _, _, P_ref, null_ref = _numpy_reference(W0, D)
    frame = compute_frame(torch.from_numpy(W0))
    proj = project(torch.from_numpy(D), frame)
    # P entries may differ in sign pattern only through the frame's sign convention: compare
    # sign-invariant quantities and the reconstruction.
    assert np.allclose(np.abs(np.diag(proj.P.numpy())), np.abs(np.diag(P_ref)), rtol=1e-10, atol=1e-14)
    assert np.isclose(np.linalg.norm(proj.P.numpy()), np.linalg.norm(P_ref), rtol=1e-12)
    assert np.allclose(proj.null.numpy(), null_ref, atol=1e-13)
    recon = frame.U.numpy() @ proj.P.numpy() @ frame.V.numpy().T + proj.null.numpy()
    assert np.allclose(recon, D, atol=1e-13)


@pytest.mark.parametrize("shape", SHAPES)
def test_parts_are_orthogonal_and_energies_sum(shape):
    W0 = torch.from_numpy(_rand(shape, 2))
    D = torch.from_numpy(_rand(shape, 3, 1e-3))
    frame = compute_frame(W0)
    proj = project(D, frame)
    e_diag, e_off, e_null = split_energies(proj.P, proj.null)
    total = float(torch.linalg.matrix_norm(D)) ** 2
    assert abs((e_diag + e_off + e_null) / total - 1.0) < 1e-12
    U, V, P = frame.U, frame.V, proj.P
    diag = U @ torch.diag(torch.diagonal(P)) @ V.T
    off = U @ (P - torch.diag(torch.diagonal(P))) @ V.T
    for a, b in ((diag, off), (diag, proj.null), (off, proj.null)):
        assert abs(float((a * b).sum())) < 1e-12 * total
    if shape[0] == shape[1]:
        assert proj.null_is_structural_zero
        assert e_null / total < 1e-24
    else:
        assert not proj.null_is_structural_zero
        assert e_null / total > 0.1  # a random update is mostly outside a thin frame


def test_truncated_core_puts_dropped_directions_into_null():
    W0 = _rand((40, 30), 4)
    W0[:, :] = W0 @ np.diag(np.r_[np.ones(25), 1e-9 * np.ones(5)])  # five negligible directions
    D = _rand((40, 30), 5, 1e-2)
    frame = compute_frame(torch.from_numpy(W0), core_rel_threshold=1e-6)
    assert frame.rank == 25
    assert frame.S.numel() == 30  # full spectrum kept for the metrics
    _, _, _, P_ref, null_ref = _numpy_reference(W0, D, r=25)
    proj = project(torch.from_numpy(D), frame)
    assert not proj.null_is_structural_zero
    assert np.allclose(proj.null.numpy(), null_ref, atol=1e-12)
    assert np.isclose(np.linalg.norm(proj.P.numpy()), np.linalg.norm(P_ref), rtol=1e-12)


def test_canonical_signs_make_frames_reproducible():
    W0 = torch.from_numpy(_rand((30, 20), 6))
    f = compute_frame(W0)
    flips = torch.from_numpy(np.random.default_rng(0).choice([-1.0, 1.0], size=20))
    U2, V2 = canonical_signs(f.U * flips, f.V * flips)
    assert torch.equal(U2, f.U) and torch.equal(V2, f.V)
    # and the frame still reconstructs W0
    assert torch.allclose(f.U @ torch.diag(f.S) @ f.V.T, W0, atol=1e-12)


@pytest.mark.parametrize("shape", [(700, 600), (600, 1300), (1536, 576)])
@pytest.mark.parametrize("dtype,rtol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_lanczos_spectral_norm(shape, dtype, rtol):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(*shape, generator=g, dtype=torch.float64)  # noise: clustered top singular values
    exact = float(torch.linalg.svdvals(X)[0])
    est = spectral_norm(X.to(dtype), exact_below=0)
    assert abs(est - exact) / exact < rtol
    # a spiked matrix converges too
    X[:, 0] *= 50
    exact = float(torch.linalg.svdvals(X)[0])
    assert abs(spectral_norm(X.to(dtype), exact_below=0) - exact) / exact < rtol


def test_spectral_norm_of_low_rank_and_zero():
    g = torch.Generator().manual_seed(1)
    X = torch.randn(800, 3, generator=g, dtype=torch.float64) @ torch.randn(3, 700, generator=g, dtype=torch.float64)
    exact = float(torch.linalg.svdvals(X)[0])
    assert abs(spectral_norm(X, exact_below=0) - exact) / exact < 1e-10  # Lanczos breaks down exactly
    assert spectral_norm(torch.zeros(600, 700, dtype=torch.float64), exact_below=0) == 0.0


def test_matrix_metrics_known_answers():
    s0 = np.array([4.0, 2.0, 1.0, 1e-9])
    s1 = np.array([5.0, 2.0, 1.0, 1e-2])
    m = matrix_metrics(
        s0,
        s1,
        delta_fro=2.0,
        delta_spec=1.0,
        energies=(1.0, 2.0, 1.0),
        rows=4,
        cols=4,
        rank=4,
        rank_thresholds=(1e-7, 1e-3),
    )
    w0_fro = np.sqrt(16 + 4 + 1 + 1e-18)
    assert m.w0_fro == pytest.approx(w0_fro)
    assert m.r_delta == pytest.approx(2.0 / w0_fro)
    assert (m.f_diag, m.f_off, m.f_null) == pytest.approx((0.25, 0.5, 0.25))
    assert m.sv_cos == pytest.approx(s0 @ s1 / np.linalg.norm(s0) / np.linalg.norm(s1))
    assert m.delta_max == pytest.approx(1.0 / 4.0)
    sr0, sr1, srd = (21 + 1e-18) / 16, (25 + 4 + 1 + 1e-4) / 25, 4.0 / 1.0
    assert (m.sr_w0, m.sr_w1, m.sr_delta) == pytest.approx((sr0, sr1, srd))
    assert m.alpha == pytest.approx((sr1 - sr0) / srd)
    assert m.dsr_pct == pytest.approx(100 * (sr1 - sr0) / sr0)
    assert m.rank_w0 == {"1e-07": 3, "0.001": 3}
    assert m.rank_w1 == {"1e-07": 4, "0.001": 4}
    row = m.as_row()
    assert row["nrank_w0_1e-07"] == 3 and row["nrank_w1_0.001"] == 4


def test_zero_update_is_all_zeros_without_nans():
    W = torch.from_numpy(_rand((30, 20), 7))
    res = decompose_matrix(W.clone(), W.clone())
    row = res.metrics.as_row()
    assert all(np.isfinite(v) for v in row.values())
    for k in ("delta_fro", "r_delta", "f_diag", "f_off", "f_null", "delta_max", "sr_delta", "alpha", "dsr_pct"):
        assert row[k] == 0.0, k
    assert row["sv_cos"] == pytest.approx(1.0)
    assert float(res.projection.P.abs().max()) == 0.0


def test_identical_spectra_give_exact_identities_whatever_the_rounding():
    """A spectrum compared with itself: dsr_pct, α and δ_max are exactly 0 and sv_cos exactly 1 for every
    spectrum, not only for those where √(Σσ²)² happens to round back to Σσ² (28 of these 50 do not)."""
    from grrr_stream.geometry.metrics import matrix_metrics

    for seed in range(50):
        s = np.sort(np.random.default_rng(seed).random(40))[::-1] * 3
        m = matrix_metrics(
            s,
            s.copy(),
            delta_fro=0.0,
            delta_spec=0.0,
            energies=(0.0, 0.0, 0.0),
            rows=40,
            cols=40,
            rank=40,
            rank_thresholds=(1e-3,),
        )
        assert (m.dsr_pct, m.alpha, m.delta_max, m.sv_cos) == (0.0, 0.0, 0.0, 1.0), seed
        assert m.sr_w0 == m.sr_w1 and m.w0_fro == pytest.approx(np.linalg.norm(s), rel=1e-15)


@pytest.mark.parametrize("shape", [(96, 40), (40, 96), (64, 64)])
def test_float32_matches_float64_at_rl_sized_update(shape):
    """r_Δ = 3e-4: the float32 pipeline's fractions agree with float64 to 1e-4 absolute."""
    W0 = _rand(shape, 8) / np.sqrt(shape[1])
    D = _rand(shape, 9)
    D *= 3e-4 * np.linalg.norm(W0) / np.linalg.norm(D)
    W1 = W0 + D
    ref = decompose_matrix(torch.from_numpy(W0), torch.from_numpy(W1.copy())).metrics
    W0f, W1f = torch.from_numpy(W0).float(), torch.from_numpy(W1).float()
    got = decompose_matrix(W0f, W1f.clone()).metrics
    for k in ("f_diag", "f_off", "f_null"):
        assert abs(getattr(got, k) - getattr(ref, k)) < 1e-4, k
    assert got.r_delta == pytest.approx(ref.r_delta, rel=1e-3)


def _near_degenerate_pair(seed: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """A float32 W0 (96×64) whose σ_5, σ_6 are 4.5e-9·σ₁ apart before rounding (about 1e-7 after) and an
    update planted in the exact float64 frame of that float32 W0: P = diag(x, −x) on the pair (a rotation of
    the pair's basis by 45° would turn it into off-diagonal energy) plus a small dense P elsewhere.
    Returns W0, W1 (float32) and the planted share of ‖ΔW‖² inside the pair."""
    g = np.random.default_rng(seed)
    U = np.linalg.qr(g.standard_normal((96, 64)))[0]
    V = np.linalg.qr(g.standard_normal((64, 64)))[0]
    s = np.linspace(1.0, 0.1, 64)
    s[5] = s[4] - 4.5e-9
    W0 = torch.from_numpy((U * s) @ V.T).float()
    U0, _, V0h = np.linalg.svd(W0.double().numpy(), full_matrices=False)  # the exact frame of the stored W0
    P = 1e-5 * g.standard_normal((64, 64))
    P[4:6, 4:6] = [[3e-3, 0.0], [0.0, -3e-3]]
    W1 = torch.from_numpy(W0.double().numpy() + U0 @ P @ V0h).float()
    share = float((P[4:6, 4:6] ** 2).sum() / (P**2).sum())
    return W0, W1, share


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_near_degenerate_pair_splits_as_in_float64(seed, monkeypatch):
    """float32 alone cannot tell the pair's vectors apart and moves energy between diag and off at random; the
    pair's rotation is then found from a small float64 problem (no float64 SVD of W0), and f_diag agrees with
    a float64 run on the same stored weights. f_degenerate reports the planted share of ‖ΔW‖² inside the pair."""
    import grrr_stream.geometry.frame as frame_mod

    W0, W1, share = _near_degenerate_pair(seed)
    ref = decompose_matrix(W0.double(), W1.double()).metrics
    svds, real = [], frame_mod._thin_svd
    monkeypatch.setattr(frame_mod, "_thin_svd", lambda W, driver: svds.append(W.dtype) or real(W, driver))
    got = decompose_matrix(W0.clone(), W1.clone()).metrics
    assert svds == [torch.float32]
    plain = decompose_matrix(
        W0.clone(), W1.clone(), settings=MatrixSettings(degenerate_gap=None)
    ).metrics  # float32's own frame
    print(
        f"f_diag: float64 {ref.f_diag:.8f}, float32 {got.f_diag:.8f}, float32 frame {plain.f_diag:.8f}; "
        f"f_degenerate {got.extra['f_degenerate']:.6f} (planted {share:.6f})"
    )
    assert abs(got.f_diag - ref.f_diag) < 1e-5 and abs(got.f_off - ref.f_off) < 1e-5
    assert got.extra["f_degenerate"] == pytest.approx(share, rel=1e-3)
    assert ref.extra["f_degenerate"] == pytest.approx(share, rel=1e-3)
    assert "f_degenerate" not in plain.extra


def test_degenerate_gap_stays_out_of_default_settings_hashes():
    from grrr_stream.config import DecompositionSettings, result_settings

    assert "degenerate_gap" not in result_settings(DecompositionSettings())
    assert result_settings(DecompositionSettings(degenerate_gap=1e-5))["degenerate_gap"] == 1e-5
    assert result_settings(DecompositionSettings(degenerate_gap=None))["degenerate_gap"] is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_all_finite_agrees_with_numpy_including_sums_that_overflow(dtype):
    """all_finite takes a shortcut through the sum: checked against NumPy's elementwise isfinite on NaN, ±Inf,
    both infinities (their sum is NaN), an empty tensor, and finite entries whose sum overflows the dtype."""
    big = torch.finfo(dtype).max
    cases = {"plain": torch.randn(40, 30), "empty": torch.zeros(0, 3)}
    for name, value in [("nan", float("nan")), ("inf", float("inf")), ("-inf", float("-inf"))]:
        t = torch.randn(40, 30)
        t[7, 3] = value
        cases[name] = t
    both = torch.randn(40, 30)
    both[0, 0], both[5, 5] = float("inf"), float("-inf")
    cases["both"] = both
    cases["overflowing sum"] = torch.full((40, 30), big * 0.75, dtype=torch.float64)
    for name, t in cases.items():
        t = t.to(dtype)
        expected = bool(np.isfinite(t.double().numpy()).all())
        assert all_finite(t) is expected, name
    assert all_finite(cases["overflowing sum"].to(dtype))  # the sum is Inf, every entry finite


@pytest.mark.parametrize("shape", [(700, 90), (90, 700)])
def test_gram_products_in_blocks_and_the_norm_through_them(monkeypatch, shape):
    """XᵀX v summed over several blocks of rows (a ragged last one) against float64 numpy, tall and wide; and
    ‖X‖₂ through such blocks against numpy's SVD."""
    from grrr_stream.geometry import frame as frame_module

    n = shape[1]
    monkeypatch.setattr(frame_module, "GRAM_BLOCK_BYTES", 64 * n * 8 + 4)  # 64 rows a block in float64
    rng = np.random.default_rng(4)
    A = rng.standard_normal(shape)
    v = rng.standard_normal(n)
    out = torch.empty(n, dtype=torch.float64)
    frame_module._gram_mv(torch.from_numpy(A), torch.from_numpy(v), out)
    ref = A.T @ (A @ v)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    A[:, 3] *= 4  # a spike, and noise
    exact = np.linalg.svd(A, compute_uv=False)[0]
    for dtype, rtol in [(torch.float64, 1e-11), (torch.float32, 2e-6)]:
        est = spectral_norm(torch.from_numpy(A).to(dtype), exact_below=0)
        assert abs(est - exact) / exact < rtol
