"""How much of one transition's update lands on a given set of residual channels.

For a group of matrices (all, readers, writers, one module) and a component c (diag, off, null), with
e_m[j, c] the energy of matrix m's component on residual channel j (:mod:`grrr_stream.geometry.channel_energy`),
T[j, c] = Σ_m e_m[j, c] over the group, S the channel set (k of the H channels):

    energy share   s_c = Σ_{j∈S} T[j, c] / Σ_j T[j, c]
    channel share  k / H
    enrichment     ratio_c = s_c / (k / H)          (1: the update ignores the set; ≫ 1: it favours it)

Null: ``draws`` channel sets of the same size k drawn uniformly without replacement (seeded), the same
sets for every group and component; p = (1 + #{null ratio ≥ observed}) / (1 + draws), one-sided (the set
takes more than its share). Interval: the 2.5 % and 97.5 % quantiles of the ratio over ``draws``
bootstrap resamples of the group's matrices (drawn with replacement, seeded), i.e. how much the ratio
depends on which matrices carried the update, for a fixed channel set. The null's 97.5 % quantile is
reported beside it (null_q975): the ratio a random set of k channels reaches 2.5 % of the time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..errors import ConfigError, StoreError
from ..geometry.channel_energy import COMPONENTS
from ..store.transition_store import StoredTransition

CHUNK_DRAWS = 256  # null draws per block: a draws×H indicator is never built whole


@dataclass(frozen=True)
class ChannelSet:
    channels: np.ndarray  # sorted unique indices
    hidden: Optional[int]  # H the set was chosen for, when its file says so
    source: str


def load_channel_set(spec: str) -> ChannelSet:
    """A channel set from a channels.json file ({"channels": [...], "hidden_size": H, ...}) or a list '3,17,42'."""
    path = Path(spec)
    if path.is_file():
        try:
            doc = json.loads(path.read_text())
            chans, hidden = doc["channels"], doc.get("hidden_size")
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ConfigError(f"--channels {spec}: not a channels file with a 'channels' list ({e})") from None
        return ChannelSet(_indices(chans, spec), None if hidden is None else int(hidden), str(path))
    try:
        chans = [int(x) for x in spec.replace(" ", "").split(",") if x]
    except ValueError:
        raise ConfigError(
            f"--channels {spec!r}: neither a file nor a comma-separated list of channel indices"
        ) from None
    return ChannelSet(_indices(chans, spec), None, "list")


def _indices(chans: Sequence, spec: str) -> np.ndarray:
    arr = np.unique(np.asarray(chans, dtype=np.int64))
    if arr.size == 0 or arr[0] < 0:
        raise ConfigError(f"--channels {spec}: needs at least one channel index, all ≥ 0")
    return arr


def groups_of(records: list[dict]) -> dict[str, list[int]]:
    """Group name → indices of its matrices: all, reader, writer, module=<name> (plan order)."""
    out: dict[str, list[int]] = {"all": list(range(len(records)))}
    for s in ("reader", "writer"):
        out[s] = [i for i, r in enumerate(records) if r["side"] == s]
    for mod in dict.fromkeys(r["module"] for r in records):
        out[f"module={mod}"] = [i for i, r in enumerate(records) if r["module"] == mod]
    return {g: idx for g, idx in out.items() if idx}


def enrichment(
    energies: np.ndarray, records: list[dict], channels: np.ndarray, *, draws: int = 2000, seed: int = 0
) -> list[dict]:
    """One row per (group, component): shares, ratio, bootstrap interval, null quantile, p-value.

    ``energies``: (matrices, H, 3) per-channel energies; ``records``: each matrix's side and module."""
    n, H, _ = energies.shape
    k = len(channels)
    if channels[-1] >= H or k >= H:
        raise ConfigError(
            f"the channel set ({k} channels, largest index {channels[-1]}) does not fit the store's "
            f"{H} residual channels (it needs fewer than {H}, all below {H})"
        )
    groups = groups_of(records)
    mask = np.zeros(H, dtype=bool)
    mask[channels] = True
    inside = energies[:, mask, :].sum(axis=1)  # (matrices, 3)
    total = energies.sum(axis=1)
    per_group = np.stack([energies[idx].sum(axis=0) for idx in groups.values()])  # (groups, H, 3)
    null = null_shares(per_group, k, draws, np.random.default_rng(seed))  # (draws, groups, 3)
    boot_rng = np.random.default_rng([seed, 1])
    rows = []
    for g, (name, idx) in enumerate(groups.items()):
        counts = boot_rng.multinomial(len(idx), np.full(len(idx), 1 / len(idx)), size=draws)  # (draws, |group|)
        with np.errstate(invalid="ignore", divide="ignore"):
            boot = (counts @ inside[idx]) / (counts @ total[idx]) / (k / H)
        for c, comp in enumerate(COMPONENTS):
            t = total[idx, c].sum()
            obs = inside[idx, c].sum() / t / (k / H) if t > 0 else np.nan
            nr = null[:, g, c] / (k / H)
            rows.append(
                {
                    "group": name,
                    "component": comp,
                    "matrices": len(idx),
                    "channels": k,
                    "hidden": H,
                    "channel_share": k / H,
                    "energy_share": obs * k / H,
                    "ratio": obs,
                    "ci_lo": float(np.nanquantile(boot[:, c], 0.025)) if t > 0 else np.nan,
                    "ci_hi": float(np.nanquantile(boot[:, c], 0.975)) if t > 0 else np.nan,
                    "null_q975": float(np.quantile(nr, 0.975)) if t > 0 else np.nan,
                    "p_value": float((1 + np.sum(nr >= obs)) / (1 + draws)) if t > 0 else np.nan,
                    "energy": float(t),
                    "draws": draws,
                    "seed": seed,
                }
            )
    return rows


