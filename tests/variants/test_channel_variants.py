"""Channel variants (issue 24, §4): the update kept on the outlier residual channels of a channels.json, or
on the others, alone or crossed with a component. Every built variant is checked against a state dict built
here independently: numpy float64 from the checkpoints (read with the safetensors library), the channel mask
from the channel list and each tensor's reader/writer role read off its name by this file's own rules, and
the components from numpy's SVD of W0."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers.common import no_track_config
from safetensors.numpy import load_file

from grrr_stream.cli.entry import main
from grrr_stream.decompose.run import run_transition
from grrr_stream.errors import ConfigError
from grrr_stream.fixtures.synthetic import TINY, Update, make_transition, write_model
from grrr_stream.variants.builder import VariantBuilder, write_variant
from grrr_stream.variants.channels import channel_restriction, load_channels
from grrr_stream.variants.spec import parse_variant, parse_variants

H = TINY.hidden
CHANNELS = [0, 5, 17, 31, 40, 63]
# the roles, independently of grrr_stream: a reader takes the residual stream as input (q/k/v, fused qkv,
# gate/up, fused gate_up, Mixtral's w1/w3, routers), a writer adds its output to it (o, down, w2)
READER = re.compile(r"\.(q_proj|k_proj|v_proj|qkv_proj|gate_proj|up_proj|gate_up_proj|w1|w3|gate|router)(\.weight)?$")
WRITER = re.compile(r"\.(o_proj|down_proj|w2)(\.weight)?$")
DECODER = re.compile(r"^model\.layers\.\d+\.")
WEIGHTS = {"": (1, 1, 1), "diag": (1, 0, 0), "off": (0, 1, 0), "null": (0, 0, 1), "offnull": (0, 1, 1)}


def tensors(folder: Path) -> dict[str, np.ndarray]:
    out = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        out.update(load_file(f))
    return out


def role(name: str) -> str | None:
    if not DECODER.match(name):
        return None
    return "reader" if READER.search(name) else "writer" if WRITER.search(name) else None


def mask(name: str, shape: tuple, channels: list[int], keep: str) -> np.ndarray:
    """1 on the kept channels of the tensor's residual axis: a Linear weight (out×in) reads along its columns
    and writes along its rows; a 3-D expert tensor (E×in×out, gpt-oss) the other way round."""
    r = role(name)
    axis = (len(shape) - 1 if r == "reader" else len(shape) - 2) if len(shape) == 2 else (1 if r == "reader" else 2)
    on = np.zeros(shape[axis], dtype=bool)
    on[channels] = True
    on = on if keep == "outlier" else ~on
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return np.broadcast_to(on.reshape(view), shape)


def components(w0: np.ndarray, w1: np.ndarray) -> dict[str, np.ndarray]:
    """ΔW_diag, ΔW_off, ΔW_null of one matrix from numpy's float64 SVD of W0."""
    dW = w1 - w0
    U, _, Vt = np.linalg.svd(w0, full_matrices=False)
    P = U.T @ dW @ Vt.T
    diag = (U * np.diag(P)) @ Vt
    null = dW - U @ P @ Vt
    return {"diag": diag, "off": dW - diag - null, "null": null}


def update(w0: np.ndarray, w1: np.ndarray, weights) -> np.ndarray:
    """Σ w_c ΔW_c of a 2-D matrix, or of every slice of a 3-D tensor (one matrix per expert)."""
    if tuple(weights) == (1, 1, 1):
        return w1 - w0
    if w0.ndim == 3:
        return np.stack([update(a, b, weights) for a, b in zip(w0, w1)])
    c = components(w0, w1)
    return sum(w * c[k] for w, k in zip(weights, ("diag", "off", "null")))


def expected(base: dict, post: dict, channels: list[int], keep: str, weights) -> tuple[dict, float, float]:
    """The variant's state dict W0 + M ⊙ Σ w_c ΔW_c (other tensors: the base's), with the restricted and the
    unrestricted update energies."""
    out, kept2, all2 = {}, 0.0, 0.0
    for name, w0 in base.items():
        if role(name) is None:
            out[name] = w0.astype(np.float64)
            continue
        a, b = w0.astype(np.float64), post[name].astype(np.float64)
        x = update(a, b, weights)
        m = x * mask(name, a.shape, channels, keep)
        out[name] = a + m
        kept2, all2 = kept2 + float((m * m).sum()), all2 + float((x * x).sum())
    return out, kept2, all2


