"""Residual channels: per-channel update energy in the streaming pass, its Zarr arrays, the enrichment
statistics and `grrr-stream channel-stats` (issue 24, §1 and §3)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.common import no_track_config
from safetensors.numpy import load_file, save_file

from grrr_stream import plots
from grrr_stream.channels.enrichment import enrichment
from grrr_stream.cli.entry import main
from grrr_stream.config import result_settings
from grrr_stream.decompose.run import run_transition
from grrr_stream.fixtures.synthetic import TINY, Update, make_transition
from grrr_stream.store.transition_store import node_key

xr = pytest.importorskip("xarray")
H = TINY.hidden
# the spec, independently of grrr_stream.geometry.channel_energy: the residual stream is a reader's input and a
# writer's output; torch's Linear stores out×in, gpt-oss's 3-D expert tensors in×out
READ, WRITE = (
    {"q_proj", "k_proj", "v_proj", "qkv_proj", "gate_proj", "up_proj", "gate_up_proj", "router"},
    {"o_proj", "down_proj"},
)


@pytest.fixture(autouse=True)
def _no_figures(monkeypatch):
    for fig in ("energy_fractions_by_layer", "band_energy_by_module", "normalized_spectra"):
        monkeypatch.setattr(plots, fig, lambda *a, **k: None)  # most of the time, not tested here


def tensors(folder: Path) -> dict[str, np.ndarray]:
    out = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        out.update(load_file(f))
    return out


def reference(W0: np.ndarray, W1: np.ndarray, axis: int) -> np.ndarray:
    """(channels, 3): the column (axis 1) or row (axis 0) squared norms of ΔW_diag, ΔW_off, ΔW_null, each
    built explicitly in float64 from the checkpoints' matrices and an exact SVD."""
    W0, dW = W0.astype(np.float64), W1.astype(np.float64) - W0.astype(np.float64)
    U, _, Vt = np.linalg.svd(W0, full_matrices=False)
    P = U.T @ dW @ Vt.T
    D = np.diag(np.diag(P))
    parts = (U @ D @ Vt, U @ (P - D) @ Vt, dW - U @ P @ Vt)
    return np.stack([np.square(x).sum(axis=0 if axis == 1 else 1) for x in parts], axis=1)


def check_against_reference(store: Path, base: Path, post: Path, hidden: int) -> int:
    """Every stored matrix's channel_energy equals the float64 reference on its residual axis; returns how many."""
    t0, t1 = tensors(base), tensors(post)
    tree = xr.open_datatree(store, engine="zarr", consolidated=False)
    n = 0
    for key, node in tree["matrices"].children.items():
        a = node.attrs
        src = a.get("tensor", a["name"])
        W0, W1 = t0[src], t1[src]
        if "index" in a:  # a slice of a 3-D expert tensor: stored in×out
            W0, W1 = W0[a["index"]], W1[a["index"]]
        if "rows" in a:
            W0, W1 = W0[slice(*a["rows"])], W1[slice(*a["rows"])]
        reads = a["module"] in READ
        axis = (1 if reads else 0) if "index" not in a else (0 if reads else 1)
        assert W0.shape[axis] == hidden, (a["name"], W0.shape)  # the residual dimension is the hidden size
        got = node["channel_energy"]
        assert got.dims == ("channel", "component")
        ref = reference(W0, W1, axis)
        np.testing.assert_allclose(got.values, ref, rtol=2e-3, atol=1e-6 * ref.sum(), err_msg=a["name"])
        # summed over channels: the metrics' energies of the same components
        m = a["metrics"]
        np.testing.assert_allclose(
            got.values.sum(axis=0), [m["e_diag"], m["e_off"], m["e_null"]], rtol=1e-4, atol=1e-9 * ref.sum()
        )
        n += 1
    return n


