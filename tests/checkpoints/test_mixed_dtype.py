"""Pairs whose checkpoints differ in dtype (a float32 RL checkpoint over a bf16 parent, float16 vs
bf16), and update sparsity as values: the decomposition against a float64 numpy reference, the
sparsity against planted counts and numpy's own float comparison and nextafter, and the transition's
entry-pooled figure against a hand count."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr
from helpers.common import no_track_config
from safetensors.torch import load_file, save_file

from grrr_stream.decompose.run import run_transition, summarize
from grrr_stream.dtypes import common_dtype
from grrr_stream.fixtures.synthetic import ModelShape, write_model
from grrr_stream.geometry.analyses.sparsity import pooled_sparsity, update_sparsity

BF16, F16, F32, F64 = torch.bfloat16, torch.float16, torch.float32, torch.float64
SHAPE = ModelShape(hidden=64, intermediate=160, layers=1, heads=4, kv_heads=2)


# ---------------------------------------------------------------------------
# the common dtype


@pytest.mark.parametrize(
    "a, b, want",
    [
        (BF16, F32, F32),
        (F32, BF16, F32),
        (F16, BF16, F32),
        (BF16, F16, F32),
        (F16, F32, F32),
        (BF16, BF16, BF16),
        (F16, F16, F16),
        (F64, BF16, F64),
        (F32, F64, F64),
        (torch.float8_e4m3fn, BF16, BF16),
        (torch.float8_e5m2, F16, F16),
        (torch.float8_e4m3fn, torch.float8_e5m2, F16),
    ],
)
def test_common_dtype_is_the_narrowest_that_holds_both(a, b, want):
    assert common_dtype(a, b) == want


def _all_finite(dtype: torch.dtype) -> torch.Tensor:
    """Every finite value of a 16- or 8-bit float, by enumerating its bit patterns."""
    bits = torch.finfo(dtype).bits
    ints = {8: torch.int8, 16: torch.int16}[bits]
    v = torch.arange(-(2 ** (bits - 1)), 2 ** (bits - 1), dtype=torch.int32).to(ints).view(dtype)
    return v[torch.isfinite(v.float())]


SMALL = (torch.float8_e4m3fn, torch.float8_e5m2, F16, BF16)


@pytest.mark.parametrize("a", SMALL)
@pytest.mark.parametrize("b", SMALL)
def test_common_dtype_matches_a_brute_force_search(a, b):
    """Independently of the rule (precision, range, subnormals): the first dtype of (a, b, float16,
    bfloat16, float32) — narrower first, finer first among equals — through which EVERY finite value of
    a and of b round-trips exactly. float16 vs bfloat16 gives float32: neither holds the other."""
    values = torch.cat([_all_finite(a).float(), _all_finite(b).float()])
    order = sorted({a, b, F16, BF16, F32}, key=lambda d: (torch.finfo(d).bits, torch.finfo(d).eps))
    want = next(d for d in order if bool((values.to(d).float() == values).all()))
    assert common_dtype(a, b) == want


# ---------------------------------------------------------------------------
# sparsity on planted cases


def _numpy_reference(w0: torch.Tensor, w1: torch.Tensor) -> dict:
    """numpy's own comparisons: values equal in float64 (+0 == −0), bit patterns in float32 (the common
    dtype of these pairs), and within one float32 ulp by nextafter."""
    a, b = w0.double().numpy().ravel(), w1.double().numpy().ravel()
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    assert np.array_equal(a32.astype(np.float64), a) and np.array_equal(b32.astype(np.float64), b)
    near = (
        (b32 == a32) | (b32 == np.nextafter(a32, np.float32(np.inf))) | (b32 == np.nextafter(a32, np.float32(-np.inf)))
    )
    return {
        "frac_unchanged": float(np.mean(a == b)),
        "frac_within_ulp": float(np.mean(near)),
        "frac_bitwise_unchanged": float(np.mean(a32.view(np.int32) == b32.view(np.int32))),
    }


def _planted_bf16_to_f32(n: int = 4096, seed: int = 0):
    """bf16 W0 and float32 W1 = W0 upcast, then: 300 entries one float32 ulp up, 500 moved far (by
    1e-2·|w|, beyond any ulp), 40 entries +0 → −0 and 10 entries −0 → +0 (values unchanged)."""
    g = torch.Generator().manual_seed(seed)
    w0 = torch.randn(n, generator=g).to(BF16)
    idx = torch.randperm(n, generator=g)
    zeros, flips = idx[:50], idx[:40]
    w0[zeros] = 0.0
    w0[idx[40:50]] = -0.0
    w1 = w0.float()
    w1[flips] = -0.0
    w1[idx[40:50]] = 0.0
    w1[idx[50:350]] = torch.from_numpy(np.nextafter(w1[idx[50:350]].numpy(), np.float32(np.inf)))
    w1[idx[350:850]] *= 1.01
    return w0.reshape(64, -1), w1.reshape(64, -1)


def test_sparsity_of_a_bf16_base_and_float32_post_against_planted_counts():
    w0, w1 = _planted_bf16_to_f32()
    n = w0.numel()
    got = update_sparsity(w0, w1)
    assert got["frac_unchanged"] == (n - 300 - 500) / n  # ±0 flips are unchanged values
    assert got["frac_bitwise_unchanged"] == (n - 300 - 500 - 50) / n
    assert got["frac_within_ulp"] == (n - 500) / n  # one float32 ulp
    assert got["sparsity_compare"] == "float32 (bfloat16→float32)"
    assert {k: got[k] for k in _numpy_reference(w0, w1)} == _numpy_reference(w0, w1)


def test_sparsity_of_a_float32_base_and_bf16_post():
    """The other direction: W0 float32 of which half are bf16 values; W1 = W0 rounded to bf16."""
    g = torch.Generator().manual_seed(1)
    w0 = torch.randn(64, 80, generator=g)
    w0[:32] = w0[:32].to(BF16).float()  # the first half already bf16 values: unchanged
    w0[0, :8] = torch.tensor([0.0, -0.0] * 4)  # zeros of either sign: bf16 keeps them
    w1 = w0.to(BF16)
    got = update_sparsity(w0, w1)
    ref = _numpy_reference(w0, w1)
    assert got["frac_unchanged"] == ref["frac_unchanged"] == pytest.approx(0.5, abs=0.01)
    assert got["frac_within_ulp"] == ref["frac_within_ulp"]
    assert got["frac_bitwise_unchanged"] == ref["frac_bitwise_unchanged"] == got["frac_unchanged"]
    assert got["sparsity_compare"] == "float32 (float32→bfloat16)"


def test_sparsity_of_a_float16_base_and_bf16_post_compares_in_float32():
    """float16 vs bf16: compared in float32. Values both hold (small integers, powers of two) count as
    unchanged; a float16 value bf16 cannot hold never does."""
    w0 = torch.tensor([1.0, 2.0, -3.0, 0.5, 0.0, -0.0, 1.0 + 2**-10, 1000.0], dtype=F16)  # 1+2^-10: float16 only
    w1 = torch.tensor([1.0, 2.0, -3.0, 0.5, -0.0, 0.0, 1.0, 1000.0], dtype=BF16)
    got = update_sparsity(w0, w1)
    assert got["frac_unchanged"] == 7 / 8 and got["frac_bitwise_unchanged"] == 5 / 8
    assert got["frac_within_ulp"] == 7 / 8  # 1 + 2^-10 vs 1 is 8192 float32 ulps apart
    assert got["sparsity_compare"] == "float32 (float16→bfloat16)"
    assert {k: got[k] for k in _numpy_reference(w0, w1)} == _numpy_reference(w0, w1)


@pytest.mark.parametrize("dtype", [BF16, F16, torch.float8_e4m3fn])
def test_sparsity_of_narrow_pairs_against_a_rank_of_every_value(dtype):
    """Same-dtype pairs rich in the hard cases (±0, ±smallest subnormal, one step across zero, the largest
    values, random moves of a few steps): the counts against an independent reference that enumerates every
    finite value of the dtype, sorts them (±0 one value) and counts steps as differences of rank."""
    values = _all_finite(dtype)  # every finite bit pattern, as values of the dtype
    v64 = values.double().numpy()
    ladder = np.unique(v64)  # ascending, +0 and −0 merged (np.unique treats them as one)
    rank = {float(v): i for i, v in enumerate(ladder)}
    g = np.random.default_rng(7)
    smallest = v64[v64 > 0].min()
    pool = np.concatenate([v64, [0.0, -0.0, smallest, -smallest] * 4])  # exact values of the dtype
    n = 6000
    a = pool[g.integers(0, pool.size, n)]
    # b: a step or two from a along the ladder, random for a quarter, a's zero of the other sign for some
    moved = np.clip(np.array([rank[float(v)] for v in a]) + g.integers(-2, 3, n), 0, ladder.size - 1)
    b = ladder[moved]
    b[: n // 4] = pool[g.integers(0, pool.size, n // 4)]
    flip = (a == 0) & (g.random(n) < 0.5)
    b[flip] = -a[flip]  # ±0 → ∓0: an equal value, another pattern
    x, y = (torch.from_numpy(v).to(dtype) for v in (a, b))
    assert np.array_equal(x.double().numpy(), a) and np.array_equal(y.double().numpy(), b)
    assert np.array_equal(np.signbit(x.double().numpy()), np.signbit(a))
    d = np.array([rank[float(u)] - rank[float(v)] for u, v in zip(a, b)])
    bits = torch.finfo(dtype).bits
    ints = {8: torch.int8, 16: torch.int16}[bits]
    got = update_sparsity(x.reshape(60, -1), y.reshape(60, -1))
    assert got["frac_unchanged"] == np.mean(d == 0) == np.mean(a == b)
    assert got["frac_within_ulp"] == np.mean(np.abs(d) <= 1)
    assert got["frac_bitwise_unchanged"] == float((x.view(ints) == y.view(ints)).double().mean())
    assert 0 < np.mean(d == 0) < np.mean(np.abs(d) <= 1) < 1  # each count is tested, not only the trivial ones


def test_sparsity_of_a_same_dtype_pair_compares_values():
    """float32 pair: +0 → −0 is unchanged as a value (sparsity_in_rl), changed bitwise; within one ulp
    against numpy's nextafter, across zero too (+0 → the smallest negative subnormal is one step)."""
    g = torch.Generator().manual_seed(2)
    w0 = torch.randn(4000, generator=g)
    w0[:100] = 0.0
    w1 = w0.clone()
    w1[:60] = -0.0
    w1[60:70] = -torch.finfo(F32).smallest_normal * torch.finfo(F32).eps  # one step below ±0
    w1[100:400] = torch.from_numpy(np.nextafter(w0[100:400].numpy(), np.float32(-np.inf)))
    w1[400:900] += 1.0
    got = update_sparsity(w0, w1)
    assert got["frac_unchanged"] == (4000 - 10 - 300 - 500) / 4000
    assert got["frac_bitwise_unchanged"] == (4000 - 60 - 10 - 300 - 500) / 4000
    assert got["frac_within_ulp"] == (4000 - 500) / 4000
    assert got["sparsity_compare"] == "float32"
    assert {k: got[k] for k in _numpy_reference(w0, w1)} == _numpy_reference(w0, w1)


