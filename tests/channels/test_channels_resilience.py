"""``grrr-stream channels`` refuses a model it cannot run the way ``decompose`` refuses bad checkpoints (issue 35
§5): one paragraph, exit status 2, no library traceback, before any forward pass, and every problem of a kind
named at once. The same hostile files as tests/cli/test_cli_errors.py (through the project's checkpoint
reader), then what only a forward pass would meet: a config.json that does not describe the weights beside it
(missing or extra tensors, other shapes, resident or left on disk), an architecture transformers has no causal
LM for or does not know, a tokenizer that fails or makes ids beyond the vocabulary, NaN weights."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from safetensors.torch import load_file, save_file  # noqa: E402

from grrr_stream.cli.entry import main  # noqa: E402


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """A tiny Llama (hidden 32, 2 layers, vocabulary 128) saved by transformers, one file; never modified."""
    from grrr_stream.fixtures.synthetic_hf import make_hf_model

    folder = tmp_path_factory.mktemp("channels-bad") / "good"
    make_hf_model(folder, "llama")
    return folder


def variant(good: Path, dest: Path, tensors=None, config=None) -> Path:
    shutil.copytree(good, dest)
    if tensors:
        t = load_file(dest / "model.safetensors")
        tensors(t)
        save_file(t, dest / "model.safetensors", metadata={"format": "pt"})
    if config:
        c = json.loads((dest / "config.json").read_text())
        config(c)
        (dest / "config.json").write_text(json.dumps(c))
    return dest


def channels(capsys, folder, *extra) -> tuple[int, str]:
    rc = main(
        [
            "channels",
            str(folder),
            "--out",
            str(Path(folder).parent / "out"),
            "--sequences",
            "2",
            "--seq-len",
            "16",
            "--no-progress",
            *map(str, extra),
        ]
    )
    return rc, capsys.readouterr().err


def assert_refused(rc: int, err: str, *needles: str) -> None:
    assert rc == 2, err
    assert err.startswith("grrr-stream: error: ") and err.count("\n") == 1, err  # one paragraph
    assert "Traceback" not in err
    for n in needles:
        assert n in err, f"{n!r} not in: {err}"


# --- the checkpoint files, as decompose refuses them --------------------------------------------------------


def test_missing_folder_file_for_folder_and_pickles_only(good, tmp_path, capsys):
    assert_refused(*channels(capsys, tmp_path / "nowhere"), "does not exist")
    assert_refused(*channels(capsys, good / "config.json"), "is a file", "folder")
    bad = tmp_path / "pickled"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (bad / "pytorch_model.bin").write_bytes(b"\x80\x04 never unpickled")
    assert_refused(*channels(capsys, bad), "pytorch_model.bin", "arbitrary code", "safetensors")


@pytest.mark.parametrize("damage", ["truncated", "garbage header", "fifo config", "no config"])
def test_damaged_files_are_refused_before_loading(good, tmp_path, capsys, damage):
    folder = variant(good, tmp_path / "m")
    shard = folder / "model.safetensors"
    if damage == "truncated":
        shard.write_bytes(shard.read_bytes()[:-13])
        needles = (str(shard), "truncated")
    elif damage == "garbage header":
        raw = shard.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        shard.write_bytes(raw[:8] + b"#" * n + raw[8 + n :])
        needles = (str(shard), "corrupt")
    elif damage == "fifo config":
        (folder / "config.json").unlink()
        os.mkfifo(folder / "config.json")
        needles = ("config.json",)
    else:
        (folder / "config.json").unlink()
        needles = ("no config.json",)
    assert_refused(*channels(capsys, folder), *needles)


# --- config against weights: what transformers would load as random weights or refuse with a traceback -------


@pytest.mark.parametrize("budget", ["1GiB", "0"])  # resident (transformers' report) / on disk (the headers)
def test_config_not_describing_the_weights_lists_every_tensor(good, tmp_path, capsys, budget):
    def damage(t):
        t.pop("model.layers.1.mlp.down_proj.weight")
        t["model.layers.5.mlp.gate_proj.weight"] = torch.zeros(3, 3)
        t["model.layers.0.mlp.up_proj.weight"] = torch.zeros(32, 64)

    folder = variant(good, tmp_path / "m", tensors=damage)
    assert_refused(
        *channels(capsys, folder, "--max-memory", budget),
        "does not describe the weights",
        "model.layers.1.mlp.down_proj.weight",
        "model.layers.5.mlp.gate_proj.weight",
        "model.layers.0.mlp.up_proj.weight is [32, 64] in the checkpoint, [64, 32] in the model",
    )


@pytest.mark.parametrize(
    "key,value,needle",
    [
        ("hidden_size", 48, "model.embed_tokens.weight is [128, 32] in the checkpoint, [128, 48] in the model"),
        ("num_hidden_layers", 3, "model.layers.2.mlp.down_proj.weight"),  # a layer the checkpoint lacks
        ("num_hidden_layers", 1, "have no place in the model"),  # a layer the model would drop
        ("vocab_size", 100, "lm_head.weight is [128, 32] in the checkpoint, [100, 32] in the model"),
    ],
)
@pytest.mark.parametrize("budget", ["1GiB", "0"])
def test_wrong_sizes_in_the_config(good, tmp_path, capsys, key, value, needle, budget):
    folder = variant(good, tmp_path / "m", config=lambda c: c.__setitem__(key, value))
    assert_refused(*channels(capsys, folder, "--max-memory", budget), needle)


def test_unknown_and_unsupported_architectures(good, tmp_path, capsys):
    unknown = variant(
        good,
        tmp_path / "unknown",
        config=lambda c: c.update(model_type="frobnicator", architectures=["FrobForCausalLM"]),
    )
    assert_refused(*channels(capsys, unknown), "'frobnicator'", "not an architecture transformers")
    encoder = variant(
        good,
        tmp_path / "t5",
        config=lambda c: (
            c.clear(),
            c.update(model_type="t5", d_model=32, d_ff=64, num_layers=2, num_heads=4, d_kv=8, vocab_size=128),
        ),
    )
    assert_refused(*channels(capsys, encoder), "no causal language-model class", "decoder-only")
    heads = variant(good, tmp_path / "heads", config=lambda c: c.__setitem__("num_attention_heads", 5))
    assert_refused(*channels(capsys, heads), "cannot read its config.json", "attention heads")


def test_every_problem_before_loading_is_listed_at_once(good, tmp_path, capsys):
    """A tokenizer that cannot load and a --seq-len beyond max_position_embeddings: both named."""
    folder = variant(good, tmp_path / "m", config=lambda c: c.__setitem__("max_position_embeddings", 8))
    (folder / "tokenizer.json").write_text("{not json")
    rc, err = channels(capsys, folder)
    assert_refused(rc, err, "(1) ", "(2) ", "tokenizer", "--seq-len 16 exceeds the model's max_position_embeddings 8")


def test_tokenizer_ids_beyond_the_vocabulary(good, tmp_path, capsys):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    folder = variant(good, tmp_path / "m")
    tok = Tokenizer(WordLevel({"[UNK]": 500, "the": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"})
    )
    assert_refused(*channels(capsys, folder), "produces ids beyond the model's vocab_size 128")


def test_nan_weights_are_named_before_any_pass(good, tmp_path, capsys, monkeypatch):
    from grrr_stream.channels import activations

    def damage(t):
        t["model.layers.1.self_attn.o_proj.weight"][0, 0] = float("nan")
        t["model.norm.weight"][3] = float("inf")

    folder = variant(good, tmp_path / "m", tensors=damage)
    ran = []
    monkeypatch.setattr(activations, "residual_hooks", lambda *a, **k: ran.append(1))
    assert_refused(
        *channels(capsys, folder),
        "2 tensor(s) hold NaN or Inf",
        "model.layers.1.self_attn.o_proj.weight",
        "model.norm.weight",
    )
    assert not ran  # refused before the first pass
