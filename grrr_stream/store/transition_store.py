"""The transition store: layout, atomic per-matrix writes, completion records and the read-only
view of a finished store. Zarr is touched only here, in store/zarr_arrays.py (array writing) and in
store/frame_cache.py (the base-frame cache).

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
    <store>/metrics.csv, summary.csv, summary.json      (both written by store/metric_tables.py)
    <store>/frames/                   base-frame cache unless frame_cache points elsewhere
        <frame key>/U (m×r), S, V (n×r), attrs complete

A matrix is done only when its arrays have been fsync'ed and then its group's
zarr.json was replaced atomically (and fsync'ed) by one with ``complete: true``.
Anything without that flag is rewritten on resume.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional
from urllib.parse import quote

import numpy as np
import torch

# write_array is called through its module so that one monkeypatch reaches every array writer
# (tests/decompose/test_resilience.py injects a disk fault there)
from ..dtypes import torch_dtype
from ..errors import StoreError, StoreMismatchError
from ..files import atomic_write_text, fsync_path, fsync_tree, remove_tree
from ..locks import FileLock
from ..runtime.phases import NO_TIMER, PhaseTimer
from . import zarr_arrays
from .frame_cache import FrameCache
from .manifest import transition_label
from .zarr_arrays import FORMAT_VERSION, zarr_module

MANIFEST_KEY = "grrr_stream"


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


class StoreLock(FileLock):
    """Exclusive advisory lock on a store directory for the lifetime of a run."""

    def __init__(self, path: Path):
        super().__init__(Path(path) / ".lock")

    def __enter__(self) -> "StoreLock":
        if self.path.parent.exists() and not self.path.parent.is_dir():
            raise StoreError(f"--store {self.path.parent} is a file; give a directory path")
        return super().__enter__()

    def busy(self, holder: str) -> Exception:
        return StoreError(
            f"store {self.path.parent} is in use by another grrr-stream process ({holder}); wait for "
            "it to finish or use another --store"
        )


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
            found = json.loads(meta.read_text()).get("attributes", {}).get(MANIFEST_KEY)
        except (ValueError, AttributeError):  # not JSON, or JSON of another shape: not a store's
            return None
        return found if isinstance(found, dict) else None

    @classmethod
    def check_writable(cls, path: Path) -> None:
        """Refuse a path that is a file or a non-empty directory that is not a grrr_stream store."""
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise StoreError(f"--store {path} is a file; give a directory path")
        if (
            cls.read_manifest(path) is None
            and path.exists()
            and any(p.name not in (".lock", "frames") for p in path.iterdir())
        ):
            raise StoreError(
                f"{path} exists and is not a grrr_stream store; refusing to write into it. Choose an empty or new "
                f"--store."
            )

    @classmethod
    def open(cls, path: Path, manifest: dict, *, overwrite: bool = False) -> "TransitionStore":
        """Open for writing, creating it or checking it belongs to the same inputs and settings.

        ``manifest`` must hold ``identity`` (dict compared exactly) plus anything descriptive.
        """
        zarr = zarr_module()
        path = Path(path)
        cls.check_writable(path)
        existing = cls.read_manifest(path)
        adopted = False
        if existing is not None and existing.get("identity") != manifest["identity"]:
            # an unfinished store of the same settings whose inputs changed (e.g. a NaN repaired in the
            # base): keep it; the caller drops the matrices whose recorded input digests no longer match
            adopted = (
                not overwrite
                and not existing.get("complete")
                and existing.get("identity", {}).get("settings_hash") == manifest["identity"].get("settings_hash")
            )
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
            raise StoreError(
                f"{path} is not a grrr_stream store (or this machine does not see it: the workers of "
                "a spread transition need the store on a filesystem they share with the driver)"
            )
        return cls(Path(path), zarr_module().open_group(str(path), mode="r+", zarr_format=3))

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

    def write_matrix(
        self,
        name: str,
        arrays: dict[str, np.ndarray],
        attrs: dict,
        array_attrs: dict[str, dict],
        *,
        timer: PhaseTimer = NO_TIMER,
    ) -> None:
        """Write one matrix's arrays durably, then mark it complete (the commit point)."""
        d = self._matrix_dir(name)
        with timer.phase("store_write"):
            if d.exists():
                remove_tree(d, within=self.path / "matrices")  # leftovers of an interrupted write
            zarr_arrays.write_group(d, {**attrs, "complete": False})
            for key, data in arrays.items():
                zarr_arrays.write_array(d, key, data, array_attrs.get(key))
        with timer.phase("fsync"):
            fsync_tree(d, release=True)  # read back only by later commands: keep the page cache for the checkpoints
        with timer.phase("store_write"):  # the commit point: zarr.json replaced atomically, then fsync'ed
            atomic_write_text(d / "zarr.json", zarr_arrays.group_metadata({**attrs, "complete": True}))

    # -- reads, groups beside the matrices, the transition's completion ----------

    def read_matrix_array(self, name: str, key: str) -> np.ndarray:
        """One array of a completed matrix (e.g. its channel_energy), as stored."""
        return np.asarray(zarr_module().open_array(str(self._matrix_dir(name) / key), mode="r")[...])

    def write_group(self, group: str, arrays: dict[str, tuple[np.ndarray, tuple[str, ...]]], attrs: dict) -> None:
        """A group of arrays with named dimensions beside the matrices (``channels``), replaced whole."""
        folder = self.path / group
        if folder.exists():
            remove_tree(folder, within=self.path)
        zarr_arrays.write_group(folder, attrs)
        for key, (data, dims) in arrays.items():
            zarr_arrays.write_array(folder, key, data, dims=dims)
        fsync_tree(folder)

    def mark_complete(self, extra: Optional[dict] = None) -> None:
        manifest = dict(self.root.attrs[MANIFEST_KEY])
        manifest["complete"] = True
        manifest.update(extra or {})
        self.root.attrs[MANIFEST_KEY] = manifest
        fsync_path(self.path / "zarr.json")

    def read_sigmas(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        g = zarr_module().open_group(str(self.path), mode="r")["matrices"][node_key(name)]
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
    arrays = (
        ["P", "sigma0", "sigma1"]
        + (["null"] if attrs.get("null_stored") else [])
        + (["null_row_norms", "null_col_norms"] if attrs.get("null_kept") == "norms" else [])
        + (["channel_energy"] if attrs.get("channels") else [])
    )
    # a record without its arrays (files removed by hand) is not done either
    if attrs.get("complete") and all((d / a / "zarr.json").is_file() for a in arrays):
        return attrs
    return None


def _bfloat16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) → the same values as float32: the high half of a float32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def to_store_array(t: torch.Tensor, dtype: str) -> tuple[np.ndarray, dict]:
    """numpy array for storage in ``dtype`` plus the attrs that describe its encoding."""
    arr = _to_numpy(t, dtype)
    return arr, (
        {"grrr_dtype": "bfloat16", "encoding": "bfloat16 bit pattern as uint16"} if dtype == "bfloat16" else {}
    )


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
                "command: it recomputes only those"
            )
        self.matrices: dict[str, dict] = {name: done[name] for name in manifest["matrices"]}

    @property
    def label(self) -> str:
        """'base→sft' (:func:`.manifest.transition_label`)."""
        return transition_label(self.manifest, "→")

    def rows(self) -> list[dict]:
        """Per-matrix metrics in plan order (as in metrics.csv)."""
        return [
            {"name": n, "layer": a["layer"], "module": a["module"], "expert": a.get("expert"), **a["metrics"]}
            for n, a in self.matrices.items()
        ]

    def dask_array(self, name: str, key: str):
        """Lazy dask view of one stored array (``P``, ``null``, ``sigma0``, ``sigma1``) holding its
        values: bfloat16 arrays, stored as uint16 bit patterns, are decoded to float32 (exactly)."""
        import dask.array as da

        arr = zarr_module().open_array(str(self.path / "matrices" / node_key(name) / key), mode="r")
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
        arr = zarr_module().open_array(str(self.path / "matrices" / node_key(name) / key), mode="r")
        data = np.asarray(arr[...])
        if arr.attrs.get("grrr_dtype") == "bfloat16":
            return torch.from_numpy(data.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(data)

    def read_group(self, group: str) -> tuple[dict[str, np.ndarray], dict]:
        """Every array of a group beside the matrices (``channels``) and the group's attributes."""
        if not (self.path / group / "zarr.json").is_file():
            raise StoreError(
                f"store {self.path} has no {group}/ arrays: it was decomposed with channel_energy off or "
                "before grrr_stream computed them; decompose it again (another --store, or --overwrite)"
            )
        grp = zarr_module().open_group(str(self.path / group), mode="r")
        return {k: np.asarray(a[...]) for k, a in grp.arrays()}, dict(grp.attrs)

    def frame_cache(self) -> Optional[FrameCache]:
        path = self.manifest.get("frame_cache")
        return FrameCache(Path(path)) if path else None