def channels_file(path: Path, channels, hidden=H, role_="base") -> Path:
    path.write_text(json.dumps({role_: {"channels": channels, "hidden_size": hidden, "fraction": 0.1}}))
    return path


def build(store, name, channels, **kw):
    b = VariantBuilder(store, parse_variant(name), channels=channels, **kw)
    return {n: t.double().numpy() for n, t in b.tensors()}, b


@pytest.fixture(scope="module")
def f64(tmp_path_factory):
    """float64 Qwen2-layout pair (planted shares), decomposed in float64, and its channels.json."""
    root = tmp_path_factory.mktemp("chv")
    base, post = make_transition(
        root,
        TINY,
        family="qwen2",
        dtype="float64",
        update=Update(r_delta=1e-2, plant=(0.2, 0.5, 0.3)),
        max_shard_bytes=60_000,
    )
    store = root / "s"
    run_transition(
        no_track_config(base=str(base), post=str(post), store=store, compute_dtype="float64", store_dtype="float64")
    )
    return store, tensors(base), tensors(post), channels_file(root / "channels.json", CHANNELS)


def check(got: dict, want: dict, base: dict, post: dict, tol: float) -> None:
    """Every tensor of the variant: within ``tol`` × ‖ΔW‖ of the reference (per tensor) where decomposed,
    the base's tensor bit for bit elsewhere."""
    assert set(got) == set(want)
    for name, w in want.items():
        if role(name) is None:  # not decomposed: the rest source's (the base's) tensor, bit for bit
            assert np.array_equal(got[name], base[name]), name
            continue
        scale = np.linalg.norm(post[name].astype(np.float64) - base[name])
        assert np.linalg.norm(got[name] - w) <= tol * scale, name


@pytest.mark.parametrize("keep", ["outlier", "rest"])
def test_channel_variants_equal_an_independent_state_dict(f64, keep):
    store, base, post, path = f64
    got, b = build(store, f"channels-{keep}", path, dtype="float64")
    want, kept2, all2 = expected(base, post, CHANNELS, keep, (1, 1, 1))
    check(got, want, base, post, 1e-12)
    for name in want:  # off the kept channels the variant is W0 exactly
        if role(name):
            off = ~mask(name, base[name].shape, CHANNELS, keep)
            assert np.array_equal(got[name][off], base[name][off]), name
    s = b.report.summary()
    assert s["channels"] == keep and s["outlier_channels"] == len(CHANNELS)
    assert s["kept_channels"] == (len(CHANNELS) if keep == "outlier" else H - len(CHANNELS))
    assert s["channel_share"] == pytest.approx(kept2 / all2, rel=1e-9)
    assert s["fidelity"] < 1e-12 and s["energy_survived"] == pytest.approx(1.0)
    assert b.metadata()["channels"]["set"] == keep and b.metadata()["channels"]["count"] == len(CHANNELS)


def test_outlier_plus_rest_minus_base_is_proj(f64):
    store, base, post, path = f64
    v = {n: build(store, n, path, dtype="float64") for n in ("channels-outlier", "channels-rest")}
    proj = {n: t.double().numpy() for n, t in VariantBuilder(store, parse_variant("proj"), dtype="float64").tensors()}
    for name in proj:
        total = v["channels-outlier"][0][name] + v["channels-rest"][0][name] - base[name]
        assert np.linalg.norm(total - proj[name]) <= 1e-13 * np.linalg.norm(proj[name]), name
    shares = [b.report.summary()["channel_share"] for _, b in v.values()]
    assert sum(shares) == pytest.approx(1.0, abs=1e-12) and 0 < shares[0] < 1
    # the pair is a fair test: each side holds a part of the update
    assert shares[0] > 0.5 * len(CHANNELS) / H


