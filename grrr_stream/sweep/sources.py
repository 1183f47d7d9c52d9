"""Where each checkpoint and benchmark of a sweep is read from, and what identifies it in keys.

A local checkpoint is keyed by its path and a sampled content fingerprint, a Hub one by its id
and revision, a generated one by the generating unit's key; benchmarks by their content, never
by where the package that ships them is installed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Optional, Sequence

from ..checkpoints.reader import Checkpoint, resolve_source
from ..errors import GrrrError
from ..evaluation import benchmarks as evaluate
from ..fixtures.tinychain_shipped import BENCHMARKS
from ..variants.rest import rest_problems
from .units import PlannedModel, Transition, Unit


class Sources:
    """Where each model's checkpoint is read from and what identifies it in keys. A base appears in
    several transitions: each local checkpoint is fingerprinted, and rest-checked, once."""

    def __init__(self, models: dict[str, PlannedModel], made: dict[str, tuple[Unit, str]]):
        self.models = models
        self.made = made  # generated model id → (the generate unit whose folder holds it, its name there)
        self._resolved: dict[str, tuple[str, dict]] = {}
        self._rest: dict[str, list[str]] = {}
        self._opened: dict[str, object] = {}  # model id → Checkpoint, or why it cannot be opened

    def resolve(self, mid: str) -> tuple[str, dict]:
        """Path/Hub id handed to the decomposition, and what identifies it in keys."""
        if mid not in self._resolved:
            self._resolved[mid] = self._resolve(mid)
        return self._resolved[mid]

    def _resolve(self, mid: str) -> tuple[str, dict]:
        if mid in self.made:
            gen, name = self.made[mid]
            return str(Path(gen.out) / name), {"generated": gen.key, "model": name}
        src = self.models[mid].source
        if self.is_local(mid):
            src = str(Path(src).expanduser().absolute())
            # a local folder is keyed by its path and its content's fingerprint: a checkpoint
            # replaced in place gets new results instead of passing for the old ones
            return src, {"source": src, "fingerprint": _fingerprint(self._open(mid))}
        return src, {"source": src, "revision": self.models[mid].revision}  # a Hub id: its revision pins it

    def is_local(self, mid: str) -> bool:
        """A local folder (one that is there, or a source written as a path), not a Hub id or generated."""
        src = self.models[mid].source
        return mid not in self.made and (Path(src).expanduser().exists() or src.startswith((".", "/", "~")))

    def problem(self, mid: str) -> Optional[str]:
        """Why ``decompose`` would refuse a local checkpoint, found by the checks it makes itself
        (:func:`~grrr_stream.checkpoints.reader.resolve_source`, then :meth:`Checkpoint.open`: a missing folder, a
        FIFO or truncated shard, a bad index or config). None for a readable one, a Hub id or a generated model."""
        if not self.is_local(mid):
            return None  # never fetched at plan time
        opened = self._open(mid)
        return opened if isinstance(opened, str) else None

    def _open(self, mid: str):
        """The local checkpoint opened once (a Checkpoint), or the error message decompose would give."""
        if mid not in self._opened:
            try:
                folder = str(Path(self.models[mid].source).expanduser().absolute())  # as the unit is given it
                self._opened[mid] = Checkpoint.open(resolve_source(folder))
            except (GrrrError, OSError) as e:
                self._opened[mid] = str(e) or type(e).__name__
        return self._opened[mid]

    def rest_problems(self, tr: Transition) -> list[str]:
        """Why the W0 of a transition cannot supply the non-decomposed tensors of composed variants,
        known at plan time for local checkpoints only (generated and Hub ones are checked by the
        unit itself, before it builds anything)."""
        if tr.id not in self._rest:
            self._rest[tr.id] = self._rest_problems(tr)
        return self._rest[tr.id]

    def _rest_problems(self, tr: Transition) -> list[str]:
        if not (self.is_local(tr.parent) and self.is_local(tr.child)):
            return []
        opened = [self._open(m) for m in (tr.parent, tr.child)]
        if any(isinstance(o, str) for o in opened):
            return []  # unreadable now: its decomposition fails with the real error (a dry run names it)
        try:
            return rest_problems(*opened)
        except (GrrrError, OSError):
            return []


def _fingerprint(opened) -> Optional[str]:
    """Sampled content fingerprint of an opened local checkpoint (reads ~1 MiB per shard), or None when it
    cannot be read (its decomposition then fails with the real error; a dry run names it)."""
    if isinstance(opened, str):
        return None
    try:
        return opened.fingerprint()
    except (GrrrError, OSError):
        return None


def _file_digest(path: Path) -> Optional[str]:
    if not path.is_file():
        return None  # a missing benchmark fails its evaluation unit, with the path in the error
    return hashlib.sha256(path.read_bytes()).hexdigest()


def benchmarks(bench_dir: str, names: Sequence[str], gen: Optional[Unit]) -> tuple[str, Any]:
    """Where a suite's benchmarks (``names`` in its ``bench_dir``) are read from, and what identifies them in
    keys."""
    if bench_dir == "tinychain":
        return str(Path(gen.out) / BENCHMARKS), {"generated": gen.key}
    if bench_dir == "bundled":
        # keyed by content, not by where the package is installed
        return str(evaluate.BUNDLED), {"bundled": {b: _file_digest(evaluate.BUNDLED / b / "test.jsonl") for b in names}}
    if bench_dir.startswith("hub"):
        return bench_dir, bench_dir
    bench_dir = str(Path(bench_dir).expanduser().absolute())
    return bench_dir, {"dir": bench_dir, "sha256": {b: _file_digest(Path(bench_dir) / b / "test.jsonl") for b in names}}