# ---------------------------------------------------------------------------
# the transition's figure: pooled over entries


def test_transition_sparsity_is_pooled_over_entries():
    """Two matrices by hand: 190 of 200 entries unchanged (0.95) and 60 of 100 (0.6): the pooled
    figure is 250/300 = 0.8333…, the mean of the two fractions 0.775."""
    rows = [
        {
            "name": "a",
            "layer": 0,
            "module": "q",
            "rows": 10,
            "cols": 20,
            "f_diag": 0.1,
            "frac_unchanged": 190 / 200,
            "frac_bitwise_unchanged": 189 / 200,
            "frac_within_ulp": 195 / 200,
            "sparsity_compare": "bfloat16",
        },
        {
            "name": "b",
            "layer": 0,
            "module": "k",
            "rows": 5,
            "cols": 20,
            "f_diag": 0.3,
            "frac_unchanged": 60 / 100,
            "frac_bitwise_unchanged": 60 / 100,
            "frac_within_ulp": 1.0,
            "sparsity_compare": "bfloat16",
        },
    ]
    got = pooled_sparsity(rows)
    assert got["frac_unchanged_pooled"] == 250 / 300
    assert got["frac_bitwise_unchanged_pooled"] == 249 / 300
    assert got["frac_within_ulp_pooled"] == 295 / 300
    assert (got["frac_unchanged_min"], got["frac_unchanged_max"]) == (0.6, 0.95)
    assert got["frac_unchanged_median"] == pytest.approx(0.775, rel=1e-15)
    summary_rows, summary = summarize(rows)
    whole = summary["scopes"]["all"]
    assert whole["frac_unchanged_pooled"] == 250 / 300 and whole["sparsity_compare"] == "bfloat16"
    assert "frac_unchanged_mean" not in whole  # no mean of fractions passed off as the transition's figure
    assert summary["scopes"]["module:k"]["frac_unchanged_pooled"] == 0.6


