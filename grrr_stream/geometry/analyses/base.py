"""What one analysis beyond the paper declares: the :class:`Analysis` record each module of this package ends in.

torch-free: the settings (:mod:`grrr_stream.config`) assemble their fields, profiles and result settings from
these records and must validate a config without loading torch; the math imports torch when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from pydantic import BaseModel, ConfigDict

from ...columns import Column

if TYPE_CHECKING:
    import torch

# The kernel's stages, in the order they run on one matrix (decompose_matrix):
#   "w1":    the frame exists, W1 is still intact (state.W1), ΔW not formed yet
#   "delta": ΔW exists (state.delta), before it becomes the null residual; a step may ask the projection
#            to keep its intermediate along an axis (state.lift)
#   "lifted": the projection is done and its intermediate along state.lift is alive (state.lifted)
#   "split": the projection is final (state.proj), ‖ΔW‖_F and ‖ΔW‖₂ known
STAGES = ("w1", "delta", "lifted", "split")


def sorted_positive(v: tuple[int, ...], message: str) -> tuple[int, ...]:
    if any(k < 1 for k in v):
        raise ValueError(message)
    return tuple(sorted(set(v)))


class AnalysisSettings(BaseModel):
    """An analysis's own settings: its fields join :class:`grrr_stream.config.DecompositionSettings` (so they
    are YAML keys of a decomposition and of a sweep's ``decomposition``), under the same rules."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


@dataclass
class MatrixState:
    """What the kernel has of one matrix when an analysis's step runs (see STAGES), and what the steps leave
    for each other: ``scratch`` (by analysis name) and ``arrays`` (per-matrix arrays for the store)."""

    frame: Any  # grrr_stream.geometry.frame.Frame (not imported: the settings import this module)
    shape: tuple[int, int]
    timer: Any  # grrr_stream.runtime.phases.PhaseTimer
    W1: Optional["torch.Tensor"] = None
    delta: Optional["torch.Tensor"] = None
    lift: Optional[int] = None
    lifted: Optional["torch.Tensor"] = None
    proj: Any = None  # grrr_stream.geometry.frame.Projection
    delta_fro: float = 0.0
    delta_spec: float = 0.0
    degenerate_gap: Optional[float] = None
    scratch: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, Any] = field(default_factory=dict)


# one step: (state, the analysis's settings, what its reader step prepared for this matrix) → its columns
Step = Callable[[MatrixState, Any, Any], Optional[dict]]


@dataclass(frozen=True)
class Analysis:
    """One per-matrix analysis beyond the paper, declared once (in the module that computes it).

    - ``settings``: its settings model (its fields join the decomposition settings; None: it has none);
    - ``profiles``: profile name → the values of its settings there (a profile not named: the fields'
      defaults, which are the full profile's);
    - ``result_defaults``: each setting that changes stored numbers → its value (JSON form) that stays out of the
      result settings, so stores and keys made before the setting existed keep their identity;
      ``result_group``: a key of the result settings that holds the settings of every analysis naming it, all
      of them written when any differs from its default (None: each setting is its own key);
    - ``enabled(settings)``: whether it runs at all;
    - ``read(settings, matrix, w0, w1)``: an optional step on the reader thread, with both checkpoint tensors
      in their own dtypes; its result reaches the steps as ``prepared``;
    - ``steps``: kernel stage (STAGES) → step; the columns a step returns go to metrics.csv;
    - ``columns``: the columns its steps add to metrics.csv, each saying how it aggregates, its label and where it
      appears (:class:`grrr_stream.columns.Column`);
    - ``phase``: the timer phase its steps are charged to.
    """

    name: str
    settings: Optional[type[AnalysisSettings]]
    steps: Mapping[str, Step]
    columns: tuple[Column, ...]
    profiles: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    result_defaults: Mapping[str, Any] = field(default_factory=dict)
    result_group: Optional[str] = None
    enabled: Callable[[Any], bool] = lambda settings: True
    read: Optional[Callable[[Any, Any, "torch.Tensor", "torch.Tensor"], Any]] = None
    phase: str = "analyses"
