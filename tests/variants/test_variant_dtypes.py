"""Variants and dtypes: pairs whose checkpoints differ in dtype, the store's own rounding in the fidelity
report, and tensors of every safetensors dtype copied through. Every check is against an independent
float64 numpy decomposition of the two checkpoints (read with the safetensors library, not grrr_stream's
reader) or against the bytes the safetensors library reads."""

from __future__ import annotations

import io
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.common import no_track_config
from safetensors.torch import load_file, save_file

from grrr_stream.decompose.run import run_transition
from grrr_stream.errors import CheckpointError
from grrr_stream.fixtures.synthetic import TINY, Update, make_transition
from grrr_stream.store.transition_store import StoredTransition
from grrr_stream.variants.builder import VariantBuilder, write_variant
from grrr_stream.variants.run import run_variants
from grrr_stream.variants.spec import parse_variant

# (diag, off, null) weights of the composed variants checked against the reference
MIXES = {
    "diag": (1, 0, 0),
    "off": (0, 1, 0),
    "null": (0, 0, 1),
    "offnull": (0, 1, 1),
    "mix=diag:0.5,off:1,null:0.25": (0.5, 1, 0.25),
}


def read_all(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint folder, by the safetensors library."""
    out = {}
    for shard in sorted(Path(folder).glob("*.safetensors")):
        out.update(load_file(str(shard)))
    return out


def rewrite(src: Path, dst: Path, dtype=None, extra: dict | None = None) -> Path:
    """A copy of ``src`` as one safetensors file written by the safetensors library: floating tensors cast to
    ``dtype`` (a pair that differs in dtype), plus ``extra`` tensors."""
    tensors = read_all(src)
    if dtype is not None:
        tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()}
    tensors.update(extra or {})
    dst.mkdir(parents=True)
    save_file(tensors, str(dst / "model.safetensors"))
    cfg = json.loads((src / "config.json").read_text())
    if dtype is not None:
        cfg["torch_dtype"] = str(dtype).removeprefix("torch.")
    (dst / "config.json").write_text(json.dumps(cfg))
    shutil.copy(src / "generation_config.json", dst / "generation_config.json")
    return dst


def reference(w0: torch.Tensor, w1: torch.Tensor) -> dict[str, np.ndarray]:
    """The decomposition in float64 numpy from the checkpoints' values: exact thin SVD of W0, P = U0ᵀ ΔW V0."""
    W0, W1 = w0.double().numpy(), w1.double().numpy()
    dW = W1 - W0
    U, _, Vt = np.linalg.svd(W0, full_matrices=False)
    P = U.T @ dW @ Vt.T
    diag = (U * np.diag(P)) @ Vt
    null = dW - U @ P @ Vt
    return {"diag": diag, "off": dW - diag - null, "null": null}


def measured(store: Path, tensors: dict, base: dict, post: dict, weights) -> float:
    """‖(variant − W0) − Σ w_c ΔW_c‖ / ‖Σ w_c ΔW_c‖ over the decomposed matrices, ΔW_c from the reference."""
    e2 = i2 = 0.0
    for name in StoredTransition(store).matrices:
        ref = reference(base[name], post[name])
        want = sum(w * ref[c] for w, c in zip(weights, ("diag", "off", "null")))
        got = tensors[name].double().numpy() - base[name].double().numpy()
        e2 += float(((got - want) ** 2).sum())
        i2 += float((want**2).sum())
    return (e2 / i2) ** 0.5


def build(store: Path, name: str, **kw) -> tuple[dict, VariantBuilder]:
    b = VariantBuilder(store, parse_variant(name), **kw)
    return dict(b.tensors()), b


@pytest.fixture(scope="module")
def f32_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("dtype_pairs")
    return make_transition(
        root, TINY, family="qwen2", dtype="float32", update=Update(r_delta=1e-2, plant=(0.2, 0.5, 0.3))
    )


PAIRS = {
    "bf16->f32": (torch.bfloat16, None),
    "f32->bf16": (None, torch.bfloat16),
    "f16->bf16": (torch.float16, torch.bfloat16),
}


@pytest.mark.parametrize("pair", list(PAIRS))
def test_mixed_pair_variants_keep_each_side_and_match_float64(pair, f32_pair, tmp_path):
    """base/full are each checkpoint in its own dtype, bit for bit; the components (float32, the variant dtype)
    match the float64 decomposition of the two checkpoints; the report says the sides differ."""
    bdt, pdt = PAIRS[pair]
    base = rewrite(f32_pair[0], tmp_path / "base", bdt) if bdt else f32_pair[0]
    post = rewrite(f32_pair[1], tmp_path / "post", pdt) if pdt else f32_pair[1]
    store = tmp_path / "s"
    run_transition(no_track_config(base=str(base), post=str(post), store=store))
    real = {"base": read_all(base), "post": read_all(post)}
    for vname, side in (("base", "base"), ("full", "post")):
        tensors, b = build(store, vname)  # variant dtype float32: not applied to a checkpoint itself
        assert set(tensors) == set(real[side])
        for k, want in real[side].items():
            assert tensors[k].dtype == want.dtype and torch.equal(tensors[k], want), (pair, vname, k)
    names = {
        "base": str(bdt or torch.float32).removeprefix("torch."),
        "post": str(pdt or torch.float32).removeprefix("torch."),
    }
    decomposed = set(StoredTransition(store).matrices)
    for vname, weights in MIXES.items():
        tensors, b = build(store, vname)
        s = b.report.summary()
        assert (s["base_dtype"], s["post_dtype"], s["sides_differ"]) == (names["base"], names["post"], True)
        assert s["sides"] == f"base {names['base']}, post {names['post']}: the sides differ in dtype"
        # components follow the variant dtype, and so does every other floating tensor (here from the base)
        assert all(t.dtype == torch.float32 for t in tensors.values())
        for k in set(tensors) - decomposed:
            assert torch.equal(tensors[k], real["base"][k].float()), (vname, k)
        err = measured(store, tensors, real["base"], real["post"], weights)
        print(f"{pair} {vname}: measured {err:.2e}, reported cast {s['fidelity']:.2e}")
        assert err < 1e-4, (pair, vname, err)


def test_same_dtype_pair_reports_one_dtype(f32_pair, tmp_path):
    store = tmp_path / "s"
    run_transition(no_track_config(base=str(f32_pair[0]), post=str(f32_pair[1]), store=store))
    s = build(store, "diag")[1].report.summary()
    assert (s["sides_differ"], s["sides"]) == (False, "base and post float32")


@pytest.fixture(scope="module")
def store_pair(tmp_path_factory):
    """float32 pair with an RL-sized update (r_Δ = 3e-4), decomposed into stores of three dtypes."""
    root = tmp_path_factory.mktemp("store_dtypes")
    base, post = make_transition(
        root, TINY, family="llama", dtype="float32", update=Update(r_delta=3e-4, plant=(0.1, 0.6, 0.3))
    )
    stores = {}
    for dt in ("bfloat16", "float16", "float32"):
        stores[dt] = root / f"s_{dt}"
        run_transition(no_track_config(base=str(base), post=str(post), store=stores[dt], store_dtype=dt))
    return read_all(base), read_all(post), stores


@pytest.mark.parametrize("store_dtype", ["bfloat16", "float16", "float32"])
def test_fidelity_report_includes_the_store_rounding(store_dtype, store_pair):
    """Variants in float64 (no cast error): the reported error (cast + store rounding) is the measured error
    against the float64 decomposition of the checkpoints; the bound holds; a float32 store reports none."""
    base, post, stores = store_pair
    store = stores[store_dtype]
    for vname, weights in MIXES.items():
        tensors, b = build(store, vname, dtype="float64")
        s = b.report.summary()
        err = measured(store, tensors, base, post, weights)
        print(
            f"{store_dtype} store, {vname}: measured {err:.3e}, reported {s['total_error']:.3e} "
            f"(store {s['store_error']:.3e}, bound {s['store_error_bound']:.3e}, cast {s['fidelity']:.1e})"
        )
        assert s["store_dtype"] == store_dtype
        if store_dtype == "float32":
            assert s["store_error"] == s["store_error_bound"] == 0.0 and s["total_error"] < 1e-9
            assert err < 1e-4
        else:
            assert err > 5e-5  # the store's rounding is there to be measured (float32 arithmetic: ~1e-5)
            assert s["total_error"] == pytest.approx(err, rel=0.15), (vname, s, err)
            assert err <= s["store_error_bound"] * (1 + 1e-3)


def test_sixteen_bit_store_warns_in_one_line(store_pair, tmp_path):
    _, _, stores = store_pair
    for dt, expect in (("bfloat16", True), ("float32", False)):
        out = io.StringIO()
        summary = write_variant(VariantBuilder(stores[dt], parse_variant("null")), tmp_path / dt / "null", stream=out)
        lines = [ln for ln in out.getvalue().splitlines() if "store keeps" in ln]
        assert len(lines) == (1 if expect else 0), out.getvalue()
        if expect:
            assert "in bfloat16" in lines[0] and f"{summary['store_error']:.2g}" in lines[0]
        csv = (tmp_path / dt / "null.fidelity.csv").read_text().splitlines()
        assert "store_error" in csv[0].split(",")
    # base/full/proj take nothing from the store: no warning
    out = io.StringIO()
    write_variant(VariantBuilder(stores["bfloat16"], parse_variant("proj")), tmp_path / "proj", stream=out)
    assert "store keeps" not in out.getvalue()


def _extras() -> dict[str, torch.Tensor]:
    """Tensors outside the decomposed matrices in every non-16/32/64-bit-float safetensors dtype, with bit
    patterns a float cast would change (uint32 above 2^31, NaN-like float8 bytes, a complex value)."""
    g = torch.Generator().manual_seed(3)

    def raw(n, dt):
        return torch.randint(
            0,
            256,
            (n * torch.empty((), dtype=dt).element_size(),),  # noqa: E731
            dtype=torch.uint8,
            generator=g,
        ).view(dt)

    out = {
        f"model.extra.{dt}".replace("torch.", ""): raw(6, dt).reshape(2, 3)
        for dt in (
            torch.uint32,
            torch.uint64,
            torch.uint16,
            torch.int8,
            torch.int64,
            torch.float8_e4m3fn,
            torch.float8_e5m2,
            torch.float8_e4m3fnuz,
            torch.float8_e8m0fnu,
            torch.complex64,
        )
    }
    out["model.extra.u32_big"] = torch.tensor([0, 2**31, 2**32 - 1], dtype=torch.int64).to(torch.uint32)
    out["model.extra.bool"] = torch.tensor([True, False, True])
    return out


def test_every_safetensors_dtype_is_copied_through_bit_for_bit(f32_pair, tmp_path):
    extras = _extras()
    base = rewrite(f32_pair[0], tmp_path / "base", extra=extras)
    post = rewrite(f32_pair[1], tmp_path / "post", extra=extras)
    store = tmp_path / "s"
    run_transition(no_track_config(base=str(base), post=str(post), store=store))
    res = run_variants(store, tmp_path / "v", ["base", "full", "diag"], dtype="bfloat16")
    for folder in res.folders:
        got = read_all(folder)
        for k, want in extras.items():
            assert got[k].dtype == want.dtype, (folder.name, k)
            assert torch.equal(got[k].view(torch.uint8), want.view(torch.uint8)), (folder.name, k)


def _with_f4(src: Path, dst: Path) -> Path:
    """A copy of a single-file checkpoint with one more tensor in the sub-byte code F4, header written by hand."""
    shutil.copytree(src, dst)
    f = dst / "model.safetensors"
    blob = f.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    header["model.extra.f4"] = {"dtype": "F4", "shape": [4], "data_offsets": [end, end + 2]}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    f.write_bytes(struct.pack("<Q", len(raw)) + raw + blob[8 + n : 8 + n + end] + b"\x12\x34")
    return dst


def test_a_dtype_without_torch_counterpart_is_refused_by_name_before_building(f32_pair, tmp_path):
    one = {s: rewrite(p, tmp_path / f"one_{s}") for s, p in zip(("base", "post"), f32_pair)}
    base, post = _with_f4(one["base"], tmp_path / "base"), _with_f4(one["post"], tmp_path / "post")
    store = tmp_path / "s"
    run_transition(no_track_config(base=str(base), post=str(post), store=store))  # decomposition ignores it
    with pytest.raises(CheckpointError, match=r"F4.*'model\.extra\.f4'"):
        run_variants(store, tmp_path / "v", ["diag"])
    assert not (tmp_path / "v").exists()
