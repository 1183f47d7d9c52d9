"""Helpers most test folders share: the repository root, a tool of tools/ imported as a module, a decomposition
config without tracking or progress, and a snapshot of a store's arrays to compare two runs."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

from grrr_stream.config import build_config

ROOT = Path(__file__).resolve().parents[2]


def tool(name: str) -> ModuleType:
    """``tools/<name>.py`` imported as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def package_modules(pkg: Path) -> dict[str, Path]:
    """Every module of a package by its dotted name below it ('' for its __init__)."""
    out = {}
    for p in sorted(pkg.rglob("*.py")):
        parts = list(p.relative_to(pkg).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


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


def seeded_sweep_yaml(pair: Path, tmp_path: Path, monkeypatch) -> Path:
    """A sweep YAML over the local pair ``pair``/base → ``pair``/post (TINY models), evaluation and tracking off,
    with the calibration cache seeded at 1 MFLOP/s so that a forecast does not measure this machine."""
    import json

    import yaml

    from grrr_stream.forecast import calibrate

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("GRRR_STREAM_CACHE", str(tmp_path / "cache"))
    largest = (160, 64)  # TINY's gate/up (160×64) and down (64×160): the most flops
    rates = {"device": "seeded", "shape": list(largest), "decompose_flops_s": 1e6, "gemm_flops_s": 1e6}
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "calibration.json").write_text(
        json.dumps({calibrate._key(calibrate.device_name(), largest): {**rates, "measured_s": 1.0}})
    )
    chain = {
        "name": "c",
        "base": {"id": "base", "source": str(pair / "base")},
        "models": [{"id": "post", "source": str(pair / "post")}],
    }
    cfg = {
        "name": "t",
        "workdir": str(tmp_path / "w"),
        "chains": [chain],
        "decomposition": {"device": "cpu"},
        "evaluation": {"enabled": False},
        "tracking": {"enabled": False},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path / "s.yaml"


def results_snapshot(workdir: Path) -> dict:
    """Every result of a sweep, with the workdir path taken out so two workdirs compare equal."""
    snap = {}
    for store in sorted((workdir / "stores").iterdir()):
        for k, v in store_snapshot(store).items():
            snap[f"{store.name}/{k}"] = v
    for folder in ("stats", "comparisons"):
        for f in sorted((workdir / folder).rglob("*")):
            # per_transition_*: tracking-only subsets of summary_long.csv, named by a path hash
            if f.suffix in (".csv", ".json") and "per_transition_" not in str(f):
                # some file names carry a hash of the store path, which differs between workdirs
                name = re.sub(r"_[0-9a-f]{8}(?=[./_])", "_H", str(f.relative_to(workdir)))
                snap[name] = f.read_text().replace(str(workdir), "WORKDIR")
    for f in sorted((workdir / "variants").rglob("*.safetensors")):
        snap[str(f.relative_to(workdir))] = f.read_bytes()
    return snap


def assert_same(a: dict, b: dict) -> None:
    import numpy as np

    assert sorted(a) == sorted(b)
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert np.array_equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k