def test_a_rounding_cast_is_measured_on_the_kept_channels(f64):
    """float64 checkpoints written as a float32 channels-outlier: the report measures the cast against the
    restricted update (the float64 reference), and the channel share does not depend on the cast."""
    store, base, post, path = f64
    got, b = build(store, "channels-outlier", path, dtype="float32")
    want, kept2, all2 = expected(base, post, CHANNELS, "outlier", (1, 1, 1))
    e2 = sum(float(((got[n] - want[n]) ** 2).sum()) for n in want if role(n))
    s = b.report.summary()
    assert 0 < s["fidelity"] == pytest.approx((e2 / kept2) ** 0.5, rel=1e-6)
    assert s["channel_share"] == pytest.approx(kept2 / all2, rel=1e-9)


@pytest.mark.parametrize(
    "name,keep,weights",
    [
        ("channels-rest-offnull", "rest", WEIGHTS["offnull"]),
        ("channels-outlier-diag", "outlier", WEIGHTS["diag"]),
        ("channels-outlier-null", "outlier", WEIGHTS["null"]),
        ("channels-rest-off", "rest", WEIGHTS["off"]),
        ("mix=diag:0.5,off:1,channels:rest", "rest", (0.5, 1, 0)),
    ],
)
def test_crossed_variants_equal_float64_components_on_the_channels(f64, name, keep, weights):
    store, base, post, path = f64
    got, b = build(store, name, path, dtype="float64")
    want, kept2, all2 = expected(base, post, CHANNELS, keep, weights)
    check(got, want, base, post, 1e-6)
    assert b.report.summary()["channel_share"] == pytest.approx(kept2 / all2, rel=1e-6)


def test_component_shares_of_outlier_and_rest_add_to_one(f64):
    store, _, _, path = f64
    for comp in ("diag", "offnull"):
        s = [
            build(store, f"channels-{k}-{comp}", path, dtype="float64")[1].report.summary()["channel_share"]
            for k in ("outlier", "rest")
        ]
        assert sum(s) == pytest.approx(1.0, abs=1e-9), comp


# ---------------------------------------------------------------------------- families


@pytest.mark.parametrize(
    "family,settings", [("qwen3_moe", {}), ("gpt_oss", {}), ("phi3", {}), ("phi3", {"split_fused": True})]
)
def test_fused_and_expert_families(tmp_path, family, settings):
    """Experts stored per expert (with a router), 3-D expert tensors stored in×out, fused qkv / gate_up (whole
    or split into row blocks): the variants equal the independent state dict, the mask taken by role."""
    pytest.importorskip("transformers")
    from grrr_stream.fixtures.synthetic_hf import make_hf_transition

    base_dir, post_dir = make_hf_transition(tmp_path, family)
    store = tmp_path / "s"
    run_transition(
        no_track_config(
            base=str(base_dir),
            post=str(post_dir),
            store=store,
            band_edges=[],
            angle_edges=[],
            compute_dtype="float64",
            store_dtype="float64",
            **settings,
        )
    )
    base, post = tensors(base_dir), tensors(post_dir)
    hidden = json.loads((base_dir / "config.json").read_text())["hidden_size"]
    chans = [1, 7, hidden - 2]
    path = channels_file(tmp_path / "channels.json", chans, hidden)
    # what this test calls decomposed is what the store decomposed (no tensor missed, none extra)
    decomposed = {
        a.get("tensor") or n for n, a in VariantBuilder(store, parse_variant("proj")).transition.matrices.items()
    }
    assert decomposed == {n for n in base if role(n)}
    names = [("channels-outlier", "outlier", (1, 1, 1)), ("channels-rest", "rest", (1, 1, 1))]
    if not settings:  # a split tensor's components are its row blocks': the whole-tensor reference is for proj only
        names.append(("channels-rest-offnull", "rest", (0, 1, 1)))
    for name, keep, weights in names:
        got, _ = build(store, name, path, dtype="float32")
        want, _, _ = expected(base, post, chans, keep, weights)
        check(got, want, base, post, 1e-12 if weights == (1, 1, 1) else 1e-5)


# ---------------------------------------------------------------------------- the store's rounding