@pytest.mark.parametrize("shape", [(50, 20), (20, 50)])
@pytest.mark.parametrize("axis", [0, 1])
def test_kernel_formula_in_blocks_of_channels(monkeypatch, shape, axis):
    """channel_energies over several blocks of channels (ROWS = 3) equals the explicit float64 components."""
    import torch

    from grrr_stream.geometry import channel_energy as energy

    monkeypatch.setattr(energy, "ROWS", 3)
    rng = np.random.default_rng(5)
    W0 = rng.standard_normal(shape)
    W1 = W0 + 0.1 * rng.standard_normal(shape)
    U, _, Vt = np.linalg.svd(W0, full_matrices=False)
    dW = W1 - W0
    P = U.T @ dW @ Vt.T
    got = energy.channel_energies(*(torch.from_numpy(x) for x in (P, dW - U @ P @ Vt, U, Vt.T)), axis)
    np.testing.assert_allclose(got.numpy(), reference(W0, W1, axis), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("shape", [(50, 20), (20, 50), (30, 30)])
@pytest.mark.parametrize("axis", [0, 1])
def test_the_projections_intermediate_gives_the_same_energies(monkeypatch, shape, axis):
    """Where the frame's side along the channels is complete (columns of a tall or square matrix, rows of a wide
    or square one), project(lift=axis) keeps V0 Pᵀ or U0 P and the energies come without a product with P:
    equal to the explicit float64 components, in blocks of channels. Elsewhere nothing is kept."""
    import torch

    from grrr_stream.geometry import channel_energy as energy
    from grrr_stream.geometry.frame import compute_frame, project

    monkeypatch.setattr(energy, "ROWS", 7)
    rng = np.random.default_rng(sum(shape) + axis)
    W0 = rng.standard_normal(shape)
    W1 = W0 + 0.1 * rng.standard_normal(shape)
    frame = compute_frame(torch.from_numpy(W0), degenerate_gap=None)
    proj = project(torch.from_numpy(W1 - W0), frame, lift=axis)
    complete = shape[1] <= shape[0] if axis == 1 else shape[0] <= shape[1]
    assert (proj.lifted is not None) == complete
    if complete:
        side = frame.V if axis == 1 else frame.U
        P = proj.P
        assert torch.allclose(proj.lifted, side @ (P.mT if axis == 1 else P), rtol=0, atol=1e-12)
    got = energy.channel_energies(proj.P, proj.null, frame.U, frame.V, axis, proj.lifted)
    np.testing.assert_allclose(got.numpy(), reference(W0, W1, axis), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("axis", [0, 1])
def test_float32_off_energy_with_the_intermediate_is_as_accurate_as_the_product(axis):
    """A nearly diagonal update (off energy 1e-6 of the diagonal's): the off energy per channel from V0 Pᵀ − V0 D
    cancels most of its terms, yet in float32 it is as close to the float64 reference as the r×r product's."""
    import torch

    from grrr_stream.geometry.channel_energy import channel_energies
    from grrr_stream.geometry.frame import compute_frame, project

    rng = np.random.default_rng(11 + axis)
    n = 96
    Q1, _ = np.linalg.qr(rng.standard_normal((n, n)))
    Q2, _ = np.linalg.qr(rng.standard_normal((n, n)))
    W0 = (Q1 * np.linspace(2, 1, n)) @ Q2.T
    P0 = np.diag(rng.standard_normal(n)) + 1e-3 * rng.standard_normal((n, n))
    W1 = W0 + 1e-3 * Q1 @ P0 @ Q2.T
    ref = reference(W0, W1, axis)[:, 1]
    frame = compute_frame(torch.from_numpy(W0).float(), degenerate_gap=None)
    dW = torch.from_numpy(W1).float() - torch.from_numpy(W0).float()
    proj = project(dW.clone(), frame, lift=axis)
    assert proj.lifted is not None
    lifted = channel_energies(proj.P, proj.null, frame.U, frame.V, axis, proj.lifted)[:, 1].numpy()
    product = channel_energies(proj.P, proj.null, frame.U, frame.V, axis)[:, 1].numpy()
    err_lifted, err_product = (np.abs(x - ref).max() / ref.max() for x in (lifted, product))
    assert err_product < 0.01  # the inputs' float32 rounding itself is not small here
    assert err_lifted <= 2 * err_product + 1e-6, (err_lifted, err_product)


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    """A tiny float32 Llama-layout pair (q/o square, k/v wide, gate/up tall, down wide) and its store."""
    root = tmp_path_factory.mktemp("channels")
    base, post = make_transition(root / "pair", TINY, family="llama", dtype="float32", update=Update(r_delta=1e-2))
    store = root / "store"
    with pytest.MonkeyPatch.context() as mp:
        for fig in ("energy_fractions_by_layer", "band_energy_by_module", "normalized_spectra"):
            mp.setattr(plots, fig, lambda *a, **k: None)
        run_transition(no_track_config(base=str(base), post=str(post), store=store))
    return base, post, store


@pytest.mark.filterwarnings("ignore:Object at .* is not recognized")
def test_energies_match_float64_numpy_on_readers_and_writers(dense):
    base, post, store = dense
    assert check_against_reference(store, base, post, H) == 14


@pytest.mark.filterwarnings("ignore:Object at .* is not recognized")
def test_channel_arrays_have_named_dimensions_through_open_store(dense):
    from grrr_stream import open_store

    _, _, store = dense
    ch = open_store(store)["channels"]
    e = ch["energy"]
    assert e.dims == ("layer", "module", "channel", "component")
    assert e.shape == (2, 7, H, 3) and list(ch["layer"].values) == [0, 1]
    assert ch.attrs["modules"] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert ch.attrs["components"] == ["diag", "off", "null"] and ch.attrs["left_out"] == {}
    assert ch.attrs["sides"]["o_proj"] == "writer" and ch.attrs["sides"]["gate_proj"] == "reader"
    one = open_store(store)[f"matrices/{node_key('model.layers.1.mlp.down_proj.weight')}"]["channel_energy"]
    np.testing.assert_array_equal(e.values[1, 6], one.values)


@pytest.mark.parametrize("family", ["phi3", "gpt_oss"])
@pytest.mark.filterwarnings("ignore:Object at .* is not recognized")
def test_fused_and_3d_expert_families_take_the_residual_side(tmp_path, family):
    """Phi-3's fused qkv/gate_up (as stored and split) and gpt-oss's in×out expert slices and router."""
    from grrr_stream.fixtures.synthetic_hf import make_hf_transition

    base, post = make_hf_transition(tmp_path / "pair", family)
    hidden = json.loads((base / "config.json").read_text())["hidden_size"]
    runs = {"as-stored": {}} if family == "gpt_oss" else {"as-stored": {}, "split": {"split_fused": True}}
    for label, extra in runs.items():
        store = tmp_path / label
        run_transition(no_track_config(base=str(base), post=str(post), store=store, **extra))
        assert check_against_reference(store, base, post, hidden) > 0
    if family == "gpt_oss":
        ch = xr.open_datatree(tmp_path / "as-stored", engine="zarr", consolidated=False)["channels"]
        assert ch["expert_energy"].dims == ("layer", "expert_module", "expert", "channel", "component")
        assert ch.attrs["expert_modules"] == ["gate_up_proj", "down_proj"] and list(ch["expert"].values) == [0, 1, 2, 3]
        assert "router" in ch.attrs["modules"] and ch.attrs["sides"]["router"] == "reader"


def test_setting_off_stores_nothing_and_the_default_keeps_result_keys(dense, tmp_path):
    base, post, _ = dense
    on = no_track_config(base=str(base), post=str(post), store=tmp_path / "s")
    off = no_track_config(base=str(base), post=str(post), store=tmp_path / "s", channel_energy=False)
    assert "channel_energy" not in result_settings(on) and result_settings(off)["channel_energy"] is False
    run_transition(
        no_track_config(
            base=str(base), post=str(post), store=tmp_path / "s", channel_energy=False, modules=["down_proj"]
        )
    )
    assert not (tmp_path / "s" / "channels").exists()
    assert main(["channel-stats", str(tmp_path / "s"), "--channels", "1,2"]) == 2


# -- enrichment ---------------------------------------------------------------------------------------


def test_enrichment_against_a_hand_computation():
    """Two matrices, four channels, set {0}: shares, ratio, bootstrap interval and p by hand."""
    e = np.zeros((2, 4, 3))
    e[0, :, 0] = [4, 1, 1, 2]  # diag of matrix 0: share of channel 0 = 4/8
    e[1, :, 0] = [1, 1, 1, 1]  # matrix 1: 1/4
    e[:, :, 1] = 1.0  # off: uniform
    e[0, :, 2] = [0, 1, 1, 1]  # null: nothing on channel 0
    recs = [{"module": "q_proj", "side": "reader"}, {"module": "o_proj", "side": "writer"}]
    rows = {(r["group"], r["component"]): r for r in enrichment(e, recs, np.array([0]), draws=4000, seed=3)}
    r = rows[("all", "diag")]
    assert r["energy_share"] == pytest.approx(5 / 12) and r["channel_share"] == 0.25
    assert r["ratio"] == pytest.approx(5 / 3)
    # bootstrap over the 2 matrices: both draws of matrix 1 (ratio 1) or of matrix 0 (ratio 2) each have
    # probability 1/4, so the 2.5 % and 97.5 % quantiles are exactly those
    assert (r["ci_lo"], r["ci_hi"]) == (pytest.approx(1.0), pytest.approx(2.0))
    # null: a random single channel; shares 5/12, 2/12, 2/12, 3/12 → only channel 0 reaches 5/12: p → 1/4
    assert r["p_value"] == pytest.approx(0.25, abs=0.03)
    assert rows[("all", "off")]["ratio"] == pytest.approx(1.0) and rows[("all", "off")]["p_value"] == 1.0
    assert rows[("all", "null")]["ratio"] == 0.0 and rows[("all", "null")]["p_value"] == 1.0
    # readers alone: matrix 0, share 4/8 → ratio 2, a one-matrix bootstrap has no spread
    rd = rows[("reader", "diag")]
    assert rd["ratio"] == pytest.approx(2.0) and rd["ci_lo"] == rd["ci_hi"] == pytest.approx(2.0)
    assert rows[("module=o_proj", "diag")]["ratio"] == pytest.approx(1.0)


def test_enrichment_of_a_concentrated_and_an_isotropic_energy():
    rng = np.random.default_rng(0)
    e = rng.exponential(size=(20, 200, 3))
    S = np.array([3, 50, 77, 120, 199])
    iso = {
        (r["group"], r["component"]): r
        for r in enrichment(e, [{"module": "q_proj", "side": "reader"}] * 20, S, draws=1000, seed=0)
    }
    e[:, S, :] *= 30
    conc = {
        (r["group"], r["component"]): r
        for r in enrichment(e, [{"module": "q_proj", "side": "reader"}] * 20, S, draws=1000, seed=0)
    }
    for c in ("diag", "off", "null"):
        assert 0.7 < iso[("all", c)]["ratio"] < 1.3 and iso[("all", c)]["p_value"] > 0.05
        assert iso[("all", c)]["ci_lo"] < 1 < iso[("all", c)]["ci_hi"]
        assert conc[("all", c)]["ratio"] > 10 and conc[("all", c)]["p_value"] == 1 / 1001
        assert conc[("all", c)]["ci_lo"] > conc[("all", c)]["null_q975"]


def planted_post(base: Path, post: Path, channels: np.ndarray, scale: float = 1e-2) -> None:
    """post = base + an update on ``channels`` only: readers' columns, writers' rows (Linear layout)."""
    shutil.copytree(base, post)
    rng = np.random.default_rng(1)
    for f in sorted(post.glob("*.safetensors")):
        ts = load_file(f)
        for name, w in ts.items():
            module = name.split(".")[-2]
            if w.ndim != 2 or module not in READ | WRITE:
                continue
            d = np.zeros_like(w)
            if module in READ:
                d[:, channels] = rng.standard_normal((w.shape[0], len(channels))) * scale * np.abs(w).mean()
            else:
                d[channels, :] = rng.standard_normal((len(channels), w.shape[1])) * scale * np.abs(w).mean()
            ts[name] = w + d
        save_file(ts, f, metadata={"format": "pt"})


@pytest.mark.filterwarnings("ignore:Object at .* is not recognized")
def test_channel_stats_on_a_planted_and_an_isotropic_update(dense, tmp_path, capsys):
    base, iso_post, iso_store = dense
    S = np.array([2, 9, 30, 41])
    planted_post(base, tmp_path / "post", S)
    store = tmp_path / "store"
    run_transition(no_track_config(base=str(base), post=str(tmp_path / "post"), store=store))
    (tmp_path / "channels.json").write_text(json.dumps({"channels": S.tolist(), "hidden_size": H}))
    for st, out in ((store, tmp_path / "planted"), (iso_store, tmp_path / "iso")):
        assert (
            main(
                [
                    "channel-stats",
                    str(st),
                    "--channels",
                    str(tmp_path / "channels.json"),
                    "--draws",
                    "500",
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
    assert "reader" in capsys.readouterr().out
    import pandas as pd

    planted = pd.read_csv(tmp_path / "planted" / "channel_stats.csv", keep_default_na=False).set_index(
        ["group", "component"]
    )
    iso = pd.read_csv(tmp_path / "iso" / "channel_stats.csv", keep_default_na=False).set_index(["group", "component"])
    # the null residual keeps the update's support (tall readers, wide writers: the frame spans the short
    # side); diag and off are mixed over channels by V0 / U0, so they need not be concentrated
    for g in ("all", "module=gate_proj", "module=down_proj"):
        assert planted.loc[(g, "null"), "ratio"] > 0.9 * H / len(S)
        assert planted.loc[(g, "null"), "p_value"] == pytest.approx(1 / 501)
    for c in ("diag", "off", "null"):
        assert 0.6 < iso.loc[("all", c), "ratio"] < 1.5 and iso.loc[("all", c), "p_value"] > 0.05
    # a channel file chosen for another model is refused
    (tmp_path / "other.json").write_text(json.dumps({"channels": [1], "hidden_size": 4096}))
    assert main(["channel-stats", str(store), "--channels", str(tmp_path / "other.json")]) == 2


@pytest.mark.parametrize("axis", [0, 1])
def test_squared_norms_against_float64(monkeypatch, axis):
    """The null residual's squared column (axis 1) or row (axis 0) norms, summed over several blocks of rows."""
    import torch

    from grrr_stream.geometry import channel_energy as energy

    monkeypatch.setattr(energy, "NULL_ROWS", 7)
    X = np.random.default_rng(3).standard_normal((50, 33)) * np.logspace(0, -3, 33)
    got = energy.squared_norms(torch.from_numpy(X).float(), axis).double().numpy()
    ref = np.square(X).sum(axis=0 if axis == 1 else 1)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=2e-6)
