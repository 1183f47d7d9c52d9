"""What an evaluation design declares: the :class:`EvaluationDesign` record each module of this package ends in.

A design decides which problems each variant answers and what its numbers rest on. The pipeline asks it to
score the variants (:attr:`~EvaluationDesign.score`), to pair them with full (:attr:`~EvaluationDesign.differences`)
and to write its own record; the sweep, the claims, the console, MLflow and the forecast read the rest of the
record. Nothing outside this package compares a design's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..settings import RECORDED_NAMES

# (the prepared evaluation, the variants in engine order, the engine slot, the scores to fill, log)
Score = Callable[[Any, list, Any, Any, Callable], None]
# (the prepared evaluation, the scores, every BenchmarkResult, the accuracy rows, the info to update)
#   → (the difference rows, the problems full solves and a variant loses, and the reverse)
Differences = Callable[[Any, Any, list, list, dict], tuple[list[dict], list[dict]]]
# (variant names, benchmark → problems, the design's settings) → (share of the problems each answers, its engine
# calls as (how many, share of the problems each), what that rests on in words)
Forecast = Callable[[Sequence[str], dict, Any], tuple[list[float], list[list[tuple[float, float]]], str]]


@dataclass(frozen=True)
class EvaluationDesign:
    """One evaluation design, declared once (in the module that runs it).

    - its own settings, if any, are the field of :class:`~grrr_stream.evaluation.settings.EvaluationOptions`
      named after it (``adaptive``); a design with settings is named in result keys with them (the options'
      ``key_fields``), and the fixed design, the paper's, adds nothing to keys (they stay those made before
      designs existed); results hold a renamed design by its old name (:attr:`recorded`);
    - ``summary``: the file of an evaluation's folder that the claims over a sweep read back (None: the
      per-benchmark summaries);
    - ``own_problems``: each variant's numbers rest on the problems it answered, which the tables and the
      console say per variant; ``note``: the console's line on what the intervals are;
    - ``check(options, variant names)``: what the design refuses, as messages;
    - ``write(evaluation, scores, difference rows)``: its own record, if any (its path);
    - ``forecast``: each variant's expected share of the problems and its engine calls, for the sweep's forecast.
    """

    name: str
    score: Score
    differences: Differences
    forecast: Forecast
    summary: Optional[str] = None
    own_problems: bool = False
    note: str = ""
    check: Callable[[Any, Sequence[str]], list[str]] = lambda options, names: []
    write: Optional[Callable[[Any, Any, list[dict]], Path]] = None

    @property
    def recorded(self) -> str:
        """Its name as results hold it (keys, records, MLflow): a renamed design's old one
        (:data:`~grrr_stream.evaluation.settings.RECORDED_NAMES`)."""
        return RECORDED_NAMES.get(self.name, self.name)

    def settings_of(self, options: Any) -> Any:
        """Its own settings in ``options`` (None: it has none)."""
        return getattr(options, self.name, None)

    def record(self, options: Any) -> dict:
        """The design as an evaluation's record (evaluation.json) holds it: its name and all its settings."""
        own = self.settings_of(options)
        return {"design": self.recorded, **({self.recorded: own.model_dump(mode="json")} if own is not None else {})}

    def params(self, options: Any) -> dict:
        """The design as MLflow params: its name and each of its settings as ``name.field``."""
        own = self.settings_of(options)
        fields = own.model_dump(mode="json") if own is not None else {}
        return {"design": self.recorded, **{f"{self.recorded}.{k}": v for k, v in fields.items()}}
