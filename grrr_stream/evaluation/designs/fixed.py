"""The fixed design, the paper's: every variant answers every problem, one variant after another, and each is
paired with full on all of them (paired bootstrap intervals over the transition's problems)."""

from __future__ import annotations

import time
from typing import Any, Sequence

from ...progress import Progress
from ...stats import claims
from ..engine_loop import EngineSlot, Scores, score_variant
from ..tables import solved_lost
from .base import EvaluationDesign


def score(evaluation: Any, order: list[str], slot: EngineSlot, scores: Scores, log) -> None:
    """Every variant on every benchmark, variants that need the same engine one after the other; with
    ``request.progress``, a progress line over the (variant, benchmark) pairs with an ETA."""
    scores.bar = Progress(
        len(evaluation.names) * len(evaluation.benches),
        label=f"  [evaluate {evaluation.transition.label}] ",
        enabled=evaluation.request.progress,
    )
    for name in order:
        began = time.time()  # each variant's own time (an engine it starts included), for its MLflow run
        score_variant(evaluation, name, slot, scores, log)
        scores.spans[name] = (began, time.time())


def differences(evaluation: Any, scores: Scores, flat: list, acc: list, info: dict) -> tuple[list[dict], list[dict]]:
    """The paired bootstrap differences between variants on every problem, the informative flag in ``info``, and
    the problems full solves and a variant loses (and the reverse)."""
    req = evaluation.request
    per_problem = claims.transition_scores(
        claims.correctness_of(flat, metric=req.options.metric),
        transition=evaluation.transition.label,
        resamples=req.resamples,
        seed=req.bootstrap_seed,
    )
    informative = claims.informative_rows([per_problem], informative_points=req.informative_points)[0]
    info.update({k: v for k, v in informative.items() if k not in ("transition", "kind")})
    return claims.difference_rows(per_problem), solved_lost(flat, req.options.metric)


def expected(variants: Sequence[str], sizes: dict, settings: Any) -> tuple[list[float], list[list], str]:
    n = len(variants)
    return [1.0] * n, [[(1.0, 1.0)]] * n, "every variant answers every problem, streamed in once"


DESIGN = EvaluationDesign("fixed", score=score, differences=differences, forecast=expected)
