"""The adaptive design of an evaluation (``design: adaptive``) on an engine: the variants answer the problems in
the seeded order of :func:`grrr_stream.stats.order.problem_order`, in the rounds of :mod:`.schedule` (full first;
each variant streamed in a few times, not once a chunk). A variant's decisions are taken a chunk at a time, from
the answers up to each boundary, and it stops as soon as :func:`grrr_stream.stats.anytime.decide` says so; full
answers every problem that any variant still needs.

Every decision is a function of the seed and the stored answers: a rerun replays them from the JSONL records
(the same records the fixed design keeps, under the same keys) and generates nothing already answered; a kill
loses at most the batch in flight.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ...files import atomic_write_text
from ...stats.anytime import Decision, bet_target, retention_interval
from ...stats.order import Order, benchmark_mean, problem_order, round_ends
from ..answers import AnswersFile, summary_text
from ..benchmarks import Benchmark
from ..scoring import BenchmarkResult, answer_problems, problem_scores, summarise_records
from ..settings import EvaluationOptions
from .schedule import REFERENCE, Schedule

# the design's files keep its old name (evaluation/settings.py, RECORDED_NAMES): a resume and the claims read them
FILE = "sequential.json"  # the design, the order's census and weights, and each variant's decision
# where this run's time went: one row per engine call (variant, problems, seconds streaming it in and generating);
# apart from FILE, whose content a resume reproduces exactly
TIMING = "sequential_timing.json"


@dataclass
class AdaptiveOutcome:
    """What the design answered: each variant's decision (full's is where the last variant stopped), and its
    results over the problems it rests on (one per benchmark it answered)."""

    order: Order
    decisions: dict[str, Decision]
    results: dict[str, list[BenchmarkResult]]
    retention: dict[str, tuple[float, float]]


class AdaptiveRun(Schedule):
    """One evaluation's variants under the adaptive design, answers in the fixed design's JSONL records.
    ``load(name)`` returns an engine holding variant ``name`` (the pipeline's engine slot, which swaps weights only
    when the variant changes)."""

    def __init__(
        self,
        benches: Sequence[Benchmark],
        names: Sequence[str],
        keys_of: dict[str, dict[str, str]],
        out: Path,
        options: EvaluationOptions,
        instruction: str,
        load: Callable[[str], Any],
        log=print,
    ):
        s = options.adaptive
        order = problem_order({b.name: len(b.problems) for b in benches}, s.seed, s.max_weight, s.allocation)
        super().__init__(order, names, s, log)
        self.options, self.instruction, self.load = options, instruction, load
        self.benches = {b.name: b for b in benches}
        self.keys_of, self.out = keys_of, Path(out)
        self.calls: list[dict] = []  # this process's engine calls (a resumed run times only what it generated)
        self._records: dict[str, dict[str, dict[int, dict]]] = {
            n: {b: AnswersFile(self.out / n / f"{b}.jsonl", keys_of[n][b], log).done for b in self.benches}
            for n in self.names
        }

    def values(self, name: str) -> np.ndarray:
        """The per-problem metric of variant ``name`` along the order, as far as it answered without a gap."""
        out: list[float] = []
        recs = self._records[name]
        for b, pos in self.order.items:
            rec = recs[b].get(self.benches[b].problems[pos].idx)
            if rec is None:
                break
            out.append(problem_scores(rec, self.options.sampling)[self.options.metric])
        return np.asarray(out)

    def answer(self, name: str, end: int) -> None:
        """Variant ``name`` answers the order's problems up to ``end`` that it has not answered."""
        todo = [(self.benches[b], self.benches[b].problems[pos]) for b, pos in self.order.items[:end]]
        todo = [(b, p) for b, p in todo if p.idx not in self._records[name][b.name]]
        if not todo:
            return
        o = self.options
        began = time.perf_counter()
        engine = self.load(name)
        loaded = time.perf_counter()
        done, _ = answer_problems(
            engine,
            todo,
            name,
            self.out,
            self.keys_of[name],
            template=o.template,
            instruction=self.instruction,
            sampling=o.sampling,
            chunk=len(todo),
            log=lambda m: None,  # damage was said when the records were read
        )
        for b, recs in done.items():
            self._records[name][b] = recs
        self.calls.append(
            {
                "variant": name,
                "problems": len(todo),
                "load_s": round(loaded - began, 4),
                "generate_s": round(time.perf_counter() - loaded, 4),
            }
        )

    def run(self) -> AdaptiveOutcome:
        """The rounds (:meth:`~.schedule.Schedule.rounds`), then where the time went (:data:`TIMING`) and the
        outcome."""
        self.rounds()
        if self.calls:
            load, gen = (sum(c[k] for c in self.calls) for k in ("load_s", "generate_s"))
            self.log(
                f"{len(self.calls)} engine calls, {sum(c['problems'] for c in self.calls)} problems: "
                f"{load:.1f} s streaming variants in, {gen:.1f} s generating"
            )
            atomic_write_text(self.out / TIMING, json.dumps({"calls": self.calls}, indent=1) + "\n")
        return self.outcome()

    def outcome(self) -> AdaptiveOutcome:
        """The decisions and results from the answers stored (every variant run to its stop)."""
        decisions = {n: self.decision(n) for n in self.others}
        last = max((d.problems for d in decisions.values()), default=self.order.total)
        full = self.values(REFERENCE)
        used = {**{n: d.problems for n, d in decisions.items()}, REFERENCE: min(last, len(full))}
        results = {n: self._results(n, used[n]) for n in self.names}
        alpha = 1 - self.settings.level
        s = self.settings
        retention = {
            n: retention_interval(
                self.order,
                self.values(n)[: used[n]],
                full[: used[n]],
                alpha=alpha,
                sequence=s.sequence,
                target=bet_target(s.bets, s.precision(n)),
            )
            for n in self.others
        }
        decisions[REFERENCE] = Decision(used[REFERENCE], "reference", 0.0, 0.0, 0.0)
        return AdaptiveOutcome(self.order, decisions, results, retention)

    def _results(self, name: str, upto: int) -> list[BenchmarkResult]:
        """The variant's result on each benchmark over its answers among the order's first ``upto`` problems."""
        mine: dict[str, list[int]] = {}
        for b, pos in self.order.items[:upto]:
            mine.setdefault(b, []).append(pos)
        out = []
        for b, positions in mine.items():
            bench = self.benches[b]
            recs = [self._records[name][b][bench.problems[p].idx] for p in sorted(positions)]
            out.append(
                summarise_records(
                    recs,
                    variant=name,
                    benchmark=b,
                    sampling=self.options.sampling,
                    sha256=bench.sha256,
                    key=self.keys_of[name][b],
                )
            )
        return out

    def paired_retention(self, name: str, upto: int) -> float:
        """variant / full (percent) on the problems the variant answered."""
        v, f = self.values(name)[:upto], self.values(REFERENCE)[:upto]
        full = benchmark_mean(self.order, f)
        return 100 * benchmark_mean(self.order, v) / full if full else float("nan")


