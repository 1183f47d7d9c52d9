"""Crash safety (kill -9 mid-run, then resume) and memory flatness in layer count."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.common import store_snapshot

from grrr_stream.fixtures.synthetic import ModelShape, Update, make_transition

ROOT = Path(__file__).resolve().parents[2]
KILL_SHAPE = ModelShape(hidden=320, intermediate=896, layers=5, heads=5, kv_heads=1)


def _decompose_cmd(base, post, store, *extra):
    return [
        sys.executable,
        "-m",
        "grrr_stream.cli",
        "decompose",
        "--base",
        str(base),
        "--post",
        str(post),
        "--store",
        str(store),
        "--no-track",
        *extra,
    ]


def _completed(store: Path) -> int:
    n = 0
    for meta in (store / "matrices").glob("*/zarr.json"):
        try:
            n += bool(json.loads(meta.read_text())["attributes"].get("complete"))
        except (json.JSONDecodeError, KeyError):
            pass
    return n


@pytest.fixture(scope="module")
def kill_pair(tmp_path_factory):
    return make_transition(
        tmp_path_factory.mktemp("kill"),
        KILL_SHAPE,
        family="qwen2",
        dtype="bfloat16",
        update=Update(r_delta=1e-2),
        max_shard_bytes=2 * 2**20,
    )


def test_kill_9_then_resume_equals_uninterrupted_run(kill_pair, tmp_path):
    base, post = kill_pair
    total = KILL_SHAPE.layers * 7
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    subprocess.run(_decompose_cmd(base, post, clean), check=True, capture_output=True, cwd=tmp_path)
    env = dict(os.environ)
    kills = 0
    # Kill at two different points; each time the next run continues from what was durable.
    for target in (3, total // 2):
        proc = subprocess.Popen(
            _decompose_cmd(base, post, killed),
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while proc.poll() is None and _completed(killed) < target and time.monotonic() < deadline:
            time.sleep(0.01)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        assert _completed(killed) < total or proc.returncode == 0
    assert kills >= 1, "the run finished before it could be killed; enlarge KILL_SHAPE"
    done_before = _completed(killed)
    out = subprocess.run(_decompose_cmd(base, post, killed), check=True, capture_output=True, text=True, cwd=tmp_path)
    assert f"({total - done_before} computed now" in out.stdout
    a, b = store_snapshot(clean), store_snapshot(killed)
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k], k


RSS_SCRIPT = textwrap.dedent("""
    import json, resource, sys
    from pathlib import Path
    from grrr_stream.config import build_config
    from grrr_stream.decompose.run import run_transition
    base, post, store = sys.argv[1:4]
    run_transition(build_config({"base": base, "post": post, "store": store, "progress": False,
                                 "tracking": {"enabled": False}}))
    print(json.dumps({"maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
""")


@pytest.mark.slow
def test_peak_rss_is_flat_in_layer_count(tmp_path):
    """Peak RSS of a 1-layer and a 4-layer model differ by < 10 %: nothing accumulates per matrix."""
    rss = {}
    for layers in (1, 4):
        shape = ModelShape(hidden=1024, intermediate=2816, layers=layers, heads=8, kv_heads=2, vocab=256)
        base, post = make_transition(
            tmp_path / f"m{layers}",
            shape,
            family="llama",
            dtype="bfloat16",
            update=Update(r_delta=1e-2),
            max_shard_bytes=64 * 2**20,
        )
        out = subprocess.run(
            [sys.executable, "-c", RSS_SCRIPT, str(base), str(post), str(tmp_path / f"s{layers}")],
            check=True,
            capture_output=True,
            text=True,
        )
        rss[layers] = json.loads(out.stdout.strip().splitlines()[-1])["maxrss_kib"] / 1024
    growth = rss[4] / rss[1] - 1
    print(f"peak RSS: 1 layer {rss[1]:.0f} MiB, 4 layers {rss[4]:.0f} MiB, growth {100 * growth:.1f} %")
    # ~1 GB of bf16 weights per 4 layers would show up many times over if anything were retained
    assert abs(growth) < 0.10, rss


# -- a frame cache shared by concurrent runs -------------------------------------------------

RACE_SHAPE = ModelShape(hidden=96, intermediate=256, layers=2, heads=4, kv_heads=2)


def _frames(cache: Path) -> dict:
    import zarr

    out = {}
    for d in sorted(p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for nm in ("U", "S", "V"):
            out[f"{d.name}/{nm}"] = zarr.open_array(str(d / nm), mode="r")[...]
    return out


@pytest.mark.slow
def test_two_runs_racing_on_one_frame_cache_both_succeed_with_identical_frames(tmp_path):
    """Two transitions from one base, decomposed at the same time into one cache (the README's advice):
    both finish, the cache holds whole frames equal to a lone run's, and nothing half-written is left."""
    from grrr_stream.fixtures.synthetic import write_model

    base = write_model(tmp_path / "base", RACE_SHAPE, family="llama", dtype="float32")
    posts = [
        write_model(
            tmp_path / f"post{i}",
            RACE_SHAPE,
            family="llama",
            dtype="float32",
            updates=(Update(r_delta=1e-2, seed=i + 1),),
        )
        for i in range(2)
    ]
    subprocess.run(
        _decompose_cmd(base, posts[0], tmp_path / "alone", "--frame-cache", tmp_path / "alone_cache"),
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    want = _frames(tmp_path / "alone_cache")
    assert len(want) == 3 * 7 * RACE_SHAPE.layers
    for trial in range(3):
        cache = tmp_path / f"cache{trial}"
        procs = [
            subprocess.Popen(
                _decompose_cmd(base, p, tmp_path / f"s{trial}-{i}", "--frame-cache", cache, "--no-progress"),
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i, p in enumerate(posts)
        ]
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
        got = _frames(cache)
        assert sorted(got) == sorted(want)
        assert all(np.array_equal(got[k], want[k]) for k in want), f"trial {trial}: frames differ"
        assert not [p.name for p in cache.iterdir() if p.name.startswith(".") and "partial" in p.name]


def test_a_damaged_frame_is_recomputed_not_trusted(tmp_path):
    import shutil

    import torch

    from grrr_stream.cli.entry import main
    from grrr_stream.fixtures.synthetic import TINY
    from grrr_stream.store.frame_cache import FrameCache

    base, post = make_transition(tmp_path / "m", TINY, family="qwen2", dtype="float32", update=Update(r_delta=1e-2))
    cache = tmp_path / "cache"
    args = [
        "decompose",
        "--base",
        str(base),
        "--post",
        str(post),
        "--frame-cache",
        str(cache),
        "--no-track",
        "--no-progress",
    ]
    assert main(args + ["--store", str(tmp_path / "a")]) == 0
    want = _frames(cache)
    keys = sorted(p for p in cache.iterdir() if p.is_dir() and not p.name.startswith("."))
    shutil.rmtree(keys[0] / "U")  # marked complete, U missing (what a racing writer used to leave)
    (keys[1] / "S" / "zarr.json").write_text("{torn")
    assert FrameCache(cache).get(keys[0].name, torch.float32) is None
    assert main(args + ["--store", str(tmp_path / "b")]) == 0
    got = _frames(cache)
    assert all(np.array_equal(got[k], want[k]) for k in want)  # the two frames were recomputed and replaced


@pytest.mark.parametrize("kind", ["foreign", "file"])
def test_frame_cache_that_is_not_one_is_refused(kind, tmp_path):
    from grrr_stream.fixtures.synthetic import TINY

    base, post = make_transition(tmp_path / "m", TINY, family="qwen2", dtype="float32", update=Update(r_delta=1e-2))
    target = tmp_path / "notacache"
    if kind == "foreign":
        target.mkdir()
        (target / "thesis.tex").write_text("precious")
    else:
        target.write_text("a file")
    run = subprocess.run(
        _decompose_cmd(base, post, tmp_path / "s", "--frame-cache", target),
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert ("is not a grrr_stream frame cache" if kind == "foreign" else "is a file") in run.stderr
    if kind == "foreign":
        assert sorted(p.name for p in target.iterdir()) == ["thesis.tex"]


def test_frame_cache_being_created_by_another_process_is_not_taken_for_a_foreign_folder(tmp_path):
    """Two decompositions starting at once (a sweep on local:2): one sees only the other's temporary
    zarr.json. Seen as a flaky 'not a grrr_stream frame cache' refusal before."""
    from grrr_stream.store.frame_cache import FrameCache

    cache = tmp_path / "frames"
    cache.mkdir()
    (cache / ".zarr.json.tmp-999999").write_text("{")  # the other process, between write and rename
    assert FrameCache(cache).prepare().path == cache
    assert (cache / "zarr.json").is_file()


def test_update_that_overflows_the_compute_dtype_is_refused_with_the_matrix_named(tmp_path):
    """W0 = −3e38 and W1 = +3e38 are finite float32 weights, but ΔW overflows float32: that matrix is not
    stored (no NaN metrics marked complete), the others are, and the exit status is 2."""
    import torch

    from grrr_stream.checkpoints.reader import Checkpoint
    from grrr_stream.checkpoints.writer import write_checkpoint
    from grrr_stream.fixtures.synthetic import TINY

    base, post = make_transition(tmp_path / "m", TINY, family="qwen2", dtype="float32", update=Update(r_delta=1e-2))
    bad = "model.layers.1.mlp.up_proj.weight"
    for folder, sign in ((base, -1.0), (post, 1.0)):
        ck = Checkpoint.open(folder)
        g = torch.Generator().manual_seed(0)
        tensors = {n: ck.read(n) for n in ck.tensors}
        shape = tensors[bad].shape
        tensors[bad] = sign * 3e38 * (0.5 + 0.5 * torch.rand(shape, generator=g))
        write_checkpoint(tmp_path / f"{folder.name}_big", list(tensors.items()), config=ck.config)
    run = subprocess.run(
        _decompose_cmd(tmp_path / "base_big", tmp_path / "post_big", tmp_path / "s"),
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and bad in run.stderr and "non-finite result" in run.stderr
    assert _completed(tmp_path / "s") == 7 * TINY.layers - 1
    for meta in (tmp_path / "s" / "matrices").glob("*/zarr.json"):
        attrs = json.loads(meta.read_text())["attributes"]
        # every number finite (sparsity_compare is the one text metric)
        assert all(np.isfinite(v) for v in attrs["metrics"].values() if not isinstance(v, str)), attrs["name"]


# -- environment faults and damaged results: one message, nothing partial marked done, resumable ----


@pytest.mark.parametrize("code,needle", [("ENOSPC", "the disk is full"), ("EROFS", "read-only")])
def test_write_fault_mid_run_is_one_message_and_the_rerun_resumes(tmp_path, capsys, monkeypatch, code, needle):
    import errno

    from helpers.common import store_snapshot as snapshot

    from grrr_stream.cli.entry import main
    from grrr_stream.fixtures.synthetic import TINY
    from grrr_stream.store import zarr_arrays

    base, post = make_transition(tmp_path / "m", TINY, family="qwen2", dtype="float32", update=Update(r_delta=1e-2))
    args = ["decompose", "--base", str(base), "--post", str(post), "--no-track", "--no-progress"]
    assert main(args + ["--store", str(tmp_path / "clean")]) == 0
    real, calls = zarr_arrays.write_array, []

    def failing(group, name, data, attrs=None):
        calls.append(name)
        if len(calls) == 9:  # in the middle of the third matrix
            raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)), str(tmp_path / "s" / "x"))
        return real(group, name, data, attrs)

    monkeypatch.setattr(zarr_arrays, "write_array", failing)
    capsys.readouterr()
    assert main(args + ["--store", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    done_after_fault = _completed(tmp_path / "s")
    assert 0 < done_after_fault < 7 * TINY.layers
    monkeypatch.setattr(zarr_arrays, "write_array", real)
    assert main(args + ["--store", str(tmp_path / "s")]) == 0
    a, b = snapshot(tmp_path / "s"), snapshot(tmp_path / "clean")
    assert sorted(a) == sorted(b) and all(
        np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k] for k in a
    )


def test_decompose_refuses_to_start_without_the_disk_space_it_needs(tmp_path, capsys, monkeypatch):
    import shutil
    from collections import namedtuple

    from grrr_stream.cli.entry import main
    from grrr_stream.fixtures.synthetic import TINY

    base, post = make_transition(tmp_path / "m", TINY, family="qwen2", dtype="float32", update=Update(r_delta=1e-2))
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10 << 20, 9 << 20, 1 << 20))
    rc = main(["decompose", "--base", str(base), "--post", str(post), "--store", str(tmp_path / "s"), "--no-track"])
    err = capsys.readouterr().err
    assert rc == 2 and "not enough disk space" in err and "MiB free on that filesystem" in err
    assert _completed(tmp_path / "s") == 0


@pytest.mark.parametrize("flag", ["--out", "--shard-gb"])
def test_file_for_a_folder_and_nan_sizes_are_refused(tmp_path, capsys, flag):
    from grrr_stream.cli.entry import main
    from grrr_stream.fixtures.synthetic import TINY

    base, post = make_transition(tmp_path / "m", TINY, family="qwen2", dtype="float32", update=Update(r_delta=1e-2))
    assert (
        main(
            [
                "decompose",
                "--base",
                str(base),
                "--post",
                str(post),
                "--store",
                str(tmp_path / "s"),
                "--no-track",
                "--no-progress",
            ]
        )
        == 0
    )
    (tmp_path / "afile").write_text("x")
    args = ["variants", "--store", str(tmp_path / "s"), "--variant", "diag", "--no-track"]
    if flag == "--out":
        args += ["--out", str(tmp_path / "afile")]
        needle = "is a file, not a folder"
    else:
        args += ["--out", str(tmp_path / "v"), "--shard-gb", "nan"]
        needle = "must be a finite number > 0 (got nan)"
    with pytest.raises(SystemExit) if flag == "--shard-gb" else _nullcontext():
        rc = main(args)
        assert rc == 2
    assert needle in capsys.readouterr().err


def _nullcontext():
    import contextlib

    return contextlib.nullcontext()


def test_store_paths_are_absolute_and_a_missing_matrix_is_named(tmp_path, capsys, monkeypatch):
    import shutil

    from grrr_stream.cli.entry import main
    from grrr_stream.fixtures.synthetic import TINY

    base, post = make_transition(tmp_path / "m", TINY, family="qwen2", dtype="float32", update=Update(r_delta=1e-2))
    monkeypatch.chdir(tmp_path)
    assert (
        main(["decompose", "--base", "m/base", "--post", "m/post", "--store", "s", "--no-track", "--no-progress"]) == 0
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # variants from another directory find the checkpoints
    assert main(["variants", "--store", str(tmp_path / "s"), "--variant", "diag", "--out", "v", "--no-track"]) == 0
    victim = sorted(p for p in (tmp_path / "s" / "matrices").iterdir() if p.is_dir())[3]
    shutil.rmtree(victim)
    capsys.readouterr()
    assert main(["stats", str(tmp_path / "s"), "--out", "st", "--no-track"]) == 2
    err = capsys.readouterr().err
    assert victim.name in err and "rerun its `grrr-stream decompose` command" in err
    monkeypatch.chdir(tmp_path)
    assert (
        main(["decompose", "--base", "m/base", "--post", "m/post", "--store", "s", "--no-track", "--no-progress"]) == 0
    )
    assert victim.is_dir()


def test_repaired_nan_keeps_the_matrices_whose_inputs_did_not_change(tmp_path, capsys):

    from grrr_stream.checkpoints.reader import Checkpoint
    from grrr_stream.checkpoints.writer import write_checkpoint
    from grrr_stream.cli.entry import main
    from grrr_stream.fixtures.synthetic import TINY

    base, post = make_transition(tmp_path / "m", TINY, family="qwen2", dtype="float32", update=Update(r_delta=1e-2))
    ck = Checkpoint.open(base)
    tensors = {n: ck.read(n) for n in ck.tensors}
    bad = "model.layers.1.self_attn.o_proj.weight"
    good = tensors[bad].clone()
    tensors[bad][0, 0] = float("nan")
    write_checkpoint(tmp_path / "nanbase", list(tensors.items()), config=ck.config)
    args = [
        "decompose",
        "--base",
        str(tmp_path / "nanbase"),
        "--post",
        str(post),
        "--store",
        str(tmp_path / "s"),
        "--no-track",
        "--no-progress",
    ]
    assert main(args) == 2 and bad in capsys.readouterr().err
    kept = {p.name: (p / "zarr.json").stat().st_mtime_ns for p in (tmp_path / "s" / "matrices").iterdir() if p.is_dir()}
    assert len(kept) == 7 * TINY.layers - 1
    tensors[bad] = good  # the NaN is repaired in place: the base's fingerprint changes
    write_checkpoint(tmp_path / "nanbase", list(tensors.items()), config=ck.config, overwrite=True)
    assert main(args) == 0, capsys.readouterr().err
    after = {
        p.name: (p / "zarr.json").stat().st_mtime_ns for p in (tmp_path / "s" / "matrices").iterdir() if p.is_dir()
    }
    assert len(after) == 7 * TINY.layers and all(after[k] == v for k, v in kept.items())  # kept, not recomputed


def test_variant_names_never_delete_outside_out(tmp_path, capsys):
    """'..=diag:1' once deleted everything beside --out, '.=diag:1' deleted --out/full."""
    from grrr_stream.cli.entry import main
    from grrr_stream.files import remove_tree
    from grrr_stream.fixtures.synthetic import TINY

    base, post = make_transition(tmp_path / "m", TINY, family="qwen2", dtype="float32", update=Update(r_delta=1e-2))
    assert (
        main(
            [
                "decompose",
                "--base",
                str(base),
                "--post",
                str(post),
                "--store",
                str(tmp_path / "s"),
                "--no-track",
                "--no-progress",
            ]
        )
        == 0
    )
    out = tmp_path / "area" / "out"
    (tmp_path / "area" / "neighbour").mkdir(parents=True)
    (out / "full").mkdir(parents=True)
    (out / "full" / "keep.txt").write_text("mine")
    for name in ("..", ".", "../neighbour", ".full", "a/b"):
        for cmd in (["variants", "--overwrite"], ["evaluate", "--materialize", "folder", "--bench-dir", str(tmp_path)]):
            rc = main(
                [
                    cmd[0],
                    "--store",
                    str(tmp_path / "s"),
                    "--variant",
                    f"{name}=diag:1",
                    "--out",
                    str(out),
                    "--no-track",
                    *cmd[1:],
                ]
            )
            err = capsys.readouterr().err
            assert rc == 2 and "variant name" in err, (name, cmd, err)
    assert (tmp_path / "area" / "neighbour").is_dir() and (out / "full" / "keep.txt").read_text() == "mine"
    # the guard behind the names: a delete outside its folder is refused, whatever the path says
    with pytest.raises(Exception, match="not inside"):
        remove_tree(out / ".." / "neighbour", within=out)
    with pytest.raises(Exception, match="not inside"):
        remove_tree(out, within=out)
    (tmp_path / "link").symlink_to(tmp_path / "area")
    with pytest.raises(Exception, match="not inside"):
        remove_tree(tmp_path / "link" / "neighbour", within=out)
    assert (tmp_path / "area" / "neighbour").is_dir()


def test_a_matrix_larger_than_memory_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    from collections import namedtuple

    import psutil

    from grrr_stream.cli.entry import main
    from grrr_stream.fixtures.synthetic import TINY

    base, post = make_transition(tmp_path / "m", TINY, family="qwen2", dtype="float32", update=Update(r_delta=1e-2))
    vm, sw = namedtuple("vm", "available"), namedtuple("sw", "free")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: vm(1 << 16))
    monkeypatch.setattr(psutil, "swap_memory", lambda: sw(0))
    rc = main(["decompose", "--base", str(base), "--post", str(post), "--store", str(tmp_path / "s"), "--no-track"])
    err = capsys.readouterr().err
    assert rc == 2 and "the largest matrix (160×64)" in err and "of memory is available" in err
    assert not (tmp_path / "s").exists()


def test_sweep_unit_whose_results_were_damaged_is_redone_and_status_says_so(tmp_path, capsys):
    import shutil

    import yaml

    from grrr_stream.cli.entry import main
    from grrr_stream.fixtures.synthetic import TINY, write_model

    models = tmp_path / "models"
    write_model(models / "base", TINY, family="qwen2", dtype="float32")
    write_model(models / "sft", TINY, family="qwen2", dtype="float32", updates=(Update(r_delta=1e-2),))
    cfg = {
        "name": "t",
        "workdir": str(tmp_path / "w"),
        "chains": [
            {
                "name": "c",
                "base": {"id": "base", "source": str(models / "base")},
                "models": [{"id": "sft", "source": str(models / "sft")}],
            }
        ],
        "statistics": {"resamples": 200, "null_draws": 200},
        "variants": {"names": ["diag"]},
        "evaluation": {"enabled": False},
        "tracking": {"enabled": False},
        "progress": False,
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["sweep", str(path)]) == 0
    store = next((tmp_path / "w" / "stores").iterdir())
    variant = next(p for p in (tmp_path / "w" / "variants" / "base-to-sft").iterdir() if p.is_dir())
    for p in store.iterdir():  # emptied by hand
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    (variant / "grrr_variant.json").unlink()
    capsys.readouterr()
    main(["status", str(path)])
    out = capsys.readouterr().out
    assert "damaged" in out and "decompose/base-to-sft" in out and "result folder is missing or incomplete" in out
    assert main(["sweep", str(path)]) == 0
    assert (store / "metrics.csv").is_file() and (variant / "grrr_variant.json").is_file()
    capsys.readouterr()
    assert main(["status", str(path)]) == 0 and "damaged" not in capsys.readouterr().out
