"""The only module that touches safetensors files and the Hugging Face Hub.

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
import shutil
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np
import torch

from .dtypes import BY_CODE, BY_TORCH
from .errors import (
    CheckpointError,
    CheckpointNotFoundError,
    MissingDependencyError,
    UnsafeCheckpointError,
)

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
# Files fetched from the Hub: weights as safetensors only, plus configs and tokenizers.
HUB_PATTERNS = ["*.safetensors", "*.json", "tokenizer*", "*.model", "*.tiktoken", "*.txt"]
_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
_MAX_HEADER = 100 * 2**20


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
    if looks_like_path or not _HUB_ID_RE.match(source):
        raise CheckpointNotFoundError(f"checkpoint folder {source} does not exist")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - a core dependency
        raise MissingDependencyError("huggingface_hub is needed for Hub ids: pip install huggingface_hub") from None
    try:
        local = snapshot_download(repo_id=source, revision=revision, allow_patterns=HUB_PATTERNS)
    except Exception as e:  # network, auth, missing repo: all end the same way for the user
        raise CheckpointNotFoundError(
            f"'{source}' is not a local folder and could not be fetched from the Hugging Face Hub "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}). Check the id, your network "
            "and HF_TOKEN, or download it yourself and pass the folder."
        ) from None
    return Path(local)


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


def read_header(shard: Path) -> tuple[dict[str, Any], int, bytes]:
    """(tensor entries, absolute offset of the data section, raw header bytes).

    Entries map name → {dtype, shape (tuple), data_offsets (begin, end)}, type-checked;
    ``__metadata__`` is dropped. Raises CheckpointError naming the file on any problem.
    """
    size = _regular_file_size(shard, "shard")
    try:
        with open(shard, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"shard {shard} is truncated or empty ({size} bytes); re-download it")
            (n,) = struct.unpack("<Q", head)
            if n > _MAX_HEADER or 8 + n > size:
                raise CheckpointError(
                    f"shard {shard} is truncated or not a safetensors file (header length {n}, file {size} bytes); "
                    "re-download it"
                )
            raw = f.read(n)
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"shard {shard} is missing; re-download the checkpoint") from None
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise CheckpointError(f"shard {shard} has a corrupt safetensors header; re-download it") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"shard {shard} has a corrupt safetensors header; re-download it")
    data_start = 8 + n
    entries: dict[str, Any] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            offsets, shape_raw, dtype = meta["data_offsets"], meta["shape"], meta["dtype"]
            if not (isinstance(offsets, list) and len(offsets) == 2 and isinstance(shape_raw, list)
                    and isinstance(dtype, str)
                    and all(type(x) is int and x >= 0 for x in offsets + shape_raw)):
                raise TypeError
            b, e = offsets
            shape = tuple(shape_raw)
        except (KeyError, TypeError):
            raise CheckpointError(f"shard {shard}: header entry for '{name}' is malformed; re-download it") from None
        if dtype in BY_CODE:
            expect = math.prod(shape) * BY_CODE[dtype].itemsize  # exact: a declared 10^30 dimension cannot wrap around
            if e - b != expect:
                raise CheckpointError(
                    f"shard {shard}: tensor '{name}' spans {e - b} bytes but {dtype}{_shape_text(shape)} needs "
                    f"{expect}; the header is corrupt, re-download it"
                )
        elif e < b:
            raise CheckpointError(f"shard {shard}: tensor '{name}' has data_offsets [{b}, {e}] that end before "
                                  "they begin; the header is corrupt, re-download it")
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": (b, e)}
    # as the safetensors library: the tensors tile the data section from 0, in order, without overlap,
    # so that no two tensors share bytes (one tensor read from another's data) and none leaves the file
    end = 0
    for name, meta in sorted(entries.items(), key=lambda kv: kv[1]["data_offsets"]):
        b, e = meta["data_offsets"]
        if b != end:
            what = "overlaps the tensor before it" if b < end else "leaves a gap before it"
            raise CheckpointError(f"shard {shard}: tensor '{name}' (data_offsets [{b}, {e}]) {what}; the header is "
                                  "corrupt or crafted, re-download the checkpoint")
        end = e
    if data_start + end > size:
        raise CheckpointError(
            f"shard {shard} is truncated: its header says the data ends at byte {data_start + end} but the file has "
            f"{size} bytes. Re-download it."
        )
    return entries, data_start, raw


def _shape_text(shape: tuple) -> str:
    text = str(list(shape))
    return text if len(text) <= 80 else text[:77] + "...]"


def _regular_file_size(path: Path, what: str) -> int:
    """The size of a regular file; a FIFO, device, folder or symlink loop is refused at once (reading a
    FIFO would wait forever)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"{what} {path} is missing; re-download the checkpoint") from None
    except OSError as e:  # ELOOP (a symlink loop), EACCES, ...
        raise CheckpointError(f"{what} {path} cannot be read: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else \
            "a device or socket"
        raise CheckpointError(f"{what} {path} is {kind}, not a regular file; give a checkpoint folder whose files "
                              "are regular files")
    return st.st_size


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
        config = None
        cfg_path = folder / "config.json"
        if os.path.lexists(cfg_path):  # present in any form: a loop or a FIFO is refused, never skipped
            _regular_file_size(cfg_path, "config file")
            try:
                config = json.loads(cfg_path.read_bytes().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise CheckpointError(f"{cfg_path} is not valid JSON: {e}") from None
            except RecursionError:
                raise CheckpointError(f"{cfg_path} is nested too deeply to be a model config") from None
            if not isinstance(config, dict):
                raise CheckpointError(f"{cfg_path} must hold a JSON object (a Hugging Face model config)")
        index = folder / INDEX_NAME
        if os.path.lexists(index):
            _regular_file_size(index, "index file")
            shard_of = cls._read_index(folder, index)
            shards = sorted(set(shard_of.values()))
        else:
            shards = sorted(folder.glob("*.safetensors"))
            if not shards:
                pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
                if pickles:
                    raise UnsafeCheckpointError(
                        f"{folder} holds only pickle checkpoints ({', '.join(pickles[:5])}). Loading them would "
                        "run arbitrary code from the file (unpickling), so grrr_stream reads safetensors only. "
                        "Convert once, in an environment you trust, e.g. "
                        "`python -c \"from transformers import AutoModelForCausalLM as M; "
                        "M.from_pretrained('IN').save_pretrained('OUT', safe_serialization=True)\"`, "
                        "or use a safetensors revision of the model."
                    )
                raise CheckpointNotFoundError(f"{folder} holds no *.safetensors files (and no {INDEX_NAME})")
            shard_of = None
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
        if shard_of is not None:
            missing = sorted(n for n in shard_of if n not in tensors)
            if missing:
                raise CheckpointError(
                    f"{index} maps {len(missing)} tensor(s) to shards that do not contain them, e.g. "
                    f"'{missing[0]}' → {shard_of[missing[0]].name}; the index and shards disagree, re-download"
                )
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
                _regular_file_size(p, "shard")
                cache[shard_name] = p
            resolved[name] = cache[shard_name]
        return resolved

    def read(self, name: str) -> torch.Tensor:
        """A fresh (owned, contiguous) CPU tensor in the checkpoint's dtype."""
        info = self.tensors[name]
        return self._read_bytes(info, info.start, info.nbytes, info.shape)

    def read_part(self, name: str, *, index: Optional[int] = None,
                  rows: Optional[tuple[int, int]] = None) -> torch.Tensor:
        """One matrix of a tensor without reading the rest: slice ``index`` of a 3-D tensor (an
        expert), or the row block ``rows`` = [start, stop) of a 2-D one (a part of a fused projection),
        or the whole tensor when neither is given. Both parts are contiguous in the row-major file
        layout, so each is one byte range: start + first-axis offset × bytes per first-axis step."""
        info = self.tensors[name]
        if index is None and rows is None:
            return self.read(name)
        if info.dtype not in BY_CODE:
            raise CheckpointError(f"tensor '{name}' in {info.shard} has unsupported dtype {info.dtype}")
        step = math.prod(info.shape[1:]) * BY_CODE[info.dtype].itemsize  # bytes per step along the first axis
        if index is not None:
            if len(info.shape) != 3 or not 0 <= index < info.shape[0]:
                raise CheckpointError(f"tensor '{name}' {list(info.shape)} has no slice {index} (expected a 3-D "
                                      "stack of expert matrices)")
            return self._read_bytes(info, info.start + index * step, step, info.shape[1:])
        start, stop = rows
        if len(info.shape) != 2 or not 0 <= start < stop <= info.shape[0]:
            raise CheckpointError(f"tensor '{name}' {list(info.shape)} has no row block [{start}, {stop})")
        return self._read_bytes(info, info.start + start * step, (stop - start) * step,
                                (stop - start, info.shape[1]))

    def read_matrix(self, m) -> torch.Tensor:
        """The matrix an :class:`~grrr_stream.arch.MatrixName` (or its store record) names."""
        if isinstance(m, dict):  # a completion record of the store
            rows = m.get("rows")
            return self.read_part(m.get("tensor") or m["name"], index=m.get("index"),
                                  rows=tuple(rows) if rows else None)
        return self.read_part(m.source, index=m.index, rows=m.rows)

    def matrix_shape(self, m) -> tuple[int, ...]:
        """Shape of the matrix ``m`` names, from the header alone."""
        shape = self.tensors[m.source].shape
        if m.index is not None:
            return tuple(shape[1:])
        if m.rows is not None:
            return (m.rows[1] - m.rows[0],) + tuple(shape[1:])
        return tuple(shape)

    def _read_bytes(self, info: TensorInfo, start: int, nbytes: int, shape: tuple[int, ...]) -> torch.Tensor:
        if info.dtype not in BY_CODE:
            raise CheckpointError(f"tensor '{info.name}' in {info.shard} has unsupported dtype {info.dtype}")
        tdtype = BY_CODE[info.dtype].torch
        out = torch.empty(nbytes, dtype=torch.uint8)
        if nbytes:
            try:
                with open(info.shard, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    out.numpy()[:] = np.frombuffer(mm, dtype=np.uint8, count=nbytes, offset=start)
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


# ---------------------------------------------------------------------------
# writing


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
        header[spec.name] = {"dtype": BY_TORCH[spec.dtype].code, "shape": list(spec.shape),
                             "data_offsets": [offset, offset + spec.nbytes]}
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
    from .files import inside, remove_tree

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


def _write_into(tmp: Path, folder: Path, tensors, layout, total: int, max_shard_bytes: int,
                config: Optional[dict], extra_files: Optional[dict]) -> None:
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
COMPANION_PATTERNS = ("tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab.*", "merges.txt",
                      "generation_config.json", "chat_template*", "*.model", "*.tiktoken", "preprocessor_config.json")


def companion_files(folder: Path) -> dict[str, bytes]:
    """Non-weight files to copy into a derived checkpoint (config.json is handled separately)."""
    out: dict[str, bytes] = {}
    for pattern in COMPANION_PATTERNS:
        for p in Path(folder).glob(pattern):
            if p.is_file():
                out[p.name] = p.read_bytes()
    return out
