"""Low-level Zarr array writing, shared by the transition store (store/transition_store.py) and the frame cache
(store/frame_cache.py): codecs, chunk shapes, dimension names (:func:`name_dimensions` records them in arrays
written without) and the direct chunk writer. These three modules are the only ones that touch Zarr.
"""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path
from typing import Optional, Union

import numpy as np

from ..errors import StoreError
from ..files import atomic_write_text

FORMAT_VERSION = 1  # of transition stores and frame caches alike
CHUNK = 1024  # 1024×1024 float32 chunks (4 MiB): good for dask, small enough to stream


def zarr_module():
    import zarr  # heavy import kept inside the owner modules

    return zarr


def _compressors(dtype: np.dtype) -> Optional[list]:
    """The codec of an array of this dtype: none for 32- and 64-bit floats, zstd for 16-bit ones.

    Measured (tools/bench_decompose.py; blosc zstd-1 with byte shuffle on 2 cores): float32 P,
    null and frames are noise-like and shrink by 8 % (ratio 1.08) at 120-180 MB/s, i.e. seconds per
    GB written and again per GB of cached frames read, for 8 % of disk. bfloat16 bit patterns
    shrink by 23 % (ratio 1.29: the exponent byte repeats), which is worth it. Stores written with
    the earlier always-zstd codec read the same (zarr records each array's codecs).
    """
    if np.dtype(dtype).itemsize > 2:
        return None
    from zarr.codecs import BloscCodec

    return [BloscCodec(cname="zstd", clevel=1, shuffle="shuffle")]


# Zarr v3 dimension names of every array written, so that xarray.open_datatree(store, engine="zarr")
# opens a store or frame cache with named axes. xarray needs equal names to mean equal lengths within
# a group: P is r×r with r the frame's core rank (≤ min(m, n) with a truncated core), indexed by U's
# columns (r_out) and V's (r_in); the singular values have min(m, n) entries (sv) whatever the core.
DIMENSIONS: dict[str, tuple[str, ...]] = {
    "P": ("r_out", "r_in"),
    "null": ("out", "in"),
    "sigma0": ("sv",),
    "sigma1": ("sv",),  # matrices/<name>/
    "null_row_norms": ("out",),
    "null_col_norms": ("in",),  # instead of null with null_storage: norms
    "channel_energy": ("channel", "component"),  # per residual channel: diag, off, null (channels.energy)
    "U": ("out", "r"),
    "S": ("sv",),
    "V": ("in", "r"),  # frames/<key>/
}
# channels/<name>: every matrix's channel_energy on one grid (grrr_stream.store.channel_tables)
CHANNEL_DIMENSIONS: dict[str, tuple[str, ...]] = {
    "energy": ("layer", "module", "channel", "component"),
    "expert_energy": ("layer", "expert_module", "expert", "channel", "component"),
    "layer": ("layer",),
    "expert": ("expert",),
}
METRICS_DIM = "matrix"  # metrics/<column>: one entry per matrix, in the order of attrs["names"]


