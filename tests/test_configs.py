"""Every shipped config validates (a sweep config also plans, offline), and its first line says how to run it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grrr_stream.config import load_config
from grrr_stream.sweep.config import load_sweep_config
from grrr_stream.sweep import plan_sweep

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def _is_sweep(path: Path) -> bool:
    return "chains" in (yaml.safe_load(path.read_text()) or {})


def test_there_are_configs():
    assert CONFIGS
    assert {"demo.yaml", "paper.yaml"} <= {p.name for p in CONFIGS if _is_sweep(p)}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_validates(path, tmp_path):
    assert path.read_text().startswith("# Run:")
    if not _is_sweep(path):
        cfg = load_config(path)
        assert cfg.base and cfg.post and cfg.store
        return
    plan = plan_sweep(load_sweep_config(path, workdir=tmp_path / "w"))  # no network, no model needed
    kinds = {u.kind for u in plan.units}
    assert {"decompose", "evaluate"} <= kinds
    if path.name in ("demo.yaml", "paper.yaml"):
        assert {"stats", "compare"} <= kinds
    assert not (tmp_path / "w").exists()  # planning writes nothing


def test_paper_config_chains_follow_the_papers_lineage():
    plan = plan_sweep(load_sweep_config(CONFIGS[0].parent / "paper.yaml"))
    t = plan.transitions
    # RL on top of distillation/SFT: incremental and cumulative transitions, and a sequential comparison
    assert t["r1-distill-1.5b-to-deepscaler-1.5b"].kind == "incremental"
    assert t["qwen25-math-1.5b-to-deepscaler-1.5b"].kind == "cumulative"
    assert t["klear-8b-sft-to-klear-8b"].kind == "incremental"
    ids = {u.id for u in plan.units}
    assert "compare/sequential/qwen3-8b-base-to-klear-8b-sft--qwen3-8b-base-to-klear-8b" in ids
    # UniReason SFT and RL both start from the base: an independent pair, not a sequence
    assert t["qwen3-14b-base-to-unireason-14b-rl"].kind == "cumulative"
    assert ("compare/independent/qwen3-14b-base-to-unireason-14b-rl--qwen3-14b-base-to-unireason-14b-think-sft"
            in ids)
    unconfirmed = [m for m, spec in plan.models.items() if not spec.confirmed]
    assert unconfirmed == ["nv-prorl-1.5b", "nv-prorl-v2-1.5b"]
