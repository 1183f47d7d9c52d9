"""The CPU-side parts of tools/gpu_check.py (the GPU parts run where a GPU is)."""

from __future__ import annotations

import math
import subprocess

import pytest
import torch
from helpers.common import ROOT, no_track_config, tool

from grrr_stream.decompose.run import run_transition


@pytest.fixture(scope="module")
def gc():
    return tool("gpu_check")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the check would run")
def test_fails_loudly_without_a_gpu():
    p = subprocess.run(
        ["bash", str(ROOT / "tools" / "gpu_check.sh"), "--layers", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert p.returncode == 2
    assert "FAILED: torch sees no CUDA GPU" in p.stderr and "Traceback" not in p.stderr


def test_reference_recovers_planted_shares(gc, planted_f64):
    from grrr_stream.checkpoints.reader import Checkpoint

    base, post = planted_f64  # shares (0.2, 0.5, 0.3) planted in W0's own frame
    b, p = Checkpoint.open(base), Checkpoint.open(post)
    name = next(n for n in b.tensors if n.endswith("mlp.up_proj.weight"))
    ref = gc.float64_reference(b.read(name).numpy(), p.read(name).numpy())
    assert (ref["f_diag"], ref["f_off"], ref["f_null"]) == pytest.approx((0.2, 0.5, 0.3), abs=1e-6)


def test_store_against_reference(gc, planted_f32_small, tmp_path):
    base, post = planted_f32_small
    store = tmp_path / "s"
    res = run_transition(no_track_config(base=str(base), post=str(post), store=store))
    worst, where = gc.max_fraction_error(store, [r["name"] for r in res.rows][:7])
    assert worst < 1e-4 and where["metric"] in ("f_diag", "f_off", "f_null")


def test_driver_timing_and_choice(gc):
    rows = gc.time_drivers({"small": (96, 40)}, torch.device("cpu"), drivers=(None,))
    (r,) = rows
    assert r["driver"] == "default" and r["seconds"] > 0 and r["recon_err"] < 1e-5 and r["orth_err"] < 1e-4
    fake = [
        {"shape": "a", "driver": "gesvd", "seconds": 3.0, "recon_err": 1e-7, "orth_err": 1e-6},
        {"shape": "b", "driver": "gesvd", "seconds": 9.0, "recon_err": 1e-7, "orth_err": 1e-6},
        {"shape": "a", "driver": "gesvdj", "seconds": 1.0, "recon_err": 1e-7, "orth_err": 1e-6},
        {"shape": "b", "driver": "gesvdj", "seconds": 2.0, "recon_err": 1e-7, "orth_err": 1e-6},
        {"shape": "a", "driver": "gesvda", "seconds": 0.5, "recon_err": 1e-3, "orth_err": 1e-6},  # inaccurate
        {"shape": "b", "driver": "gesvda", "seconds": 0.5, "recon_err": 1e-7, "orth_err": 1e-6},
        {"shape": "a", "driver": "default", "seconds": math.nan, "recon_err": math.nan, "orth_err": math.nan},
        {"shape": "b", "driver": "default", "seconds": 0.1, "recon_err": 1e-7, "orth_err": 1e-6},
    ]
    assert gc.pick_driver(fake, 1e-4) == "gesvdj"
    assert gc.pick_driver(fake, 1e-2) == "gesvda"
    assert gc.pick_driver(fake[4:5], 1e-4) is None


def test_table_is_aligned(gc):
    text = gc.format_table([("a", "1"), ("longer key", "2")])
    assert text.splitlines() == ["a           1", "longer key  2"]


def test_svd_driver_applies_to_cuda_tensors_only():
    """`svd_driver` picks a cuSOLVER routine; CPU LAPACK has one path and torch refuses a driver there."""
    from grrr_stream.geometry.frame import _driver, compute_frame

    A = torch.randn(12, 5, dtype=torch.float64)
    assert _driver(A, "gesvdj") == {} and _driver(A, None) == {}
    f = compute_frame(A, driver="gesvdj")
    torch.testing.assert_close((f.U * f.S) @ f.V.T, A)
