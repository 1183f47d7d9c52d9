"""A new analysis and a new sweep kind are each one module plus their lines in their registry: planted in a copy
of the package (nothing else of it changed), a sweep run from that copy shows the analysis's pooled column and
the kind's headline column on the console, in transitions.csv, on the report page and in MLflow, with values
computed here from the checkpoints (float64 numpy)."""

from __future__ import annotations

import filecmp
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import grrr_stream
from grrr_stream.fixtures.synthetic import TINY, Update, write_model
from grrr_stream.sweep.rows import read_rows

PKG = Path(grrr_stream.__file__).resolve().parent

ANALYSIS_MODULE = '''"""Planted: the share of W1's entries above zero, pooled over the entries of a scope."""

from ...columns import CONSOLE, DEFAULT_SHOWN, HEADLINE, POOLED, Column
from .base import Analysis

POSITIVE = Column(
    "frac_positive",
    "entries of W1 above zero",
    aggregate=POOLED,
    short="positive",
    shown=DEFAULT_SHOWN | {CONSOLE, HEADLINE},
)


def _read(opts, matrix, w0, w1):
    return {POSITIVE.name: int((w1 > 0).sum()) / w1.numel()}


ANALYSIS = Analysis("positive", None, {"split": lambda state, opts, prepared: prepared}, (POSITIVE,), read=_read)
'''

KIND_MODULE = '''"""Planted: per transition, ‖ΔW‖_F over its decomposed matrices, from its store's metrics.csv."""

import json
import math
from pathlib import Path
from typing import ClassVar

from ...columns import CONSOLE, HEADLINE, REPORT, TRANSITIONS, VALUE, Column
from ..rows import read_rows
from ..units import Unit, UnitParams
from .base import Kind
from .decompose import METRICS, keys, store_of, unit_id

NAME = "norm"
NORM = Column(
    "delta_norm",
    "‖ΔW‖_F over the decomposed matrices",
    aggregate=VALUE,
    short="‖ΔW‖",
    fmt=".6g",
    shown=frozenset({TRANSITIONS, REPORT, CONSOLE, HEADLINE}),
)


class NormParams(UnitParams):
    kind: ClassVar[str] = NAME
    transition: str
    store_key: str

    def key_content(self) -> dict:
        return {"transition": self.transition, "store": self.store_key}


def plan(ctx):
    units = [
        Unit.of(f"{NAME}/{t}", f"norm of {t}", NormParams(transition=t, store_key=k), ctx.keyed(NAME, t), (unit_id(t),))
        for t, k in keys(ctx).items()
    ]
    return units, []


def run(u, ctx):
    rows = read_rows(store_of(ctx, u.params.transition) / METRICS)
    value = math.sqrt(sum(float(r["delta_fro"]) ** 2 for r in rows))
    Path(u.out).mkdir(parents=True, exist_ok=True)
    (Path(u.out) / "norm.json").write_text(json.dumps({NORM.name: value}))
    return {NORM.name: value}


KIND = Kind(name=NAME, params=NormParams, plan=plan, run=run, marker="norm.json", columns=(NORM,))
'''


def _plant(root: Path) -> Path:
    """A copy of the package with the analysis and the kind planted: their modules, and their lines in the two
    registries (the name in the import list, the record in the tuple)."""
    copy = root / "grrr_stream"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("__pycache__", "tinychain_seed1", "tinychain_seed2"))
    (copy / "geometry" / "analyses" / "planted.py").write_text(ANALYSIS_MODULE)
    (copy / "sweep" / "kinds" / "norm.py").write_text(KIND_MODULE)
    for registry, anchor_import, anchor_record, name, record in (
        (
            "geometry/analyses/__init__.py",
            "    degenerate_share,\n",
            "    sparsity.ANALYSIS,\n",
            "planted",
            "planted.ANALYSIS",
        ),
        ("sweep/kinds/__init__.py", "    generate,\n", "        decompose.KIND,\n", "norm", "norm.KIND"),
    ):
        path = copy / registry
        text = path.read_text()
        assert text.count(anchor_import) == 1 and text.count(anchor_record) == 1, registry
        indent = anchor_record[: len(anchor_record) - len(anchor_record.lstrip())]
        text = text.replace(anchor_import, anchor_import + f"    {name},\n")
        text = text.replace(anchor_record, anchor_record + f"{indent}{record},\n")
        path.write_text(text)
    return copy