def null_shares(per_group: np.ndarray, k: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Energy shares of ``draws`` uniform random k-subsets of the H channels, for every group and component."""
    G, H, C = per_group.shape
    flat = per_group.transpose(1, 0, 2).reshape(H, G * C)
    totals = flat.sum(axis=0)
    out = np.empty((draws, G * C))
    for start in range(0, draws, CHUNK_DRAWS):
        b = min(CHUNK_DRAWS, draws - start)
        picks = np.argpartition(rng.random((b, H)), k - 1, axis=1)[:, :k]  # k distinct channels, uniformly
        ind = np.zeros((b, H))
        np.put_along_axis(ind, picks, 1.0, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start : start + b] = (ind @ flat) / totals
    return out.reshape(draws, G, C)


def store_energies(path: Path) -> tuple[np.ndarray, list[dict]]:
    """(matrices, H, 3) energies and each matrix's record (layer, module, expert, side), from a finished
    store's ``channels/`` arrays alone (no checkpoint)."""
    arrays, attrs = StoredTransition(Path(path)).read_group("channels")
    sides = attrs["sides"]
    energies, records = [], []
    layers = arrays["layer"].tolist()
    for key, mods, experts in (
        ("energy", attrs["modules"], [None]),
        ("expert_energy", attrs["expert_modules"], arrays.get("expert", np.array([])).tolist()),
    ):
        if key not in arrays:
            continue
        grid = arrays[key] if key == "expert_energy" else arrays[key][:, :, None]
        for li, layer in enumerate(layers):
            for mi, mod in enumerate(mods):
                for ei, ex in enumerate(experts):
                    e = grid[li, mi, ei]
                    if np.isnan(e).all():  # no such matrix in this layer
                        continue
                    energies.append(e)
                    records.append({"layer": layer, "module": mod, "expert": ex, "side": sides[mod]})
    if not records:
        raise StoreError(f"store {path} has no per-channel energies")
    return np.stack(energies), records
