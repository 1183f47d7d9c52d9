"""Bad-input handling of the checkpoint reader (grrr_stream.checkpoints.reader) and of
transition planning (pairing base and post tensors), plus the positive path the
error checks must not break: bit-exact reads and stable fingerprints.

Every checkpoint here is a tiny synthetic one (synthetic.TINY); tests that damage a
checkpoint work on a copy of a module-scoped original.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from grrr_stream.checkpoints.header import read_header
from grrr_stream.checkpoints.reader import INDEX_NAME, Checkpoint, resolve_source
from grrr_stream.checkpoints.writer import TensorSpec, write_checkpoint
from grrr_stream.config import build_config
from grrr_stream.decompose.plan import plan_transition
from grrr_stream.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    ConfigError,
    GrrrError,
    TensorMismatchError,
    UnsafeCheckpointError,
)
from grrr_stream.fixtures.synthetic import TINY, make_transition, write_model

SHARD_BYTES = 100_000  # TINY in float32 → 6 shards plus an index


# ---------------------------------------------------------------------------
# fixtures and helpers


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    """(base, post) folders of a sharded float32 TINY transition; never modified."""
    root = tmp_path_factory.mktemp("ckpt")
    return make_transition(root, TINY, dtype="float32", max_shard_bytes=SHARD_BYTES)


@pytest.fixture
def base_copy(pair, tmp_path) -> Path:
    """A private copy of the base folder that a test may damage."""
    return Path(shutil.copytree(pair[0], tmp_path / "base"))


def weight_map(folder: Path) -> dict[str, str]:
    return json.loads((folder / INDEX_NAME).read_text())["weight_map"]


def write_weight_map(folder: Path, wm: dict[str, str]) -> None:
    data = json.loads((folder / INDEX_NAME).read_text())
    data["weight_map"] = wm
    (folder / INDEX_NAME).write_text(json.dumps(data))


def shard_of(folder: Path, tensor: str) -> Path:
    return folder / weight_map(folder)[tensor]


def cfg_for(base: Path, post: Path, store: Path, **extra):
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


def as_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def rewrite_header(shard: Path, edit) -> None:
    """Rewrite a shard's JSON header through ``edit(header) -> header``, keeping the data."""
    raw = shard.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = edit(json.loads(raw[8 : 8 + n]))
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    shard.write_bytes(struct.pack("<Q", len(blob)) + blob + raw[8 + n :])


# ---------------------------------------------------------------------------
# 1. pickle-only folders


def test_pickle_only_folder_is_refused_with_conversion_hint(tmp_path):
    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    # Content is never looked at: refusing must happen before anything is unpickled.
    (folder / "model.bin").write_bytes(b"\x80\x04 not a real pickle")
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04 not a real pickle")
    with pytest.raises(UnsafeCheckpointError) as ei:
        Checkpoint.open(folder)
    err = ei.value
    assert isinstance(err, CheckpointError) and isinstance(err, ValueError) and isinstance(err, GrrrError)
    msg = str(err)
    assert str(folder) in msg
    assert "model.bin" in msg and "pytorch_model.bin" in msg
    assert "pickle" in msg.lower()
    assert "arbitrary code" in msg
    assert "safetensors" in msg
    assert "save_pretrained" in msg and "safe_serialization=True" in msg  # how to convert


def test_empty_folder_is_not_found(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointNotFoundError) as ei:
        Checkpoint.open(tmp_path / "empty")
    assert isinstance(ei.value, FileNotFoundError)
    assert "*.safetensors" in str(ei.value) and str(tmp_path / "empty") in str(ei.value)


# ---------------------------------------------------------------------------
# 2. shard names and links that leave the folder


@pytest.mark.parametrize("kind", ["dotdot", "absolute"])
def test_index_naming_shard_outside_folder_is_refused(base_copy, tmp_path, kind):
    outside = tmp_path / "outside.safetensors"
    victim = "model.layers.0.mlp.down_proj.weight"
    shutil.copy(shard_of(base_copy, victim), outside)  # a real, readable file: only the path is wrong
    bad_name = "../outside.safetensors" if kind == "dotdot" else str(outside.resolve())
    wm = weight_map(base_copy)
    wm[victim] = bad_name
    write_weight_map(base_copy, wm)
    with pytest.raises(UnsafeCheckpointError) as ei:
        Checkpoint.open(base_copy)
    assert isinstance(ei.value, ValueError)
    msg = str(ei.value)
    assert INDEX_NAME in msg and bad_name in msg
    assert "outside the checkpoint folder" in msg and "refusing" in msg


