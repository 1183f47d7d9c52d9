"""Singular values through SciPy's LAPACK (grrr_stream.geometry.lapack) against float64 references, the input
left intact, the cases it hands back to torch, and the GIL released while it runs (the reason it exists)."""

import threading
import time

import numpy as np
import pytest
import torch

from grrr_stream.decompose.streaming import torch_threads
from grrr_stream.geometry import lapack
from grrr_stream.geometry.frame import compute_frame, svdvals

pytestmark = pytest.mark.torch_threads  # tests/conftest.py runs these before any vLLM test


@pytest.fixture
def one_thread(monkeypatch):
    """One torch thread, and the SciPy path taken whatever the CPU (on an Intel CPU with MKL it is not, by
    default: lapack.preferred)."""
    monkeypatch.setenv(lapack.ENV, "scipy")
    with torch_threads(1):
        yield


@pytest.mark.parametrize("shape", [(300, 120), (120, 300), (257, 257), (1, 40)])
@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 2e-6), (torch.float64, 1e-13)])
def test_values_match_float64_and_leave_the_input_alone(shape, dtype, rtol, one_thread):
    g = np.random.default_rng(sum(shape))
    # a spread of scales (σ from 1 down to 1e-4), as in trained weights
    A = (
        g.standard_normal(shape) @ np.diag(np.logspace(0, -4, shape[1]))
        if shape[1] <= shape[0]
        else np.diag(np.logspace(0, -4, shape[0])) @ g.standard_normal(shape)
    )
    ref = np.linalg.svd(A, compute_uv=False)  # float64 LAPACK through NumPy, a different binding
    X = torch.from_numpy(A).to(dtype)
    before = X.clone()
    s = lapack.svdvals(X)
    assert s is not None and s.dtype == dtype and s.shape == (min(shape),)
    assert np.all(np.diff(s.numpy()) <= 0)
    assert np.max(np.abs(s.double().numpy() - ref)) <= rtol * ref[0] * 10
    assert torch.equal(X, before)
    # a transposed view (not contiguous) gives the same values
    assert torch.equal(lapack.svdvals(X.mT.contiguous().mT), s)


