"""The adaptive design's schedule: which variant answers how far, in which engine call. It reads answers and asks
for more through two methods, :meth:`Schedule.values` and :meth:`Schedule.answer`, and nothing else, so the same
rounds run on an engine (:class:`~.rounds.AdaptiveRun`, answers in JSONL records) and on planted answers
(:class:`PlantedSchedule`: what the design would answer and how many calls it would make, at any size, without
an engine; ``tools/simulate_rounds.py`` and the forecast's shares rest on it).

Variants take turns, full first, in rounds whose answered prefix grows geometrically from the census and one
chunk, or further: as far as the running variants' intervals say they will need
(:func:`~grrr_stream.stats.lookahead.batch_end`), so that most variants are streamed into the engine twice (the first
chunk, then to their stop). Decisions are taken a chunk at a time from the answers up to each boundary, so how far
a call runs ahead changes no decision, only the answers generated past a stop.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from ...stats.anytime import Decision, decide
from ...stats.lookahead import batch_end
from ...stats.order import Order, round_ends

REFERENCE = "full"


class Schedule:
    """The rounds of one evaluation under ``settings``
    (:class:`~grrr_stream.evaluation.settings.AdaptiveSettings`) over ``order``; ``names``: full and its variants.
    A subclass says what has been answered (:meth:`values`) and answers more (:meth:`answer`)."""

    def __init__(self, order: Order, names: Sequence[str], settings, log: Callable[[str], None] = print):
        self.order, self.settings, self.log = order, settings, log
        self.names = list(names)
        self.others = [n for n in self.names if n != REFERENCE]
        # (variant, its answers, full's) → its decision: a round asks for the same one several times (to loop, to
        # log, for full's next end), and answers only grow
        self._decided: dict[tuple[str, int, int], Decision] = {}

    def values(self, name: str) -> np.ndarray:
        """The per-problem metric of variant ``name`` along the order, as far as it answered without a gap."""
        raise NotImplementedError

    def answer(self, name: str, end: int) -> None:
        """Variant ``name`` answers the order's problems up to ``end`` that it has not answered (one engine call)."""
        raise NotImplementedError

    def _rule(self, name: str) -> dict:
        """The stopping rule's settings for ``name`` (:func:`~grrr_stream.stats.anytime.decide`'s keywords)."""
        s = self.settings
        return dict(
            chunk=s.chunk,
            precision_points=s.precision(name),
            alpha=1 - s.level,
            sequence=s.sequence,
            retention_points=s.retention_precision_pct.get(name),
            bets=s.bets,
        )

    def decision(self, name: str) -> Decision:
        mine, full = self.values(name), self.values(REFERENCE)
        key = (name, len(mine), len(full))
        if key not in self._decided:
            thresholds = self.settings.thresholds(name)
            self._decided[key] = decide(self.order, mine, full, thresholds, **self._rule(name))
        return self._decided[key]

    def rounds(self) -> dict[str, Decision]:
        """Rounds until every variant stopped: full answers the round's prefix, then each running variant, a call
        at a time, until it stops or reaches the round's end. A round's end is the next of the geometric ends
        (:func:`~grrr_stream.stats.order.round_ends`), or further: as far as the running variants are expected
        to need full's answers; no call answers fewer than ``min_batch`` problems where more are left (a smaller
        call costs about as much). The ends move with the answers, the decisions do not. Returns each
        variant's decision."""
        s = self.settings
        ends = round_ends(self.order, s.chunk, s.growth, s.min_batch)
        end = ends[0]
        while True:
            running = [n for n in self.others if not self.decision(n).stopped]
            if not running:
                break
            self.answer(REFERENCE, end)
            for name in running:
                while True:
                    if self.decision(name).stopped or len(self.values(name)) >= end:
                        break
                    self.answer(name, self._batch_end(name, end))
                self.log(f"{name}: {_said(self.decision(name), self.order.total)}")
            if end >= self.order.total:
                break
            later = min(end + s.min_batch, self.order.total)
            end = max(next(e for e in ends if e >= later), self._next_end())
        return {n: self.decision(n) for n in self.others}

    def _batch_end(self, name: str, end: int, slack: Optional[float] = None) -> int:
        s = self.settings
        return batch_end(
            self.order,
            self.values(name),
            self.values(REFERENCE),
            s.thresholds(name),
            end=end,
            slack=s.lookahead if slack is None else slack,
            min_batch=s.min_batch,
            **self._rule(name),
        )

    def _next_end(self) -> int:
        """How far the running variants are expected to need full's answers (0 when none could say)."""
        if self.settings.lookahead <= 0:
            return 0
        needs = [self._batch_end(n, self.order.total, slack=1.0) for n in self.others if not self.decision(n).stopped]
        return max(needs, default=0)


class PlantedSchedule(Schedule):
    """The schedule over planted answers: ``answers[name]`` is the variant's per-problem metric along the whole
    order. It records each call's size (:attr:`calls`: variant → problems per call) and how far each variant
    answered (:attr:`answered`)."""

    def __init__(self, order: Order, answers: dict[str, np.ndarray], settings):
        names = [REFERENCE] + [n for n in answers if n != REFERENCE]
        super().__init__(order, names, settings, log=lambda m: None)
        self._answers = {n: np.asarray(a, dtype=np.float64) for n, a in answers.items()}
        self.answered = {n: 0 for n in names}
        self.calls: dict[str, list[int]] = {n: [] for n in names}

    def values(self, name: str) -> np.ndarray:
        return self._answers[name][: self.answered[name]]

    def answer(self, name: str, end: int) -> None:
        if end > self.answered[name]:
            self.calls[name].append(end - self.answered[name])
            self.answered[name] = end


def _said(d: Decision, total: int) -> str:
    why = {
        "thresholds": "every threshold decided",
        "precision": "difference within the precision target",
        "exhausted": "every problem answered",
    }.get(d.reason, "not decided yet")
    return (
        f"{'stopped' if d.stopped else 'running'} at {d.problems} of {total} problems ({why}); minus_full "
        f"{d.minus_full:+.1f} points, anytime-valid [{d.lo:+.1f}, {d.hi:+.1f}]"
    )