# ---------------------------------------------------------------------------
# mixed pairs end to end


def _mixed_pair(root: Path, base_dtype: str, post_dtype: str) -> tuple[Path, Path]:
    """A synthetic base in ``base_dtype`` and a post in ``post_dtype`` whose decomposed matrices change
    half their entries by ~1e-2 of their scale and keep the others (as values, when post can hold them)."""
    base = write_model(root / "base", SHAPE, family="llama", dtype=base_dtype, seed=3)
    post = root / "post"
    shutil.copytree(base, post)
    tensors = load_file(str(post / "model.safetensors"))
    g = torch.Generator().manual_seed(4)
    out = {}
    for name, w in tensors.items():
        w = w.double()
        if name.endswith("_proj.weight"):
            keep = torch.rand(w.shape, generator=g) < 0.5
            w = w + torch.where(keep, 0.0, 1e-2 * w.abs().mean() * torch.randn(w.shape, generator=g, dtype=F64))
        out[name] = w.to(getattr(torch, post_dtype)).contiguous()
    save_file(out, str(post / "model.safetensors"), metadata={"format": "pt"})
    return base, post


def _reference(w0: np.ndarray, w1: np.ndarray) -> dict:
    """Independent float64 numpy decomposition of one pair (each side upcast from its own dtype)."""
    D = w1 - w0
    U, s0, Vt = np.linalg.svd(w0, full_matrices=False)
    P = U.T @ D @ Vt.T
    null = D - U @ P @ Vt
    d2 = np.sum(D**2)
    return {
        "P": P,
        "null": null,
        "f_diag": np.sum(np.diag(P) ** 2) / d2,
        "f_off": (np.sum(P**2) - np.sum(np.diag(P) ** 2)) / d2,
        "f_null": np.sum(null**2) / d2,
    }