@pytest.mark.parametrize("shape", [(700, 520), (520, 520), (1100, 600)])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 5e-6), (torch.float64, 1e-13)])
def test_vectors_match_float64_and_leave_the_input_alone(shape, dtype, tol, one_thread):
    """U, S, Vh against NumPy's float64 SVD (a different binding): values, the rank-one projectors u_i v_iᵀ
    (sign-free; σ well separated here), orthonormal columns, X rebuilt; the frame built from them too."""
    g = np.random.default_rng(shape[0])
    k = min(shape)
    sig = np.linspace(2.0, 1.0, k)  # gaps of about 1/k·σ₁: every vector well defined
    Q1, _ = np.linalg.qr(g.standard_normal((shape[0], k)))
    Q2, _ = np.linalg.qr(g.standard_normal((shape[1], k)))
    A = (Q1 * sig) @ Q2.T
    Ur, Sr, Vhr = np.linalg.svd(A, full_matrices=False)
    X = torch.from_numpy(A).to(dtype)
    before = X.clone()
    out = lapack.svd(X)
    assert out is not None
    U, S, Vh = (t.double().numpy() for t in out)
    assert out[0].dtype == dtype and out[0].is_contiguous() and out[2].is_contiguous()
    assert U.shape == (shape[0], k) and S.shape == (k,) and Vh.shape == (k, shape[1])
    assert np.max(np.abs(S - Sr)) <= tol * Sr[0] * 10
    # each singular pair up to its joint sign, through the sign-free u_i (v_i·x) on a few columns
    for i in (0, k // 2, k - 1):
        assert np.max(np.abs(np.outer(U[:, i], Vh[i, :8]) - np.outer(Ur[:, i], Vhr[i, :8]))) <= 1e3 * tol
    assert np.max(np.abs(U.T @ U - np.eye(k))) <= 100 * tol
    assert np.max(np.abs(Vh @ Vh.T - np.eye(k))) <= 100 * tol
    assert np.max(np.abs((U * S) @ Vh - A)) <= 100 * tol * Sr[0]
    assert torch.equal(X, before)


def test_svd_is_left_to_torch_below_its_threshold_and_on_a_team_of_threads(one_thread):
    assert lapack.svd(torch.randn(600, lapack.SVD_MIN_SIDE - 1)) is None  # MKL is as fast there
    assert lapack.svd(torch.randn(600, lapack.SVD_MIN_SIDE)) is not None
    X = torch.randn(600, 520)
    X[3, 4] = float("inf")
    assert lapack.svd(X) is None
    with torch_threads(2):
        assert lapack.svd(torch.randn(600, 520)) is None


def test_frames_from_either_lapack_agree(one_thread):
    """compute_frame through SciPy's LAPACK (one thread) and through torch's (two) gives the same frame within
    float32 rounding: canonical signs make the vectors comparable, wide and tall inputs alike."""
    g = torch.Generator().manual_seed(3)
    for shape in [(520, 800), (800, 520)]:
        Q1, _ = torch.linalg.qr(torch.randn(shape[0], 520, generator=g, dtype=torch.float64))
        Q2, _ = torch.linalg.qr(torch.randn(shape[1], 520, generator=g, dtype=torch.float64))
        W = ((Q1 * torch.linspace(2, 1, 520, dtype=torch.float64)) @ Q2.T).float()
        a = compute_frame(W, degenerate_gap=None)
        with torch_threads(2):
            b = compute_frame(W, degenerate_gap=None)
        assert a.U.shape == b.U.shape == (shape[0], 520) and a.V.shape == b.V.shape == (shape[1], 520)
        assert torch.allclose(a.S, b.S, rtol=0, atol=5e-6)
        assert (a.U - b.U).abs().max() < 5e-3 and (a.V - b.V).abs().max() < 5e-3


def test_cases_left_to_torch(one_thread):
    assert lapack.svdvals(torch.zeros(0, 5)) is None
    assert lapack.svdvals(torch.ones(4, 3, dtype=torch.float16)) is None
    X = torch.randn(40, 30)
    X[3, 4] = float("nan")
    assert lapack.svdvals(X) is None  # LAPACK refuses it; torch's own behaviour applies
    with torch_threads(2):
        assert lapack.svdvals(torch.randn(40, 30)) is None  # a team of torch threads: torch's own LAPACK
    # frame.svdvals gives the same values either way (tall orientation, within float32 rounding)
    Y = torch.randn(90, 200, dtype=torch.float64)
    assert torch.allclose(svdvals(Y), torch.linalg.svdvals(Y), rtol=1e-12, atol=0)


def test_the_gil_is_released_during_the_call(one_thread):
    """While one thread is inside the LAPACK call, another keeps running Python: no pause between its loop
    iterations lasts half the call (scipy.linalg.svd, which holds the GIL, left a 125 ms pause in a 138 ms call
    on this machine; this binding's longest was 0.3 ms)."""
    X = torch.randn(1200, 1200)
    span: list[float] = []

    def work():
        with torch_threads(1):
            span.append(time.perf_counter())
            assert lapack.svdvals(X) is not None
            span.append(time.perf_counter())

    t = threading.Thread(target=work)
    stamps = []
    t.start()
    while t.is_alive():
        stamps.append(time.perf_counter())
    t.join()
    start, end = span
    inside = [s for s in stamps if start <= s <= end]
    assert end - start > 0.02  # long enough for the check to mean something
    assert len(inside) > 1 and max(np.diff(inside)) < 0.5 * (end - start)


def test_the_lanes_hold_scipys_blas_to_their_thread_count():
    """In a fresh process (SciPy's LAPACK not loaded yet), torch_threads(1) around the pipeline holds every BLAS
    that NumPy and SciPy load to one thread: an OpenBLAS left at its default team made each lane's call spin up
    threads of its own (the lanes' svdvals took 2x the wall time of torch's)."""
    import subprocess
    import sys

    code = (
        "from threadpoolctl import threadpool_info\n"
        "from grrr_stream.decompose.streaming import torch_threads\n"
        "with torch_threads(1):\n"
        "    blas = [(i['filepath'], i['num_threads']) for i in threadpool_info() if i['user_api'] == 'blas']\n"
        "print(blas)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    blas = eval(out)
    assert any("scipy" in path for path, _ in blas) and all(n == 1 for _, n in blas), blas


def test_the_path_is_chosen_by_the_cpus_maker_unless_forced(monkeypatch, tmp_path):
    """OpenBLAS unless torch's LAPACK is MKL on an Intel CPU (where MKL was the faster); the environment
    variable overrides the rule either way, and a forced torch leaves every matrix to torch."""
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\n")
    assert lapack.cpu_vendor(str(info)) == "AuthenticAMD"
    assert lapack.cpu_vendor(str(tmp_path / "absent")) == ""
    monkeypatch.delenv(lapack.ENV, raising=False)
    lapack._auto_choice.cache_clear()
    for vendor, mkl, expected in [
        ("GenuineIntel", True, False),
        ("AuthenticAMD", True, True),
        ("GenuineIntel", False, True),
        ("", True, True),
    ]:
        monkeypatch.setattr(lapack, "cpu_vendor", lambda cpuinfo="", v=vendor: v)
        monkeypatch.setattr(torch.backends.mkl, "is_available", lambda m=mkl: m)
        lapack._auto_choice.cache_clear()
        assert lapack.preferred() is expected, (vendor, mkl)
        for forced in ("scipy", "torch"):
            monkeypatch.setenv(lapack.ENV, forced)
            assert lapack.preferred() is (forced == "scipy")
        monkeypatch.delenv(lapack.ENV)
    lapack._auto_choice.cache_clear()
    monkeypatch.undo()
    monkeypatch.setenv(lapack.ENV, "torch")
    with torch_threads(1):
        assert lapack.svdvals(torch.randn(600, 520)) is None and lapack.svd(torch.randn(600, 520)) is None
