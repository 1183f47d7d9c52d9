"""The calibration text shipped with the package, cut into token sequences.

The text is an excerpt of Jane Austen's *Pride and Prejudice* (public domain; provenance,
checksum and the exact extraction in ``calibration/README.md``). It is tokenised with the
model folder's own tokenizer when it has one; otherwise with the documented byte fallback
(UTF-8 bytes, byte ``b`` → token id ``b mod vocab_size``), which needs no tokenizer files
and is what synthetic checkpoints without a tokenizer get.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import ConfigError
from .defaults import DEFAULT_SEQ_LEN, DEFAULT_SEQUENCES

TEXT_NAME = "pride_and_prejudice.txt"
TEXT_SHA256 = "81d883e5af26fe2e287cdb4c9de72fb62ea7d05fc30763cec42eaaa59baba08b"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def text_path() -> Path:
    return Path(__file__).with_name("calibration") / TEXT_NAME


def calibration_text() -> str:
    """The shipped text, after checking it against its recorded SHA256."""
    data = text_path().read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != TEXT_SHA256:
        raise ConfigError(
            f"{text_path()} has sha256 {digest}, expected {TEXT_SHA256}: the package's calibration "
            "text was modified; reinstall grrr-stream"
        )
    return data.decode("utf-8")


@dataclass(frozen=True)
class Calibration:
    """``ids``: (sequences, seq_len) int64 token ids; ``tokenizer``: what produced them."""

    ids: torch.Tensor
    tokenizer: str


def _tokenizer_ids(model_dir: Path, text: str) -> tuple[list[int], list[int], str]:
    """(document prefix the tokenizer adds, e.g. BOS; the text's ids; a label)."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(model_dir))
    except Exception as e:  # noqa: BLE001 - broken or partial tokenizer files fail in many library-specific ways
        text = " ".join(str(e).split())[:300] or type(e).__name__
        raise ConfigError(
            f"the tokenizer in {model_dir} cannot be loaded ({type(e).__name__}: {text}); repair or "
            f"remove its tokenizer files ({', '.join(TOKENIZER_FILES)}: without them the "
            "calibration text is cut into bytes)"
        ) from e
    # a tokenizer that starts every document with BOS gets BOS at the start of every sequence
    with_special = tok("a", add_special_tokens=True)["input_ids"]
    plain = tok("a", add_special_tokens=False)["input_ids"]
    prefix = with_special[: len(with_special) - len(plain)] if with_special[-len(plain) :] == plain else []
    ids = tok(text, add_special_tokens=False)["input_ids"]
    return list(prefix), list(ids), f"{type(tok).__name__} of {model_dir.name}"


def calibration_ids(
    model_dir: Path,
    *,
    vocab_size: int,
    sequences: int = DEFAULT_SEQUENCES,
    seq_len: int = DEFAULT_SEQ_LEN,
    max_positions: int | None = None,
) -> Calibration:
    """The first ``sequences`` consecutive, non-overlapping windows of ``seq_len`` tokens of the text."""
    if sequences < 1 or seq_len < 2:
        raise ConfigError(f"need at least 1 sequence of at least 2 tokens (got {sequences} × {seq_len})")
    if max_positions is not None and seq_len > max_positions:
        raise ConfigError(f"--seq-len {seq_len} exceeds the model's max_position_embeddings {max_positions}")
    text = calibration_text()
    model_dir = Path(model_dir)
    if any((model_dir / f).is_file() for f in TOKENIZER_FILES):
        prefix, ids, label = _tokenizer_ids(model_dir, text)
    else:
        prefix, ids, label = [], [b % vocab_size for b in text.encode("utf-8")], "bytes mod vocab_size (no tokenizer)"
    body = seq_len - len(prefix)
    if body < 1:
        raise ConfigError(f"--seq-len {seq_len} leaves no room for text after the tokenizer's prefix {prefix}")
    if len(ids) < sequences * body:
        raise ConfigError(
            f"the calibration text has {len(ids)} tokens with this tokenizer: too few for "
            f"{sequences} sequences of {seq_len} tokens; ask for fewer or shorter sequences"
        )
    if max(ids[: sequences * body], default=0) >= vocab_size:
        raise ConfigError(f"the tokenizer in {model_dir} produces ids beyond the model's vocab_size {vocab_size}")
    rows = [prefix + ids[i * body : (i + 1) * body] for i in range(sequences)]
    return Calibration(torch.tensor(rows, dtype=torch.long), label)
