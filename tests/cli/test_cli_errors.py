"""Bad-input handling of ``grrr-stream decompose`` and of run_transition: every error a
user can cause ends with exit status 2 and one message that names the file or tensor
involved and says what to do; ``--debug`` shows the traceback instead. Also the store
guards: locking, foreign directories, reuse with other inputs.

Tiny synthetic checkpoints only; CLI calls run in-process except two subprocess tests.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grrr_stream.checkpoints.reader import INDEX_NAME, Checkpoint, tensor_digest
from grrr_stream.checkpoints.writer import write_checkpoint
from grrr_stream.cli.entry import main
from grrr_stream.config import build_config, load_config
from grrr_stream.decompose.run import run_transition
from grrr_stream.errors import (
    ConfigError,
    GrrrError,
    NonFiniteWeightError,
    StoreError,
    StoreMismatchError,
)
from grrr_stream.fixtures.synthetic import TINY, ModelShape, Update, make_transition, write_model
from grrr_stream.store.transition_store import StoreLock

SHARD_BYTES = 100_000
N_MATRICES = 7 * TINY.layers


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    """(base, post) of a sharded float32 TINY transition; never modified."""
    return make_transition(tmp_path_factory.mktemp("cli"), TINY, dtype="float32", max_shard_bytes=SHARD_BYTES)


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing a run writes by default lands in the repository


def decompose(capsys, *args) -> tuple[int, str, str]:
    rc = main(["decompose", *map(str, args), "--no-track", "--no-progress"])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_user_error(rc: int, err: str, *needles: str) -> None:
    assert rc == 2, err
    assert err.startswith("grrr-stream: error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, f"{n!r} not in: {err}"


def copy(folder: Path, dest: Path) -> Path:
    return Path(shutil.copytree(folder, dest))


def weight_map(folder: Path) -> dict[str, str]:
    return json.loads((folder / INDEX_NAME).read_text())["weight_map"]


def cfg_for(base, post, store, **extra):
    return build_config(
        {
            "base": str(base),
            "post": str(post),
            "store": store,
            "device": "cpu",
            "tracking": {"enabled": False},
            "progress": False,
            **extra,
        }
    )


def completed_matrices(store: Path) -> set[str]:
    """Names of matrices whose completion record says complete (read straight from zarr.json)."""
    done = set()
    for meta in (store / "matrices").glob("*/zarr.json"):
        attrs = json.loads(meta.read_text()).get("attributes", {})
        if attrs.get("complete") is True:
            done.add(attrs["name"])
    return done


def set_model_type(folder: Path, model_type: str) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = model_type
    (folder / "config.json").write_text(json.dumps(cfg))


# ---------------------------------------------------------------------------
# bad checkpoints through the CLI (1-6, 8, 9)


def test_cli_pickle_only_folder(pair, tmp_path, capsys):
    bad = tmp_path / "pickled"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (bad / "pytorch_model.bin").write_bytes(b"\x80\x04 never unpickled")
    rc, _, err = decompose(capsys, "--base", bad, "--post", pair[1], "--store", tmp_path / "s")
    assert_user_error(rc, err, str(bad), "pytorch_model.bin", "arbitrary code", "safetensors", "save_pretrained")
    assert not (tmp_path / "s").exists()  # refused before touching the store


def test_cli_index_escaping_folder(pair, tmp_path, capsys):
    post = copy(pair[1], tmp_path / "post")
    idx = json.loads((post / INDEX_NAME).read_text())
    idx["weight_map"]["model.layers.0.self_attn.q_proj.weight"] = "../../etc/passwd"
    (post / INDEX_NAME).write_text(json.dumps(idx))
    rc, _, err = decompose(capsys, "--base", pair[0], "--post", post, "--store", tmp_path / "s")
    assert_user_error(rc, err, str(post / INDEX_NAME), "../../etc/passwd", "outside the checkpoint folder")


def test_cli_missing_shard(pair, tmp_path, capsys):
    post = copy(pair[1], tmp_path / "post")
    shard = post / weight_map(post)["model.layers.1.mlp.gate_proj.weight"]
    shard.unlink()
    rc, _, err = decompose(capsys, "--base", pair[0], "--post", post, "--store", tmp_path / "s")
    assert_user_error(rc, err, str(shard), "missing", "re-download")


def test_cli_truncated_shard(pair, tmp_path, capsys):
    post = copy(pair[1], tmp_path / "post")
    shard = post / weight_map(post)["model.layers.0.mlp.down_proj.weight"]
    shard.write_bytes(shard.read_bytes()[:-13])
    rc, _, err = decompose(capsys, "--base", pair[0], "--post", post, "--store", tmp_path / "s")
    assert_user_error(rc, err, str(shard), "truncated", "Re-download")


def test_cli_garbage_header(pair, tmp_path, capsys):
    base = copy(pair[0], tmp_path / "base")
    shard = base / weight_map(base)["model.layers.1.self_attn.q_proj.weight"]
    raw = shard.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    shard.write_bytes(raw[:8] + b"#" * n + raw[8 + n :])
    rc, _, err = decompose(capsys, "--base", base, "--post", pair[1], "--store", tmp_path / "s")
    assert_user_error(rc, err, str(shard), "corrupt", "re-download")


def test_cli_index_maps_tensor_to_wrong_shard(pair, tmp_path, capsys):
    post = copy(pair[1], tmp_path / "post")
    idx = json.loads((post / INDEX_NAME).read_text())
    wm = idx["weight_map"]
    wm["lm_head.weight"] = wm["model.embed_tokens.weight"]
    (post / INDEX_NAME).write_text(json.dumps(idx))
    rc, _, err = decompose(capsys, "--base", pair[0], "--post", post, "--store", tmp_path / "s")
    assert_user_error(rc, err, str(post / INDEX_NAME), "'lm_head.weight'", "do not contain")


def test_cli_lists_every_pairing_problem(pair, tmp_path, capsys):
    base = Checkpoint.open(pair[0])
    dropped = ["model.layers.0.self_attn.k_proj.weight", "model.layers.1.mlp.down_proj.weight"]
    halved = "model.layers.0.mlp.up_proj.weight"
    as_int = "model.layers.1.self_attn.q_proj.weight"
    extra = "model.layers.7.mlp.gate_proj.weight"

    def tensors():
        for name in base.tensors:
            if name in dropped:
                continue
            t = base.read(name)
            if name == halved:
                t = t[: t.shape[0] // 2].contiguous()
            if name == as_int:
                t = t.to(torch.int8)
            yield name, t
        yield extra, torch.ones(TINY.intermediate, TINY.hidden)

    post = write_checkpoint(tmp_path / "post", tensors(), config=base.config, max_shard_bytes=SHARD_BYTES)
    rc, _, err = decompose(capsys, "--base", pair[0], "--post", post, "--store", tmp_path / "s")
    assert_user_error(rc, err, "5 problem(s)", *dropped, halved, as_int, extra, "I8", "[80, 64]")


def test_cli_model_type_mismatch(pair, tmp_path, capsys):
    post = copy(pair[1], tmp_path / "post")
    set_model_type(post, "mistral")
    rc, _, err = decompose(capsys, "--base", pair[0], "--post", post, "--store", tmp_path / "s")
    assert_user_error(rc, err, "'qwen2'", "'mistral'", str(post))


def test_cli_unknown_family_then_custom_pattern(pair, tmp_path, capsys):
    base, post = copy(pair[0], tmp_path / "base"), copy(pair[1], tmp_path / "post")
    set_model_type(base, "phi3")
    set_model_type(post, "phi3")
    store = tmp_path / "s"
    rc, _, err = decompose(capsys, "--base", base, "--post", post, "--store", store)
    assert_user_error(rc, err, "'phi3'", "module_pattern", "(?P<layer>", "(?P<module>")
    pattern = r"^model\.layers\.(?P<layer>\d+)\.(?:self_attn|mlp)\.(?P<module>\w+)\.weight$"
    rc, out, err = decompose(
        capsys,
        "--base",
        base,
        "--post",
        post,
        "--store",
        store,
        "--module-pattern",
        pattern,
        "--modules",
        "q_proj,down_proj",
        "--device",
        "cpu",
    )
    assert rc == 0, err
    assert "4 matrices" in out
    assert completed_matrices(store) == {
        f"model.layers.{i}.{m}.weight" for i in range(TINY.layers) for m in ("self_attn.q_proj", "mlp.down_proj")
    }


def test_cli_nonexistent_path(pair, tmp_path, capsys):
    missing = tmp_path / "nowhere" / "base"
    rc, _, err = decompose(capsys, "--base", missing, "--post", pair[1], "--store", tmp_path / "s")
    assert_user_error(rc, err, str(missing), "does not exist")


def test_cli_file_instead_of_folder(pair, tmp_path, capsys):
    cfg_file = pair[1] / "config.json"
    rc, _, err = decompose(capsys, "--base", pair[0], "--post", cfg_file, "--store", tmp_path / "s")
    assert_user_error(rc, err, str(cfg_file), "is a file", "folder")


# ---------------------------------------------------------------------------
# 10. configuration errors


def test_yaml_config_reports_all_problems_at_once(pair, tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        f"base: {pair[0]}\npost: {pair[1]}\nstore: {tmp_path / 's'}\n"
        "device: tpu\ncore_rel_threshold: 2\ncompute_dtpye: float64\n"
    )
    with pytest.raises(ConfigError) as ei:
        load_config(cfg)
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, GrrrError)
    msg = str(ei.value)
    assert str(cfg) in msg and "3 problem(s)" in msg
    assert "compute_dtpye: unknown key" in msg
    assert "device:" in msg and "'cuda:N'" in msg
    assert "core_rel_threshold:" in msg and "between 0 and 1" in msg
    # the same through the CLI, paths given on the command line
    cfg.write_text("device: tpu\ncore_rel_threshold: 2\ncompute_dtpye: float64\n")
    rc, _, err = decompose(capsys, "--config", cfg, "--base", pair[0], "--post", pair[1], "--store", tmp_path / "s")
    assert_user_error(rc, err, str(cfg), "3 problem(s)", "compute_dtpye", "device", "core_rel_threshold")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "text,needle", [("device: [cpu\n", "not valid YAML"), ("- a\n- b\n", "mapping"), (None, "does not exist")]
)
def test_bad_yaml_files(pair, tmp_path, capsys, text, needle):
    cfg = tmp_path / "bad.yaml"
    if text is not None:
        cfg.write_text(text)
    rc, _, err = decompose(capsys, "--config", cfg, "--base", pair[0], "--post", pair[1], "--store", tmp_path / "s")
    assert_user_error(rc, err, str(cfg), needle)


@pytest.mark.parametrize(
    "pattern", [r"^model\.layers\.(\d+)\.(\w+)\.weight$", r"^model\.layers\.(?P<layer>\d+)\.(\w+)\.weight$"]
)
def test_module_pattern_without_named_groups(pair, tmp_path, capsys, pattern):
    with pytest.raises(ConfigError) as ei:
        build_config({"base": "a", "post": "b", "store": "s", "module_pattern": pattern})
    msg = str(ei.value)
    assert "module_pattern" in msg and "(?P<module>...)" in msg and "'module'" in msg
    rc, _, err = decompose(
        capsys, "--base", pair[0], "--post", pair[1], "--store", tmp_path / "s", "--module-pattern", pattern
    )
    assert_user_error(rc, err, "module_pattern", "named groups")


def test_invalid_module_pattern_regex(capsys, tmp_path):
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        build_config({"base": "a", "post": "b", "store": "s", "module_pattern": "(?P<layer>\\d+"})


def test_cli_missing_required_options(capsys):
    rc, _, err = decompose(capsys, "--base", "x")
    assert_user_error(rc, err, "--post", "--store")


# ---------------------------------------------------------------------------
# 7. non-finite weights


def test_nonfinite_post_weight_names_tensor_and_keeps_the_rest(pair, tmp_path):
    post_ckpt = Checkpoint.open(pair[1])
    bad = "model.layers.1.self_attn.k_proj.weight"

    def tensors():
        for name in post_ckpt.tensors:
            t = post_ckpt.read(name)
            if name == bad:
                t[0, 0] = float("nan")
                t[3, 4] = float("inf")
                t[5, 6] = float("-inf")
            yield name, t

    post = write_checkpoint(tmp_path / "post", tensors(), config=post_ckpt.config, max_shard_bytes=SHARD_BYTES)
    store = tmp_path / "store"
    with pytest.raises(NonFiniteWeightError) as ei:
        run_transition(cfg_for(pair[0], post, store))
    err = ei.value
    assert isinstance(err, ValueError) and isinstance(err, GrrrError)
    msg = str(err)
    assert f"{bad} in post: 1 NaN and 2 Inf value(s)" in msg
    assert f"other {N_MATRICES - 1} are done" in msg
    assert sum(n in msg for n in Checkpoint.open(pair[0]).tensors) == 1  # only the bad one is named
    done = completed_matrices(store)
    assert len(done) == N_MATRICES - 1 and bad not in done


# ---------------------------------------------------------------------------
# 12-14. store guards


def test_store_in_use_by_held_lock(pair, tmp_path, capsys):
    store = tmp_path / "store"
    with StoreLock(store):
        with pytest.raises(StoreError) as ei:
            with StoreLock(store):
                pass
        assert isinstance(ei.value, RuntimeError)
        assert str(store) in str(ei.value) and "in use" in str(ei.value)
        rc, _, err = decompose(capsys, "--base", pair[0], "--post", pair[1], "--store", store)
        assert_user_error(rc, err, str(store), "in use by another grrr-stream process", "another --store")
    assert not (store / "matrices").exists()


def test_missing_benchmark_and_busy_workdir_raise_their_own_types(tmp_path):
    """Neither is a checkpoint or a store problem; both stay user errors (exit status 2)."""
    from grrr_stream.errors import BenchmarkNotFoundError, CheckpointNotFoundError, WorkdirBusyError
    from grrr_stream.evaluation.benchmarks import load_benchmark
    from grrr_stream.sweep import SweepLock

    with pytest.raises(BenchmarkNotFoundError, match="benchmark file .* does not exist") as ei:
        load_benchmark("arith", tmp_path)
    assert isinstance(ei.value, GrrrError) and isinstance(ei.value, FileNotFoundError)
    assert not isinstance(ei.value, CheckpointNotFoundError)
    with SweepLock(tmp_path / "w"):
        with pytest.raises(WorkdirBusyError, match="another grrr-stream sweep is running") as ei:
            with SweepLock(tmp_path / "w"):
                pass
    assert isinstance(ei.value, GrrrError) and isinstance(ei.value, RuntimeError)
    assert not isinstance(ei.value, StoreError)


def test_subprocess_second_process_on_locked_store_exits_2_without_traceback(pair, tmp_path):
    store = tmp_path / "store"
    with StoreLock(store):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "grrr_stream.cli",
                "decompose",
                "--base",
                str(pair[0]),
                "--post",
                str(pair[1]),
                "--store",
                str(store),
                "--no-track",
                "--no-progress",
                "--device",
                "cpu",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "grrr-stream: error:" in proc.stderr and "in use by another grrr-stream process" in proc.stderr


def test_subprocess_debug_shows_traceback(tmp_path):
    missing = tmp_path / "missing-base"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grrr_stream.cli",
            "decompose",
            "--base",
            str(missing),
            "--post",
            str(missing),
            "--store",
            str(tmp_path / "s"),
            "--no-track",
            "--no-progress",
            "--debug",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode not in (0, 2)
    assert "Traceback (most recent call last)" in proc.stderr
    assert "CheckpointNotFoundError" in proc.stderr and str(missing) in proc.stderr


def test_debug_reraises_in_process(pair, tmp_path):
    missing = tmp_path / "missing-post"
    with pytest.raises(FileNotFoundError):
        main(
            [
                "decompose",
                "--base",
                str(pair[0]),
                "--post",
                str(missing),
                "--store",
                str(tmp_path / "s"),
                "--no-track",
                "--no-progress",
                "--debug",
            ]
        )


@pytest.mark.parametrize("overwrite", [False, True])
def test_foreign_nonempty_directory_is_never_written_or_wiped(pair, tmp_path, capsys, overwrite):
    foreign = tmp_path / "my-results"
    (foreign / "sub").mkdir(parents=True)
    files = {foreign / "notes.txt": b"keep me", foreign / "sub" / "data.bin": b"\x00\x01\x02"}
    for p, b in files.items():
        p.write_bytes(b)
    args = ["--base", pair[0], "--post", pair[1], "--store", foreign] + (["--overwrite"] if overwrite else [])
    rc, _, err = decompose(capsys, *args)
    assert_user_error(rc, err, str(foreign), "not a grrr_stream store", "empty or new --store")
    for p, b in files.items():
        assert p.read_bytes() == b
    assert not (foreign / "matrices").exists() and not (foreign / "zarr.json").exists()


def test_store_path_that_is_a_file(pair, tmp_path, capsys):
    target = tmp_path / "results.txt"
    target.write_text("not a directory")
    rc, _, err = decompose(capsys, "--base", pair[0], "--post", pair[1], "--store", target)
    assert_user_error(rc, err, str(target))
    assert target.read_text() == "not a directory"


def test_store_reused_with_other_post_needs_overwrite(pair, tmp_path):
    post2 = write_model(
        tmp_path / "post2", TINY, dtype="float32", seed=0, updates=(Update(r_delta=3e-2),), max_shard_bytes=SHARD_BYTES
    )
    store = tmp_path / "store"
    first = run_transition(cfg_for(pair[0], pair[1], store, modules=["q_proj"]))
    assert first.computed == TINY.layers
    # same inputs again: a resume with nothing to do
    assert run_transition(cfg_for(pair[0], pair[1], store, modules=["q_proj"])).computed == 0
    before = {p: p.read_bytes() for p in (store / "matrices").rglob("*") if p.is_file()}
    with pytest.raises(StoreMismatchError) as ei:
        run_transition(cfg_for(pair[0], post2, store, modules=["q_proj"]))
    err = ei.value
    assert isinstance(err, StoreError) and isinstance(err, RuntimeError)
    msg = str(err)
    assert str(store) in msg and "post_fingerprint" in msg and "base_fingerprint" not in msg
    assert "--overwrite" in msg
    assert {p: p.read_bytes() for p in (store / "matrices").rglob("*") if p.is_file()} == before
    # a changed result setting is caught the same way
    with pytest.raises(StoreMismatchError, match="settings_hash"):
        run_transition(cfg_for(pair[0], pair[1], store, modules=["q_proj"], compute_dtype="float64"))
    again = run_transition(cfg_for(pair[0], post2, store, modules=["q_proj"], overwrite=True))
    assert again.computed == TINY.layers and again.frames_reused == TINY.layers  # base frames kept
    manifest = json.loads((store / "zarr.json").read_text())["attributes"]["grrr_stream"]
    assert manifest["post"] == str(post2) and manifest["complete"] is True
    post2_ckpt = Checkpoint.open(post2)
    for name in completed_matrices(store):
        attrs = json.loads((store / "matrices" / name / "zarr.json").read_text())["attributes"]
        assert attrs["post_digest"] == tensor_digest(post2_ckpt.read(name))


def test_store_reused_after_post_changed_in_place(tmp_path):
    """The post checkpoint is edited in place (one value of one matrix) after a completed
    run. Rerunning into the same store must not silently keep the stale result: either
    refuse (StoreMismatchError) or recompute that matrix. The shard is larger than the
    16 x 64 KiB the checkpoint fingerprint samples, and the value sits in an unsampled
    byte range, so only the recorded per-matrix digests can notice the change."""
    shape = ModelShape(hidden=128, intermediate=1024, layers=1, heads=4, kv_heads=2, vocab=64)
    base, post = make_transition(tmp_path, shape, dtype="float32")
    shard = post / "model.safetensors"
    name = "model.layers.0.mlp.down_proj.weight"
    info = Checkpoint.open(post).tensors[name]  # absolute byte range in the shard
    raw = bytearray(shard.read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    span = len(raw) - (8 + n)
    sampled = [(8 + n + span * i // 16, 8 + n + span * i // 16 + 65536) for i in range(16)]
    offset = next(o for o in range(info.start, info.end - 4, 4) if all(o + 4 <= a or o >= b for a, b in sampled))
    store = tmp_path / "store"
    cfg = cfg_for(base, post, store, modules=["down_proj"])
    run_transition(cfg)
    old = struct.unpack("<f", raw[offset : offset + 4])[0]
    raw[offset : offset + 4] = struct.pack("<f", old + 1.0)
    shard.write_bytes(bytes(raw))
    new_digest = tensor_digest(Checkpoint.open(post).read(name))
    try:
        run_transition(cfg)
    except StoreMismatchError:
        return
    attrs = json.loads((store / "matrices" / name / "zarr.json").read_text())["attributes"]
    assert attrs["post_digest"] == new_digest, (
        "post changed after the store was written, yet the rerun kept the stale result without complaint"
    )


# ---------------------------------------------------------------------------
# hostile sweep configs: bounded messages, clear refusals (issue: hardening)

BOMB = "\n".join(
    ["a: &a [" + ", ".join(["x"] * 10) + "]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]" for i in range(8)]
    + ["name: t", "workdir: w", "chains: *i"]
)


@pytest.mark.parametrize(
    "content,needle",
    [
        (BOMB.encode(), "expands to more than"),
        (("name: t\nworkdir: w\nchains: " + "[" * 60 + "]" * 60 + "\n").encode(), "nests deeper"),
        (("name: t\nworkdir: w\nchains: " + "[" * 3000 + "]" * 3000 + "\n").encode(), "nested too deeply"),
        (b"name: t\xff\nworkdir: w\n", "is not UTF-8"),
        (
            b"name: t\nworkdir: w\nchains: [{name: c, base: {id: b, source: x}}]\nvariants: {names: [[diag]]}\n",
            "variants.names.0",
        ),
        (
            b"name: t\nworkdir: w\nchains: [{name: c, base: {id: b, source: x}}]\nvariants: {transitions: [[x]]}\n",
            "variants.transitions",
        ),
        (b"name: t\nworkdir: w\nchains: [{name: c, base: {id: '..', source: x}}]\n", "must start with a letter"),
        (
            b"name: t\nworkdir: w\nchains: [{name: c, base: {id: b, source: x}}]\nevaluation: {benchmarks: [../x]}\n",
            "evaluation.benchmarks",
        ),
    ],
)
def test_hostile_sweep_configs_are_refused_with_a_short_message(tmp_path, capsys, content, needle):
    path = tmp_path / "sweep.yaml"
    path.write_bytes(content)
    rc = main(["sweep", str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err, err[:2000]
    assert len(err) < 9000 and "Traceback" not in err


def test_config_that_is_not_a_regular_file(tmp_path, capsys):
    import os

    os.mkfifo(tmp_path / "fifo.yaml")
    rc = main(["sweep", str(tmp_path / "fifo.yaml"), "--dry-run"])
    assert rc == 2 and "is not a regular file" in capsys.readouterr().err
