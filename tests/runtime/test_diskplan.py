"""Disk known before a run: the estimate against what is written, the refusal with numbers,
and the null residual kept as norms only (smaller store; variants recompute it; increments refuse)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr
from helpers.common import no_track_config

from grrr_stream.checkpoints.reader import Checkpoint
from grrr_stream.decompose.run import run_transition
from grrr_stream.errors import StoreError, StoreMismatchError
from grrr_stream.fixtures.synthetic import ModelShape, Update, make_transition
from grrr_stream.runtime import diskplan
from grrr_stream.stats.comparisons import compare
from grrr_stream.store.transition_store import StoredTransition
from grrr_stream.variants.builder import VariantBuilder
from grrr_stream.variants.spec import parse_variant

# big enough that metadata, tables and figures are a small part of the store, small enough to be quick
SHAPE = ModelShape(hidden=256, intermediate=704, layers=2, heads=4, kv_heads=2)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return make_transition(
        tmp_path_factory.mktemp("disk"), SHAPE, family="qwen2", dtype="float32", update=Update(r_delta=1e-2)
    )


def tree_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file())


def _matrix_shapes(folder: Path) -> list[tuple[int, int]]:
    ck = Checkpoint.open(folder)
    return [ck.tensors[n].shape for n in ck.tensors if n.endswith("_proj.weight")]


def test_estimate_within_ten_percent_of_what_is_written(pair, tmp_path, capsys):
    base, post = pair
    store, frames = tmp_path / "s", tmp_path / "frames"
    shapes = _matrix_shapes(base)
    needs = diskplan.transition_needs(shapes, store, frames, store_dtype="float32", compute_dtype="float32")
    est = {n.what: n.bytes for n in needs}
    run_transition(no_track_config(base=str(base), post=str(post), store=store, frame_cache=frames, progress=True))
    err = capsys.readouterr().err
    assert "disk: P" in err and "frames" in err  # said before the work, from the headers
    written_store, written_frames = tree_bytes(store), tree_bytes(frames)
    est_store = est["P"] + est["null"] + est["sigmas, tables"]
    assert abs(est_store - written_store) <= 0.10 * written_store, (est_store, written_store)
    assert abs(est["frames"] - written_frames) <= 0.10 * written_frames, (est["frames"], written_frames)
    # independent count of the raw array bytes: P r×r and null m×n (non-square only), float32
    raw = sum(4 * min(m, n) ** 2 + (4 * m * n if m != n else 0) for m, n in shapes)
    assert est["P"] + est["null"] == raw
    # a second transition from the same base finds every frame in the cache: it writes none
    cached = sum(1 for p in frames.iterdir() if p.is_dir() and not p.name.startswith("."))
    again = diskplan.transition_needs(
        shapes,
        tmp_path / "b",
        frames,
        store_dtype="float32",
        compute_dtype="float32",
        frames_cached_fraction=cached / len(shapes),
    )
    assert {n.what: n.bytes for n in again}["frames"] == 0
    # what the decomposition itself counts: this base's frames only (a sweep shares one cache between bases)
    from grrr_stream.store.frame_cache import FrameCache

    fp = Checkpoint.open(base).fingerprint()
    assert FrameCache(frames).count(fp, "float32", None) == cached > 0
    assert FrameCache(frames).count("another base", "float32", None) == 0
    assert FrameCache(frames).count(fp, "float64", None) == 0


def test_refuses_with_the_numbers_when_space_lacks(pair, tmp_path, monkeypatch):
    base, post = pair
    real = shutil.disk_usage
    monkeypatch.setattr(diskplan.shutil, "disk_usage", lambda p: real(p)._replace(free=1_000_000))  # 1 MB free
    with pytest.raises(StoreError, match=r"(?s)not enough disk space.*needs about .*P .*null .*frames.*free") as e:
        run_transition(no_track_config(base=str(base), post=str(post), store=tmp_path / "s"))
    assert "resumes" in str(e.value)
    assert not [d for d in (tmp_path / "s" / "matrices").iterdir() if d.is_dir()]  # no matrix was started


def test_folders_on_one_filesystem_add_up(tmp_path, monkeypatch):
    real = shutil.disk_usage
    monkeypatch.setattr(diskplan.shutil, "disk_usage", lambda p: real(p)._replace(free=100 << 20))
    a = diskplan.DiskNeed("P", tmp_path / "a", 30 << 20)
    b = diskplan.DiskNeed("frames", tmp_path / "b", 30 << 20)
    assert diskplan.shortfalls([a]) == [] and diskplan.shortfalls([b]) == []
    # together 60 MiB + 64 MiB headroom > 100 MiB free on the same filesystem
    (line,) = diskplan.shortfalls([a, b])
    assert "needs about 60.0 MiB" in line and "100.0 MiB free" in line


def test_null_as_norms_only(pair, tmp_path):
    base, post = pair
    full_store, small_store = tmp_path / "full", tmp_path / "small"
    run_transition(no_track_config(base=str(base), post=str(post), store=full_store))
    run_transition(
        no_track_config(
            base=str(base), post=str(post), store=small_store, null_storage="norms", frame_cache=tmp_path / "frames2"
        )
    )
    a, b = StoredTransition(full_store), StoredTransition(small_store)
    nonsquare = [n for n, at in a.matrices.items() if at["shape"][0] != at["shape"][1]]
    assert nonsquare
    for name in nonsquare:
        assert a.has_array(name, "null") and not b.has_array(name, "null")
        null = a.read_tensor(name, "null").double()
        g = zarr.open_group(str(small_store / "matrices" / name), mode="r")
        np.testing.assert_allclose(
            g["null_row_norms"][...], torch.linalg.vector_norm(null, dim=1).numpy(), rtol=1e-5, atol=1e-12
        )
        np.testing.assert_allclose(
            g["null_col_norms"][...], torch.linalg.vector_norm(null, dim=0).numpy(), rtol=1e-5, atol=1e-12
        )
        # the metrics do not depend on what was kept
        assert b.matrices[name]["metrics"]["f_null"] == a.matrices[name]["metrics"]["f_null"]
    assert tree_bytes(small_store) < 0.6 * tree_bytes(full_store)
    # a variant that needs the null part is rebuilt from the checkpoints and the frame: the same weights
    for spec in ("null", "mix=diag:0.5,off:0.25,null:0.75"):
        va = dict(VariantBuilder(full_store, parse_variant(spec), dtype="float32").tensors())
        vb = dict(VariantBuilder(small_store, parse_variant(spec), dtype="float32").tensors())
        for name in nonsquare:
            torch.testing.assert_close(vb[name], va[name], rtol=0, atol=2e-7)
    # an increment between transitions needs the arrays: refused, with the option named
    with pytest.raises(StoreMismatchError, match="null_storage"):
        compare(a, b, "stepwise")


def _sweep_yaml(pair, tmp_path) -> Path:
    import yaml

    base, post = pair
    cfg = {
        "name": "disk",
        "workdir": str(tmp_path / "w"),
        "chains": [
            {
                "name": "c",
                "base": {"id": "base", "source": str(base)},
                "models": [{"id": "post", "source": str(post), "parent": "base"}],
            }
        ],
        "decomposition": {"device": "cpu"},
        "statistics": {"enabled": False},
        "variants": {"names": ["base", "diag"]},
        "evaluation": {"enabled": False},
        "tracking": {"enabled": False},
        "progress": False,
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_sweep_dry_run_says_the_disk_and_a_run_refuses_without_it(pair, tmp_path, monkeypatch, capsys):
    from grrr_stream.cli import entry as cli

    cfg = _sweep_yaml(pair, tmp_path)
    assert cli.main(["sweep", str(cfg), "--dry-run"]) == 0
    out = capsys.readouterr().out
    shapes = _matrix_shapes(pair[0])
    want = diskplan.transition_needs(shapes, tmp_path, tmp_path, store_dtype="float32", compute_dtype="float32")
    assert f"[disk: {diskplan.describe(want)}]" in out  # the decomposition, from the headers
    # each variant folder: every tensor of the base in float32 (the synthetic pair is float32)
    ck = Checkpoint.open(pair[0])
    folder = sum(t.nbytes for t in ck.tensors.values())
    assert out.count(f"[disk: variant {diskplan.gib(folder)}") == 2
    assert "disk for the 3 unit(s) to run" in out and "NOT ENOUGH SPACE" not in out
    assert not (tmp_path / "w").exists()  # a dry run writes nothing

    real = shutil.disk_usage
    monkeypatch.setattr(diskplan.shutil, "disk_usage", lambda p: real(p)._replace(free=1_000_000))
    assert cli.main(["sweep", str(cfg), "--dry-run"]) == 0
    assert "NOT ENOUGH SPACE" in capsys.readouterr().out
    assert cli.main(["sweep", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "not enough disk space for the 3 sweep unit(s)" in err and "Traceback" not in err
