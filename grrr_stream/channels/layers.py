"""Per decoder layer, the share of each component's update energy on a set of residual channels.

For layer l, component c and the matrices of that layer (readers and writers, experts included),
T_l[j, c] = Σ_m e_m[j, c]; the layer's share is Σ_{j∈S} T_l[j, c] / Σ_j T_l[j, c], next to the
channels' share k / H. It is :mod:`.enrichment`'s energy share with the matrices grouped by depth
(no null or interval here: the figure reads it along depth, the table gives the tests).
"""

from __future__ import annotations

import numpy as np

from ..geometry.channel_energy import COMPONENTS


def layer_shares(energies: np.ndarray, records: list[dict], channels: np.ndarray) -> list[dict]:
    """One row per (layer, component): the layer's energy share on ``channels`` and its total energy.

    ``energies``: (matrices, H, 3) float per-channel energies; ``records``: each matrix's ``layer``."""
    H = energies.shape[1]
    mask = np.zeros(H, dtype=bool)
    mask[np.asarray(channels, dtype=np.int64)] = True
    e = np.asarray(energies, dtype=np.float64)
    layers = np.array([r["layer"] for r in records])
    rows = []
    for layer in sorted(set(layers.tolist())):
        sub = e[layers == layer]
        total = sub.sum(axis=(0, 1))
        inside = sub[:, mask, :].sum(axis=(0, 1))
        for c, comp in enumerate(COMPONENTS):
            rows.append(
                {
                    "layer": int(layer),
                    "component": comp,
                    "matrices": int(sub.shape[0]),
                    "channels": int(mask.sum()),
                    "hidden": H,
                    "channel_share": float(mask.sum()) / H,
                    "energy_share": float(inside[c] / total[c]) if total[c] > 0 else float("nan"),
                    "energy": float(total[c]),
                }
            )
    return rows
