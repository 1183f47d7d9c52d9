"""The only module that touches Zarr: store layout, atomic per-matrix writes,
completion records and the base-frame cache.

Layout of a transition store (Zarr v3, readable with plain zarr/dask/xarray)::

    <store>/zarr.json                 root group; attrs["grrr_stream"] = manifest
    <store>/matrices/<matrix key>/    one group per decomposed matrix; the key is the tensor name, or
                                      '<tensor>[<e>]' for expert e of a 3-D expert tensor and
                                      '<tensor>[q]' etc. for a part of a split fused tensor (%-escaped)
        P       r×r     update in the pretrained frame, U0ᵀ ΔW V0
        null    m×n     explicit null residual ΔW − U0 P V0ᵀ (absent when W0 is
                        square with an untruncated core: zero by construction)
        sigma0  min(m,n) singular values of W0
        sigma1  min(m,n) singular values of W1
        attrs   name, layer, module, shape, rank, digests, metrics, complete; for a part of a
                tensor also expert, tensor (the checkpoint tensor), index (3-D slice) or rows
    <store>/metrics/                  one float64 column array per metric (attrs: names, columns)
    <store>/metrics.csv, summary.csv, summary.json
    <store>/frames/                   base-frame cache unless frame_cache points elsewhere
        <frame key>/U (m×r), S, V (n×r), attrs complete

A matrix is done only when its arrays have been fsync'ed and then its group's
attributes were rewritten with ``complete: true`` (zarr replaces zarr.json
atomically; we fsync it). Anything without that flag is rewritten on resume.
"""

from __future__ import annotations

import errno
import json
import os
import re
import time
from pathlib import Path
from typing import Optional
from urllib.parse import quote

import numpy as np
import torch

from .dtypes import torch_dtype
from .errors import StoreError, StoreMismatchError
from .files import atomic_write_text, fsync_path, fsync_tree, remove_tree, to_csv
from .frame import Frame
from .locks import FileLock
from .phases import NO_TIMER, PhaseTimer

FORMAT_VERSION = 1
MANIFEST_KEY = "grrr_stream"
CHUNK = 1024  # 1024×1024 float32 chunks (4 MiB): good for dask, small enough to stream

def _zarr():
    import zarr  # heavy import kept inside the owner module

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


def node_key(name: str) -> str:
    """Zarr node name for a tensor name: names with '/' or odd characters, and names starting with
    '.' or '__' (never a folder of their own: '..' would be the parent), are %-escaped."""
    if re.fullmatch(r"[A-Za-z0-9_.\-]+", name) and not name.startswith(("__", ".")):
        return name
    escaped = quote(name, safe="")
    if escaped.startswith((".", "__")):  # '..' is the parent folder; zarr reserves names starting with '__'
        escaped = quote(escaped[0], safe="").replace(".", "%2E").replace("_", "%5F") + escaped[1:]
    return escaped


def _to_numpy(t: torch.Tensor, dtype: str) -> np.ndarray:
    t = t.detach().to("cpu")
    if dtype == "bfloat16":
        # numpy has no bfloat16: store the bit pattern as uint16, tagged in attrs.
        return t.to(torch.bfloat16).contiguous().view(torch.uint16).numpy()
    return t.to(torch_dtype(dtype)).contiguous().numpy()


# Zarr v3 dimension names of every array written, so that xarray.open_datatree(store, engine="zarr")
# opens a store or frame cache with named axes. xarray needs equal names to mean equal lengths within
# a group: P is r×r with r the frame's core rank (≤ min(m, n) with a truncated core), indexed by U's
# columns (r_out) and V's (r_in); the singular values have min(m, n) entries (sv) whatever the core.
DIMENSIONS: dict[str, tuple[str, ...]] = {
    "P": ("r_out", "r_in"), "null": ("out", "in"), "sigma0": ("sv",), "sigma1": ("sv",),  # matrices/<name>/
    "null_row_norms": ("out",), "null_col_norms": ("in",),  # instead of null with null_storage: norms
    "U": ("out", "r"), "S": ("sv",), "V": ("in", "r"),                                    # frames/<key>/
}
METRICS_DIM = "matrix"  # metrics/<column>: one entry per matrix, in the order of attrs["names"]


