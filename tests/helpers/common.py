"""Helpers most test folders share: the repository root, a decomposition config without tracking or
progress, and a snapshot of a store's arrays to compare two runs."""

from __future__ import annotations

from pathlib import Path

from grrr_stream.config import build_config

ROOT = Path(__file__).resolve().parents[2]


def store_snapshot(store: Path) -> dict:
    """Every array and every matrix's attributes of a store (plus metrics.csv when present)."""
    import json

    import zarr

    root = zarr.open_group(str(store), mode="r")
    out = {}
    for name, g in root["matrices"].groups():
        for key, arr in g.arrays():
            out[f"{name}/{key}"] = arr[...]
        out[f"{name}/attrs"] = json.dumps(dict(g.attrs), sort_keys=True)
    if (Path(store) / "metrics.csv").is_file():
        out["metrics.csv"] = (Path(store) / "metrics.csv").read_text()
    return out


def no_track_config(**values):
    values.setdefault("tracking", {"enabled": False})
    values.setdefault("progress", False)
    return build_config(values)


class SteppingClock:
    """A stand-in for time.monotonic in grrr_stream.progress: 11 s more at every call, past the reporter's 10 s
    between lines off a terminal, so that every update prints a line and the ETA is deterministic."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 11.0
        return self.now
