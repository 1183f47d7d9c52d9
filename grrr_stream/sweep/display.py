"""The sweep's progress lines: units done / total, the unit that starts or just ended, and an ETA."""

from __future__ import annotations

from typing import Iterable, Optional, TextIO

from ..progress import Progress, fmt_seconds
from .units import Unit


class Display:
    """Units done / total, the unit that starts or just ended, and an ETA for the units still to run.

    The ETA starts from the sweep's forecast (forecast.json: seconds per unit) and is corrected as units end:
    a unit's forecast is scaled by measured / forecast over the ended units of its kind, or over all ended
    units while none of its kind has ended. A unit without a forecast counts at the mean measured time of its
    kind; one of a kind not timed yet is counted, not guessed (one 6-minute training unit says nothing about a
    0.3 s variant build). Printed and counted by a :class:`~grrr_stream.progress.Progress`, as a
    decomposition's matrices are; the lines are worded here."""

    def __init__(
        self,
        total: int,
        done: int,
        enabled: bool,
        stream: TextIO,
        forecast: Optional[dict[str, Optional[float]]] = None,
    ):
        self.progress = Progress(total, done=done, enabled=enabled, stream=stream)
        self.forecast = {k: v for k, v in (forecast or {}).items() if v is not None and v > 0}
        self.by_kind: dict[str, list[float]] = {}  # measured seconds of ended units
        self.pairs: dict[str, list[tuple[float, float]]] = {}  # kind → (measured, forecast) of ended units

    def say(self, text: str) -> None:
        self.progress.message(f"[sweep] {text}")

    def start(self, unit: Unit, running: int = 1) -> None:
        also = f" ({running} units running)" if running > 1 else ""
        guess = self.expected(unit)
        expect = f" (expected ~{fmt_seconds(guess)})" if guess is not None else ""
        self.say(f"[{self.progress.done}/{self.progress.total} done] start {unit.id}: {unit.label}{expect}{also}")

    def end(self, unit: Unit, rec: dict, pending: Iterable[Unit]) -> None:
        self.progress.count()
        secs = float(rec.get("seconds") or 0.0)
        if rec["status"] == "done":  # a failure's time says nothing about the work
            self.by_kind.setdefault(unit.kind, []).append(secs)
            if unit.id in self.forecast:
                self.pairs.setdefault(unit.kind, []).append((secs, self.forecast[unit.id]))
        status = "done" if rec["status"] == "done" else "FAILED"
        tail = f" — {rec['error']}" if rec["status"] != "done" else ""
        self.say(
            f"[{self.progress.done}/{self.progress.total}] {status} {unit.id} in {secs:.1f} s{tail} | "
            f"{self._eta(pending)}"
        )

    def ratio(self, kind: str) -> float:
        """Measured / forecast seconds over the ended units of ``kind`` (all ended units while none of it has
        ended; 1 before any)."""
        pairs = self.pairs.get(kind) or [p for ps in self.pairs.values() for p in ps]
        measured, forecast = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
        return measured / forecast if pairs and forecast > 0 else 1.0

    def expected(self, unit: Unit, ratios: Optional[dict[str, float]] = None) -> Optional[float]:
        """Seconds ``unit`` is expected to take: its forecast corrected by :meth:`ratio`, else the mean of its
        kind's ended units, else None. ``ratios``: the ratios found so far, kept by a caller asking for many units
        (each would otherwise sum every ended unit again)."""
        if unit.id in self.forecast:
            ratios = {} if ratios is None else ratios
            if unit.kind not in ratios:
                ratios[unit.kind] = self.ratio(unit.kind)
            return self.forecast[unit.id] * ratios[unit.kind]
        ts = self.by_kind.get(unit.kind)
        return sum(ts) / len(ts) if ts else None

    def _eta(self, pending: Iterable[Unit]) -> str:
        rest, untimed, ratios = 0.0, 0, {}
        for u in pending:
            s = self.expected(u, ratios)
            if s is None:
                untimed += 1
            else:
                rest += s
        elapsed = f"elapsed {fmt_seconds(self.progress.elapsed())}"
        if untimed:
            return f"{elapsed}, ETA ≥ {fmt_seconds(rest)} + {untimed} unit(s) not forecast or timed yet"
        return f"{elapsed}, ETA ~{fmt_seconds(rest)}"
