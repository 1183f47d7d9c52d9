"""The package's one progress line: items done / total, current item, rate and ETA (:class:`Progress`), also
for an iterable (:meth:`Progress.track`) and for the tasks of Dask graphs computed locally (:func:`dask_tasks`)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Optional, TextIO, TypeVar

from .unit_log import console

T = TypeVar("T")


def fmt_seconds(s: float) -> str:
    """42s, 3m05s, 1h02m."""
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


class Progress:
    """Prints ``[done/total] pct | item | s/it | ETA`` to stderr; :meth:`message` prints a line as given.

    On a terminal the line is rewritten in place; elsewhere (logs, CI) a line is printed
    once ``every`` seconds have passed since the start or the last line, and for the last item
    when an earlier line was printed (a step shorter than ``every`` prints none). ETA uses only items processed in
    this run, so resumed runs
    do not count skipped work as instant.
    """

    def __init__(
        self,
        total: int,
        *,
        done: int = 0,
        label: str = "",
        enabled: bool = True,
        stream: Optional[TextIO] = None,
        every: float = 10.0,
    ):
        self.total = total
        self.done = done
        self.label = label
        self.enabled = enabled
        self.stream = stream or console()  # the terminal, also while a sweep unit's output goes to its log
        self._start = time.monotonic()
        self._processed = 0
        self._tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every = every
        self._last: Optional[float] = None  # when advance() last printed, off a terminal

    def message(self, text: str) -> None:
        if self.enabled:
            self._emit(text, final=True)

    def count(self, n: int = 1) -> None:
        """Count ``n`` more items done without printing (a caller that words its own lines, as the sweep)."""
        self.done += n
        self._processed += n

    def skip(self, n: int = 1) -> None:
        """Count ``n`` items found done already (a resumed run): in done / total, not in the rate."""
        self.done += n

    def elapsed(self) -> float:
        """Seconds since this reporter was created."""
        return time.monotonic() - self._start

    def advance_to(self, done: int, item: str) -> None:
        """Advance to ``done`` items (nothing when as many are counted already: another caller advanced it)."""
        if done > self.done:
            self.advance(item, done - self.done)

    def track(self, items: Iterable[T], item: Callable[[T], str] = str) -> Iterator[T]:
        """``items`` as they are, each counted (and named by ``item``) once the consumer asks for the next."""
        for x in items:
            yield x
            self.advance(item(x))

    def advance(self, item: str, n: int = 1) -> None:
        self.count(n)
        if not self.enabled:
            return
        elapsed = self.elapsed()
        rate = elapsed / self._processed if self._processed else 0.0
        remaining = max(self.total - self.done, 0)
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta = fmt_seconds(rate * remaining) if self._processed else "?"
        final = self.done >= self.total
        if not self._tty:  # a log or CI: not one line per matrix of a 300-matrix model, none for a short step
            now = time.monotonic()
            waited = now - (self._start if self._last is None else self._last)
            if not (waited >= self.every or (final and self._last is not None)):
                return
            self._last = now
        width = len(str(self.total))
        text = f"{self.label}[{self.done:>{width}}/{self.total}] {pct:5.1f}% | {item} | {rate:.2f} s/it | ETA {eta}"
        self._emit(text, final=final)

    def _emit(self, text: str, final: bool) -> None:
        if self._tty:
            self.stream.write("\r\033[K" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


@contextmanager
def dask_tasks(label: str, *, enabled: bool = True, every: float = 10.0) -> Iterator[Progress]:
    """Tasks done / total of the Dask graphs computed inside the block on a local scheduler (threads, processes,
    synchronous) as progress lines; each graph adds its tasks to the total when it starts. A distributed
    client's graphs are not seen here (its dashboard shows them)."""
    bar = Progress(0, label=label, enabled=enabled, every=every)
    if not enabled:
        yield bar
        return
    from dask.callbacks import Callback

    class _Tasks(Callback):
        def _start_state(self, dsk, state):
            bar.total += len(state["ready"]) + len(state["waiting"])

        def _posttask(self, key, result, dsk, state, worker_id):
            bar.advance("tasks")

    with _Tasks():
        yield bar
