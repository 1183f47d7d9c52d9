"""Shared fixtures: tiny synthetic checkpoints written once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Keep the two-core CI machine responsive and results reproducible.
os.environ.setdefault("OMP_NUM_THREADS", "2")
# The sweep forecast's calibration cache: not the user's home, and kept across sessions (measured once)
os.environ.setdefault("GRRR_STREAM_CACHE", str(Path(__import__("tempfile").gettempdir()) / "grrr_stream_test_cache"))

from grrr_stream.fixtures.synthetic import TINY, ModelShape, Update, make_transition


@pytest.fixture(scope="session")
def planted_f64(tmp_path_factory):
    """float64 Qwen2-layout pair with planted shares (0.2, 0.5, 0.3) at r_Δ = 1e-2, several shards."""
    root = tmp_path_factory.mktemp("planted_f64")
    return make_transition(
        root,
        TINY,
        family="qwen2",
        dtype="float64",
        update=Update(r_delta=1e-2, plant=(0.2, 0.5, 0.3)),
        max_shard_bytes=60_000,
    )


@pytest.fixture(scope="session")
def planted_f32_small(tmp_path_factory):
    """float32 Llama-layout pair with an RL-sized update (r_Δ = 3e-4) and planted shares (0.1, 0.6, 0.3)."""
    root = tmp_path_factory.mktemp("planted_f32")
    shape = ModelShape(hidden=96, intermediate=256, layers=2, heads=6, kv_heads=2)
    return make_transition(
        root,
        shape,
        family="llama",
        dtype="float32",
        update=Update(r_delta=3e-4, plant=(0.1, 0.6, 0.3)),
        max_shard_bytes=200_000,
    )


@pytest.fixture(scope="session")
def bf16_pair(tmp_path_factory):
    """bf16 Qwen3-layout pair with an isotropic update, as real checkpoints are stored."""
    root = tmp_path_factory.mktemp("bf16")
    return make_transition(
        root, TINY, family="qwen3", dtype="bfloat16", update=Update(r_delta=5e-2), max_shard_bytes=40_000
    )


@pytest.fixture(scope="session")
def tiny_chain(tmp_path_factory):
    """The quick tiny trained chain (base, sft, rl, sibling + its benchmark), built once (485 s at load 10)."""
    import time

    import torch

    from grrr_stream.fixtures.tinychain import build_chain

    # One thread, as build_chain uses: on a shared 2-core machine two OpenMP threads
    # that find only one free core spin-wait and run ~30x slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("tinychain")
    t0 = time.time()
    try:
        paths = build_chain(out, seed=0, quick=True, progress=False)
    finally:
        torch.set_num_threads(threads)
    print(f"\nquick chain built in {time.time() - t0:.1f} s")
    return out, paths


def pytest_collection_modifyitems(config, items):
    """Tests marked ``torch_threads`` go first (stable order otherwise): once vLLM's CPU backend has run in this
    process (tests/evaluation/test_evaluate_vllm.py), torch.set_num_threads no longer takes effect, and the tests
    of the lanes' one-thread paths (tests/geometry/test_lapack.py: SciPy's LAPACK is used only on one torch
    thread) would meet a process that no user's decomposition runs in."""
    items.sort(key=lambda item: item.get_closest_marker("torch_threads") is None)
