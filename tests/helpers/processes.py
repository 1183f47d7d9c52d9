"""Processes a test starts for real (an MLflow server, a Dask scheduler and its workers, the console script):
each in a process group of its own, stopped by group, so nothing it forked outlives the test."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


def stop_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process group led by ``proc`` (started with start_new_session), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc.poll() is not None and not group_alive(proc.pid):
                return
            time.sleep(0.1)
    proc.wait(timeout=5)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True
    return True


def console_script(name: str = "grrr-stream") -> str:
    """The installed console script beside this interpreter (the one a user of this venv runs)."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.is_file() else (shutil.which(name) or name)
