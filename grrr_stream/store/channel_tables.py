"""The store's ``channels/`` arrays: every matrix's per-channel energies on one grid, so that channel
questions are answered from the store alone (no checkpoint, no per-matrix reads).

    channels/energy         (layer, module, channel, component)          matrices outside the experts
    channels/expert_energy  (layer, expert_module, expert, channel, component)   expert matrices, if any
    channels/layer, channels/expert                                       their coordinates
    attrs: modules, expert_modules (names along those axes), components (diag, off, null), sides
           (module → reader or writer), channels (the hidden size), left_out (matrix → why)

Cells without a matrix (a module a layer lacks) are NaN. Values are float64 squared norms, in the
update's units (the same as the metrics' e_diag, e_off, e_null, which they sum to over channels).
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

import numpy as np

from ..checkpoints.arch import MatrixName
from ..geometry.channel_energy import COMPONENTS
from .zarr_arrays import CHANNEL_DIMENSIONS as DIMS

GROUP = "channels"


def channel_tables(
    matrices: list[MatrixName], done: dict[str, dict], read: Callable[[str], np.ndarray]
) -> tuple[dict[str, tuple[np.ndarray, tuple[str, ...]]], dict]:
    """(arrays with their dimension names, group attrs) of the matrices whose energies were stored;
    ``read(name)`` gives one matrix's (channel, component) array. Empty when none has them."""
    with_energy = [m for m in matrices if done[m.name].get("channels")]
    left_out = {m.name: "module outside the residual stream" for m in matrices if not done[m.name].get("channels")}
    if not with_energy:
        return {}, {}
    data = {m.name: read(m.name) for m in with_energy}
    hidden = Counter(a.shape[0] for a in data.values()).most_common(1)[0][0]
    for m in with_energy:  # a residual dimension that is not the model's: never put on the common axis
        if data[m.name].shape[0] != hidden:
            left_out[m.name] = f"{data[m.name].shape[0]} channels, not {hidden}"
    kept = [m for m in with_energy if m.name not in left_out]
    layers = sorted({m.layer for m in kept})
    li = {v: i for i, v in enumerate(layers)}
    arrays: dict[str, tuple[np.ndarray, tuple[str, ...]]] = {"layer": (np.array(layers, dtype=np.int64), DIMS["layer"])}
    dense = [m for m in kept if m.expert is None]
    experts = [m for m in kept if m.expert is not None]
    modules = list(dict.fromkeys(m.module for m in dense))
    expert_modules = list(dict.fromkeys(m.module for m in experts))
    if dense:
        grid = np.full((len(layers), len(modules), hidden, len(COMPONENTS)), np.nan)
        for m in dense:
            grid[li[m.layer], modules.index(m.module)] = data[m.name]
        arrays["energy"] = (grid, DIMS["energy"])
    if experts:
        ids = sorted({m.expert for m in experts})
        grid = np.full((len(layers), len(expert_modules), len(ids), hidden, len(COMPONENTS)), np.nan)
        for m in experts:
            grid[li[m.layer], expert_modules.index(m.module), ids.index(m.expert)] = data[m.name]
        arrays["expert_energy"] = (grid, DIMS["expert_energy"])
        arrays["expert"] = (np.array(ids, dtype=np.int64), DIMS["expert"])
    attrs = {
        "modules": modules,
        "expert_modules": expert_modules,
        "components": list(COMPONENTS),
        "sides": {m.module: done[m.name]["channels"]["side"] for m in kept},
        "channels": int(hidden),
        "left_out": left_out,
    }
    return arrays, attrs


def write_channel_tables(store, matrices: list[MatrixName], done: dict[str, dict]) -> None:
    """Write ``channels/`` into a transition store once its matrices are complete (``done``: their records)."""
    arrays, attrs = channel_tables(matrices, done, lambda n: store.read_matrix_array(n, "channel_energy"))
    if arrays:
        store.write_group(GROUP, arrays, attrs)
