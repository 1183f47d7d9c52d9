"""Singular values and thin SVDs through SciPy's LAPACK (OpenBLAS in SciPy's wheels), with the GIL released.

Why not torch's: on the decomposition's CPU path the matrices run in lanes, one torch thread each
(grrr_stream.decompose.streaming), and there torch's ``svdvals`` (MKL's xGESDD without vectors) took 1.6-1.8x
the time of OpenBLAS's on square shapes and 1.2x on the MLP's (one thread on this 2-core AMD EPYC: 576²
29 → 18 ms, 1536 × 576 52 → 43 ms, 1536² 504 → 283 ms; tools/bench_decompose.py's svdvals_w1). Why not
``scipy.linalg.svd``: it holds the GIL for the whole call, so a second lane could not run its own Python
between torch calls (two threads took as long as one after the other). ctypes releases the GIL around a
foreign call, so the routine is taken from ``scipy.linalg.cython_lapack`` (SciPy's public Cython API, the same
binary on every platform) and called through ctypes.

Used only where it helps: a CPU float32 or float64 matrix computed on one torch thread (the lanes; their
OpenBLAS is held to one thread too, :func:`blas_threads`), on a CPU where OpenBLAS is the faster (:func:`preferred`).
Elsewhere, or if SciPy's LAPACK cannot be loaded, or if the routine reports any problem (a non-finite entry, no
convergence), :func:`svdvals` and :func:`svd` return None and the caller uses torch's, which then raises or returns
what it always did.
"""

from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager
from functools import lru_cache
from typing import Iterator, Optional

import numpy as np
import torch

_INT = ctypes.POINTER(ctypes.c_int)
# GRRR_STREAM_CPU_LAPACK=scipy or =torch overrides the choice of :func:`preferred` (auto: by the CPU's maker)
ENV = "GRRR_STREAM_CPU_LAPACK"
_ROUTINES = {torch.float32: ("sgesdd", np.float32), torch.float64: ("dgesdd", np.float64)}


@lru_cache(maxsize=None)
def _gesdd(dtype: torch.dtype):
    """xGESDD as a ctypes function (Fortran calling convention: every argument by reference), or None."""
    try:
        from scipy.linalg import cython_lapack

        capsule = cython_lapack.__pyx_capi__[_ROUTINES[dtype][0]]
        api = ctypes.pythonapi
        api.PyCapsule_GetName.restype, api.PyCapsule_GetName.argtypes = ctypes.c_char_p, [ctypes.py_object]
        api.PyCapsule_GetPointer.restype = ctypes.c_void_p
        api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
        address = api.PyCapsule_GetPointer(capsule, api.PyCapsule_GetName(capsule))
    except (ImportError, KeyError, AttributeError, ValueError):
        return None
    # jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork, iwork, info
    proto = ctypes.CFUNCTYPE(
        None,
        ctypes.c_char_p,
        _INT,
        _INT,
        ctypes.c_void_p,
        _INT,
        ctypes.c_void_p,
        ctypes.c_void_p,
        _INT,
        ctypes.c_void_p,
        _INT,
        ctypes.c_void_p,
        _INT,
        ctypes.c_void_p,
        _INT,
    )
    return proto(address)


def _ref(value: int):
    return ctypes.byref(ctypes.c_int(value))


def svdvals(X: torch.Tensor) -> Optional[torch.Tensor]:
    """σ(X) in descending order as a tensor of X's dtype, or None where this path does not apply (see the
    module's docstring). X is left as it is (LAPACK works on a copy)."""
    out = _gesdd_call(X, vectors=False)
    return None if out is None else torch.from_numpy(out[0])


SVD_MIN_SIDE = 512  # below, torch's MKL is as fast or faster


