"""Where the time of a run goes: wall seconds per named phase, from any thread.

The decomposition overlaps three threads (reader, compute, writer), so the phases add up
to more than the wall time; the compute thread's phases plus its waits for the other two
are its whole critical path. Timing is always on (a perf_counter pair per phase and
matrix costs microseconds); on a GPU, kernels are asynchronous, so a phase is closed with
a device synchronisation only when ``sync`` is set (benchmarks), never in normal runs.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator, Optional

import torch


class PhaseTimer:
    def __init__(self, sync_device: Optional[torch.device] = None):
        self._seconds: dict[str, float] = {}
        self._cpu: dict[str, float] = {}
        self._lock = threading.Lock()
        self._sync = sync_device if sync_device is not None and sync_device.type == "cuda" else None

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self._sync is not None:
            torch.cuda.synchronize(self._sync)
        t, c = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            if self._sync is not None:
                torch.cuda.synchronize(self._sync)
            self.add(name, time.perf_counter() - t, time.thread_time() - c)

    def add(self, name: str, seconds: float, cpu: Optional[float] = None) -> None:
        with self._lock:
            self._seconds[name] = self._seconds.get(name, 0.0) + seconds
            if cpu is not None:
                self._cpu[name] = self._cpu.get(name, 0.0) + cpu

    def seconds(self) -> dict[str, float]:
        with self._lock:
            return dict(self._seconds)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds of the phase's own thread (time.thread_time): unlike wall seconds, barely changed by
        other jobs sharing the cores. Threads that the phase's work starts (an OpenMP team's workers) are not
        counted, so with more than one torch thread these understate the math."""
        with self._lock:
            return dict(self._cpu)


class _NoTimer(PhaseTimer):
    """For callers that do not ask where the time went (the frame kernel used on its own)."""

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        yield

    def add(self, name: str, seconds: float, cpu: Optional[float] = None) -> None:
        pass


NO_TIMER = _NoTimer()
