"""Every shipped config validates (a sweep config also plans, offline), and its first line says how to run it.
What paper.yaml and paper_extended.yaml plan: test_paper_config.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grrr_stream.config import load_config
from grrr_stream.sweep.config import load_sweep_config
from grrr_stream.sweep import plan_sweep

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


def _is_sweep(path: Path) -> bool:
    return "chains" in (yaml.safe_load(path.read_text()) or {})


def test_there_are_configs():
    assert CONFIGS
    assert {"demo.yaml", "paper.yaml", "paper_extended.yaml"} <= {p.name for p in CONFIGS if _is_sweep(p)}


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
    if path.name in ("demo.yaml", "paper.yaml", "paper_extended.yaml"):
        assert {"stats", "compare"} <= kinds
    assert not (tmp_path / "w").exists()  # planning writes nothing


def test_profile_paper_turns_the_analyses_beyond_the_paper_off(tmp_path):
    """`decompose --profile paper` drops exactly the analyses beyond the paper; without it they are on, and a
    flag the user gives beside it still wins over nothing else (the profile only sets those four keys)."""
    from grrr_stream.cli.entry import build_parser
    from grrr_stream.cli.transition import config_from_args

    argv = ["decompose", "--base", "b", "--post", "p", "--store", str(tmp_path / "s")]
    parser = build_parser()
    full = config_from_args(parser.parse_args(argv))
    paper = config_from_args(parser.parse_args(argv + ["--profile", "paper"]))
    assert full.band_edges and full.angle_edges and full.survival_dtype and full.channel_energy
    assert (paper.band_edges, paper.angle_edges, paper.survival_dtype, paper.channel_energy) == ((), (), None, False)
    same = {k for k in type(full).model_fields if getattr(full, k) == getattr(paper, k)}
    assert set(type(full).model_fields) - same == {"band_edges", "angle_edges", "survival_dtype", "channel_energy"}