def test_index_shard_symlinked_outside_folder_is_followed(base_copy, tmp_path):
    """Symlinks are made by whoever owns the filesystem (the Hub cache is all symlinks),
    so only the names in the untrusted index are checked, not where links lead."""
    name = "model.layers.1.mlp.gate_proj.weight"
    before = Checkpoint.open(base_copy).read(name)
    shard = shard_of(base_copy, name)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / shard.name
    shutil.move(shard, target)
    os.symlink(target, shard)
    assert torch.equal(Checkpoint.open(base_copy).read(name), before)


def test_hub_cache_layout_with_symlinked_shards_opens(pair, tmp_path):
    """huggingface_hub.snapshot_download (what resolve_source returns for a Hub id) lays a
    repo out as ``models--org--name/snapshots/<rev>/<file> -> ../../blobs/<hash>``: every
    file of the returned folder is a symlink that resolves outside it. A sharded model
    fetched from the Hub must open like its local copy."""
    repo = tmp_path / "hub" / "models--org--tiny"
    snap, blobs = repo / "snapshots" / "0123abcd", repo / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    for i, f in enumerate(sorted(pair[0].iterdir())):
        shutil.copy(f, blobs / f"blob{i:03d}")
        os.symlink(f"../../blobs/blob{i:03d}", snap / f.name)
    ckpt = Checkpoint.open(snap)
    assert set(ckpt.tensors) == set(Checkpoint.open(pair[0]).tensors)


# ---------------------------------------------------------------------------
# 3. missing shard


def test_index_naming_missing_shard(base_copy):
    shard = shard_of(base_copy, "model.layers.0.mlp.up_proj.weight")
    shard.unlink()
    with pytest.raises(CheckpointNotFoundError) as ei:
        Checkpoint.open(base_copy)
    assert isinstance(ei.value, FileNotFoundError) and isinstance(ei.value, GrrrError)
    msg = str(ei.value)
    assert str(shard) in msg and INDEX_NAME in msg and "re-download" in msg


# ---------------------------------------------------------------------------
# 4. truncated and corrupt shards


@pytest.mark.parametrize("cut", [1, 7, 4096])
def test_truncated_shard(base_copy, cut):
    shard = shard_of(base_copy, "model.layers.1.mlp.down_proj.weight")
    data = shard.read_bytes()
    shard.write_bytes(data[:-cut])
    with pytest.raises(CheckpointError) as ei:
        Checkpoint.open(base_copy)
    assert isinstance(ei.value, ValueError)
    msg = str(ei.value)
    assert str(shard) in msg and "truncated" in msg and "re-download" in msg.lower()


def test_truncated_single_file_checkpoint(tmp_path):
    folder = write_model(tmp_path / "single", TINY, dtype="float32")
    shard = folder / "model.safetensors"
    assert not (folder / INDEX_NAME).exists()
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="truncated") as ei:
        Checkpoint.open(folder)
    assert str(shard) in str(ei.value)


