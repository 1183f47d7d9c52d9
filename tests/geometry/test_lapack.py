"""Singular values through SciPy's LAPACK (grrr_stream.geometry.lapack) against float64 references, the input
left intact, the cases it hands back to torch, and the GIL released while it runs (the reason it exists)."""

import threading
import time

import numpy as np
import pytest
import torch

from grrr_stream.decompose.streaming import torch_threads
from grrr_stream.geometry import lapack
from grrr_stream.geometry.frame import svdvals


@pytest.fixture
def one_thread():
    with torch_threads(1):
        yield


@pytest.mark.parametrize("shape", [(300, 120), (120, 300), (257, 257), (1, 40)])
@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 2e-6), (torch.float64, 1e-13)])
def test_values_match_float64_and_leave_the_input_alone(shape, dtype, rtol, one_thread):
    g = np.random.default_rng(sum(shape))
    # a spread of scales (σ from 1 down to 1e-4), as in trained weights
    A = g.standard_normal(shape) @ np.diag(np.logspace(0, -4, shape[1])) if shape[1] <= shape[0] else \
        np.diag(np.logspace(0, -4, shape[0])) @ g.standard_normal(shape)
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

    code = ("from threadpoolctl import threadpool_info\n"
            "from grrr_stream.decompose.streaming import torch_threads\n"
            "with torch_threads(1):\n"
            "    blas = [(i['filepath'], i['num_threads']) for i in threadpool_info() if i['user_api'] == 'blas']\n"
            "print(blas)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    blas = eval(out)
    assert any("scipy" in path for path, _ in blas) and all(n == 1 for _, n in blas), blas
