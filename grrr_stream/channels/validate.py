"""What ``grrr-stream channels`` refuses, and when: before any forward pass, every problem at once.

1. :func:`preflight` (before loading anything): the folder as a checkpoint (the project's reader: a
   missing or truncated shard, a corrupt header, pickles only, an index leaving the folder, ... as
   ``decompose`` refuses them), a config.json transformers can read, an architecture with a
   causal-LM class (the model's own forward runs), a decoder layer list, a tokenizer that loads and
   the calibration sequences it makes (ids inside the vocabulary, ``--seq-len`` within the model's
   positions). The problems found are listed together.
2. :func:`raise_loading_problems` (right after transformers' ``from_pretrained``, before any
   forward): the config against the weights beside it: tensors the model needs but the checkpoint
   lacks, tensors the model has no place for, and shapes that differ (transformers' own loading report
   for the weights it loaded, the safetensors headers for the ones left on disk, which it does not read).
3. :func:`nonfinite_tensors` (after loading, before the passes): every floating tensor read once, a
   block of rows at a time, and each one holding NaN or Inf named (a forward pass would turn the whole
   residual stream into NaN and report a perplexity of nan after minutes of work).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import torch

from ..checkpoints.reader import Checkpoint
from ..errors import CheckpointError, CheckpointNotFoundError, ConfigError, NonFiniteWeightError
from .calibration import calibration_ids
from .model_config import REMOTE_DECODERS, config_from, config_summary, decoder_layers, need, text_config
from .sliced import offloaded_from_safetensors

SCAN_BLOCK_BYTES = 16 * 2**20  # read at a time by the non-finite scan (+ its isfinite mask)


def first_line(e: BaseException) -> str:
    """An exception's text on one line (a library's multi-line message joined), at most 400 characters."""
    text = " ".join(str(e).split())
    return (text[:400] + " …" if len(text) > 400 else text) or type(e).__name__


def _listing(problems: list[str]) -> str:
    return " ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))


def _build_problems(transformers, config, model_type: Optional[str]) -> list[str]:
    """What keeps transformers from building ``config``'s causal LM (on the meta device) or finding its layers."""
    import copy

    from accelerate import init_empty_weights

    try:
        with init_empty_weights():
            model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config))
    except Exception as e:  # noqa: BLE001 - an unsupported architecture or an inconsistent config
        if "Unrecognized configuration class" in str(e):
            return [
                f"its architecture ({type(config).__name__}, model_type '{model_type}') has no causal "
                "language-model class in transformers: `grrr-stream channels` needs a decoder-only LLM"
            ]
        return [f"transformers cannot build the model its config.json describes ({type(e).__name__}: {first_line(e)})"]
    try:
        decoder_layers(model, text_config(config).num_hidden_layers)
    except ConfigError as e:
        return [str(e)]
    return []


def preflight(model_dir: Path, *, sequences: int, seq_len: int):
    """(checkpoint, transformers config, calibration) of ``model_dir``, or one error listing every problem."""
    model_dir = Path(model_dir)
    ckpt = Checkpoint.open(model_dir)  # a structural fault of the files ends here, with its own message
    if ckpt.config is None:
        raise CheckpointNotFoundError(f"{model_dir}: no config.json (a Hugging Face model folder is needed)")
    transformers = need("transformers")
    need("accelerate")

    problems: list[str] = []
    config = None
    model_type = ckpt.model_type
    try:
        config = config_from(transformers, model_dir)
    except Exception as e:  # noqa: BLE001 - transformers raises ValueError, KeyError, its own validation errors
        if model_type and model_type not in REMOTE_DECODERS and _unknown_type(transformers, model_type):
            problems.append(
                f"its model_type '{model_type}' is not an architecture transformers "
                f"{transformers.__version__} implements (the channels pass runs the model's own "
                "forward: a newer transformers, or a model_type it knows, is needed)"
            )
        else:
            problems.append(
                f"transformers {transformers.__version__} cannot read its config.json "
                f"({type(e).__name__}: {first_line(e)})"
            )
    if config is not None:
        problems += _build_problems(transformers, config, model_type)
    cal = None
    tc = text_config(config) if config is not None else None
    vocab = getattr(tc, "vocab_size", None) if tc is not None else (ckpt.config or {}).get("vocab_size")
    positions = getattr(tc, "max_position_embeddings", None) if tc is not None else None
    if isinstance(positions, int) and seq_len > positions:
        problems.append(f"--seq-len {seq_len} exceeds the model's max_position_embeddings {positions}")
    if isinstance(vocab, int) and vocab > 0:
        try:
            cal = calibration_ids(model_dir, vocab_size=vocab, sequences=sequences, seq_len=seq_len)
        except ConfigError as e:
            problems.append(str(e))
    else:
        problems.append("its config.json has no positive integer vocab_size")
    if problems:
        raise ConfigError(f"{model_dir} cannot be analysed: {_listing(problems)}")
    return ckpt, config, cal