def test_sixteen_bit_store_rounding_is_counted_on_the_kept_channels(tmp_path):
    """A bfloat16 store rounds diag P and the null residual: the reported error of a channel variant (its
    rounding on the kept channels only) matches the error measured against float64, and the bound holds."""
    base_dir, post_dir = make_transition(
        tmp_path, TINY, family="llama", dtype="float32", update=Update(r_delta=3e-4, plant=(0.1, 0.6, 0.3))
    )
    store = tmp_path / "s"
    run_transition(no_track_config(base=str(base_dir), post=str(post_dir), store=store, store_dtype="bfloat16"))
    base, post = tensors(base_dir), tensors(post_dir)
    chans = list(range(0, H, 3))  # a third of the channels: enough entries for the estimate to settle
    path = channels_file(tmp_path / "channels.json", chans)
    for name, keep, weights in (
        ("channels-outlier-diag", "outlier", (1, 0, 0)),
        ("channels-rest-offnull", "rest", (0, 1, 1)),
        ("channels-outlier-null", "outlier", (0, 0, 1)),
    ):
        got, b = build(store, name, path, dtype="float64")
        want, _, _ = expected(base, post, chans, keep, weights)
        e2 = i2 = 0.0
        for n in want:
            if role(n):
                e2 += float(((got[n] - want[n]) ** 2).sum())
                i2 += float(((want[n] - base[n]) ** 2).sum())
        err = (e2 / i2) ** 0.5
        s = b.report.summary()
        assert err > 5e-5, name  # the rounding is there to be measured
        assert s["total_error"] == pytest.approx(err, rel=0.25), (name, s, err)
        assert err <= s["store_error_bound"] * (1 + 1e-3), name


# ---------------------------------------------------------------------------- files, refusals, CLI


@pytest.mark.parametrize(
    "content,match",
    [
        ("not json", "not JSON"),
        ('{"post": {"channels": [1]}}', "no base.channels"),
        ('{"base": {"channels": "1,2"}}', "list of integers"),
        ('{"base": {"channels": [1, 2.5]}}', "list of integers"),
        ('{"base": {"channels": [true]}}', "list of integers"),
        ('{"base": {"channels": [-1, 3]}}', "negative"),
        ('{"base": {"channels": [3, 3]}}', "twice"),
        ("[1, 2]", "no base.channels"),
    ],
)
def test_bad_channels_files_are_refused(tmp_path, content, match):
    (tmp_path / "c.json").write_text(content)
    with pytest.raises(ConfigError, match=match):
        load_channels(tmp_path / "c.json")


def test_channels_file_roles_and_missing_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"base": {"channels": [9, 2]}, "post": {"channels": [4]}}))
    assert load_channels(path).channels == (2, 9) and load_channels(path, "post").channels == (4,)
    with pytest.raises(ConfigError, match="does not exist"):
        load_channels(tmp_path / "nowhere.json")


def test_channel_variants_refused_before_building(f64, tmp_path):
    store, _, _, _ = f64
    with pytest.raises(ConfigError, match="--channels PATH"):
        VariantBuilder(store, parse_variant("channels-outlier"))
    with pytest.raises(ConfigError, match=r"out of range for hidden size 64"):
        VariantBuilder(
            store, parse_variant("channels-rest"), channels=channels_file(tmp_path / "a.json", [3, 64], hidden=None)
        )
    with pytest.raises(ConfigError, match="hidden size 128"):
        VariantBuilder(store, parse_variant("channels-rest"), channels=channels_file(tmp_path / "b.json", [3], 128))
    # a variant that is not a channel variant ignores a channel set
    assert VariantBuilder(store, parse_variant("diag"), channels=tmp_path / "a.json").channels is None
    # a module outside the residual stream (a custom pattern's) has no channel to be restricted to
    matrices = {"m.kv_a_proj": {"layer": 0, "module": "kv_a_proj", "shape": [16, 64]}}
    with pytest.raises(ConfigError, match="kv_a_proj neither read nor write"):
        channel_restriction("outlier", load_channels(channels_file(tmp_path / "c.json", [1])), matrices, "x")


@pytest.mark.parametrize(
    "text,match",
    [
        ("channels-middle", "unknown variant"),
        ("channels-outlier-proj", "unknown variant"),
        ("channels-rest=diag:1", "reserved"),
        ("x=diag:1,channels:both", "channels must be one of"),
    ],
)
def test_channel_variant_names(text, match):
    with pytest.raises(ConfigError, match=match):
        parse_variant(text)


