"""Variant algebra, random-removal controls, dtype fidelity, HF-loadable folders, memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers.common import no_track_config

from grrr_stream.checkpoints.reader import Checkpoint
from grrr_stream.config import TrackingConfig
from grrr_stream.decompose.run import run_transition
from grrr_stream.fixtures.synthetic import ModelShape, Update, make_transition
from grrr_stream.store.transition_store import StoredTransition
from grrr_stream.variants.builder import VariantBuilder, write_variant
from grrr_stream.variants.run import run_variants
from grrr_stream.variants.spec import parse_variant


def build(store, name, **kw):
    b = VariantBuilder(store, parse_variant(name), **kw)
    return dict(b.tensors()), b


@pytest.fixture(scope="module")
def f64_store(planted_f64, tmp_path_factory):
    base, post = planted_f64
    store = tmp_path_factory.mktemp("vstore") / "s"
    run_transition(
        no_track_config(base=str(base), post=str(post), store=store, compute_dtype="float64", store_dtype="float64")
    )
    return store


def test_component_algebra_float64(f64_store):
    t = StoredTransition(f64_store)
    v = {n: build(f64_store, n, dtype="float64")[0] for n in ("base", "full", "diag", "off", "null", "offnull")}
    for name in t.matrices:
        base, full = v["base"][name], v["full"][name]
        d = {k: v[k][name] - base for k in ("diag", "off", "null", "offnull")}
        total = full - base
        scale = float(torch.linalg.matrix_norm(total))
        assert float(torch.linalg.matrix_norm(d["diag"] + d["off"] + d["null"] - total)) < 1e-6 * scale
        assert float(torch.linalg.matrix_norm(d["offnull"] - (total - d["diag"]))) < 1e-6 * scale
        e = {k: float(torch.linalg.matrix_norm(d[k])) ** 2 / scale**2 for k in ("diag", "off", "null")}
        m = t.matrices[name]["metrics"]
        assert (e["diag"], e["off"], e["null"]) == pytest.approx((m["f_diag"], m["f_off"], m["f_null"]), abs=1e-9)


def test_variants_are_built_on_the_real_checkpoints(f64_store):
    """base/full are the two checkpoints bit for bit; proj and the components are the base plus parts of ΔW
    on the decomposed matrices, every other tensor from the base (rest_from post on request)."""
    t = StoredTransition(f64_store)
    ck = {"base": Checkpoint.open(t.manifest["base_folder"]), "post": Checkpoint.open(t.manifest["post_folder"])}
    real = {side: {n: c.read(n) for n in c.tensors} for side, c in ck.items()}
    decomposed = set(t.matrices)
    rest = set(real["base"]) - decomposed
    # the pair is a fair test: embeddings, norms, lm_head and biases changed in post-training too
    changed_rest = {n for n in rest if not torch.equal(real["base"][n], real["post"][n])}
    assert {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} <= changed_rest
    assert any(n.endswith(".bias") for n in changed_rest) and changed_rest == rest

    def same(tensors, side):
        return {n for n in tensors if torch.equal(tensors[n], real[side][n])}

    v = {
        n: build(f64_store, n, dtype="float64")[0]
        for n in ("base", "full", "proj", "diag", "off", "null", "offnull", "randrm-0")
    }
    assert set(v["base"]) == set(real["base"]) and same(v["base"], "base") == set(real["base"])
    assert set(v["full"]) == set(real["post"]) and same(v["full"], "post") == set(real["post"])
    # proj differs from full exactly on the tensors that are not decomposed (which changed)
    assert {n for n in v["proj"] if not torch.equal(v["proj"][n], v["full"][n])} == rest
    assert same(v["proj"], "base") >= rest and same(v["proj"], "post") == decomposed
    for name in ("diag", "off", "null", "offnull", "randrm-0"):
        assert same(v[name], "base") >= rest, name
    # rest_from post: every other tensor from the post model, and proj is then full on every tensor
    post_rest = {n: build(f64_store, n, dtype="float64", rest_from="post")[0] for n in ("proj", "diag")}
    assert all(torch.equal(post_rest["proj"][n], v["full"][n]) for n in v["full"])
    assert same(post_rest["diag"], "post") >= rest
    b = VariantBuilder(f64_store, parse_variant("diag"), dtype="float64", rest_from="post")
    meta = b.metadata()
    assert (meta["rest_from"], meta["config_from"], meta["prompt_format_from"]) == ("post", "post", "post")
    assert VariantBuilder(f64_store, parse_variant("base")).metadata()["rest_from"] is None


def test_random_removal_controls(f64_store):
    t = StoredTransition(f64_store)
    full = build(f64_store, "full", dtype="float64")[0]
    removed = {s: build(f64_store, f"randrm-{s}", dtype="float64") for s in (0, 1, 2)}
    cache = t.frame_cache()
    for name, attrs in t.matrices.items():
        frame = cache.get(attrs["frame_key"], torch.float64)
        want = float(torch.linalg.vector_norm(torch.diagonal(t.read_tensor(name, "P"))))
        Rs = []
        for s, (tensors, builder) in removed.items():
            R = full[name] - tensors[name]
            assert float(torch.linalg.matrix_norm(R)) == pytest.approx(want, rel=1e-9)
            # entirely inside span(U0) ⊗ span(V0)
            inside = frame.U @ (frame.U.T @ R @ frame.V) @ frame.V.T
            assert float(torch.linalg.matrix_norm(R - inside)) < 1e-10 * want
            Rs.append(R)
            row = next(r for r in builder.report.rows if r.name == name)
            assert row.removed_norm == pytest.approx(want)
        for a in range(3):
            for b in range(a + 1, 3):
                cos = float((Rs[a] * Rs[b]).sum()) / want**2
                assert abs(cos) < 0.5  # different random directions (typically |cos| ~ 1/r)


def test_base_and_full_are_bit_exact(bf16_pair, tmp_path):
    base, post = bf16_pair
    store = tmp_path / "s"
    run_transition(no_track_config(base=str(base), post=str(post), store=store))
    # base and full keep the checkpoint's own dtype whatever the variant dtype (never a cast, not even a widening)
    for dtype, kept in (("bfloat16", torch.bfloat16), ("float32", torch.bfloat16), ("float16", torch.bfloat16)):
        for name, src in (("base", base), ("full", post)):
            tensors, b = build(store, name, dtype=dtype)
            ck = Checkpoint.open(src)
            assert set(tensors) == set(ck.tensors)
            for tname in ck.tensors:
                want = ck.read(tname)
                assert tensors[tname].dtype == kept and torch.equal(tensors[tname].to(want.dtype), want), (
                    dtype,
                    name,
                    tname,
                )
            assert b.report.summary()["fidelity"] == 0.0
            assert b.config()["torch_dtype"] == str(kept).removeprefix("torch.")


def test_fidelity_bf16_loses_rl_sized_update_and_warns(planted_f32_small, tmp_path, capsys):
    base, post = planted_f32_small  # r_Δ = 3e-4
    store = tmp_path / "s"
    run_transition(no_track_config(base=str(base), post=str(post), store=store))
    with pytest.warns(UserWarning, match="loses"):
        lossy = write_variant(VariantBuilder(store, parse_variant("off"), dtype="bfloat16"), tmp_path / "v" / "off")
    assert "WARNING: variant 'off' in bfloat16" in capsys.readouterr().err
    print(
        f"bf16 'off' variant at r_delta=3e-4: fidelity error {lossy['fidelity']:.3f}, "
        f"energy kept {lossy['energy_survived']:.3f}"
    )
    assert lossy["fidelity"] > 0.01
    # rounding noise larger than the update itself: none of its energy is kept (the old
    # ⟨realised, intended⟩²/‖intended‖⁴ called this 98 % kept)
    assert lossy["fidelity"] > 1 and lossy["energy_survived"] == 0.0
    for name in ("off", "diag", "offnull", "null", "randrm-0"):
        b = VariantBuilder(store, parse_variant(name), dtype="float32")
        for _ in b.tensors():
            pass
        s = b.report.summary()
        assert s["fidelity_max"] < 1e-3, (name, s)
        assert s["energy_survived"] == pytest.approx(1.0, abs=2e-3)


def test_float32_fidelity_without_a_float64_pass_matches_it(planted_f32_small, tmp_path, monkeypatch):
    """A float32 variant of a float32 decomposition: its weights and fidelity report from the float32
    pass (TwoSum rounding errors; copies from the record) equal those of the float64 reference pass."""
    from grrr_stream.variants import fidelity as V

    base, post = planted_f32_small  # r_Δ = 3e-4: the cast error is a visible share of the update
    store = tmp_path / "s"
    run_transition(no_track_config(base=str(base), post=str(post), store=store))
    names = ("off", "diag", "null", "randrm-0", "full", "proj", "base")
    fast = {n: build(store, n, dtype="float32") for n in names}
    monkeypatch.setattr(V, "_EXACT_INTO", {})  # every matrix through the float64 pass
    ref = {n: build(store, n, dtype="float32") for n in names}
    for n in names:
        (tf, bf), (tr, br) = fast[n], ref[n]
        for k in tr:  # the same weights (fl(W0 + intended) either way, up to rare double rounding)
            assert float((tf[k].double() - tr[k].double()).abs().max()) <= 1e-7 * float(tr[k].abs().max()), (n, k)
        for rf, rr in zip(bf.report.rows, br.report.rows):
            assert rf.intended_norm == pytest.approx(rr.intended_norm, rel=1e-5, abs=1e-12)
            assert rf.error_norm == pytest.approx(rr.error_norm, rel=1e-3, abs=1e-12), (n, rf, rr)
            assert rf.energy_survived == pytest.approx(rr.energy_survived, abs=1e-6)
        if n in ("off", "diag", "null"):
            assert max(r.error_norm for r in br.report.rows) > 0  # a cast error is there to be measured


def test_written_folder_loads_in_transformers_with_same_logits(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = ModelShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=128)
    base, post = make_transition(
        tmp_path / "m", shape, family="qwen2", dtype="bfloat16", update=Update(r_delta=5e-2), max_shard_bytes=40_000
    )
    store = tmp_path / "s"
    run_transition(no_track_config(base=str(base), post=str(post), store=store))
    res = run_variants(store, tmp_path / "variants", ["offnull"], max_shard_bytes=60_000)
    folder = res.folders[0]
    assert (folder / "model.safetensors.index.json").is_file()  # sharded like a real checkpoint
    assert (folder / "generation_config.json").is_file() and (folder / "grrr_variant.json").is_file()
    assert (tmp_path / "variants" / "offnull.fidelity.csv").is_file()
    ids = torch.tensor([[1, 5, 9, 33, 7, 100, 2]])
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    fresh = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=torch.float32).eval()
    stream = dict(VariantBuilder(store, parse_variant("offnull")).tensors())
    missing, unexpected = fresh.load_state_dict(stream, strict=False)
    assert not unexpected and all("rotary" in m for m in missing)
    with torch.no_grad():
        a, b = loaded(ids).logits, fresh(ids).logits
    assert torch.equal(a, b)
    # a variant differs from the full model
    full = AutoModelForCausalLM.from_pretrained(post, dtype=torch.float32).eval()
    with torch.no_grad():
        assert not torch.allclose(full(ids).logits, a)


def test_rerun_skips_finished_variant_and_tracks_nested_runs(f64_store, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    kw = dict(tracking=TrackingConfig(uri=uri), max_shard_bytes=60_000)
    first = run_variants(f64_store, tmp_path / "v", ["diag", "half=diag:0.5,off:1,null:1"], **kw)
    mtime = (first.folders[0] / "grrr_variant.json").stat().st_mtime_ns
    again = run_variants(f64_store, tmp_path / "v", ["diag", "half=diag:0.5,off:1,null:1"], **kw)
    assert (first.folders[0] / "grrr_variant.json").stat().st_mtime_ns == mtime
    assert again.summaries == first.summaries and again.run_ids == first.run_ids
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("grrr_stream")
    runs = client.search_runs([exp.experiment_id])
    kinds = sorted(r.data.tags.get("grrr.kind", "?") for r in runs)
    assert kinds == ["transition", "variant", "variant"]
    parent = next(r for r in runs if r.data.tags.get("grrr.kind") == "transition")
    for r in runs:
        if r.data.tags.get("grrr.kind") == "variant":
            assert r.data.tags["mlflow.parentRunId"] == parent.info.run_id
            assert r.data.params["dtype"] == "float32" and "fidelity" in r.data.metrics
    half = json.loads((tmp_path / "v" / "half" / "grrr_variant.json").read_text())
    assert half["settings"]["components"] == {"diag": 0.5, "off": 1.0, "null": 1.0}


def test_variant_cli_and_bad_names(f64_store, tmp_path, capsys):
    from grrr_stream.cli.entry import main

    rc = main(["variants", "--store", str(f64_store), "--variant", "nope", "--out", str(tmp_path), "--no-track"])
    assert rc == 2 and "unknown variant 'nope'" in capsys.readouterr().err
    rc = main(
        ["variants", "--store", str(f64_store), "--variant", "x=diag:1,rot:2", "--out", str(tmp_path), "--no-track"]
    )
    assert rc == 2 and "unknown component 'rot'" in capsys.readouterr().err
    rc = main(
        [
            "variants",
            "--store",
            str(f64_store),
            "--variant",
            "null",
            "--out",
            str(tmp_path / "o"),
            "--no-track",
            "--shard-gb",
            "0.0001",
        ]
    )
    assert rc == 0 and "null" in capsys.readouterr().out


RSS = textwrap.dedent("""
    import json, resource, sys
    from grrr_stream.variants.spec import parse_variant
    from grrr_stream.variants.builder import VariantBuilder, write_variant
    write_variant(VariantBuilder(sys.argv[1], parse_variant("offnull")), sys.argv[2], max_shard_bytes=8 << 20)
    print(json.dumps({"maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""")


@pytest.mark.slow
def test_variant_build_peak_rss_flat_in_layers(tmp_path):
    rss = {}
    for layers in (1, 4):
        shape = ModelShape(hidden=768, intermediate=2048, layers=layers, heads=6, kv_heads=2, vocab=256)
        base, post = make_transition(
            tmp_path / f"m{layers}",
            shape,
            family="llama",
            dtype="bfloat16",
            update=Update(r_delta=1e-2),
            max_shard_bytes=32 << 20,
        )
        store = tmp_path / f"s{layers}"
        run_transition(no_track_config(base=str(base), post=str(post), store=store))
        out = subprocess.run(
            [sys.executable, "-c", RSS, str(store), str(tmp_path / f"v{layers}")],
            check=True,
            capture_output=True,
            text=True,
        )
        rss[layers] = json.loads(out.stdout.strip().splitlines()[-1])["maxrss_mib"]
    print(f"variant build peak RSS: 1 layer {rss[1]:.0f} MiB, 4 layers {rss[4]:.0f} MiB")
    assert abs(rss[4] / rss[1] - 1) < 0.10, rss


def test_rest_from_base_refused_when_post_added_tokens(planted_f64, tmp_path):
    from grrr_stream.checkpoints.writer import write_checkpoint
    from grrr_stream.errors import TensorMismatchError

    base, post = planted_f64
    ck = Checkpoint.open(post)

    def tensors():  # the post model grew two token rows (added tokens)
        for name in ck.tensors:
            t = ck.read(name)
            if name in ("model.embed_tokens.weight", "lm_head.weight"):
                t = torch.cat([t, t[:2]])
            yield name, t

    grown = write_checkpoint(tmp_path / "grown", tensors(), config=ck.config)
    store = tmp_path / "s"
    run_transition(no_track_config(base=str(base), post=str(grown), store=store))
    # the default refuses before building anything, names the tensors and the options that work
    with pytest.raises(TensorMismatchError, match="embed_tokens") as e:
        VariantBuilder(store, parse_variant("diag"))
    assert "rest_from: post" in str(e.value) and "rest_from: auto" in str(e.value)
    with pytest.raises(TensorMismatchError):
        run_variants(store, tmp_path / "v", ["base", "diag"])
    assert not (tmp_path / "v").exists()
    # base and full are the checkpoints themselves: no rest to choose, never refused
    assert VariantBuilder(store, parse_variant("base")).layout()[0].name
    # auto falls back to the post model, on record
    auto = VariantBuilder(store, parse_variant("diag"), rest_from="auto")
    assert auto.rest_from == "post" and "embed_tokens" in auto.rest_fallback
    assert auto.metadata()["rest_fallback"] == auto.rest_fallback
    grown_rows = dict(auto.tensors())["model.embed_tokens.weight"].shape[0]
    assert grown_rows == ck.tensors["model.embed_tokens.weight"].shape[0] + 2
    tensors_post = dict(VariantBuilder(store, parse_variant("diag"), rest_from="post").tensors())
    assert tensors_post["model.embed_tokens.weight"].shape[0] == grown_rows


@pytest.mark.parametrize(
    "text,match",
    [
        ("..=diag:1", "must start with"),
        (".=diag:1", "must start with"),
        ("a/b=diag:1", "must start with"),
        (".hidden=off:1", "must start with"),
        ("full=diag:1", "reserved"),
        ("randrm-3=diag:1", "reserved"),
        ("x" * 65 + "=diag:1", "at most 64"),
        ("x=diag:nan", "finite"),
    ],
)
def test_variant_names_that_would_be_paths_or_collide_are_refused(text, match):
    from grrr_stream.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        parse_variant(text)


def test_a_checkpoint_changed_after_its_decomposition_is_refused_by_the_variant_builder(bf16_pair, tmp_path):
    """A float changed in place in a tensor that was not decomposed (a norm: no matrix digest covers it): the
    checkpoint's fingerprint no longer is the one the store recorded, so building a variant is refused naming the
    folder, as decompose refuses a finished store with another input, instead of copying the changed tensor."""
    import shutil

    from grrr_stream.errors import StoreMismatchError

    base, post = (shutil.copytree(p, tmp_path / p.name) for p in bf16_pair)
    store = tmp_path / "s"
    run_transition(no_track_config(base=str(base), post=str(post), store=store))
    build(store, "full")  # as decomposed: built
    decomposed = {a.get("tensor") or n for n, a in StoredTransition(store).matrices.items()}
    info = next(i for n, i in Checkpoint.open(post).tensors.items() if n not in decomposed and i.end > i.start)
    with open(info.shard, "r+b") as f:
        f.seek(info.start)
        byte = f.read(1)
        f.seek(info.start)
        f.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(StoreMismatchError, match=f"post checkpoint {post}.*decompose again"):
        build(store, "full")