def difference_rows(
    run: AdaptiveRun, outcome: AdaptiveOutcome, transition: str, averages: dict[str, Any]
) -> list[dict]:
    """Per variant: its score on the problems it answered, its paired difference to full with the anytime-valid
    interval, its retention with its interval, how many problems they rest on, why it stopped and which side of
    each threshold it is on."""
    rows = []
    for name in run.names:
        d = outcome.decisions[name]
        row: dict = {
            "transition": transition,
            "kind": "",
            "variant": name,
            "score": averages.get(name),
            "interval": "anytime-valid",
            "problems": d.problems,
            "stopped": d.reason,
        }
        if name != REFERENCE:
            lo, hi = outcome.retention[name]
            row.update(
                minus_full=d.minus_full,
                minus_full_ci_lo=d.lo,
                minus_full_ci_hi=d.hi,
                retention_full_pct=run.paired_retention(name, d.problems),
                retention_full_ci_lo=lo,
                retention_full_ci_hi=hi,
                **{f"side: {k}": v for k, v in d.sides.items()},
            )
        rows.append(row)
    return rows


def write_record(out: Path, run: AdaptiveRun, outcome: AdaptiveOutcome, rows: Sequence[dict]) -> Path:
    """``sequential.json``: the design's settings, the order's census and weights, each variant's decision, and the
    difference rows with their numbers exact (what the claims over a sweep read)."""
    o = outcome.order
    record = {
        "design": "sequential",  # as results name the design (RECORDED_NAMES)
        "settings": run.settings.model_dump(mode="json"),
        "problems": o.total,
        "census": list(o.census),
        "weights": o.weight,
        "rounds": round_ends(o, run.settings.chunk, run.settings.growth, run.settings.min_batch),
        "variants": {
            n: {
                "problems": d.problems,
                "stopped": d.reason,
                "minus_full": d.minus_full,
                "lo": d.lo,
                "hi": d.hi,
                "sides": d.sides,
                "retention_ci": list(outcome.retention.get(n, ())),
            }
            for n, d in outcome.decisions.items()
        },
        "rows": list(rows),
    }
    path = Path(out) / FILE
    # with a digest over its fields: the claims over a sweep take its rows only while it verifies
    atomic_write_text(path, summary_text(json.loads(json.dumps(record, default=float))))
    return path
