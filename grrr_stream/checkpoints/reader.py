"""Reading safetensors checkpoints, local or from the Hugging Face Hub. With
checkpoints/header.py (header parsing) and checkpoints/writer.py (writing) the only
modules that touch safetensors files.

Reading parses the safetensors header itself (8-byte little-endian length, JSON
header, raw little-endian data) so that every structural problem - a shard name
that leaves the folder, a missing or truncated shard, a tensor the index promises
but the shard lacks - is found up front and reported with the file it concerns.
Tensors are read through a short-lived memory map of exactly their byte range and
copied out, so nothing of a checkpoint stays mapped (or counted in RSS) after the
matrix that needed it is done.
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..dtypes import BY_CODE
from ..errors import CheckpointError, CheckpointNotFoundError, MissingDependencyError, UnsafeCheckpointError
from ..unit_log import console
from .header import read_header, regular_file_size

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
# Files fetched from the Hub: weights as safetensors only, plus configs and tokenizers.
HUB_PATTERNS = ["*.safetensors", "*.json", "tokenizer*", "*.model", "*.tiktoken", "*.txt"]
_HUB_ID_RE = re.compile(r"[A-Za-z0-9][\w.\-]*/[\w.\-]+", re.ASCII)  # fullmatch: no trailing newline, ASCII only


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: shard file and absolute byte range."""

    name: str
    shard: Path
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def is_floating(self) -> bool:
        return self.dtype in BY_CODE and BY_CODE[self.dtype].floating

    @property
    def nbytes(self) -> int:
        return self.end - self.start


# ---------------------------------------------------------------------------
# locating a checkpoint


def resolve_source(source: str, revision: Optional[str] = None) -> Path:
    """Local folder for a path or a Hub repo id (downloading safetensors + json/tokenizer files)."""
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            raise CheckpointNotFoundError(
                f"{source} is a file; pass the checkpoint *folder* (the one holding config.json and *.safetensors)"
            )
        return path
    looks_like_path = source.startswith(("/", ".", "~")) or source.count("/") != 1
    if looks_like_path or not _HUB_ID_RE.fullmatch(source):
        raise CheckpointNotFoundError(f"checkpoint folder {source} does not exist")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - a core dependency
        raise MissingDependencyError("huggingface_hub is needed for Hub ids: pip install huggingface_hub") from None
    try:
        local = snapshot_download(
            repo_id=source, revision=revision, allow_patterns=HUB_PATTERNS, tqdm_class=_console_bars()
        )
    except Exception as e:  # network, auth, missing repo: all end the same way for the user
        raise CheckpointNotFoundError(
            f"'{source}' is not a local folder and could not be fetched from the Hugging Face Hub "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}). Check the id, your network "
            "and HF_TOKEN, or download it yourself and pass the folder."
        ) from None
    return Path(local)


def _console_bars():
    """huggingface_hub's bars (files, bytes, ETA) drawn on this package's console: the terminal, also inside a
    sweep unit whose output goes to its log (unit_log.console); off a terminal hf hides them, as it does anyway."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    class ConsoleBars(hf_tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("file", console())
            super().__init__(*args, **kwargs)

    return ConsoleBars


def _safe_shard_path(folder: Path, shard_name: str, index_file: Path) -> Path:
    """Resolve a shard name from an (untrusted) index, refusing names that leave the folder.

    The check is on the name, not on where symlinks lead: the Hugging Face cache lays
    out every snapshot as symlinks into a shared blob folder, and a symlink is made by
    whoever owns the filesystem, not by the index file.
    """
    p = Path(shard_name)
    if not shard_name or p.is_absolute() or ".." in p.parts or "\\" in shard_name or len(p.parts) != 1:
        raise UnsafeCheckpointError(
            f"{index_file} names shard '{shard_name}', which points outside the checkpoint folder; "
            "refusing to read it. Shard names must be plain file names inside the folder."
        )
    return folder / p


def _read_config(cfg_path: Path) -> Optional[dict]:
    """The model config, or None without one."""
    if not os.path.lexists(cfg_path):  # present in any form: a loop or a FIFO is refused, never skipped
        return None
    regular_file_size(cfg_path, "config file")
    try:
        config = json.loads(cfg_path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{cfg_path} is not valid JSON: {e}") from None
    except RecursionError:
        raise CheckpointError(f"{cfg_path} is nested too deeply to be a model config") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{cfg_path} must hold a JSON object (a Hugging Face model config)")
    return config


def _unindexed_shards(folder: Path) -> list[Path]:
    """The shards of a folder without an index; a folder of pickles only is refused."""
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise UnsafeCheckpointError(
                f"{folder} holds only pickle checkpoints ({', '.join(pickles[:5])}). Loading them would "
                "run arbitrary code from the file (unpickling), so grrr_stream reads safetensors only. "
                "Convert once, in an environment you trust, e.g. "
                '`python -c "from transformers import AutoModelForCausalLM as M; '
                "M.from_pretrained('IN').save_pretrained('OUT', safe_serialization=True)\"`, "
                "or use a safetensors revision of the model."
            )
        raise CheckpointNotFoundError(f"{folder} holds no *.safetensors files (and no {INDEX_NAME})")
    return shards


def _collect_tensors(shards: list[Path], shard_of: Optional[dict[str, Path]]) -> dict[str, TensorInfo]:
    """Every tensor of the shards' headers; with an index (``shard_of``) each from the shard it names."""
    tensors: dict[str, TensorInfo] = {}
    for shard in shards:
        header, data_start, _ = read_header(shard)
        for name, meta in header.items():
            if shard_of is not None and shard_of.get(name) != shard:
                continue  # the index decides which shard owns a name
            if name in tensors:
                raise CheckpointError(
                    f"tensor '{name}' appears in both {tensors[name].shard.name} and {shard.name}; "
                    f"add a {INDEX_NAME} or remove the duplicate shard"
                )
            b, e = meta["data_offsets"]
            tensors[name] = TensorInfo(name, shard, meta["dtype"], meta["shape"], data_start + b, data_start + e)
    return tensors


