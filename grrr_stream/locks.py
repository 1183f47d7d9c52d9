"""One owner for advisory file locks (a store, a sweep's workdir).

An exclusive, non-blocking ``flock`` held for the lifetime of a ``with`` block. The
kernel releases it when the holder dies, so a killed run never leaves a stale lock.
The holder writes "pid N on HOST" into the file for the message of whoever is refused.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from typing import Optional


class FileLock:
    """Subclasses say what is locked by overriding :meth:`busy`."""

    def __init__(self, path: Path, *, wait: bool = False):
        self.path = Path(path)
        self.wait = wait  # block until the holder releases it instead of refusing
        self._fd: Optional[int] = None

    def busy(self, holder: str) -> Exception:
        """The error raised when another process holds the lock (``holder``: its pid and host)."""
        return RuntimeError(f"{self.path} is locked by {holder}")

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if self.wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "an unknown process"
            os.close(fd)
            raise self.busy(holder) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def held(self) -> bool:
        """Whether another process holds it now (asking creates nothing)."""
        if not self.path.exists():
            return False
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing releases a lock taken just now
        return False
