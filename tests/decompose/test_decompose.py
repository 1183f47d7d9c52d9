"""End-to-end tests of one transition: known answers, store layout, resume, frame cache."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr
from helpers.common import no_track_config, store_snapshot
from safetensors.torch import load_file

from grrr_stream.decompose.run import run_transition

REQUIRED_COLUMNS = {
    "name",
    "layer",
    "module",
    "f_diag",
    "f_off",
    "f_null",
    "r_delta",
    "sv_cos",
    "delta_max",
    "sr_w0",
    "sr_delta",
    "sr_w1",
    "alpha",
}


def load_all(folder: Path) -> dict[str, torch.Tensor]:
    out = {}
    for shard in sorted(Path(folder).glob("*.safetensors")):
        out.update(load_file(str(shard)))
    return out


def numpy_reference(w0: np.ndarray, w1: np.ndarray) -> dict:
    """Independent float64 implementation of the per-matrix metrics."""
    D = w1 - w0
    U, s0, Vt = np.linalg.svd(w0, full_matrices=False)
    s1 = np.linalg.svd(w1, compute_uv=False)
    P = U.T @ D @ Vt.T
    null = D - U @ P @ Vt
    d2 = np.sum(D**2)
    sd = np.linalg.svd(D, compute_uv=False)

    def sr(s):
        return np.sum(s**2) / s[0] ** 2

    return {
        "P": P,
        "null": null,
        "s0": s0,
        "s1": s1,
        "f_diag": np.sum(np.diag(P) ** 2) / d2,
        "f_off": (np.sum(P**2) - np.sum(np.diag(P) ** 2)) / d2,
        "f_null": np.sum(null**2) / d2,
        "r_delta": np.sqrt(d2) / np.linalg.norm(w0),
        "sv_cos": s0 @ s1 / np.linalg.norm(s0) / np.linalg.norm(s1),
        "delta_max": np.max(np.abs(s1 - s0)) / s0[0],
        "sr_w0": sr(s0),
        "sr_w1": sr(s1),
        "sr_delta": sr(sd),
        "alpha": (sr(s1) - sr(s0)) / sr(sd),
    }


def read_metrics_csv(store: Path) -> list[dict]:
    with open(store / "metrics.csv") as f:
        return list(csv.DictReader(f))


def test_planted_fractions_recovered_float64(planted_f64, tmp_path):
    base, post = planted_f64
    res = run_transition(no_track_config(base=str(base), post=str(post), store=tmp_path / "s", compute_dtype="float64"))
    planted = json.loads((post / "synthetic.json").read_text())["planted_shares"]
    assert len(res.rows) == 14  # 2 layers × 7 projections
    for row in res.rows:
        want = planted[row["name"]]
        got = (row["f_diag"], row["f_off"], row["f_null"])
        assert got == pytest.approx(want, rel=1e-6, abs=1e-12), row["name"]
        assert sum(got) == pytest.approx(1.0, abs=1e-9)
        if row["module"] in ("q_proj", "o_proj"):  # square in TINY: no null space
            assert row["f_null"] < 1e-20


def test_planted_fractions_float32_rl_sized(planted_f32_small, tmp_path):
    base, post = planted_f32_small
    res = run_transition(no_track_config(base=str(base), post=str(post), store=tmp_path / "s"))
    planted = json.loads((post / "synthetic.json").read_text())["planted_shares"]
    for row in res.rows:
        assert row["r_delta"] == pytest.approx(3e-4, rel=1e-3)
        for k, want in zip(("f_diag", "f_off", "f_null"), planted[row["name"]]):
            assert abs(row[k] - want) < 1e-4, (row["name"], k, row[k], want)


def test_bf16_pair_matches_independent_numpy_reference(bf16_pair, tmp_path):
    base, post = bf16_pair
    store = tmp_path / "s"
    res = run_transition(no_track_config(base=str(base), post=str(post), store=store))
    W0, W1 = load_all(base), load_all(post)
    root = zarr.open_group(str(store), mode="r")
    assert {r["name"] for r in res.rows} == {n for n in W0 if n.endswith("_proj.weight")}
    for row in res.rows:
        name = row["name"]
        ref = numpy_reference(W0[name].double().numpy(), W1[name].double().numpy())
        for k in ("f_diag", "f_off", "f_null", "r_delta", "sv_cos", "delta_max", "sr_w0", "sr_w1", "alpha"):
            assert row[k] == pytest.approx(ref[k], rel=2e-4, abs=2e-6), (name, k)
        assert row["sr_delta"] == pytest.approx(ref["sr_delta"], rel=1e-4)
        g = root["matrices"][name]
        # P up to the frame's sign convention: |diag| and the norm are sign-invariant
        assert np.allclose(np.abs(np.diag(g["P"][:])), np.abs(np.diag(ref["P"])), rtol=1e-3, atol=1e-6)
        assert np.linalg.norm(g["P"][:]) == pytest.approx(np.linalg.norm(ref["P"]), rel=1e-5)
        m, n = W0[name].shape
        if m == n:
            assert "null" not in g and g.attrs["null_stored"] is False
        else:
            assert np.allclose(g["null"][:], ref["null"], atol=1e-6 * np.abs(ref["null"]).max() + 1e-9)
        # float32 SVD: absolute error ~ eps·σ1 on every singular value
        assert np.allclose(g["sigma0"][:], ref["s0"], rtol=1e-5, atol=2e-6 * ref["s0"][0])
        assert np.allclose(g["sigma1"][:], ref["s1"], rtol=1e-5, atol=2e-6 * ref["s1"][0])
        assert g.attrs["complete"] is True


def test_store_layout_csv_and_dask(planted_f64, tmp_path):
    import dask.array as da

    base, post = planted_f64
    store = tmp_path / "s"
    res = run_transition(no_track_config(base=str(base), post=str(post), store=store))  # no figures by default
    assert not (store / "figures").exists()
    rows = read_metrics_csv(store)
    assert REQUIRED_COLUMNS <= set(rows[0])
    assert [r["name"] for r in rows] == [r["name"] for r in res.rows]
    for r_csv, r in zip(rows, res.rows):
        assert float(r_csv["f_null"]) == r["f_null"]  # CSV keeps full precision
    root = zarr.open_group(str(store), mode="r")
    manifest = root.attrs["grrr_stream"]
    assert manifest["complete"] is True and manifest["format"] == 1
    cols = root["metrics"]
    assert list(cols.attrs["names"]) == [r["name"] for r in res.rows]
    assert np.array_equal(cols["f_diag"][:], [r["f_diag"] for r in res.rows])
    name = "model.layers.1.mlp.up_proj.weight"
    P = da.from_zarr(str(store), component=f"matrices/{name}/P")
    assert P.dtype == np.float32 and P.shape == (64, 64)
    assert float((P**2).sum().compute()) == pytest.approx(
        res.rows[[r["name"] for r in res.rows].index(name)]["e_diag"]
        + res.rows[[r["name"] for r in res.rows].index(name)]["e_off"],
        rel=1e-5,
    )
    summary = json.loads((store / "summary.json").read_text())
    assert summary["scopes"]["all"]["n"] == 14 and summary["scopes"]["module:up_proj"]["n"] == 2
    vals = np.array([r["f_null"] for r in res.rows if r["module"] == "up_proj"])
    assert summary["scopes"]["module:up_proj"]["f_null_mean"] == pytest.approx(vals.mean())
    assert summary["scopes"]["module:up_proj"]["f_null_std"] == pytest.approx(vals.std(ddof=1))
    again = run_transition(no_track_config(base=str(base), post=str(post), store=store, figures=True))
    assert again.computed == 0  # figures are not a result setting: the finished store is reused as it is
    assert (store / "figures" / "energy_fractions.png").stat().st_size > 1000


def test_self_transition_is_all_zeros(planted_f64, tmp_path):
    base, _ = planted_f64
    res = run_transition(no_track_config(base=str(base), post=str(base), store=tmp_path / "s"))
    for row in res.rows:
        for k, v in row.items():
            if isinstance(v, float):
                assert np.isfinite(v), (row["name"], k)
        assert row["delta_fro"] == 0.0 and row["f_diag"] == row["f_off"] == row["f_null"] == 0.0
        assert row["alpha"] == 0.0 and row["delta_max"] == 0.0


def test_resume_recomputes_only_unfinished(planted_f64, tmp_path):
    base, post = planted_f64
    store = tmp_path / "s"
    cfg = no_track_config(base=str(base), post=str(post), store=store)
    first = run_transition(cfg)
    reference = store_snapshot(store)
    # Simulate a crash: two matrices lose their completion flag, one is half-deleted.
    names = [r["name"] for r in first.rows]
    for name in names[3:5]:
        meta = store / "matrices" / name / "zarr.json"
        doc = json.loads(meta.read_text())
        doc["attributes"]["complete"] = False
        meta.write_text(json.dumps(doc))
    import shutil

    shutil.rmtree(store / "matrices" / names[6] / "P")
    again = run_transition(cfg)
    assert again.computed == 0 + 3  # exactly the unfinished ones
    assert again.frames_reused == 3  # their base frames came from the cache
    after = store_snapshot(store)
    assert after.keys() == reference.keys()
    for k in reference:
        assert np.array_equal(reference[k], after[k]), k
    assert run_transition(cfg).computed == 0  # a finished transition does nothing


def test_second_transition_from_same_base_reuses_frames(planted_f64, bf16_pair, tmp_path):
    base, post = planted_f64
    frames = tmp_path / "frames"
    a = run_transition(no_track_config(base=str(base), post=str(post), store=tmp_path / "a", frame_cache=frames))
    assert a.frames_reused == 0
    b = run_transition(no_track_config(base=str(base), post=str(base), store=tmp_path / "b", frame_cache=frames))
    assert b.frames_reused == len(b.rows) == 14
    # a cached frame gives bit-identical results to a fresh SVD
    c = run_transition(no_track_config(base=str(base), post=str(post), store=tmp_path / "c", frame_cache=frames))
    assert c.frames_reused == 14
    fresh, cached = store_snapshot(tmp_path / "a"), store_snapshot(tmp_path / "c")
    assert fresh.keys() == cached.keys()
    assert all(np.array_equal(fresh[k], cached[k]) for k in fresh)
    # a different frame option does not hit the cache
    d = run_transition(
        no_track_config(
            base=str(base), post=str(post), store=tmp_path / "d", frame_cache=frames, compute_dtype="float64"
        )
    )
    assert d.frames_reused == 0


def test_large_cached_frames_read_when_needed_give_the_same_store(planted_f64, tmp_path, monkeypatch):
    """Frames above PREFETCH_FRAME_BYTES are read by the compute thread, not ahead by the reader, and
    pairs above PREFETCH_PAIR_BYTES after the current math (memory on 14B shapes); the writer keeps only
    σ of a cached frame. None of it may change a stored byte."""
    from grrr_stream.decompose import stages, streaming
    from grrr_stream.decompose.plan import plan_transition

    base, post = planted_f64
    frames = tmp_path / "frames"
    fresh = run_transition(no_track_config(base=str(base), post=str(post), store=tmp_path / "a", frame_cache=frames))
    assert fresh.frames_reused == 0
    monkeypatch.setattr(stages, "PREFETCH_FRAME_BYTES", 0)  # every frame deferred
    monkeypatch.setattr(streaming, "PREFETCH_PAIR_BYTES", 0)  # every next pair read after the math
    deferred = run_transition(no_track_config(base=str(base), post=str(post), store=tmp_path / "b", frame_cache=frames))
    assert deferred.frames_reused == 14 and deferred.timings["frame_read"] > 0
    a, b = store_snapshot(tmp_path / "a"), store_snapshot(tmp_path / "b")
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    # the attributes (rank from the slimmed frame) too
    assert all(a[k] == b[k] for k in a if k.endswith("/attrs"))
    assert stages.frame_bytes((10, 4), torch.float32) == (10 * 4 + 4 + 4 * 4) * 4
    from grrr_stream.checkpoints.reader import Checkpoint

    b, p = Checkpoint.open(base), Checkpoint.open(post)
    plan = plan_transition(b, p, no_track_config(base=str(base), post=str(post), store=tmp_path / "x"))
    m = plan.matrices[0]
    assert streaming.pair_bytes(plan, m) == 2 * 8 * b.tensors[m.name].shape[0] * b.tensors[m.name].shape[1]


def test_changed_setting_refuses_then_overwrites(planted_f64, tmp_path):
    from grrr_stream.errors import StoreMismatchError

    base, post = planted_f64
    store = tmp_path / "s"
    run_transition(no_track_config(base=str(base), post=str(post), store=store))
    with pytest.raises(StoreMismatchError, match="settings_hash"):
        run_transition(no_track_config(base=str(base), post=str(post), store=store, store_dtype="float64"))
    # settings that do not affect results reuse the store
    assert run_transition(no_track_config(base=str(base), post=str(post), store=store, device="cpu")).computed == 0
    res = run_transition(
        no_track_config(base=str(base), post=str(post), store=store, store_dtype="float64", overwrite=True)
    )
    assert res.computed == 14
    assert zarr.open_group(str(store), mode="r")["matrices"][res.rows[0]["name"]]["P"].dtype == np.float64


def test_core_threshold_and_module_subset(planted_f64, tmp_path):
    base, post = planted_f64
    res = run_transition(
        no_track_config(
            base=str(base),
            post=str(post),
            store=tmp_path / "s",
            modules=["q_proj", "down_proj"],
            core_rel_threshold=0.5,
            compute_dtype="float64",
        )
    )
    assert {r["module"] for r in res.rows} == {"q_proj", "down_proj"}
    for r in res.rows:
        assert r["rank"] < min(r["rows"], r["cols"])
        assert r["f_diag"] + r["f_off"] + r["f_null"] == pytest.approx(1.0, abs=1e-9)
        assert r["f_null"] > 0.3  # the dropped core directions now count as null


def test_bf16_store_dtype_round_trips_bit_pattern(planted_f64, tmp_path):
    base, post = planted_f64
    store = tmp_path / "s"
    run_transition(
        no_track_config(base=str(base), post=str(post), store=store, store_dtype="bfloat16", modules=["up_proj"])
    )
    arr = zarr.open_group(str(store), mode="r")["matrices"]["model.layers.0.mlp.up_proj.weight"]["P"]
    assert arr.dtype == np.uint16 and arr.attrs["grrr_dtype"] == "bfloat16"
    P = torch.from_numpy(arr[...].view(np.int16)).view(torch.bfloat16).float()
    assert torch.isfinite(P).all() and P.abs().max() > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_gpu_matches_cpu(bf16_pair, tmp_path):
    base, post = bf16_pair
    cpu = run_transition(no_track_config(base=str(base), post=str(post), store=tmp_path / "c", device="cpu"))
    gpu = run_transition(no_track_config(base=str(base), post=str(post), store=tmp_path / "g", device="cuda"))
    for a, b in zip(cpu.rows, gpu.rows):
        for k in ("f_diag", "f_off", "f_null", "r_delta", "sv_cos", "alpha"):
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-6), (a["name"], k)
