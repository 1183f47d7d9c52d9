"""The sections of a sweep YAML that kinds own: :class:`Section` (a top-level key, its model and default), and
the checks their models share (transition selectors, names that become folders, variant names as YAML reads
them). :mod:`.config` assembles ``SweepConfig`` from the sections of the kinds in the registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional, Union

from pydantic import Field

from ..files import is_component

# "cumulative" | "incremental" | "steps" | "all" | "none" (or null / false) | a list of transition ids.
# steps: every training step of the lineage, parent → child (base → child where the parent is the base):
# the set the paper evaluates (SFT rows base → SFT, RL rows SFT → RL or base → RL), never the cumulative
# base → grandchild, which is decomposed but not evaluated.
TransitionSelector = Optional[Union[Literal["cumulative", "incremental", "steps", "all", "none"], list[str]]]


def selector(v: Any) -> Any:
    """A ``transitions`` selector as written: null and false both mean none (a ``mode="before"`` validator)."""
    return "none" if v is False or v is None else v


def component(v: str) -> str:
    """An id, suite or benchmark name: it becomes a folder name (a field validator)."""
    if not is_component(v):
        raise ValueError(
            "must start with a letter or digit and use only letters, digits, '_', '.', '-' "
            "(at most 64 characters): it names folders and runs"
        )
    return v


def yaml_variant_names(v: Any) -> Any:
    """A list of variant names as YAML 1.1 reads them: the bare words `off` and `null` are read as false and
    None, and in a list of variant names they can only mean the variants of those names."""
    if isinstance(v, list):
        return ["off" if x is False else "null" if x is None else x for x in v]
    return v


@dataclass(frozen=True)
class Section:
    """One top-level key of the sweep YAML that a kind owns: its type (a pydantic model, or a list or Optional
    of one) and its default (``factory``: made anew for each config; None with ``optional``: the key may be
    absent and then reads None)."""

    key: str
    model: Any
    factory: Optional[Callable[[], Any]] = None
    optional: bool = False

    def field(self) -> tuple[Any, Any]:
        """The (annotation, default) pair of this section's field in ``SweepConfig``."""
        if self.optional:
            return Optional[self.model], None
        return self.model, Field(default_factory=self.factory or self.model)
