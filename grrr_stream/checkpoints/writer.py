"""Writing safetensors checkpoints: a sharded Hugging Face folder streamed tensor by tensor
(variants, evaluation copies, test fixtures), and the companion files that travel with the weights.
Reading is :mod:`grrr_stream.checkpoints.reader`.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np
import torch

from ..dtypes import BY_TORCH
from ..errors import CheckpointError
from ..files import inside, remove_tree
from .reader import INDEX_NAME, SINGLE_NAME


@dataclass(frozen=True)
class TensorSpec:
    """What will be written for one tensor: name, shape and torch dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * torch.empty((), dtype=self.dtype).element_size()


def plan_shards(layout: list[TensorSpec], max_shard_bytes: int) -> list[list[TensorSpec]]:
    """Greedy split of the layout into shards of at most ``max_shard_bytes`` (one tensor may exceed it)."""
    shards: list[list[TensorSpec]] = [[]]
    size = 0
    for spec in layout:
        if shards[-1] and size + spec.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(spec)
        size += spec.nbytes
    return [s for s in shards if s]


def _safetensors_header(specs: list[TensorSpec]) -> bytes:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for spec in specs:
        header[spec.name] = {
            "dtype": BY_TORCH[spec.dtype].code,
            "shape": list(spec.shape),
            "data_offsets": [offset, offset + spec.nbytes],
        }
        offset += spec.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    return raw + b" " * (-len(raw) % 8)  # the format pads the header to 8-byte alignment


def write_checkpoint(
    folder: Path,
    tensors: Iterable[tuple[str, torch.Tensor]],
    *,
    layout: Optional[list[TensorSpec]] = None,
    config: Optional[dict] = None,
    max_shard_bytes: int = 2 * 2**30,
    extra_files: Optional[dict[str, bytes]] = None,
    overwrite: bool = False,
    within: Optional[Path] = None,
) -> Path:
    """Stream ``(name, tensor)`` pairs, in ``layout`` order, into a sharded HF folder.

    Because every tensor's shape and dtype are known up front, each shard's header is
    written first and each tensor's bytes go to disk as soon as it arrives: at most one
    tensor is held in memory, whatever the shard size. The folder is assembled under a
    hidden temporary name, fsync'ed and renamed into place, so a crash never leaves a
    half-written folder under the final name. Free disk space is checked first.
    Without ``layout`` the tensors are collected first (fine for small checkpoints).
    ``within``: the folder this call may delete in when it replaces ``folder`` (default: its
    parent); ``folder`` must lie strictly inside it.
    """
    folder = Path(folder)
    within = Path(within) if within is not None else folder.parent
    if not inside(folder, within) or folder.name in ("", ".", ".."):
        raise CheckpointError(f"refusing to write {folder}: it is not a folder inside {within}")
    if layout is None:
        tensors = list(tensors)
        layout = [TensorSpec(name, tuple(t.shape), t.dtype) for name, t in tensors]
    if folder.exists() and not overwrite:
        raise CheckpointError(f"{folder} already exists; remove it or pass overwrite")
    folder.parent.mkdir(parents=True, exist_ok=True)
    total = sum(spec.nbytes for spec in layout)
    free = shutil.disk_usage(folder.parent).free
    if total + 64 * 2**20 > free:
        raise CheckpointError(
            f"not enough disk space for {folder}: needs {total / 2**30:.2f} GiB, {free / 2**30:.2f} GiB free"
        )
    _remove_stale_partials(folder)
    tmp = folder.parent / f".{folder.name}.partial-{os.getpid()}"
    remove_tree(tmp, within=folder.parent)
    tmp.mkdir()
    try:
        _write_into(tmp, folder, tensors, layout, total, max_shard_bytes, config, extra_files)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    remove_tree(folder, within=within)
    os.replace(tmp, folder)
    return folder


def _remove_stale_partials(folder: Path) -> None:
    """Delete temporary folders left by killed writers of ``folder`` (their pid is gone)."""
    for p in folder.parent.glob(f".{folder.name}.partial-*"):
        try:
            os.kill(int(p.name.rsplit("-", 1)[1]), 0)
            continue  # its writer is alive (pids are per host: on a shared filesystem this keeps it)
        except (ValueError, ProcessLookupError):
            shutil.rmtree(p, ignore_errors=True)  # a hidden sibling named after folder: inside folder.parent
        except PermissionError:
            continue


def _write_into(
    tmp: Path,
    folder: Path,
    tensors,
    layout,
    total: int,
    max_shard_bytes: int,
    config: Optional[dict],
    extra_files: Optional[dict],
) -> None:
    shards = plan_shards(layout, max_shard_bytes)
    n = len(shards)
    names = [SINGLE_NAME] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    it = iter(tensors)
    weight_map: dict[str, str] = {}
    for fname, specs in zip(names, shards):
        header = _safetensors_header(specs)
        with open(tmp / fname, "wb") as f:
            f.write(struct.pack("<Q", len(header)))
            f.write(header)
            for spec in specs:
                try:
                    name, t = next(it)
                except StopIteration:
                    raise CheckpointError(f"tensor stream ended before '{spec.name}' ({folder})") from None
                if name != spec.name or tuple(t.shape) != spec.shape or t.dtype != spec.dtype:
                    raise CheckpointError(
                        f"tensor stream out of step with the layout: got '{name}' {tuple(t.shape)} {t.dtype}, "
                        f"expected '{spec.name}' {spec.shape} {spec.dtype}"
                    )
                t = t.detach().to("cpu").contiguous()
                if t.numel():
                    f.write(t.view(-1).view(torch.uint8).numpy().data)
                weight_map[name] = fname
            f.flush()
            os.fsync(f.fileno())
    if next(it, None) is not None:
        raise CheckpointError(f"tensor stream has more tensors than the layout of {folder}")
    if n > 1:
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (tmp / INDEX_NAME).write_text(json.dumps(index, indent=2))
    if config is not None:
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
    for fname, blob in (extra_files or {}).items():
        (tmp / fname).write_bytes(blob)


# Files of a model folder that travel with its weights (tokenizer, chat template, generation config).
COMPANION_PATTERNS = (
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.*",
    "merges.txt",
    "generation_config.json",
    "chat_template*",
    "*.model",
    "*.tiktoken",
    "preprocessor_config.json",
)


def companion_files(folder: Path) -> dict[str, bytes]:
    """Non-weight files to copy into a derived checkpoint (config.json is handled separately)."""
    out: dict[str, bytes] = {}
    for pattern in COMPANION_PATTERNS:
        for p in Path(folder).glob(pattern):
            if p.is_file():
                out[p.name] = p.read_bytes()
    return out
