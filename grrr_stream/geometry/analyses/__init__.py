"""Per-matrix analyses beyond the paper, one module each, each ending in an :class:`~.base.Analysis` record:
principal bands (:mod:`.bands`), principal subspace angles (:mod:`.angles`, solved by :mod:`.davidson`),
component survival through a 16-bit dtype (:mod:`.survival`), the degenerate share (:mod:`.degenerate_share`),
update sparsity (:mod:`.sparsity`) and channel energies (:mod:`.channels`). ANALYSES is the one registry:
the settings, the kernel (:func:`grrr_stream.geometry.kernel.decompose_matrix`), the reader thread, the
summaries, transitions.csv, the report and MLflow take what they need of an analysis from it.

torch-free at import, like :mod:`.base`: the math imports torch when it runs."""

from __future__ import annotations

from typing import Any

from ...columns import Schema
from ..metrics import PAPER_COLUMNS
from . import (
    angles,
    bands,
    channels,
    degenerate_share,
    sparsity,
    survival,
)
from .base import Analysis, AnalysisSettings

# in the order their columns appear in metrics.csv
ANALYSES: tuple[Analysis, ...] = (
    bands.ANALYSIS,
    angles.ANALYSIS,
    survival.ANALYSIS,
    degenerate_share.ANALYSIS,
    sparsity.ANALYSIS,
    channels.ANALYSIS,
)


class AnalysisOptions(*(a.settings for a in ANALYSES if a.settings is not None)):
    """Every analysis's settings in one model (the fields' defaults: the full profile's)."""


def profile_values(profile: str) -> dict[str, Any]:
    """What a profile sets of the analyses' settings (the full profile: nothing, the fields' defaults)."""
    return {k: v for a in ANALYSES for k, v in a.profiles.get(profile, {}).items()}


def options(**values: Any) -> AnalysisOptions:
    """The settings with every optional analysis off (as in the paper profile), but for ``values``."""
    return AnalysisOptions(**{**profile_values("paper"), **values})


def result_parts(opts: Any) -> tuple[dict[str, dict], dict[str, Any]]:
    """The analyses' part of the result settings: (group → its settings, each written when any setting of the
    group differs from its default; ungrouped settings that differ from their default)."""
    groups: dict[str, dict] = {}
    changed: set[str] = set()
    alone: dict[str, Any] = {}
    for a in ANALYSES:
        for name, default in a.result_defaults.items():
            value = getattr(opts, name)
            value = list(value) if isinstance(value, tuple) else value
            if a.result_group is not None:
                groups.setdefault(a.result_group, {})[name] = value
                if value != default:
                    changed.add(a.result_group)
            elif value != default:
                alone[name] = value
    return {g: v for g, v in groups.items() if g in changed}, alone


# every column of metrics.csv: the paper's, then each analysis's (in the order above)
MATRIX_COLUMNS: Schema = PAPER_COLUMNS + Schema(*(a.columns for a in ANALYSES))


__all__ = [
    "ANALYSES",
    "Analysis",
    "AnalysisOptions",
    "AnalysisSettings",
    "MATRIX_COLUMNS",
    "options",
    "profile_values",
    "result_parts",
]
