"""The safetensors header, parsed and checked by hand (8-byte little-endian length, JSON header,
raw little-endian data) so that every structural problem is found before any tensor is read and
reported with the file it concerns. Used by :class:`grrr_stream.checkpoints.reader.Checkpoint`.
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from pathlib import Path
from typing import Any

from ..dtypes import BY_CODE
from ..errors import CheckpointError, CheckpointNotFoundError

_MAX_HEADER = 100 * 2**20


def read_header(shard: Path) -> tuple[dict[str, Any], int, bytes]:
    """(tensor entries, absolute offset of the data section, raw header bytes).

    Entries map name → {dtype, shape (tuple), data_offsets (begin, end)}, type-checked;
    ``__metadata__`` is dropped. Raises CheckpointError naming the file on any problem.
    """
    size = regular_file_size(shard, "shard")
    n, raw = _read_raw_header(shard, size)
    header = _parse_header(shard, raw)
    data_start = 8 + n
    entries = {name: _header_entry(shard, name, meta) for name, meta in header.items() if name != "__metadata__"}
    _check_tiling(shard, entries, data_start, size)
    return entries, data_start, raw


def _read_raw_header(shard: Path, size: int) -> tuple[int, bytes]:
    """The declared header length and the header bytes, refused when the file cannot hold them."""
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
            return n, f.read(n)
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"shard {shard} is missing; re-download the checkpoint") from None


def _parse_header(shard: Path, raw: bytes) -> dict:
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise CheckpointError(f"shard {shard} has a corrupt safetensors header; re-download it") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"shard {shard} has a corrupt safetensors header; re-download it")
    return header


def _header_entry(shard: Path, name: str, meta: Any) -> dict[str, Any]:
    """One tensor's header entry, type-checked, with a byte span that fits its dtype and shape."""
    try:
        offsets, shape_raw, dtype = meta["data_offsets"], meta["shape"], meta["dtype"]
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and isinstance(shape_raw, list)
            and isinstance(dtype, str)
            and all(type(x) is int and x >= 0 for x in offsets + shape_raw)
        ):
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
        raise CheckpointError(
            f"shard {shard}: tensor '{name}' has data_offsets [{b}, {e}] that end before "
            "they begin; the header is corrupt, re-download it"
        )
    return {"dtype": dtype, "shape": shape, "data_offsets": (b, e)}


def _check_tiling(shard: Path, entries: dict[str, Any], data_start: int, size: int) -> None:
    """As the safetensors library: the tensors tile the data section from 0, in order, without overlap,
    so that no two tensors share bytes (one tensor read from another's data) and none leaves the file."""
    end = 0
    for name, meta in sorted(entries.items(), key=lambda kv: kv[1]["data_offsets"]):
        b, e = meta["data_offsets"]
        if b != end:
            what = "overlaps the tensor before it" if b < end else "leaves a gap before it"
            raise CheckpointError(
                f"shard {shard}: tensor '{name}' (data_offsets [{b}, {e}]) {what}; the header is "
                "corrupt or crafted, re-download the checkpoint"
            )
        end = e
    if data_start + end > size:
        raise CheckpointError(
            f"shard {shard} is truncated: its header says the data ends at byte {data_start + end} but the file has "
            f"{size} bytes. Re-download it."
        )


def _shape_text(shape: tuple) -> str:
    text = str(list(shape))
    return text if len(text) <= 80 else text[:77] + "...]"


def regular_file_size(path: Path, what: str) -> int:
    """The size of a regular file; a FIFO, device, folder or symlink loop is refused at once (reading a
    FIFO would wait forever)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"{what} {path} is missing; re-download the checkpoint") from None
    except OSError as e:  # ELOOP (a symlink loop), EACCES, ...
        raise CheckpointError(f"{what} {path} cannot be read: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device or socket"
        )
        raise CheckpointError(
            f"{what} {path} is {kind}, not a regular file; give a checkpoint folder whose files are regular files"
        )
    return st.st_size
