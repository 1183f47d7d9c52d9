"""Disk a run will write, known from checkpoint headers before any work, and the refusal
when a filesystem lacks it.

The estimates are of the bytes the arrays take raw: 32- and 64-bit arrays are stored raw (see
``store.zarr_arrays._compressors``), so for them the estimate is what is written up to the Zarr metadata
(a few kB per matrix) and the tables and figures (under a MB); 16-bit stores are compressed by
zstd and come out about 20 % below it. Variant folders are safetensors files of known size.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

from ..dtypes import ITEMSIZE
from ..errors import StoreError

# Zarr metadata of one matrix group (group + 4 arrays) and the per-transition tables and figures,
# measured on written stores: small, but it keeps the estimate honest for tiny models.
MATRIX_OVERHEAD = 4_000
TRANSITION_OVERHEAD = 600_000
HEADROOM = 64 << 20  # never fill a disk to the last byte: logs, temp files, the OS


@dataclass(frozen=True)
class DiskNeed:
    what: str  # frames, P, null, sigmas, variant, ...
    folder: Path  # where it is written
    bytes: int


def matrix_needs(
    shape: Sequence[int],
    *,
    store_dtype: str,
    compute_dtype: str,
    null_storage: str = "array",
    core_truncated: bool = False,
) -> dict[str, int]:
    """Bytes of one decomposed m×n matrix: P (r×r), the null residual (m×n, absent when W0 is
    square with an untruncated core: zero by construction; m + n norms with null_storage 'norms'),
    σ(W0) and σ(W1), and its base frame U (m×r), S, V (n×r) in the compute dtype."""
    m, n = int(shape[0]), int(shape[1])
    r = min(m, n)
    s, c = ITEMSIZE[store_dtype], ITEMSIZE[compute_dtype]
    null = 0
    if m != n or core_truncated:
        null = m * n * s if null_storage == "array" else (m + n) * 8
    return {"P": r * r * s, "null": null, "sigmas": 2 * r * 8 + MATRIX_OVERHEAD, "frames": (m * r + n * r + r) * c}


def transition_needs(
    shapes: Iterable[Sequence[int]],
    store: Path,
    frame_cache: Path,
    *,
    store_dtype: str,
    compute_dtype: str,
    null_storage: str = "array",
    core_truncated: bool = False,
    frames_cached_fraction: float = 0.0,
) -> list[DiskNeed]:
    """What decomposing matrices of these shapes writes into ``store`` and ``frame_cache``."""
    tot = {"P": 0, "null": 0, "sigmas": 0, "frames": 0}
    for shape in shapes:
        for k, v in matrix_needs(
            shape,
            store_dtype=store_dtype,
            compute_dtype=compute_dtype,
            null_storage=null_storage,
            core_truncated=core_truncated,
        ).items():
            tot[k] += v
    tot["frames"] = int(tot["frames"] * max(0.0, 1.0 - frames_cached_fraction))
    tot["sigmas"] += TRANSITION_OVERHEAD
    return [
        DiskNeed("P", Path(store), tot["P"]),
        DiskNeed("null", Path(store), tot["null"]),
        DiskNeed("sigmas, tables", Path(store), tot["sigmas"]),
        DiskNeed("frames", Path(frame_cache), tot["frames"]),
    ]


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


def describe(needs: Sequence[DiskNeed]) -> str:
    """'P 0.20 GiB, null 0.30 GiB, ... = 1.07 GiB' (zero items left out)."""
    parts = [f"{n.what} {gib(n.bytes)}" for n in needs if n.bytes]
    return ", ".join(parts) + f" = {gib(sum(n.bytes for n in needs))}"


def _existing(folder: Path) -> Path:
    probe = Path(folder).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def shortfalls(needs: Sequence[DiskNeed]) -> list[str]:
    """One line per filesystem that lacks the space for what is to be written on it."""
    per_fs: dict[int, tuple[Path, int, list[DiskNeed]]] = {}
    for n in needs:
        if not n.bytes:
            continue
        probe = _existing(n.folder)
        dev = os.stat(probe).st_dev
        at, total, items = per_fs.get(dev, (probe, 0, []))
        per_fs[dev] = (at, total + n.bytes, items + [n])
    lines = []
    for at, total, items in per_fs.values():
        free = shutil.disk_usage(at).free
        if total + HEADROOM > free:
            folders = sorted({str(n.folder) for n in items})
            lines.append(
                f"{', '.join(folders)}: needs about {gib(total)} ({describe(items)}), "
                f"{gib(free)} free on that filesystem"
            )
        # several folders on one filesystem add up: checked together
    return lines


def check_space(needs: Sequence[DiskNeed], what: str, hint: Optional[str] = None) -> None:
    """Refuse, with the numbers, when a filesystem lacks the space for ``needs``."""
    short = shortfalls(needs)
    if short:
        raise StoreError(
            f"not enough disk space for {what}:\n  "
            + "\n  ".join(short)
            + f"\n{hint or 'Free space or point the output at another disk.'}"
        )