def chunk_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """At most CHUNK per axis, tiling the array with (almost) no padding. Zarr stores edge chunks at
    full chunk size: with 1024-row chunks a 1536-row array took 2048 rows on disk, which compression
    used to hide. ceil(s / ceil(s / CHUNK)) per axis pads fewer than ceil(s / CHUNK) entries (8960 →
    9 chunks of 996: 4 rows of padding)."""
    return tuple(-(-s // -(-s // CHUNK)) if s else 1 for s in shape)


def write_group(folder: Path, attrs: dict) -> None:
    """A Zarr v3 group at ``folder`` with these attributes, its zarr.json written as zarr writes it. Not
    atomic: callers mark completion in a later, atomic rewrite (:func:`group_metadata`)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "zarr.json").write_text(group_metadata(attrs))


def group_metadata(attrs: dict) -> str:
    """The zarr.json text of a group with these attributes (zarr's own layout; tests/store/test_store.py
    compares the bytes)."""
    return json.dumps({"attributes": attrs, "zarr_format": 3, "node_type": "group"}, indent=2)


def write_array(
    group: Union["object", Path],
    name: str,
    data: np.ndarray,
    attrs: Optional[dict] = None,
    dims: Optional[tuple[str, ...]] = None,
):
    """``data`` as the array ``name`` of ``group``: a zarr Group, or the folder of a group on local disk
    (:func:`write_group`). Into a folder, an uncompressed array is written without zarr: its zarr.json and
    chunk files as zarr writes them (byte for byte, tests/store/test_store.py). Zarr's own path costs about
    5 ms of CPU per array and 2 per group (an event-loop round trip per metadata file), which on
    SmolLM2-135M's 210 matrices, each with a store group of 5 arrays and a frame of 3, was several seconds."""
    chunks = chunk_shape(data.shape)
    compressors = _compressors(data.dtype)
    dims = tuple(dims or DIMENSIONS[name])
    if isinstance(group, Path):
        if compressors is None:
            folder = group / name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "zarr.json").write_text(array_metadata(data.dtype, data.shape, chunks, dims, attrs or {}))
            if data.size:
                _write_raw_chunks(folder, data, chunks)
            return None
        group = zarr_module().open_group(str(group), mode="r+", zarr_format=3)
    arr = group.create_array(
        name,
        shape=data.shape,
        chunks=chunks,
        dtype=data.dtype,
        compressors=compressors,
        overwrite=True,
        attributes=attrs or {},
        fill_value=0,
        dimension_names=dims,
    )
    store = arr.store_path.store
    if compressors is None and data.size and hasattr(store, "root"):
        _write_raw_chunks(Path(store.root) / arr.store_path.path, data, chunks)
    else:
        arr[...] = data
    return arr


def array_metadata(
    dtype: np.dtype, shape: tuple[int, ...], chunks: tuple[int, ...], dims: tuple[str, ...], attrs: dict
) -> str:
    """The zarr.json text of an uncompressed array: zarr's own metadata for this dtype and rank (taken once
    per process from an array zarr writes), with the shape, chunks, dimension names and attributes set."""
    meta = json.loads(_array_template(np.dtype(dtype).str, len(shape)))
    meta["shape"] = list(shape)
    meta["chunk_grid"]["configuration"]["chunk_shape"] = list(chunks)
    meta["dimension_names"] = list(dims)
    meta["attributes"] = attrs
    return json.dumps(meta, indent=2)


@functools.lru_cache(maxsize=None)
def _array_template(dtype: str, ndim: int) -> str:
    zarr = zarr_module()
    with tempfile.TemporaryDirectory() as tmp:
        zarr.open_group(tmp, mode="w", zarr_format=3).create_array(
            "a",
            shape=(1,) * ndim,
            chunks=(1,) * ndim,
            dtype=np.dtype(dtype),
            compressors=None,
            fill_value=0,
            dimension_names=[f"d{i}" for i in range(ndim)],
            attributes={},
        )
        return (Path(tmp) / "a" / "zarr.json").read_text()


def _write_raw_chunks(folder: Path, data: np.ndarray, chunks: tuple[int, ...]) -> None:
    """The chunk files zarr itself writes for an array without compressors (codec chain: bytes,
    little endian; default chunk key encoding c/i/j; edge chunks padded with the fill value 0),
    written directly: zarr's own path costs about three times a plain file write per array, which
    on a model of 200 small matrices was seconds of the writer thread (tests/store/test_store.py checks
    the files are byte-identical to zarr's)."""
    data = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<"))
    grid = [range(0, s, c) for s, c in zip(data.shape, chunks)]
    for corner in np.ndindex(*[len(g) for g in grid]):
        lo = [g[i] for g, i in zip(grid, corner)]
        block = data[tuple(slice(a, a + c) for a, c in zip(lo, chunks))]
        if block.shape != chunks:  # an edge chunk: zarr stores it at full size
            full = np.zeros(chunks, dtype=data.dtype)
            full[tuple(slice(0, n) for n in block.shape)] = block
            block = full
        path = folder.joinpath("c", *map(str, corner))
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.write(np.ascontiguousarray(block).data)


def name_dimensions(path: Path) -> int:
    """Record dimension names (:data:`DIMENSIONS`) in the arrays of a store or frame cache written
    before grrr_stream recorded them, so that xarray can open it. Rewrites array metadata only
    (each zarr.json atomically), never data; returns the number of arrays updated."""
    path = Path(path)
    todo = []
    for meta in sorted(path.rglob("zarr.json")):
        rel = meta.relative_to(path).parts
        if any(part.startswith(".") for part in rel):
            continue  # a frame being written by another process
        doc = json.loads(meta.read_text())
        if doc.get("node_type") != "array" or doc.get("dimension_names"):
            continue
        dims = (
            (METRICS_DIM,)
            if len(rel) == 3 and rel[0] == "metrics"
            else CHANNEL_DIMENSIONS.get(meta.parent.name)
            if len(rel) == 3 and rel[0] == "channels"
            else DIMENSIONS.get(meta.parent.name)
        )
        if dims is None or len(dims) != len(doc["shape"]):  # checked for all before any is changed
            raise StoreError(f"{meta.parent} is not an array grrr_stream writes; cannot name its dimensions")
        todo.append((meta, {**doc, "dimension_names": list(dims)}))
    for meta, doc in todo:
        atomic_write_text(meta, json.dumps(doc, indent=2))
    return len(todo)
