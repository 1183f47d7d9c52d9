"""Third-party output of one sweep unit into its own log file (the sweep names it: ``Workdir.log``).

vLLM, transformers, torch and MLflow print their own logging, warnings (FutureWarning), NUMA
notices and progress bars ("Loading safetensors checkpoint shards"). vLLM writes some of it from
C++ or from an engine subprocess straight to file descriptors 1 and 2, past Python's ``logging``
and ``warnings``; so the redirection is made on the descriptors themselves (``os.dup2``) for the
unit's whole life, and every child process started meanwhile inherits it.

This package's own progress lines are not third-party output: they go to :func:`console`, a
stream on the terminal's original descriptor, which stays the terminal while a unit runs.
``verbose``: the output is copied to the terminal as well (a pipe and a thread that tees it).
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, TextIO

_console: Optional[TextIO] = None
_capturing = threading.Lock()  # the descriptors belong to the process: one capture at a time


def console() -> TextIO:
    """Where this package's own progress lines go: the terminal, also while a unit's output goes to its log."""
    return _console or sys.stderr


def _fd_backed(stream: TextIO, fd: int) -> bool:
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):  # a test's capture object, a closed stream
        return False


def _tee(read_fd: int, log, terminal_fd: int) -> None:
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            log.write(chunk)
            log.flush()
            try:
                os.write(terminal_fd, chunk)
            except OSError:
                pass


@contextmanager
def unit_log(path: Path, *, verbose: bool = False) -> Iterator[Path]:
    """Descriptors 1 and 2 (and ``sys.stdout`` / ``sys.stderr``) point at ``path`` (appended to) inside the
    block. Nested or concurrent use in one process (units on threads) leaves the descriptors alone."""
    global _console
    if not _capturing.acquire(blocking=False):
        yield path
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    old_out, old_err, previous = sys.stdout, sys.stderr, _console
    for s in (old_out, old_err):
        s.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    # our own lines: the terminal's descriptor when stderr is it; a test's capture object as it is
    own = os.fdopen(os.dup(saved[2]), "w", buffering=1) if _fd_backed(old_err, 2) else None
    log = open(path, "ab")
    tee, write_end = None, None
    try:
        if verbose:
            read_end, write_end = os.pipe()
            tee = threading.Thread(target=_tee, args=(read_end, log, saved[2]), daemon=True)
            tee.start()
        target = write_end if verbose else log.fileno()
        os.dup2(target, 1)
        os.dup2(target, 2)
        if write_end is not None:
            os.close(write_end)  # 1 and 2 hold the pipe open now: it closes when they are restored
        sys.stdout = open(1, "w", buffering=1, closefd=False, encoding="utf-8", errors="replace")
        sys.stderr = open(2, "w", buffering=1, closefd=False, encoding="utf-8", errors="replace")
        _console = own or old_err
        yield path
    finally:
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except (OSError, ValueError):
                pass
        sys.stdout, sys.stderr, _console = old_out, old_err, previous
        os.dup2(saved[1], 1)
        os.dup2(saved[2], 2)
        if tee is not None:  # an engine subprocess that outlives the unit keeps the pipe open: do not wait on it
            tee.join(timeout=5)
        for fd in saved.values():
            os.close(fd)
        if own is not None:
            own.close()
        if tee is None or not tee.is_alive():
            log.close()
            if path.stat().st_size == 0:
                path.unlink()  # a unit whose libraries said nothing leaves no log
        _capturing.release()
