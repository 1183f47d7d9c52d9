"""Every shipped config validates (a sweep config also plans, offline), and its first line says how to run it.
What paper.yaml and paper_extended.yaml plan: test_paper_config.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grrr_stream.config import load_config
from grrr_stream.sweep import plan_sweep
from grrr_stream.sweep.config import load_sweep_config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


def _is_sweep(path: Path) -> bool:
    data = yaml.safe_load(path.read_text()) or {}
    return "chains" in data or "include" in data  # an include is of another sweep config


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
    if path.name == "demo_adaptive.yaml":  # demo.yaml's units, and its evaluation again in the adaptive design
        designs = {u.params.options.design for u in plan.units if u.kind == "evaluate"}
        assert designs == {"fixed", "adaptive"}


def test_profiles_set_exactly_their_analyses_and_explicit_settings_win(tmp_path):
    """`decompose` with no profile is the standard one: every analysis but the exact subspace angles.
    `--profile full` adds the angles at k = 16 and 64, `--profile paper` drops exactly the four analyses beyond
    the paper, and a setting the config gives wins over its profile."""
    import yaml

    from grrr_stream.cli.entry import build_parser
    from grrr_stream.cli.transition import config_from_args

    argv = ["decompose", "--base", "b", "--post", "p", "--store", str(tmp_path / "s")]
    parser = build_parser()
    standard = config_from_args(parser.parse_args(argv))
    full = config_from_args(parser.parse_args(argv + ["--profile", "full"]))
    paper = config_from_args(parser.parse_args(argv + ["--profile", "paper"]))
    assert standard.profile == "standard" and standard.angle_edges == ()
    assert standard.band_edges == (16, 64, 256) and standard.survival_dtype == "bfloat16" and standard.channel_energy
    assert full.angle_edges == (16, 64) and full.band_edges and full.survival_dtype and full.channel_energy
    assert (paper.band_edges, paper.angle_edges, paper.survival_dtype, paper.channel_energy) == ((), (), None, False)
    fields = set(type(full).model_fields) - {"profile"}
    assert {k for k in fields if getattr(full, k) != getattr(standard, k)} == {"angle_edges", "figures"}
    assert {k for k in fields if getattr(full, k) != getattr(paper, k)} == {
        "band_edges",
        "angle_edges",
        "survival_dtype",
        "channel_energy",
        "figures",
    }
    assert full.figures and not standard.figures and not paper.figures  # the transition's figures: full only
    assert config_from_args(parser.parse_args(argv + ["--figures"])).figures
    assert not config_from_args(parser.parse_args(argv + ["--profile", "full", "--no-figures"])).figures
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"angle_edges": [32], "channel_energy": True}))
    mixed = config_from_args(parser.parse_args(argv + ["--profile", "paper", "--config", str(cfg)]))
    assert mixed.angle_edges == (32,) and mixed.channel_energy and mixed.band_edges == ()


def test_full_profile_keeps_the_result_settings_of_earlier_default_runs():
    """Stores and sweep keys made when every analysis was the default carry no 'analyses' entry; the full
    profile reproduces exactly that, the standard one says what it left out."""
    from grrr_stream.config import DecompositionSettings, result_settings

    assert "analyses" not in result_settings(DecompositionSettings(profile="full"))
    assert result_settings(DecompositionSettings())["analyses"]["angle_edges"] == []