@pytest.mark.parametrize(
    "base_dtype, post_dtype", [("bfloat16", "float32"), ("float32", "bfloat16"), ("float16", "bfloat16")]
)
def test_mixed_pair_decomposes_and_matches_float64_reference(tmp_path, base_dtype, post_dtype):
    base, post = _mixed_pair(tmp_path / "m", base_dtype, post_dtype)
    store = tmp_path / "s"
    res = run_transition(no_track_config(base=str(base), post=str(post), store=store))
    W0, W1 = load_file(str(base / "model.safetensors")), load_file(str(post / "model.safetensors"))
    root = zarr.open_group(str(store), mode="r")
    compare = f"float32 ({base_dtype}→{post_dtype})"
    assert len(res.rows) == 7
    counted = entries = 0
    for row in res.rows:
        name = row["name"]
        w0, w1 = W0[name].double().numpy(), W1[name].double().numpy()
        ref = _reference(w0, w1)
        for k in ("f_diag", "f_off", "f_null"):
            assert row[k] == pytest.approx(ref[k], rel=2e-4, abs=2e-6), (name, k)
        g = root["matrices"][name]
        P = g["P"][:]
        # P up to the frame's sign convention: |diag| and the norm are sign-invariant
        # (measured: 6.5e-5 of max|P| on the diagonal, 1.5e-7 on the norm, 9e-7 of max|null|: float32 SVD)
        assert np.allclose(np.abs(np.diag(P)), np.abs(np.diag(ref["P"])), rtol=1e-3, atol=2e-4 * np.abs(ref["P"]).max())
        assert np.linalg.norm(P) == pytest.approx(np.linalg.norm(ref["P"]), rel=1e-5)
        if "null" in g:
            assert np.allclose(g["null"][:], ref["null"], rtol=0, atol=1e-5 * np.abs(ref["null"]).max())
        assert g.attrs["dtypes"] == {"base": base_dtype, "post": post_dtype}
        assert row["sparsity_compare"] == compare
        unchanged = int(np.sum(w0 == w1))  # values, in float64
        assert row["frac_unchanged"] == unchanged / w0.size
        counted, entries = counted + unchanged, entries + w0.size
    whole = res.summary_rows[0]
    assert whole["scope"] == "all" and whole["frac_unchanged_pooled"] == counted / entries
    assert whole["sparsity_compare"] == compare
    manifest = json.loads((store / "zarr.json").read_text())["attributes"]["grrr_stream"]
    assert manifest["sparsity_compare"] == compare