def _changed(original: Path, copy: Path) -> tuple[list[str], list[str]]:
    """(files only in the copy, files that differ), relative to the package."""
    added, differ = [], []

    def walk(c: filecmp.dircmp, rel: str) -> None:
        added.extend(f"{rel}{n}" for n in c.right_only if n != "__pycache__")
        differ.extend(f"{rel}{n}" for n in c.diff_files)
        for n, sub in c.subdirs.items():
            if n != "__pycache__":
                walk(sub, f"{rel}{n}/")

    walk(filecmp.dircmp(original, copy, ignore=["__pycache__", "tinychain_seed1", "tinychain_seed2"]), "")
    return sorted(added), sorted(differ)


@pytest.mark.timeout(600)
def test_a_planted_analysis_and_kind_reach_every_place_their_columns_name(tmp_path):
    copy = _plant(tmp_path / "src")
    added, differ = _changed(PKG, copy)
    assert added == ["geometry/analyses/planted.py", "sweep/kinds/norm.py"]
    assert differ == ["geometry/analyses/__init__.py", "sweep/kinds/__init__.py"]

    models = tmp_path / "models"
    base = write_model(models / "base", TINY, family="qwen2", dtype="float32", seed=0)
    post = write_model(models / "post", TINY, family="qwen2", dtype="float32", seed=0, updates=(Update(r_delta=2e-2),))
    cfg = {
        "name": "planted",
        "workdir": str(tmp_path / "work"),
        "chains": [
            {
                "name": "c",
                "base": {"id": "base", "source": str(base)},
                "models": [{"id": "post", "source": str(post), "method": "SFT"}],
            }
        ],
        "decomposition": {"device": "cpu"},
        "statistics": {"resamples": 200, "null_draws": 200},
        "variants": {"enabled": False},
        "evaluation": {"enabled": False},
        "progress": False,
    }
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(cfg))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "PYTHONPATH": str(copy.parent)}
    done = subprocess.run(
        [sys.executable, "-m", "grrr_stream.cli", "sweep", str(tmp_path / "sweep.yaml"), "--tracking-uri", uri],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (
        f"{copy}"
        in subprocess.run(
            [sys.executable, "-c", "import grrr_stream; print(grrr_stream.__file__)"],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
        ).stdout
    )

    # the expected values, from the checkpoints
    from safetensors.numpy import load_file

    store = next((tmp_path / "work" / "stores").glob("base-to-post*"))
    names = [r["name"] for r in read_rows(store / "metrics.csv")]
    w0, w1 = load_file(str(base / "model.safetensors")), load_file(str(post / "model.safetensors"))
    positive = sum(int((w1[n] > 0).sum()) for n in names) / sum(w1[n].size for n in names)
    norm = math.sqrt(sum(float(np.sum((w1[n].astype(np.float64) - w0[n].astype(np.float64)) ** 2)) for n in names))

    row = read_rows(tmp_path / "work" / "report" / "transitions.csv")[0]
    assert row["frac_positive_pooled"] == positive  # Σ/Σ over entries, exact
    assert {"frac_positive_min", "frac_positive_median", "frac_positive_max"} <= set(row)
    assert "frac_positive_mean" not in row
    assert row["delta_norm"] == pytest.approx(norm, rel=1e-6)

    console = done.stdout
    assert f"positive {positive:.3f}" in console and f"‖ΔW‖ {norm:.6g}"[:10] in console

    page = (tmp_path / "work" / "report" / "index.html").read_text()
    assert "entries of W1 above zero (pooled)" in page and "‖ΔW‖_F over the decomposed matrices" in page

    from mlflow import MlflowClient

    runs = MlflowClient(uri).search_runs(
        [e.experiment_id for e in MlflowClient(uri).search_experiments()], "tags.`grrr.kind` = 'transition'"
    )
    assert len(runs) == 1
    metrics = runs[0].data.metrics
    assert metrics["frac_positive"] == positive and metrics["delta_norm"] == pytest.approx(norm, rel=1e-6)
    assert metrics["f_diag"] == row["f_diag_mean"]
