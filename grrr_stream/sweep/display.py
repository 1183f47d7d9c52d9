"""The sweep's progress lines: units done / total, the unit that just ended, and an ETA."""

from __future__ import annotations

from typing import Iterable, TextIO

from ..progress import Progress, fmt_seconds
from .units import Unit


class Display:
    """Units done / total, the unit that just ended, and an ETA from this run's unit timings.

    Printed and counted by a :class:`~grrr_stream.progress.Progress`, as a decomposition's matrices are;
    the lines are worded here, since a sweep's ETA comes from its unit kinds rather than a mean rate."""

    def __init__(self, total: int, done: int, enabled: bool, stream: TextIO):
        self.progress = Progress(total, done=done, enabled=enabled, stream=stream)
        self.by_kind: dict[str, list[float]] = {}

    def say(self, text: str) -> None:
        self.progress.message(f"[sweep] {text}")

    def start(self, unit: Unit, running: int = 1) -> None:
        also = f" ({running} units running)" if running > 1 else ""
        self.say(f"[{self.progress.done}/{self.progress.total} done] start {unit.id}: {unit.label}{also}")

    def end(self, unit: Unit, rec: dict, pending: Iterable[Unit]) -> None:
        self.progress.count()
        secs = float(rec.get("seconds") or 0.0)
        self.by_kind.setdefault(unit.kind, []).append(secs)
        status = "done" if rec["status"] == "done" else "FAILED"
        tail = f" — {rec['error']}" if rec["status"] != "done" else ""
        self.say(f"[{self.progress.done}/{self.progress.total}] {status} {unit.id} in {secs:.1f} s{tail} | "
                 f"{self._eta(pending)}")

    def _eta(self, pending: Iterable[Unit]) -> str:
        """From this run's mean time per unit kind; units of a kind not timed yet are counted, not
        guessed (one 6-minute training unit says nothing about a 0.3 s variant build)."""
        rest, untimed = 0.0, 0
        for u in pending:
            ts = self.by_kind.get(u.kind)
            if ts:
                rest += sum(ts) / len(ts)
            else:
                untimed += 1
        elapsed = f"elapsed {fmt_seconds(self.progress.elapsed())}"
        if untimed:
            return f"{elapsed}, ETA ≥ {fmt_seconds(rest)} + {untimed} unit(s) of kinds not timed yet"
        return f"{elapsed}, ETA ~{fmt_seconds(rest)}"