def _check_index_covers(index: Path, shard_of: dict[str, Path], tensors: dict[str, TensorInfo]) -> None:
    """Every tensor the index promises is in the shard it names."""
    missing = sorted(n for n in shard_of if n not in tensors)
    if missing:
        raise CheckpointError(
            f"{index} maps {len(missing)} tensor(s) to shards that do not contain them, e.g. "
            f"'{missing[0]}' → {shard_of[missing[0]].name}; the index and shards disagree, re-download"
        )


class Checkpoint:
    """A Hugging Face-style folder of safetensors shards, opened lazily.

    Only headers are read on open; tensor data is read on demand with :meth:`read`.
    """

    def __init__(self, folder: Path, tensors: dict[str, TensorInfo], shards: list[Path], config: Optional[dict]):
        self.folder = folder
        self.tensors = tensors
        self.shards = shards
        self.config = config

    @property
    def model_type(self) -> Optional[str]:
        return (self.config or {}).get("model_type")

    @classmethod
    def open(cls, folder: Path) -> "Checkpoint":
        folder = Path(folder)
        if folder.is_file():
            raise CheckpointNotFoundError(
                f"{folder} is a file; pass the checkpoint *folder* (the one holding config.json and *.safetensors)"
            )
        if not folder.is_dir():
            raise CheckpointNotFoundError(f"checkpoint folder {folder} does not exist")
        config = _read_config(folder / "config.json")
        index = folder / INDEX_NAME
        if os.path.lexists(index):
            regular_file_size(index, "index file")
            shard_of = cls._read_index(folder, index)
            shards = sorted(set(shard_of.values()))
        else:
            shards = _unindexed_shards(folder)
            shard_of = None
        tensors = _collect_tensors(shards, shard_of)
        if shard_of is not None:
            _check_index_covers(index, shard_of, tensors)
        return cls(folder, tensors, shards, config)

    @staticmethod
    def _read_index(folder: Path, index: Path) -> dict[str, Path]:
        try:
            data = json.loads(index.read_text())
            weight_map = data["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, RecursionError):
            raise CheckpointError(f"{index} is not a valid safetensors index (needs a 'weight_map' object)") from None
        resolved: dict[str, Path] = {}
        cache: dict[str, Path] = {}
        for name, shard_name in weight_map.items():
            if not isinstance(shard_name, str):
                raise CheckpointError(f"{index}: shard of '{name}' is not a file name")
            if shard_name not in cache:
                p = _safe_shard_path(folder, shard_name, index)
                if not os.path.lexists(p):
                    raise CheckpointNotFoundError(f"shard {p} (listed in {index.name}) is missing; re-download it")
                regular_file_size(p, "shard")
                cache[shard_name] = p
            resolved[name] = cache[shard_name]
        return resolved

    def read(self, name: str, *, mapped: bool = True) -> torch.Tensor:
        """A fresh (owned, contiguous) CPU tensor in the checkpoint's dtype (``mapped``: as in :meth:`read_part`)."""
        info = self.tensors[name]
        return self._read_bytes(info, info.start, info.nbytes, info.shape, mapped)

    def read_part(
        self, name: str, *, index: Optional[int] = None, rows: Optional[tuple[int, int]] = None, mapped: bool = True
    ) -> torch.Tensor:
        """One matrix of a tensor without reading the rest: slice ``index`` of a 3-D tensor (an
        expert), or the row block ``rows`` = [start, stop) of a 2-D one (a part of a fused projection),
        or the whole tensor when neither is given. Both parts are contiguous in the row-major file
        layout, so each is one byte range: start + first-axis offset × bytes per first-axis step.
        ``mapped=False`` reads with ``readinto`` instead of copying from a memory map: the mapped
        pages count in the process's RSS while they are copied, doubling the transient of a large
        block (the channels pass's LM head slices)."""
        info = self.tensors[name]
        if index is None and rows is None:
            return self.read(name, mapped=mapped)
        if info.dtype not in BY_CODE:
            raise CheckpointError(f"tensor '{name}' in {info.shard} has unsupported dtype {info.dtype}")
        step = math.prod(info.shape[1:]) * BY_CODE[info.dtype].itemsize  # bytes per step along the first axis
        if index is not None:
            if len(info.shape) != 3 or not 0 <= index < info.shape[0]:
                raise CheckpointError(
                    f"tensor '{name}' {list(info.shape)} has no slice {index} (expected a 3-D stack of expert matrices)"
                )
            return self._read_bytes(info, info.start + index * step, step, info.shape[1:], mapped)
        start, stop = rows
        if len(info.shape) != 2 or not 0 <= start < stop <= info.shape[0]:
            raise CheckpointError(f"tensor '{name}' {list(info.shape)} has no row block [{start}, {stop})")
        return self._read_bytes(
            info, info.start + start * step, (stop - start) * step, (stop - start, info.shape[1]), mapped
        )

    def read_matrix(self, m) -> torch.Tensor:
        """The matrix an :class:`~grrr_stream.checkpoints.arch.MatrixName` (or its store record) names."""
        if isinstance(m, dict):  # a completion record of the store
            rows = m.get("rows")
            return self.read_part(
                m.get("tensor") or m["name"], index=m.get("index"), rows=tuple(rows) if rows else None
            )
        return self.read_part(m.source, index=m.index, rows=m.rows)

    def matrix_shape(self, m) -> tuple[int, ...]:
        """Shape of the matrix ``m`` names, from the header alone."""
        shape = self.tensors[m.source].shape
        if m.index is not None:
            return tuple(shape[1:])
        if m.rows is not None:
            return (m.rows[1] - m.rows[0],) + tuple(shape[1:])
        return tuple(shape)

    def _read_bytes(
        self, info: TensorInfo, start: int, nbytes: int, shape: tuple[int, ...], mapped: bool = True
    ) -> torch.Tensor:
        if info.dtype not in BY_CODE:
            raise CheckpointError(f"tensor '{info.name}' in {info.shard} has unsupported dtype {info.dtype}")
        tdtype = BY_CODE[info.dtype].torch
        out = torch.empty(nbytes, dtype=torch.uint8)
        if nbytes:
            try:
                with open(info.shard, "rb") as f:
                    if mapped:
                        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                            out.numpy()[:] = np.frombuffer(mm, dtype=np.uint8, count=nbytes, offset=start)
                    else:
                        f.seek(start)
                        if f.readinto(out.numpy()) != nbytes:
                            raise ValueError(f"short read at byte {start}")
            except (OSError, ValueError) as e:
                raise CheckpointError(f"could not read tensor '{info.name}' from {info.shard}: {e}") from None
        return out.view(tdtype).reshape(shape)

    def fingerprint(self) -> str:
        """Cheap identity of the checkpoint's weights.

        Hashes every shard's name, size and header, plus 16 blocks of 64 KiB spread
        over its data. Two different training runs of one architecture have identical
        headers but differ in (nearly) every block, so a swapped checkpoint is caught
        without reading tens of GB; per-tensor full-content digests are recorded as
        each matrix is processed.
        """
        h = hashlib.blake2b(digest_size=16)
        for shard in self.shards:
            _, data_start, raw = read_header(shard)
            size = shard.stat().st_size
            h.update(shard.name.encode() + b"\0" + str(size).encode() + b"\0" + raw)
            span = size - data_start
            if span <= 0:
                continue
            with open(shard, "rb") as f:
                for i in range(16):
                    f.seek(data_start + (span * i) // 16)
                    h.update(f.read(65536))
        return h.hexdigest()


def tensor_digest(t: torch.Tensor) -> str:
    """Full-content digest of a contiguous CPU tensor (dtype and shape included)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{t.dtype}{tuple(t.shape)}".encode())
    if t.numel():
        h.update(t.contiguous().view(-1).view(torch.uint8).numpy())
    return h.hexdigest()
