"""What a store's manifest says of its transition for people: its label. Light on purpose (no torch, no zarr), so
that MLflow's run names and the statistics' labels read it from one place."""

from __future__ import annotations

from pathlib import Path


def transition_label(manifest: dict, arrow: str = " → ") -> str:
    """The label the decomposition was given (a sweep gives its two model ids, "base1 → sft1"), else the two
    models' folder names, "base → sft"; joined by ``arrow``."""
    given = manifest.get("label")
    if isinstance(given, str) and given:
        return given.replace(" → ", arrow)
    return f"{Path(manifest['base']).name}{arrow}{Path(manifest['post']).name}"
