"""Channel energies: each component's energy per residual channel (columns of readers, rows of writers), stored
per matrix as the ``channel_energy`` array and gathered into a store's channels/ arrays (docs/channels.md)."""

from __future__ import annotations

from typing import Any, Optional

from .base import Analysis, AnalysisSettings, MatrixState


class ChannelSettings(AnalysisSettings):
    # measured at most a few percent of a decomposition
    channel_energy: bool = True


def _read(opts: Any, matrix: Any, w0: Any, w1: Any) -> int:
    """The axis along which the matrix touches the residual stream (0: rows, 1: columns)."""
    from ..channel_energy import residual_axis

    return residual_axis(matrix)


def _delta(state: MatrixState, opts: Any, axis: Optional[int]) -> None:
    state.lift = axis  # the projection keeps its intermediate along this axis for the next step


def _lifted(state: MatrixState, opts: Any, axis: Optional[int]) -> None:
    """Now, while the projection's intermediate is alive: an r×n buffer, freed after."""
    if axis is None:
        return
    from ..channel_energy import channel_energies

    frame, proj = state.frame, state.proj
    state.arrays["channel_energy"] = channel_energies(proj.P, proj.null, frame.U, frame.V, axis, state.lifted)


ANALYSIS = Analysis(
    "channels",
    ChannelSettings,
    {"delta": _delta, "lifted": _lifted},
    (),
    profiles={"paper": {"channel_energy": False}},
    result_defaults={"channel_energy": True},
    enabled=lambda opts: opts.channel_energy,
    read=_read,
    phase="channel_energy",
)
