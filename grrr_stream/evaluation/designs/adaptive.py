"""The adaptive design (``design: adaptive``; results hold its old name, ``sequential``): each variant answers the
problems in a seeded order, in rounds (:mod:`.rounds`), until its anytime-valid intervals decide every threshold it
is compared with or come within its precision; full answers as far as its longest-running variant. Each variant's
numbers rest on its own problems, paired with full's answers to the same ones."""

from __future__ import annotations

import time
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Sequence

from ...forecast.adaptive_shares import expected
from ..engine_loop import EngineSlot, Scores, keys_for, sharing
from .base import EvaluationDesign
from .rounds import FILE, REFERENCE, AdaptiveRun, difference_rows, write_record


def check(options: Any, names: Sequence[str]) -> list[str]:
    """It compares every variant with full, streamed into one engine."""
    problems = []
    if REFERENCE not in names or len(names) < 2:
        problems.append(
            f"design: adaptive compares variants with full: evaluate full and at least one other "
            f"variant (got {', '.join(names)})"
        )
    if options.materialize != "engine":
        problems.append(
            "design: adaptive swaps variants in and out of one engine a few times each: it needs materialize: engine"
        )
    return problems + _unmatched(options.adaptive, [n.partition("=")[0].strip() for n in names])


# the per-variant settings: a glob each (the first that matches wins), or a variant's name
PER_VARIANT = {"variant_precision_points": True, "difference_points": False, "retention_pct": False,
               "retention_precision_pct": False}  # fmt: skip


def _unmatched(adaptive: Any, names: Sequence[str]) -> list[str]:
    """A per-variant setting the user gave whose pattern or name matches no evaluated variant means nothing: refused
    with the names it could have matched. The defaults' patterns name variants a sweep may not evaluate, and are
    left alone wherever they appear (a saved config holds every default explicitly)."""
    problems = []
    defaults = type(adaptive)()
    for key, glob in PER_VARIANT.items():
        for pattern in getattr(adaptive, key):
            if pattern in getattr(defaults, key):
                continue
            if not any(fnmatchcase(n, pattern) if glob else n == pattern for n in names):
                problems.append(
                    f"adaptive.{key}: {pattern!r} matches no evaluated variant (they are {', '.join(names)})"
                )
    return problems


def score(evaluation: Any, order: list[str], slot: EngineSlot, scores: Scores, log) -> None:
    """Every variant in rounds, full first (:class:`~.rounds.AdaptiveRun`)."""
    names = [REFERENCE] + [n for n in order if n != REFERENCE]
    scores.keys_of = {n: keys_for(evaluation, n) for n in names}
    began = time.time()
    with sharing(evaluation, scores.keys_of):
        run = AdaptiveRun(
            evaluation.benches,
            names,
            scores.keys_of,
            evaluation.out,
            evaluation.options,
            evaluation.instruction,
            lambda name: slot.holding(name, scores, log),
            log,
        )
        scores.outcome = (run, run.run())
    scores.results = scores.outcome[1].results
    scores.spans = {n: (began, time.time()) for n in names}


def differences(evaluation: Any, scores: Scores, flat: list, acc: list, info: dict) -> tuple[list[dict], list[dict]]:
    """Each variant's difference to full with its anytime-valid interval, and the gain full − base (paired,
    anytime-valid) in ``info``; no solved/lost rows: the variants rest on different problems."""
    run, outcome = scores.outcome
    rows = difference_rows(run, outcome, evaluation.transition.label, {r["variant"]: r["average"] for r in acc})
    base = next((r for r in rows if r["variant"] == "base"), None)
    if base is not None:
        gain = -base["minus_full"]
        points = evaluation.request.informative_points
        info.update(
            gain=gain,
            gain_ci_lo=-base["minus_full_ci_hi"],
            gain_ci_hi=-base["minus_full_ci_lo"],
            informative=gain >= points,
            gain_problems=base["problems"],
            interval="anytime-valid",
        )
        info["informative_within_ci"] = bool(info["informative"] and info["gain_ci_lo"] < points)
    proj = next((r for r in rows if r["variant"] == "proj"), None)
    if proj is not None:
        # paired on the problems proj answered, as the claims over a sweep take it (full's average rests on more)
        info.update(
            full_minus_proj=-proj["minus_full"],
            full_minus_proj_ci_lo=-proj["minus_full_ci_hi"],
            full_minus_proj_ci_hi=-proj["minus_full_ci_lo"],
        )
    info["design"] = DESIGN.recorded
    info["problems"] = {r["variant"]: r["problems"] for r in rows}
    return rows, []


def write(evaluation: Any, scores: Scores, rows: list[dict]) -> Path:
    return write_record(evaluation.out, *scores.outcome, rows)


DESIGN = EvaluationDesign(
    "adaptive",
    score=score,
    differences=differences,
    forecast=expected,
    summary=FILE,
    own_problems=True,
    note="intervals are anytime-valid confidence sequences over the problems each variant answered (sequential.json)",
    check=check,
    write=write,
)
