"""The evaluation designs: which problems each variant answers and what its numbers rest on.

- ``base``: the :class:`~.base.EvaluationDesign` record every design declares;
- ``fixed``: every variant answers every problem, paired with full on all of them (the paper's tables);
- ``sequential``: each variant answers a seeded order of the problems until its anytime-valid intervals decide
  (``rounds``: the run in rounds and its record).

A new design is one module ending in a ``DESIGN`` record, and its line in :data:`DESIGNS`.
"""

from __future__ import annotations

from ...errors import ConfigError
from . import fixed, sequential
from .base import EvaluationDesign

DESIGNS: dict[str, EvaluationDesign] = {d.name: d for d in (fixed.DESIGN, sequential.DESIGN)}


def design_of(name: str) -> EvaluationDesign:
    """The design named ``name`` (ConfigError naming the designs there are)."""
    try:
        return DESIGNS[name]
    except KeyError:
        raise ConfigError(f"evaluation design {name!r} is not one of {', '.join(DESIGNS)}") from None
