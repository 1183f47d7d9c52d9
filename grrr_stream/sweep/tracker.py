"""A sweep's MLflow logging, in the background of its work.

A sweep's units record what they would log (``TrackingConfig.defer``) in WORKDIR/.sweep/tracking
and go on with the next unit at once; :class:`Tracker`, a thread of the sweep's process, logs
those records in the order they were written, while the units compute. A slow server delays only
the logging; a server that is down is tried again a few seconds later (it may come back during the
sweep); what is still pending when the sweep's work ends is logged then, or left for a rerun or
``grrr-stream track WORKDIR``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from ..config import TrackingConfig
from ..tracking.mlflow_client import limits
from ..tracking.run_log import FlushResult, flush, pending_files

_QUIET_S = 0.5  # between looks at an empty folder
_BACKOFF_S = (2.0, 5.0, 15.0, 30.0)  # after failures in a row: a server that is down is not hammered


class Tracker:
    """``with Tracker(folder, tracking) as t: ...`` logs ``folder``'s records while the block runs;
    :meth:`close` (also on exit) logs what is left and returns the last flush."""

    def __init__(self, folder: Path, tracking: TrackingConfig):
        self.folder, self.tracking = Path(folder), tracking
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="grrr-tracker", daemon=True)
        self.last: FlushResult = FlushResult()

    def __enter__(self) -> "Tracker":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _loop(self) -> None:
        failures = 0
        while not self._stop.wait(_BACKOFF_S[min(failures, len(_BACKOFF_S)) - 1] if failures else _QUIET_S):
            if not pending_files(self.folder):
                continue
            with limits(self.tracking.timeout_s, self.tracking.retries):
                self.last = flush(self.folder)
            failures = failures + 1 if self.last.error else 0

    def close(self) -> FlushResult:
        """Stop the thread (after the flush it is in) and log what is still pending, once."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            if pending_files(self.folder):
                with limits(self.tracking.timeout_s, self.tracking.retries):
                    self.last = flush(self.folder)
        return self.last

    def left(self) -> list[str]:
        """The names of the units whose logging is still pending (one per record)."""
        names = []
        for f in pending_files(self.folder):
            try:
                names.append(json.loads(f.read_text())[0]["name"])
            except (OSError, ValueError, LookupError, TypeError):
                names.append(f.name)
        return names