@pytest.mark.parametrize(
    "damage", ["garbage_header", "header_not_object", "cut_inside_header", "three_bytes", "random_bytes"]
)
def test_corrupt_shard_names_file(base_copy, damage):
    shard = shard_of(base_copy, "model.layers.0.mlp.gate_proj.weight")
    raw = shard.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    if damage == "garbage_header":
        shard.write_bytes(raw[:8] + b"\x00{garbage\xff" * (n // 10) + b"\xff" * (n % 10) + raw[8 + n :])
    elif damage == "header_not_object":
        rewrite_header(shard, lambda h: [1, 2, 3])
    elif damage == "cut_inside_header":
        shard.write_bytes(raw[: 8 + n // 2])
    elif damage == "three_bytes":
        shard.write_bytes(raw[:3])
    else:
        shard.write_bytes(os.urandom(len(raw)))
    with pytest.raises(CheckpointError) as ei:
        Checkpoint.open(base_copy)
    assert isinstance(ei.value, ValueError)
    msg = str(ei.value)
    assert str(shard) in msg and "re-download" in msg


@pytest.mark.parametrize(
    "field,bad", [("data_offsets", "strings"), ("data_offsets", "three"), ("shape", "strings"), ("dtype", "missing")]
)
def test_malformed_header_entries_raise_checkpoint_error(base_copy, field, bad):
    """A syntactically valid header with ill-typed entries must be reported as a
    CheckpointError naming the shard, not crash with TypeError later."""
    shard = shard_of(base_copy, "model.layers.0.mlp.gate_proj.weight")

    def edit(h):
        for k, meta in h.items():
            if k == "__metadata__":
                continue
            if bad == "strings":
                meta[field] = [str(x) for x in meta[field]]
            elif bad == "three":
                meta[field] = list(meta[field]) + [0]
            else:
                del meta[field]
        return h

    rewrite_header(shard, edit)
    with pytest.raises(CheckpointError) as ei:
        ckpt = Checkpoint.open(base_copy)
        for name in ckpt.tensors:  # if opening passed, reading must fail cleanly
            ckpt.read(name)
    assert str(shard) in str(ei.value)


def test_tensor_span_not_matching_shape(base_copy):
    shard = shard_of(base_copy, "model.layers.0.mlp.gate_proj.weight")

    def edit(h):
        h["model.layers.0.mlp.gate_proj.weight"]["shape"] = [160, 63]
        return h

    rewrite_header(shard, edit)
    with pytest.raises(CheckpointError) as ei:
        Checkpoint.open(base_copy)
    assert str(shard) in str(ei.value) and "model.layers.0.mlp.gate_proj.weight" in str(ei.value)


# ---------------------------------------------------------------------------
# 5. index and shards disagree; invalid index / config.json


def test_index_maps_tensor_to_shard_without_it(base_copy):
    wm = weight_map(base_copy)
    wrong = weight_map(base_copy)["model.embed_tokens.weight"]
    assert wm["model.norm.weight"] != wrong
    wm["model.norm.weight"] = wrong
    write_weight_map(base_copy, wm)
    with pytest.raises(CheckpointError) as ei:
        Checkpoint.open(base_copy)
    assert isinstance(ei.value, ValueError) and not isinstance(ei.value, UnsafeCheckpointError)
    msg = str(ei.value)
    assert "model.norm.weight" in msg and wrong in msg and "do not contain" in msg


@pytest.mark.parametrize("text", ["{not json", json.dumps({"metadata": {}}), json.dumps({"weight_map": [1]})])
def test_invalid_index_file(base_copy, text):
    (base_copy / INDEX_NAME).write_text(text)
    with pytest.raises(CheckpointError) as ei:
        Checkpoint.open(base_copy)
    assert INDEX_NAME in str(ei.value) and "weight_map" in str(ei.value)


def test_duplicate_tensor_in_two_shards_without_index(base_copy):
    owner = shard_of(base_copy, "model.norm.weight")
    (base_copy / INDEX_NAME).unlink()
    save_file({"model.norm.weight": torch.ones(TINY.hidden)}, str(base_copy / "zz-extra.safetensors"))
    with pytest.raises(CheckpointError) as ei:
        Checkpoint.open(base_copy)
    msg = str(ei.value)
    assert "model.norm.weight" in msg and owner.name in msg and "zz-extra.safetensors" in msg


def test_invalid_config_json(base_copy):
    (base_copy / "config.json").write_text('{"model_type": ')
    with pytest.raises(CheckpointError) as ei:
        Checkpoint.open(base_copy)
    assert str(base_copy / "config.json") in str(ei.value)


@pytest.mark.parametrize("text", ["[1, 2]", '"qwen2"'])
def test_config_json_that_is_not_an_object(base_copy, pair, tmp_path, text):
    """config.json holding valid JSON that is not an object must give a CheckpointError
    naming the file (not an AttributeError when model_type is looked up)."""
    (base_copy / "config.json").write_text(text)
    with pytest.raises(CheckpointError) as ei:
        base = Checkpoint.open(base_copy)
        plan_transition(base, Checkpoint.open(pair[1]), cfg_for(base_copy, pair[1], tmp_path / "s"))
    assert "config.json" in str(ei.value)


# ---------------------------------------------------------------------------
# 6. base and post do not pair up


def test_all_pairing_problems_reported_together(pair, tmp_path):
    base = Checkpoint.open(pair[0])
    missing = "model.layers.1.mlp.up_proj.weight"
    extra = "model.layers.2.self_attn.q_proj.weight"
    reshaped = "model.layers.0.mlp.gate_proj.weight"
    integer = "model.layers.1.self_attn.o_proj.weight"

    def tensors():
        for name in base.tensors:
            if name == missing:
                continue
            t = base.read(name)
            if name == reshaped:
                t = t.T.contiguous()
            elif name == integer:
                t = (t * 1000).to(torch.int32)
            yield name, t
        yield extra, torch.zeros(TINY.hidden, TINY.hidden)

    post_dir = write_checkpoint(tmp_path / "post", tensors(), config=base.config, max_shard_bytes=SHARD_BYTES)
    post = Checkpoint.open(post_dir)
    with pytest.raises(TensorMismatchError) as ei:
        plan_transition(base, post, cfg_for(pair[0], post_dir, tmp_path / "store"))
    err = ei.value
    assert isinstance(err, CheckpointError) and isinstance(err, ValueError)
    msg = str(err)
    assert "4 problem(s)" in msg
    lines = {ln.strip().split(":")[0]: ln for ln in msg.splitlines()[1:]}
    assert set(lines) == {missing, extra, reshaped, integer}
    assert "not in post" in lines[missing]
    assert "not in base" in lines[extra]
    assert "[160, 64]" in lines[reshaped] and "[64, 160]" in lines[reshaped]
    assert "I32" in lines[integer] and "not floating point" in lines[integer]


def test_model_type_mismatch(pair, tmp_path):
    post = Path(shutil.copytree(pair[1], tmp_path / "post"))
    cfg = json.loads((post / "config.json").read_text())
    cfg["model_type"] = "llama"
    (post / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TensorMismatchError) as ei:
        plan_transition(Checkpoint.open(pair[0]), Checkpoint.open(post), cfg_for(pair[0], post, tmp_path / "s"))
    msg = str(ei.value)
    assert "'qwen2'" in msg and "'llama'" in msg and str(post) in msg and "same architecture" in msg


# ---------------------------------------------------------------------------
# 8. unsupported families


def _set_model_type(folder: Path, model_type: str) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = model_type
    (folder / "config.json").write_text(json.dumps(cfg))


def test_unknown_model_type_needs_module_pattern(pair, tmp_path):
    base = Path(shutil.copytree(pair[0], tmp_path / "base"))
    post = Path(shutil.copytree(pair[1], tmp_path / "post"))
    _set_model_type(base, "falcon_mamba")  # a family without a built-in pattern
    _set_model_type(post, "falcon_mamba")
    b, p = Checkpoint.open(base), Checkpoint.open(post)
    with pytest.raises(ConfigError) as ei:
        plan_transition(b, p, cfg_for(base, post, tmp_path / "s"))
    assert isinstance(ei.value, ValueError)
    msg = str(ei.value)
    assert "'falcon_mamba'" in msg and "module_pattern" in msg and "(?P<layer>" in msg
    custom = r"^model\.layers\.(?P<layer>\d+)\.(?:self_attn|mlp)\.(?P<module>[a-z_]+)\.weight$"
    plan = plan_transition(b, p, cfg_for(base, post, tmp_path / "s", module_pattern=custom))
    assert len(plan.matrices) == 7 * TINY.layers


def test_module_pattern_matching_nothing(pair, tmp_path):
    cfg = cfg_for(
        pair[0], pair[1], tmp_path / "s", module_pattern=r"^transformer\.h\.(?P<layer>\d+)\.(?P<module>\w+)\.weight$"
    )
    with pytest.raises(TensorMismatchError) as ei:
        plan_transition(Checkpoint.open(pair[0]), Checkpoint.open(pair[1]), cfg)
    assert "module_pattern" in str(ei.value) and str(pair[0]) in str(ei.value)


# ---------------------------------------------------------------------------
# 9. paths


def test_nonexistent_local_path(tmp_path):
    missing = tmp_path / "no" / "such" / "model"
    with pytest.raises(CheckpointNotFoundError) as ei:
        resolve_source(str(missing))
    assert isinstance(ei.value, FileNotFoundError)
    assert str(missing) in str(ei.value) and "does not exist" in str(ei.value)
    with pytest.raises(CheckpointNotFoundError):
        Checkpoint.open(missing)


def test_file_instead_of_folder(pair):
    shard = next(pair[0].glob("*.safetensors"))
    with pytest.raises(CheckpointNotFoundError) as ei:
        resolve_source(str(shard))
    msg = str(ei.value)
    assert str(shard) in msg and "is a file" in msg and "folder" in msg


def test_hub_id_that_cannot_be_fetched(tmp_path, monkeypatch):
    """A relative 'org/name' that is no local folder is tried on the Hub; a failure there
    (here simulated: no network in tests) becomes a CheckpointNotFoundError with advice."""
    import huggingface_hub

    monkeypatch.chdir(tmp_path)
    calls = []

    def fake_download(**kw):
        calls.append(kw)
        raise OSError("Connection refused\nmore details")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    with pytest.raises(CheckpointNotFoundError) as ei:
        resolve_source("some-org/some-model", revision="main")
    assert calls and calls[0]["repo_id"] == "some-org/some-model" and calls[0]["revision"] == "main"
    assert "*.safetensors" in calls[0]["allow_patterns"] and "*.bin" not in calls[0]["allow_patterns"]
    msg = str(ei.value)
    assert "some-org/some-model" in msg and "HF_TOKEN" in msg and "Connection refused" in msg
    assert "more details" not in msg  # first line only


# ---------------------------------------------------------------------------
# 11. positive path: exact reads, stable fingerprints


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_read_is_bit_identical_to_safetensors(tmp_path, dtype):
    folder = write_model(tmp_path / dtype, TINY, dtype=dtype, seed=3, max_shard_bytes=50_000)
    assert (folder / INDEX_NAME).exists() and len(list(folder.glob("*.safetensors"))) > 2
    expected: dict[str, torch.Tensor] = {}
    for f in folder.glob("*.safetensors"):
        expected.update(load_file(f))
    ckpt = Checkpoint.open(folder)
    assert set(ckpt.tensors) == set(expected)
    want_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    for name, ref in expected.items():
        got = ckpt.read(name)
        assert got.dtype == ref.dtype == want_dtype
        assert got.shape == ref.shape
        assert got.is_contiguous()
        assert as_bytes(got) == as_bytes(ref), name


def test_fingerprint_stable_and_sensitive_to_one_value(base_copy):
    name = "model.layers.1.self_attn.v_proj.weight"
    shard = shard_of(base_copy, name)
    tensors = load_file(shard)
    save_file(tensors, str(shard), metadata={"format": "pt"})  # the header layout save_file writes
    fp1 = Checkpoint.open(base_copy).fingerprint()
    fp2 = Checkpoint.open(base_copy).fingerprint()
    assert fp1 == fp2
    header_before = read_header(shard)[2]
    tensors[name][3, 5] += 0.25
    save_file(tensors, str(shard), metadata={"format": "pt"})
    assert read_header(shard)[2] == header_before  # same layout, one value differs
    fp3 = Checkpoint.open(base_copy).fingerprint()
    assert fp3 != fp1
    assert Checkpoint.open(base_copy).read(name)[3, 5] == tensors[name][3, 5]


def test_write_checkpoint_removes_leftovers_of_killed_writers_only(tmp_path):
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid no longer runs
    stale = tmp_path / f".out.partial-{dead.pid}"
    live = tmp_path / f".out.partial-{os.getppid()}"  # a running process: its write may be in progress
    for d in (stale, live):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"half")
    write_checkpoint(tmp_path / "out", [("w", torch.ones(2, 2))])
    assert not stale.exists() and live.exists()
    assert torch.equal(load_file(tmp_path / "out" / "model.safetensors")["w"], torch.ones(2, 2))


def test_failed_write_leaves_no_temporary_folder(tmp_path):
    def tensors():
        yield "a", torch.ones(2)
        raise RuntimeError("source died")

    with pytest.raises(RuntimeError):
        write_checkpoint(
            tmp_path / "out",
            tensors(),
            layout=[TensorSpec("a", (2,), torch.float32), TensorSpec("b", (2,), torch.float32)],
        )
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------
# hostile headers and files that are not regular files (issue: hardening)


def _two_in_one_shard(folder: Path) -> tuple[Path, str, str]:
    """A shard holding two same-sized tensors (k_proj and v_proj of a layer, as the writer groups them)."""
    for shard in sorted(folder.glob("*.safetensors")):
        header, _, _ = read_header(shard)
        names = [n for n in header if n.endswith(("self_attn.k_proj.weight", "self_attn.v_proj.weight"))]
        for k in names:
            v = k.replace("k_proj", "v_proj")
            if k.endswith("k_proj.weight") and v in header:
                return shard, k, v
    raise AssertionError("no shard holds a k/v pair")


def test_overlapping_data_offsets_are_refused(base_copy):
    shard, k, v = _two_in_one_shard(base_copy)

    def edit(h):  # v_proj would be read from k_proj's bytes
        h[v]["data_offsets"] = h[k]["data_offsets"]
        return h

    rewrite_header(shard, edit)
    with pytest.raises(CheckpointError, match="overlaps the tensor before it|leaves a gap") as ei:
        Checkpoint.open(base_copy)
    assert str(shard) in str(ei.value)


@pytest.mark.parametrize("shape", [[10**30, 64], [2**40, 2**40], [0, 64]])
def test_declared_shapes_that_overflow_or_are_empty_are_refused_before_any_work(base_copy, pair, tmp_path, shape):
    name = "model.layers.0.mlp.up_proj.weight"
    shard = shard_of(base_copy, name)

    def edit(h):
        h[name]["shape"] = shape
        if 0 in shape:  # a consistent empty tensor: shifts the offsets of the tensors after it
            b, e = h[name]["data_offsets"]
            h[name]["data_offsets"] = [b, b]
            for other in h:
                if other != "__metadata__" and h[other]["data_offsets"][0] >= e:
                    ob, oe = h[other]["data_offsets"]
                    h[other]["data_offsets"] = [ob - (e - b), oe - (e - b)]
        return h

    rewrite_header(shard, edit)
    if 0 in shape:  # a well-formed file: refused when the transition is planned, before any SVD
        base = Checkpoint.open(base_copy)
        with pytest.raises(TensorMismatchError, match="zero-size dimension"):
            plan_transition(base, Checkpoint.open(pair[1]), cfg_for(base_copy, pair[1], tmp_path / "s"))
    else:
        with pytest.raises(CheckpointError, match="needs") as ei:
            Checkpoint.open(base_copy)
        assert len(str(ei.value)) < 600  # the 10^30 dimension is not echoed in full


@pytest.mark.parametrize("kind", ["fifo", "dir", "loop"])
def test_shard_that_is_not_a_regular_file_is_refused_at_once(base_copy, kind):
    shard = sorted(base_copy.glob("*.safetensors"))[0]
    shard.unlink()
    if kind == "fifo":
        os.mkfifo(shard)  # reading it would block forever
    elif kind == "dir":
        shard.mkdir()
    else:
        os.symlink(shard.name, shard)  # a link to itself
    with pytest.raises(CheckpointError, match="not a regular file|cannot be read") as ei:
        Checkpoint.open(base_copy)
    assert str(shard) in str(ei.value)


@pytest.mark.parametrize("kind", ["loop", "fifo"])
def test_config_json_that_is_a_loop_or_fifo_is_refused_not_ignored(base_copy, kind):
    cfg = base_copy / "config.json"
    cfg.unlink()
    if kind == "loop":
        os.symlink("config.json", cfg)
    else:
        os.mkfifo(cfg)
    with pytest.raises(CheckpointError, match="config file"):
        Checkpoint.open(base_copy)


def test_dry_run_of_a_sweep_with_a_fifo_shard_does_not_hang(base_copy, pair, tmp_path):
    import subprocess
    import sys

    import yaml

    shard = sorted(base_copy.glob("*.safetensors"))[0]
    shard.unlink()
    os.mkfifo(shard)
    cfg = {
        "name": "t",
        "workdir": str(tmp_path / "w"),
        "chains": [
            {
                "name": "c",
                "base": {"id": "b", "source": str(base_copy)},
                "models": [{"id": "p", "source": str(pair[1])}],
            }
        ],
        "evaluation": {"enabled": False},
        "tracking": {"enabled": False},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(cfg))
    run = subprocess.run(
        [sys.executable, "-m", "grrr_stream.cli", "sweep", str(tmp_path / "s.yaml"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0 and "decompose/b-to-p" in run.stdout
