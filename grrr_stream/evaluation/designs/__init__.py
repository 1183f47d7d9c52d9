"""The evaluation designs: which problems each variant answers and what its numbers rest on.

- ``base``: the :class:`~.base.EvaluationDesign` record every design declares;
- ``fixed``: every variant answers every problem, paired with full on all of them (the paper's tables);
- ``adaptive``: each variant answers a seeded order of the problems until its anytime-valid intervals decide
  (``rounds``: the run in rounds and its record; results hold it by its old name, ``sequential``).

A new design is one module ending in a ``DESIGN`` record, and its line in :data:`DESIGNS`.
"""

from __future__ import annotations

from typing import Optional

from ...errors import ConfigError
from . import adaptive, fixed
from .base import EvaluationDesign

DESIGNS: dict[str, EvaluationDesign] = {d.name: d for d in (fixed.DESIGN, adaptive.DESIGN)}


def design_of(name: str) -> EvaluationDesign:
    """The design named ``name``, or recorded as ``name`` in results (ConfigError naming the designs there are)."""
    design = DESIGNS.get(name) or recorded(name)
    if design is None:
        raise ConfigError(f"evaluation design {name!r} is not one of {', '.join(DESIGNS)}")
    return design


def recorded(name: str) -> Optional[EvaluationDesign]:
    """The design that results name ``name`` (:attr:`~.base.EvaluationDesign.recorded`; None: no design)."""
    return next((d for d in DESIGNS.values() if d.recorded == name), None)
