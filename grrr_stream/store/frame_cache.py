"""The base-frame cache: SVD frames of base matrices as Zarr groups, shared by every transition
from one base (layout in store/transition_store.py's docstring: ``frames/<frame key>/U, S, V``).
"""

from __future__ import annotations

import errno
import json
import os
import re
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch

# write_array is called through its module so that one monkeypatch reaches every array writer
# (tests/decompose/test_resilience.py injects a disk fault there)
from ..config import DEGENERATE_GAP
from ..errors import StoreError
from ..files import atomic_write_text, fsync_path, fsync_tree, remove_tree
from ..geometry.frame import Frame, all_finite
from . import zarr_arrays
from .zarr_arrays import FORMAT_VERSION, zarr_module


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
    def key(
        base_digest: str,
        compute_dtype: str,
        core_rel_threshold: Optional[float],
        degenerate_gap: Optional[float] = DEGENERATE_GAP,
    ) -> str:
        thr = "full" if core_rel_threshold is None else f"t{core_rel_threshold:g}"
        # a non-default degenerate_gap can change a float32 frame (computed in float64 instead): its own key
        gap = (
            ""
            if degenerate_gap == DEGENERATE_GAP
            else ("-gnone" if degenerate_gap is None else f"-g{degenerate_gap:g}")
        )
        return f"{base_digest}-{compute_dtype}-{thr}{gap}"

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
        others = (
            [c.name for c in p.iterdir() if c.name != "zarr.json" and not c.name.startswith(".zarr.json.tmp-")]
            if p.is_dir()
            else []
        )
        legacy = attrs is not None and all(_FRAME_KEY_RE.fullmatch(n) or n.startswith(".") for n in others)
        if others and not legacy:
            raise StoreError(
                f"--frame-cache {p} is not a grrr_stream frame cache (no marker in its zarr.json) and is not empty; "
                "refusing to write into it. Point --frame-cache at a new or empty folder, or at an existing cache."
            )
        p.mkdir(parents=True, exist_ok=True)
        atomic_write_text(
            meta,
            json.dumps(
                {"zarr_format": 3, "node_type": "group", "attributes": {**(attrs or {}), self.MARKER: FORMAT_VERSION}}
            ),
        )
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
            if (
                attrs.get("complete")
                and attrs.get("base_fingerprint") == base_fingerprint
                and attrs.get("dtype") == compute_dtype
                and attrs.get("core_rel_threshold") == core_rel_threshold
            ):
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
            zarr_arrays.write_group(tmp, {**attrs, "complete": True})  # complete once renamed into place
            for nm in ("U", "S", "V"):
                zarr_arrays.write_array(tmp, nm, getattr(frame, nm).detach().to("cpu").contiguous().numpy())
            fsync_tree(tmp, release=True)  # read back by a later transition, if any: from disk then
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


_FRAME_KEY_RE = re.compile(r"[0-9a-f]{8,}-float(32|64)-(full|t[0-9.e+-]+)(-g(none|[0-9.e+-]+))?")


def _read_frame(d: Path, shape: Optional[tuple[int, int]], *, load: bool = True) -> Optional[Frame]:
    """A complete, readable, consistently shaped and finite frame at ``d``, else None. With
    ``load=False`` only the metadata is checked (cheap: whether a writer may skip its put)."""
    try:
        meta = json.loads((d / "zarr.json").read_text())
        if not meta.get("attributes", {}).get("complete"):
            return None
        arrays = {}
        for nm in ("U", "S", "V"):
            a = zarr_module().open_array(str(d / nm), mode="r")
            arrays[nm] = a
        m, r = arrays["U"].shape
        n, r2 = arrays["V"].shape
        if arrays["S"].shape != (r,) or r2 != r or (shape is not None and (m, n) != tuple(shape)):
            return None
        if not load:
            return Frame(U=torch.empty(0), S=torch.empty(0), V=torch.empty(0))
        data = {nm: torch.from_numpy(np.asarray(a[...])) for nm, a in arrays.items()}
        if not all(all_finite(t) for t in data.values()):
            return None
        return Frame(U=data["U"], S=data["S"], V=data["V"])
    except Exception:  # noqa: BLE001 - missing, torn or foreign files: not a frame to trust
        return None