def test_channel_variant_specs_and_unchanged_components():
    s = {x.name: x for x in parse_variants(["channels-outlier", "channels-rest-offnull", "offnull"])}
    assert s["channels-outlier"].components() == {"diag": 1.0, "off": 1.0, "null": 1.0, "channels": "outlier"}
    assert s["channels-rest-offnull"].components() == {"diag": 0.0, "off": 1.0, "null": 1.0, "channels": "rest"}
    assert "channels" not in s["offnull"].components()  # other variants' components (and sweep keys) unchanged


def test_cli_and_folders(f64, tmp_path, capsys):
    store, base, post, path = f64
    rc = main(
        ["variants", "--store", str(store), "--variant", "channels-outlier", "--out", str(tmp_path / "o"), "--no-track"]
    )
    assert rc == 2 and "--channels PATH" in capsys.readouterr().err
    rc = main(
        [
            "variants",
            "--store",
            str(store),
            "--variant",
            "channels-outlier",
            "--variant",
            "channels-rest-diag",
            "--out",
            str(tmp_path / "o"),
            "--no-track",
            "--channels",
            str(path),
            "--dtype",
            "float64",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "channels-rest-diag: its 58 'rest' channels hold" in out
    got = tensors(tmp_path / "o" / "channels-outlier")
    want, _, _ = expected(base, post, CHANNELS, "outlier", (1, 1, 1))
    check(got, want, base, post, 1e-12)
    meta = json.loads((tmp_path / "o" / "channels-outlier" / "grrr_variant.json").read_text())
    assert meta["settings"]["channels"]["count"] == len(CHANNELS) and meta["fidelity"]["channels"] == "outlier"
    header = (tmp_path / "o" / "channels-outlier.fidelity.csv").read_text().splitlines()[0].split(",")
    assert "unrestricted_norm" in header
    # the same folder with another channel set is a variant built with other settings, not skipped
    other = channels_file(tmp_path / "other.json", [1, 2])
    with pytest.raises(ConfigError, match="other settings"):
        write_variant(
            VariantBuilder(store, parse_variant("channels-outlier"), channels=other, dtype="float64"),
            tmp_path / "o" / "channels-outlier",
        )


# ---------------------------------------------------------------------------- sweeps


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    root = tmp_path_factory.mktemp("chv_chain")
    for name, updates in {"base": (), "sft": (Update(r_delta=2e-2, plant=(0.25, 0.45, 0.30)),)}.items():
        write_model(root / name, TINY, family="qwen2", dtype="float32", seed=0, updates=updates)
    return root


def sweep_config(chain: Path, workdir: Path, names: list[str], channels=None, evaluated=None) -> dict:
    return {
        "name": "chv",
        "workdir": str(workdir),
        "chains": [
            {
                "name": "syn",
                "base": {"id": "base", "source": str(chain / "base")},
                "models": [{"id": "sft", "source": str(chain / "sft"), "parent": "base", "method": "SFT"}],
            }
        ],
        "decomposition": {"device": "cpu"},
        "statistics": {"enabled": False},
        "variants": {"names": names, "transitions": "all", **({"channels": channels} if channels else {})},
        "evaluation": {
            "enabled": evaluated is not None,
            "variants": evaluated,
            "transitions": "all",
            "benchmarks": ["math500"],
            "limit": 2,
        },
        "tracking": {"enabled": False},
        "progress": False,
    }


def test_sweep_plans_channel_variants_only_with_a_channels_file(chain, tmp_path):
    from grrr_stream.sweep import plan_sweep
    from grrr_stream.sweep.config import SweepConfig

    def plan(names, channels=None, evaluated=None):
        return plan_sweep(SweepConfig.model_validate(sweep_config(chain, tmp_path / "w", names, channels, evaluated)))

    with pytest.raises(ConfigError, match="need the outlier channels: set variants.channels"):
        plan(["diag", "channels-outlier"])
    with pytest.raises(ConfigError, match="does not exist"):
        plan(["channels-outlier"], str(tmp_path / "missing.json"))
    a = channels_file(tmp_path / "a.json", CHANNELS)
    b = channels_file(tmp_path / "b.json", [1, 2, 3])
    ref = {u.id: u.key for u in plan(["diag"], evaluated=["base", "diag"]).units}
    with_channels = plan(["diag", "channels-outlier", "channels-rest-offnull"], str(a), ["base", "diag"])
    keys = {u.id: u.key for u in with_channels.units}
    # units without channel variants keep their keys, whatever variants.channels says
    assert all(keys[u] == k for u, k in ref.items())
    unit = with_channels.unit("variant/base-to-sft/channels-outlier")
    assert unit.params.channels == str(a.absolute()) and unit.params.channels_key == load_channels(a).digest
    assert with_channels.unit("variant/base-to-sft/diag").params.channels is None
    # the channel set, not the file's place, keys a channel variant; a mapping picks the parent's file
    moved = channels_file(tmp_path / "moved.json", CHANNELS)
    other = plan(["channels-outlier"], {"base": str(b)}, ["channels-outlier", "base"])
    same = plan(["channels-outlier"], str(moved))
    assert same.unit("variant/base-to-sft/channels-outlier").key == keys["variant/base-to-sft/channels-outlier"]
    assert other.unit("variant/base-to-sft/channels-outlier").key != keys["variant/base-to-sft/channels-outlier"]
    ev = other.unit("evaluate/base-to-sft")
    assert ev.params.channels == str(b.absolute()) and ev.key != ref["evaluate/base-to-sft"]
    with pytest.raises(ConfigError, match="no channels.json for base"):
        plan(["channels-outlier"], {"sft": str(b)})


def test_sweep_builds_a_channel_variant(chain, tmp_path):
    from grrr_stream.sweep import plan_sweep, run_sweep
    from grrr_stream.sweep.config import SweepConfig

    path = channels_file(tmp_path / "c.json", CHANNELS)
    plan = plan_sweep(SweepConfig.model_validate(sweep_config(chain, tmp_path / "w", ["channels-rest"], str(path))))
    run_sweep(plan, progress=False)
    folder = Path(plan.unit("variant/base-to-sft/channels-rest").out)
    got = tensors(folder)
    base, post = tensors(chain / "base"), tensors(chain / "sft")
    want, _, _ = expected(base, post, CHANNELS, "rest", (1, 1, 1))
    check(
        {n: t.astype(np.float64) for n, t in got.items()},
        want,
        {n: t.astype(np.float64) for n, t in base.items()},
        post,
        1e-12,
    )
    assert json.loads((folder / "grrr_variant.json").read_text())["settings"]["channels"]["file"] == str(
        path.absolute()
    )


# ---------------------------------------------------------------------------- evaluation


def test_evaluation_takes_channel_variants(tmp_path):
    """The evaluation pipeline evaluates channel variants like any other (a stand-in engine, no vLLM): each
    streamed into the engine, its channel set on record; without a channels.json it refuses before starting."""
    pytest.importorskip("math_verify")
    from helpers.stand_in import SETTINGS, StandInEngine, sums_transition

    from grrr_stream.evaluation.pipeline import EvaluationRequest, run_evaluation
    from grrr_stream.evaluation.settings import EvaluationOptions

    base, post, store, bench_root = sums_transition(tmp_path, 3, 4)
    names = ["full", "channels-outlier", "channels-rest-offnull"]
    StandInEngine.started = []
    with pytest.raises(ConfigError, match="--channels PATH"):
        run_evaluation(
            EvaluationRequest(store, tmp_path / "e", names, ["sums"], bench_root, EvaluationOptions(engine=SETTINGS)),
            engine_factory=StandInEngine,
            log=lambda m: None,
        )
    assert StandInEngine.started == []
    path = channels_file(tmp_path / "c.json", CHANNELS)
    res = run_evaluation(
        EvaluationRequest(
            store, tmp_path / "e", names, ["sums"], bench_root, EvaluationOptions(engine=SETTINGS), channels=path
        ),
        engine_factory=StandInEngine,
        log=lambda m: None,
    )
    assert {r["variant"] for r in res.accuracy_rows} == set(names)
    saved = json.loads((tmp_path / "e" / "evaluation.json").read_text())["variants"]
    assert saved["channels-rest-offnull"]["channels"]["digest"] == load_channels(path).digest
    assert "channels" not in saved["full"]