def svd(X: torch.Tensor) -> Optional[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Thin (U, S, Vh) of X, as ``torch.linalg.svd(X, full_matrices=False)`` gives them (up to rounding and the
    vectors' signs), or None where this path does not apply (see the module's docstring) or X's short side is
    below SVD_MIN_SIDE. X is left as it is.

    xGESDD with jobz 'S'. One thread, on this 2-core AMD EPYC (Zen 5), against torch's MKL: 576² 44 → 37 ms,
    1536 × 576 85 → 82 ms, 1536² 780 → 590 ms, 8960 × 1536 2.41 → 2.22 s; 1536 × 256 16 → 18 ms, hence the
    threshold. (Handing LAPACK X's row-major bytes as the column-major Xᵀ saves the transposed copies but
    took 2.97 s on 8960 × 1536: LAPACK's wide path is slower.)"""
    if min(X.shape, default=0) < SVD_MIN_SIDE:
        return None
    out = _gesdd_call(X, vectors=True)
    if out is None:
        return None
    s, u, vh = out  # U and Vᵀ column-major: the row-major bytes of Uᵀ and V
    return torch.from_numpy(u).mT.contiguous(), torch.from_numpy(s), torch.from_numpy(vh).mT.contiguous()


def _gesdd_call(X: torch.Tensor, *, vectors: bool) -> Optional[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """xGESDD of X (jobz 'S' with ``vectors``, else 'N'): (σ, U's column-major buffer (k, m), Vᵀ's (n, k)), the
    buffers empty without vectors; None where the path does not apply or LAPACK reports a problem."""
    if not _applies(X):
        return None
    fn = _gesdd(X.dtype)
    if fn is None:
        return None
    m, n = X.shape
    k = min(m, n)
    np_dtype = _ROUTINES[X.dtype][1]
    # column-major m×n, as LAPACK wants it: the row-major bytes of Xᵀ (always a copy, since xGESDD overwrites it)
    a = torch.empty((n, m), dtype=X.dtype).copy_(X.mT).numpy()
    s = np.empty(k, np_dtype)
    # U (m × k) and Vᵀ (k × n), column-major; not referenced for jobz 'N'
    u, vh = (np.empty((k, m), np_dtype), np.empty((n, k), np_dtype)) if vectors else (np.empty(1, np_dtype),) * 2
    ldu, ldvt = (max(1, m), max(1, k)) if vectors else (1, 1)
    iwork = np.empty(8 * k, np.int32)
    info = ctypes.c_int(0)

    def call(work: np.ndarray, lwork: int) -> None:
        fn(
            b"S" if vectors else b"N",
            _ref(m),
            _ref(n),
            a.ctypes.data,
            _ref(max(1, m)),
            s.ctypes.data,
            u.ctypes.data,
            _ref(ldu),
            vh.ctypes.data,
            _ref(ldvt),
            work.ctypes.data,
            _ref(lwork),
            iwork.ctypes.data,
            ctypes.byref(info),
        )

    query = np.empty(1, np_dtype)
    call(query, -1)  # workspace query: the optimal lwork comes back in work[0]
    if info.value != 0:
        return None
    lwork = max(1, int(query[0]))
    call(np.empty(lwork, np_dtype), lwork)
    if info.value != 0:
        return None
    return s, u, vh


def _applies(X: torch.Tensor) -> bool:
    return (
        X.device.type == "cpu"
        and X.dtype in _ROUTINES
        and X.ndim == 2
        and min(X.shape) > 0
        and torch.get_num_threads() == 1
        and preferred()
    )


def preferred() -> bool:
    """Whether this path is taken on this machine: SciPy's OpenBLAS, unless torch's LAPACK is MKL on an Intel CPU.

    MKL picks its fastest kernels on Intel's CPUs. One thread, float32, torch's MKL against SciPy's OpenBLAS:
    - on a 2-core AMD EPYC (Zen 5) OpenBLAS was 1.1-1.8x faster (σ of 1536² 504 → 283 ms, thin SVD 780 → 590 ms);
    - on a 2-core Intel Xeon with AVX-512 (Sapphire Rapids family) MKL was 1.05-1.1x faster on the large shapes
      (thin SVD of 8960 × 1536 2.05 against 2.25 s, 1536² 0.82 against 0.89 s; σ of 8960 × 1536 0.99 against 1.07 s),
      and the two were level on the small ones.
    ``GRRR_STREAM_CPU_LAPACK`` = ``scipy`` or ``torch`` overrides the rule (for benchmarks and odd machines)."""
    forced = os.environ.get(ENV, "auto").strip().lower()
    if forced in ("scipy", "torch"):
        return forced == "scipy"
    return _auto_choice()


@lru_cache(maxsize=None)
def _auto_choice() -> bool:
    return not (torch.backends.mkl.is_available() and cpu_vendor() == "GenuineIntel")


def cpu_vendor(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's vendor_id (GenuineIntel, AuthenticAMD, ...), or "" where the system does not say (not Linux,
    not x86)."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


@contextmanager
def blas_threads(n: int) -> Iterator[None]:
    """NumPy's and SciPy's BLAS held to ``n`` threads for the block (OpenBLAS's count is per library, not per
    thread: with lanes, each lane's LAPACK call must run on its own thread, not spin up a team of its own)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # a dependency of the package; without it the calls are still right, only slower
        yield
        return
    _gesdd(torch.float32)  # loads SciPy's LAPACK now: threadpoolctl sets the libraries loaded when it is called
    with threadpool_limits(limits=n, user_api="blas"):
        yield