def chunk_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """At most CHUNK per axis, tiling the array with (almost) no padding. Zarr stores edge chunks at
    full chunk size: with 1024-row chunks a 1536-row array took 2048 rows on disk, which compression
    used to hide. ceil(s / ceil(s / CHUNK)) per axis pads fewer than ceil(s / CHUNK) entries (8960 →
    9 chunks of 996: 4 rows of padding)."""
    return tuple(-(-s // -(-s // CHUNK)) if s else 1 for s in shape)


def _write_array(group, name: str, data: np.ndarray, attrs: Optional[dict] = None,
                 dims: Optional[tuple[str, ...]] = None):
    chunks = chunk_shape(data.shape)
    compressors = _compressors(data.dtype)
    arr = group.create_array(
        name, shape=data.shape, chunks=chunks, dtype=data.dtype, compressors=compressors,
        overwrite=True, attributes=attrs or {}, fill_value=0, dimension_names=dims or DIMENSIONS[name],
    )
    store = arr.store_path.store
    if compressors is None and data.size and hasattr(store, "root"):
        _write_raw_chunks(Path(store.root) / arr.store_path.path, data, chunks)
    else:
        arr[...] = data
    return arr


def _write_raw_chunks(folder: Path, data: np.ndarray, chunks: tuple[int, ...]) -> None:
    """The chunk files zarr itself writes for an array without compressors (codec chain: bytes,
    little endian; default chunk key encoding c/i/j; edge chunks padded with the fill value 0),
    written directly: zarr's own path costs about three times a plain file write per array, which
    on a model of 200 small matrices was seconds of the writer thread (tests/test_store.py checks
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


class StoreLock(FileLock):
    """Exclusive advisory lock on a store directory for the lifetime of a run."""

    def __init__(self, path: Path):
        super().__init__(Path(path) / ".lock")

    def __enter__(self) -> "StoreLock":
        if self.path.parent.exists() and not self.path.parent.is_dir():
            raise StoreError(f"--store {self.path.parent} is a file; give a directory path")
        return super().__enter__()

    def busy(self, holder: str) -> Exception:
        return StoreError(f"store {self.path.parent} is in use by another grrr-stream process ({holder}); wait for "
                          "it to finish or use another --store")


class TransitionStore:
    """Results of one transition (base → post) in a Zarr v3 directory store."""

    def __init__(self, path: Path, root):
        self.path = Path(path)
        self.root = root

    # -- opening -----------------------------------------------------------

    @staticmethod
    def read_manifest(path: Path) -> Optional[dict]:
        meta = Path(path) / "zarr.json"
        if not meta.is_file():
            return None
        try:
            return json.loads(meta.read_text()).get("attributes", {}).get(MANIFEST_KEY)
        except json.JSONDecodeError:
            return None

    @classmethod
    def check_writable(cls, path: Path) -> None:
        """Refuse a path that is a file or a non-empty directory that is not a grrr_stream store."""
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise StoreError(f"--store {path} is a file; give a directory path")
        if (cls.read_manifest(path) is None and path.exists()
                and any(p.name not in (".lock", "frames") for p in path.iterdir())):
            raise StoreError(
                f"{path} exists and is not a grrr_stream store; refusing to write into it. Choose an empty or new --store."
            )

    @classmethod
    def open(cls, path: Path, manifest: dict, *, overwrite: bool = False) -> "TransitionStore":
        """Open for writing, creating it or checking it belongs to the same inputs and settings.

        ``manifest`` must hold ``identity`` (dict compared exactly) plus anything descriptive.
        """
        zarr = _zarr()
        path = Path(path)
        cls.check_writable(path)
        existing = cls.read_manifest(path)
        adopted = False
        if existing is not None and existing.get("identity") != manifest["identity"]:
            # an unfinished store of the same settings whose inputs changed (e.g. a NaN repaired in the
            # base): keep it; the caller drops the matrices whose recorded input digests no longer match
            adopted = not overwrite and not existing.get("complete") and \
                existing.get("identity", {}).get("settings_hash") == manifest["identity"].get("settings_hash")
            if not overwrite and not adopted:
                old, new = existing.get("identity", {}), manifest["identity"]
                diffs = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
                raise StoreMismatchError(
                    f"store {path} holds results for different inputs or settings (differs in: {', '.join(diffs)}). "
                    "Mixing them would corrupt the results. Use another --store, or pass --overwrite to discard "
                    "the old results (cached base frames are kept; they are keyed by content)."
                )
            if not adopted:
                cls.clear(path)
        if existing is None or existing.get("identity") != manifest["identity"]:
            root = zarr.open_group(str(path), mode="a", zarr_format=3)
            root.attrs[MANIFEST_KEY] = {**manifest, "format": FORMAT_VERSION, "complete": False}
            root.require_group("matrices")
        else:
            root = zarr.open_group(str(path), mode="a", zarr_format=3)
            merged = dict(existing)
            merged.update({k: v for k, v in manifest.items() if k != "identity"})
            root.attrs[MANIFEST_KEY] = merged
        store = cls(path, root)
        store.adopted = adopted
        return store

    @classmethod
    def attach(cls, path: Path) -> "TransitionStore":
        """Open a store that another process (the run's driver, which holds its lock) has opened with
        :meth:`open`, to write matrices into it: a Dask worker's share of a spread transition."""
        if cls.read_manifest(path) is None:
            raise StoreError(f"{path} is not a grrr_stream store (or this machine does not see it: the workers of "
                             "a spread transition need the store on a filesystem they share with the driver)")
        return cls(Path(path), _zarr().open_group(str(path), mode="r+", zarr_format=3))

    adopted = False  # opened over an unfinished store whose inputs changed (see :meth:`open`)

    def remove_matrix(self, name: str) -> None:
        """Drop one matrix's results (its inputs changed): it is recomputed."""
        remove_tree(self._matrix_dir(name), within=self.path / "matrices")

    @staticmethod
    def clear(path: Path) -> None:
        """Delete all results in a store except the lock and the (content-keyed) frame cache."""
        for p in path.iterdir():
            if p.name in ("frames", ".lock"):
                continue
            remove_tree(p, within=path)

    # -- per-matrix results ---------------------------------------------------

    def _matrix_dir(self, name: str) -> Path:
        return self.path / "matrices" / node_key(name)

    def completed(self) -> dict[str, dict]:
        """tensor name → attrs of every matrix whose completion record is durable."""
        done: dict[str, dict] = {}
        base = self.path / "matrices"
        if not base.is_dir():
            return done
        for d in base.iterdir():
            attrs = _complete_attrs(d)
            if attrs is not None:
                done[attrs["name"]] = attrs
        return done

    def is_complete(self, name: str) -> bool:
        """Whether one matrix's completion record is durable (reads only that matrix's metadata)."""
        return _complete_attrs(self._matrix_dir(name)) is not None

    def write_matrix(self, name: str, arrays: dict[str, np.ndarray], attrs: dict, array_attrs: dict[str, dict],
                     *, timer: PhaseTimer = NO_TIMER) -> None:
        """Write one matrix's arrays durably, then mark it complete (the commit point)."""
        zarr = _zarr()
        d = self._matrix_dir(name)
        with timer.phase("store_write"):
            if d.exists():
                remove_tree(d, within=self.path / "matrices")  # leftovers of an interrupted write
            group = zarr.open_group(str(self.path), mode="a", zarr_format=3)["matrices"].create_group(
                node_key(name), attributes={**attrs, "complete": False}
            )
            for key, data in arrays.items():
                _write_array(group, key, data, array_attrs.get(key))
        with timer.phase("fsync"):
            fsync_tree(d)
        with timer.phase("store_write"):
            group.attrs["complete"] = True
        with timer.phase("fsync"):
            fsync_path(d / "zarr.json")
            fsync_path(d)

    # -- tables -----------------------------------------------------------------

    def write_tables(self, rows: list[dict], summary_rows: list[dict], summary: dict) -> None:
        """metrics.csv, summary.csv, summary.json and the metrics/ column arrays."""
        zarr = _zarr()
        atomic_write_text(self.path / "metrics.csv", to_csv(rows))
        atomic_write_text(self.path / "summary.csv", to_csv(summary_rows))
        atomic_write_text(self.path / "summary.json", json.dumps(summary, indent=2, sort_keys=True))
        root = zarr.open_group(str(self.path), mode="a", zarr_format=3)
        numeric: list[str] = []
        for r in rows:  # a column some matrices lack (an angle above a small matrix's size) is NaN there
            numeric += [k for k, v in r.items() if k not in numeric and isinstance(v, (int, float))
                        and not isinstance(v, bool)]
        grp = root.create_group("metrics", overwrite=True, attributes={
            "names": [r["name"] for r in rows], "columns": numeric,
        })
        for col in numeric:
            # a column some rows leave empty (expert of a non-expert matrix: None) is NaN there
            vals = [r.get(col) for r in rows]
            _write_array(grp, col, np.array([np.nan if v is None else float(v) for v in vals], dtype=np.float64),
                         dims=(METRICS_DIM,))
        fsync_tree(self.path / "metrics")

    def mark_complete(self, extra: Optional[dict] = None) -> None:
        manifest = dict(self.root.attrs[MANIFEST_KEY])
        manifest["complete"] = True
        manifest.update(extra or {})
        self.root.attrs[MANIFEST_KEY] = manifest
        fsync_path(self.path / "zarr.json")

    def read_sigmas(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        g = _zarr().open_group(str(self.path), mode="r")["matrices"][node_key(name)]
        return np.asarray(g["sigma0"][:]), np.asarray(g["sigma1"][:])


def _complete_attrs(d: Path) -> Optional[dict]:
    """A matrix group's attributes when it is complete: flagged so, with every array it lists."""
    meta = d / "zarr.json"
    if not meta.is_file():
        return None
    try:
        attrs = json.loads(meta.read_text()).get("attributes", {})
    except json.JSONDecodeError:
        return None  # torn write from a killed run: redone
    arrays = ["P", "sigma0", "sigma1"] + (["null"] if attrs.get("null_stored") else []) \
        + (["null_row_norms", "null_col_norms"] if attrs.get("null_kept") == "norms" else [])
    # a record without its arrays (files removed by hand) is not done either
    if attrs.get("complete") and all((d / a / "zarr.json").is_file() for a in arrays):
        return attrs
    return None


class FrameCache:
    """Cached SVD frames of base matrices, keyed by content digest and frame options.

    Shared by every transition from one base, possibly by several processes at once. A
    frame is written as a complete Zarr group under a hidden temporary name, fsync'ed, and
    renamed into place: a reader sees a whole frame or none. Two writers of the same frame
    compute the same content; the second rename finds the first in place and its copy is
    dropped. A frame found incomplete, unreadable, of the wrong shape or non-finite is never
    trusted: :meth:`get` returns None (the caller recomputes it) and :meth:`put` replaces it.
    The cache's root ``zarr.json`` carries a marker, so a folder that is not a frame cache
    is refused instead of written into.
    """

    MARKER = "grrr_stream_frame_cache"

    def __init__(self, path: Path):
        self.path = Path(path)

    @staticmethod
    def key(base_digest: str, compute_dtype: str, core_rel_threshold: Optional[float]) -> str:
        thr = "full" if core_rel_threshold is None else f"t{core_rel_threshold:g}"
        return f"{base_digest}-{compute_dtype}-{thr}"

    # -- the cache folder -----------------------------------------------------------

    def prepare(self) -> "FrameCache":
        """Create the cache (or adopt one written before the marker existed); refuse a folder
        that is something else."""
        p = self.path
        if p.exists() and not p.is_dir():
            raise StoreError(f"--frame-cache {p} is a file; give a folder (new, empty, or an existing frame cache)")
        meta = p / "zarr.json"
        attrs = None
        if meta.is_file():
            try:
                doc = json.loads(meta.read_text())
                attrs = doc.get("attributes", {}) if doc.get("node_type") == "group" else None
            except (OSError, ValueError, AttributeError):
                attrs = None
        if attrs is not None and attrs.get(self.MARKER):
            return self
        # another process preparing the same new cache at this moment leaves only its temporary zarr.json
        others = [c.name for c in p.iterdir() if c.name != "zarr.json" and not c.name.startswith(".zarr.json.tmp-")] \
            if p.is_dir() else []
        legacy = attrs is not None and all(_FRAME_KEY_RE.match(n) or n.startswith(".") for n in others)
        if others and not legacy:
            raise StoreError(
                f"--frame-cache {p} is not a grrr_stream frame cache (no marker in its zarr.json) and is not empty; "
                "refusing to write into it. Point --frame-cache at a new or empty folder, or at an existing cache.")
        p.mkdir(parents=True, exist_ok=True)
        atomic_write_text(meta, json.dumps({"zarr_format": 3, "node_type": "group",
                                            "attributes": {**(attrs or {}), self.MARKER: FORMAT_VERSION}}))
        return self

    # -- frames ---------------------------------------------------------------------------

    def count(self, base_fingerprint: str, compute_dtype: str, core_rel_threshold: Optional[float]) -> int:
        """Frames in the cache of the checkpoint with this fingerprint, in these frame settings (from
        their metadata alone; frames written before the fingerprint was recorded are not counted)."""
        if not self.path.is_dir():
            return 0
        n = 0
        for d in self.path.iterdir():
            try:
                attrs = json.loads((d / "zarr.json").read_text()).get("attributes", {})
            except (OSError, ValueError, AttributeError):
                continue  # the root metadata file, temporaries, damaged frames: not counted
            if attrs.get("complete") and attrs.get("base_fingerprint") == base_fingerprint \
                    and attrs.get("dtype") == compute_dtype and attrs.get("core_rel_threshold") == core_rel_threshold:
                n += 1
        return n

    def get(self, key: str, dtype: torch.dtype, shape: Optional[tuple[int, int]] = None) -> Optional[Frame]:
        """The cached frame, or None when absent or not to be trusted (recompute it then)."""
        frame = _read_frame(self.path / key, shape)
        if frame is None:
            return None
        return Frame(U=frame.U.to(dtype), S=frame.S.to(dtype), V=frame.V.to(dtype))

    def put(self, key: str, frame: Frame, attrs: dict) -> None:
        """Store a frame atomically; keep a valid frame already in place (another writer's)."""
        final = self.path / key
        shape = (frame.U.shape[0], frame.V.shape[0])
        if _read_frame(final, shape, load=False) is not None:
            return
        tmp = self.path / f".{key}.partial-{os.getpid()}-{time.monotonic_ns()}"
        try:
            g = _zarr().open_group(str(tmp), mode="w", zarr_format=3, attributes={**attrs, "complete": True})
            for nm in ("U", "S", "V"):
                _write_array(g, nm, getattr(frame, nm).detach().to("cpu").contiguous().numpy())
            fsync_tree(tmp)
            if final.exists() and _read_frame(final, shape, load=False) is None:
                # an untrustworthy leftover (killed writer of an older version, damaged files): move it aside
                trash = self.path / f".{key}.broken-{os.getpid()}-{time.monotonic_ns()}"
                try:
                    os.rename(final, trash)
                except FileNotFoundError:
                    pass  # another writer moved it first
                else:
                    remove_tree(trash, within=self.path)
            try:
                os.rename(tmp, final)
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                # another writer's identical frame is in place
            else:
                fsync_path(self.path)
        finally:
            if tmp.exists():
                remove_tree(tmp, within=self.path)


_FRAME_KEY_RE = re.compile(r"^[0-9a-f]{8,}-float(32|64)-(full|t[0-9.e+-]+)$")


def _read_frame(d: Path, shape: Optional[tuple[int, int]], *, load: bool = True) -> Optional[Frame]:
    """A complete, readable, consistently shaped and finite frame at ``d``, else None. With
    ``load=False`` only the metadata is checked (cheap: whether a writer may skip its put)."""
    try:
        meta = json.loads((d / "zarr.json").read_text())
        if not meta.get("attributes", {}).get("complete"):
            return None
        arrays = {}
        for nm in ("U", "S", "V"):
            a = _zarr().open_array(str(d / nm), mode="r")
            arrays[nm] = a
        m, r = arrays["U"].shape
        n, r2 = arrays["V"].shape
        if arrays["S"].shape != (r,) or r2 != r or (shape is not None and (m, n) != tuple(shape)):
            return None
        if not load:
            return Frame(U=torch.empty(0), S=torch.empty(0), V=torch.empty(0))
        data = {nm: torch.from_numpy(np.asarray(a[...])) for nm, a in arrays.items()}
        if not all(bool(torch.isfinite(t).all()) for t in data.values()):
            return None
        return Frame(U=data["U"], S=data["S"], V=data["V"])
    except Exception:  # noqa: BLE001 - missing, torn or foreign files: not a frame to trust
        return None


def _bfloat16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) → the same values as float32: the high half of a float32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def to_store_array(t: torch.Tensor, dtype: str) -> tuple[np.ndarray, dict]:
    """numpy array for storage in ``dtype`` plus the attrs that describe its encoding."""
    arr = _to_numpy(t, dtype)
    return arr, ({"grrr_dtype": "bfloat16", "encoding": "bfloat16 bit pattern as uint16"} if dtype == "bfloat16" else {})


class StoredTransition:
    """Read-only view of a finished transition store (for statistics and variants)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        manifest = TransitionStore.read_manifest(self.path)
        if manifest is None:
            raise StoreError(f"{self.path} is not a grrr_stream store (no manifest in zarr.json)")
        if not manifest.get("complete"):
            raise StoreError(
                f"store {self.path} is incomplete; rerun its `grrr-stream decompose` command to finish it first"
            )
        self.manifest = manifest
        done = TransitionStore(self.path, None).completed()
        missing = [name for name in manifest["matrices"] if name not in done]
        if missing:
            raise StoreError(
                f"store {self.path} lacks the results of {len(missing)} matrix(es), e.g. {missing[0]} (folder "
                f"matrices/{node_key(missing[0])} missing or incomplete); rerun its `grrr-stream decompose` "
                "command: it recomputes only those")
        self.matrices: dict[str, dict] = {name: done[name] for name in manifest["matrices"]}

    @property
    def label(self) -> str:
        return f"{Path(self.manifest['base']).name}→{Path(self.manifest['post']).name}"

    def rows(self) -> list[dict]:
        """Per-matrix metrics in plan order (as in metrics.csv)."""
        return [{"name": n, "layer": a["layer"], "module": a["module"], "expert": a.get("expert"), **a["metrics"]}
                for n, a in self.matrices.items()]

    def dask_array(self, name: str, key: str):
        """Lazy dask view of one stored array (``P``, ``null``, ``sigma0``, ``sigma1``) holding its
        values: bfloat16 arrays, stored as uint16 bit patterns, are decoded to float32 (exactly)."""
        import dask.array as da

        arr = _zarr().open_array(str(self.path / "matrices" / node_key(name) / key), mode="r")
        x = da.from_zarr(arr)
        if arr.attrs.get("grrr_dtype") == "bfloat16":
            x = x.map_blocks(_bfloat16_bits_to_float32, dtype=np.float32)
        return x

    def store_dtype(self) -> str:
        """dtype of the stored P and null arrays (a decomposition setting)."""
        return self.manifest["settings"]["store_dtype"]

    def has_array(self, name: str, key: str) -> bool:
        return (self.path / "matrices" / node_key(name) / key / "zarr.json").is_file()

    def read_tensor(self, name: str, key: str) -> torch.Tensor:
        """One stored array as a CPU tensor in its stored dtype (bfloat16 bit patterns decoded)."""
        arr = _zarr().open_array(str(self.path / "matrices" / node_key(name) / key), mode="r")
        data = np.asarray(arr[...])
        if arr.attrs.get("grrr_dtype") == "bfloat16":
            return torch.from_numpy(data.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(data)

    def frame_cache(self) -> Optional["FrameCache"]:
        path = self.manifest.get("frame_cache")
        return FrameCache(Path(path)) if path else None


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
        dims = (METRICS_DIM,) if len(rel) == 3 and rel[0] == "metrics" else DIMENSIONS.get(meta.parent.name)
        if dims is None or len(dims) != len(doc["shape"]):  # checked for all before any is changed
            raise StoreError(f"{meta.parent} is not an array grrr_stream writes; cannot name its dimensions")
        todo.append((meta, {**doc, "dimension_names": list(dims)}))
    for meta, doc in todo:
        atomic_write_text(meta, json.dumps(doc, indent=2))
    return len(todo)