def _unknown_type(transformers, model_type: str) -> bool:
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        return model_type not in CONFIG_MAPPING
    except ImportError:
        return False


def raise_loading_problems(model_dir: Path, model: torch.nn.Module, info: dict, config) -> None:
    """Refuse a model whose config does not describe its checkpoint, listing every tensor concerned:
    transformers' loading report (missing, unexpected, mismatched) and, for the weights left on disk
    (which transformers does not read while loading), their shapes in the safetensors headers."""
    remote = config_summary(model_dir).get("model_type") in REMOTE_DECODERS
    missing = sorted(info.get("missing_keys") or ())
    # MiMo's multi-token-prediction layers are not part of the next-token model (model_config.REMOTE_DECODERS)
    unexpected = sorted(k for k in info.get("unexpected_keys") or () if not (remote and ".mtp_layers." in k))
    mismatched = {k: (tuple(a), tuple(b)) for k, a, b in info.get("mismatched_keys") or ()}
    ckpt = None
    for qualified, p, name, _ in offloaded_from_safetensors(model):
        ckpt = ckpt or Checkpoint.open(Path(model_dir))
        t = ckpt.tensors.get(name)
        if t is not None and tuple(t.shape) != tuple(p.shape):
            mismatched[qualified] = (tuple(t.shape), tuple(p.shape))
    problems = []
    if missing:
        problems.append(f"{len(missing)} tensor(s) the model needs are not in the checkpoint: {_names(missing)}")
    if unexpected:
        problems.append(
            f"{len(unexpected)} tensor(s) of the checkpoint have no place in the model the config "
            f"describes: {_names(unexpected)}"
        )
    if mismatched:
        shown = [
            f"{k} is {list(a)} in the checkpoint, {list(b)} in the model" for k, (a, b) in sorted(mismatched.items())
        ]
        problems.append(f"{len(mismatched)} tensor(s) have another shape than the config implies: {_names(shown)}")
    if problems:
        raise CheckpointError(
            f"{model_dir}: config.json does not describe the weights beside it "
            f"(hidden_size {getattr(text_config(config), 'hidden_size', '?')}, num_hidden_layers "
            f"{getattr(text_config(config), 'num_hidden_layers', '?')}, vocab_size "
            f"{getattr(text_config(config), 'vocab_size', '?')}): {_listing(problems)}. Use the "
            "config.json that was saved with these weights"
        )


def _names(items: list[str], limit: int = 6) -> str:
    return ", ".join(items[:limit]) + (f", … ({len(items) - limit} more)" if len(items) > limit else "")


def nonfinite_tensors(ckpt, on_tensor: Optional[Callable[[str], None]] = None) -> list[str]:
    """Names of the checkpoint's floating tensors holding NaN or Inf (each read once, by blocks of rows)."""
    bad = []
    for name, info in ckpt.tensors.items():
        if info.is_floating and _has_nonfinite(ckpt, name, tuple(info.shape), info.nbytes):
            bad.append(name)
        if on_tensor is not None:
            on_tensor(name)
    return bad


def _has_nonfinite(ckpt, name: str, shape: tuple[int, ...], nbytes: int) -> bool:
    if len(shape) != 2 or nbytes <= SCAN_BLOCK_BYTES:
        if len(shape) == 3 and nbytes > SCAN_BLOCK_BYTES:
            return any(not torch.isfinite(ckpt.read_part(name, index=i, mapped=False)).all() for i in range(shape[0]))
        return not bool(torch.isfinite(ckpt.read(name)).all())
    rows = max(1, SCAN_BLOCK_BYTES // max(1, nbytes // max(1, shape[0])))
    return any(
        not torch.isfinite(ckpt.read_part(name, rows=(s, min(s + rows, shape[0])), mapped=False)).all()
        for s in range(0, shape[0], rows)
    )


def raise_nonfinite(model_dir: Path, bad: list[str]) -> None:
    if bad:
        raise NonFiniteWeightError(
            f"{model_dir}: {len(bad)} tensor(s) hold NaN or Inf values: {_names(bad)}. A "
            "forward pass would make the residual stream NaN; repair or re-download "
            "the checkpoint"
        )


def tensor_count(ckpt) -> int:
    return sum(1 for t in ckpt.tensors.values() if t.is_floating)
