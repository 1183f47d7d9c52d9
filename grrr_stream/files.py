"""General file helpers: atomic text writes, fsync, CSV text and its reader, and the one guarded delete.

Every recursive delete in grrr_stream goes through :func:`remove_tree`, which refuses a
target that does not lie strictly inside the folder the caller may delete in (both
resolved first, so neither ``..`` nor a symlink can point it elsewhere). Names that become
path components are validated where they enter (:func:`check_component`); this is the
second line of defence.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import os
import re
import shutil
import threading
from pathlib import Path
from typing import Iterable

import numpy as np

from .errors import ConfigError, StoreError

# one path component: starts with a letter or digit, no separators, no '.'/'..', bounded. Always applied with
# fullmatch (is_component): with match and a '$' anchor, a trailing newline would pass into a folder's name.
COMPONENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")


def is_component(name: object) -> bool:
    """Whether ``name`` is safe as one folder, file or run name: the one rule for names (the whole string)."""
    return isinstance(name, str) and COMPONENT_RE.fullmatch(name) is not None


def check_component(name: str, what: str) -> str:
    """``name`` if it is safe as one folder or file name, else a ConfigError naming ``what``."""
    if not is_component(name):
        shown = repr(name)[:80]
        raise ConfigError(
            f"{what} {shown} must start with a letter or digit and use only letters, digits, "
            "'_', '.', '-' (at most 64 characters): it names a folder"
        )
    return name


def inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` lies strictly inside ``folder`` once both are resolved."""
    p, f = Path(path).resolve(), Path(folder).resolve()
    return p != f and f in p.parents


def remove_tree(path: Path, *, within: Path) -> None:
    """Delete ``path`` (a folder or a file) if it lies strictly inside ``within``; refuse otherwise."""
    path = Path(path)
    if path.is_symlink():  # a link is removed, never followed
        if not inside(path.parent, within) and Path(path.parent).resolve() != Path(within).resolve():
            raise StoreError(f"refusing to delete {path}: it is not inside {within}")
        path.unlink()
        return
    if not path.exists():
        return
    if not inside(path, within):
        raise StoreError(f"refusing to delete {path}: it is not inside {within} (resolved: {path.resolve()})")
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def fsync_path(p: Path, *, release: bool = False) -> None:
    """fsync ``p`` (a file or a directory). ``release``: then drop its pages from the page cache (below)."""
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
        if release and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def fsync_tree(root: Path, *, release: bool = False) -> None:
    """fsync every file and directory under ``root`` (zarr itself never fsyncs).

    ``release``: drop each file's pages from the page cache once they are on disk. For what a run writes
    and does not read back soon (a matrix's P and null, a frame): the cache keeps the checkpoints'
    pages instead of gigabytes of output, and the next write reuses the pages just freed. On a VM that
    backs guest memory lazily, a write into never-touched pages cost 3.4 CPU s per GB with fsync against
    0.4-0.7 with the pages released (tools/bench_decompose.py's writer phases, docs/benchmarks.md)."""
    for d, _, files in os.walk(root):
        for f in files:
            fsync_path(Path(d) / f, release=release)
        fsync_path(Path(d))


def temp_sibling(path: Path) -> Path:
    """A hidden temporary name beside ``path``, unique to this process and thread: two units in one Dask worker
    (a unit that secedes while its tasks run lets another start) may write the same file at the same moment."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to a temporary sibling, fsync it and rename it over ``path``. A failure leaves no temporary
    file behind and names ``path``, the file the caller asked for, not the temporary one."""
    path = Path(path)
    tmp = temp_sibling(path)
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(e, OSError) and e.filename in (str(tmp), tmp):
            raise type(e)(e.errno, e.strerror, str(path)) from None
        raise
    fsync_path(path.parent)


def to_json(obj) -> str:
    """``obj`` as indented JSON text, numpy scalars written as the Python numbers they equal."""

    def plain(x):
        if isinstance(x, np.generic):
            return x.item()
        raise TypeError(f"not JSON: {type(x).__name__}")

    return json.dumps(obj, indent=1, default=plain) + "\n"


def to_csv(rows: Iterable[dict]) -> str:
    """CSV text of dict rows (columns in order of first appearance); floats keep every bit."""
    rows = list(rows)
    if not rows:
        return ""
    buf = io.StringIO()
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        # repr keeps every bit of a float; numpy scalars (np.float64 is a float) are
        # converted first, or their repr would read 'np.float64(...)'
        w.writerow(
            {
                k: (
                    repr(float(v))
                    if isinstance(v, (float, np.floating))
                    else int(v)
                    if isinstance(v, np.integer)
                    else v
                )
                for k, v in r.items()
            }
        )
    return buf.getvalue()


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file (a header line, then one dict per line) as text, as :func:`to_csv` wrote them."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def ensure_folder(path: Path, what: str) -> Path:
    """Create ``path`` as a folder; a file (or anything else) already there is a ConfigError naming ``what``."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {path} is a file, not a folder; give a folder path")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(f"{what} {path}: a file stands where one of its parent folders should be") from None
    return path


def describe_os_error(e: OSError) -> str:
    """One sentence for an environment fault: what happened, where, and what to do."""
    where = f" ({e.filename})" if getattr(e, "filename", None) else ""
    if e.errno == errno.ENOSPC:
        return (
            f"the disk is full{where}. Free space, then rerun the same command: finished work is kept and it "
            "resumes where it stopped"
        )
    if e.errno == errno.EROFS:
        return f"the file system is read-only{where}; write the results to a writable folder"
    if e.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied{where}; write the results to a folder you may write to"
    if e.errno == errno.ENOTDIR:
        return f"a file stands where a folder is expected{where}"
    if e.errno == errno.EDQUOT:
        return f"the disk quota is exceeded{where}. Free space, then rerun the same command to resume"
    return f"{e.strerror or e}{where}"
