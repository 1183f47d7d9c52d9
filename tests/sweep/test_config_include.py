"""A sweep config's ``include``: the included file's values under the including file's, chains merged by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grrr_stream.errors import ConfigError
from grrr_stream.sweep.config import load_sweep_config

BASE = {
    "name": "base",
    "workdir": "w",
    "chains": [
        {
            "name": "a",
            "base": {"id": "a0", "source": "tinychain:base"},
            "models": [{"id": "a1", "source": "tinychain:sft", "method": "SFT"}],
        },
        {"name": "b", "base": {"id": "b0", "source": "tinychain:base"}},
    ],
    "statistics": {"resamples": 500, "null_draws": 600},
    "evaluation": {"benchmarks": ["arith"], "bench_dir": "tinychain", "engine": {"max_new_tokens": 32}},
}


def _write(path: Path, values: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def test_include_merges_sections_key_by_key_and_chains_by_name(tmp_path):
    _write(tmp_path / "configs" / "base.yaml", BASE)
    top = _write(
        tmp_path / "configs" / "more" / "top.yaml",
        {
            "include": "../base.yaml",  # relative to the including file, not to the working directory
            "name": "top",
            "chains": [
                {"name": "a", "models": [{"id": "a2", "source": "tinychain:rl", "parent": "a1", "method": "RL"}]},
                {"name": "c", "base": {"id": "c0", "source": "tinychain:base"}},
            ],
            "statistics": {"resamples": 700},
            "evaluation": {"engine": {"max_new_tokens": 16}},
        },
    )
    cfg = load_sweep_config(top)
    assert cfg.name == "top" and str(cfg.workdir) == "w"
    assert [(c.name, [m.id for m in c.models]) for c in cfg.chains] == [("a", ["a1", "a2"]), ("b", []), ("c", [])]
    assert cfg.chains[0].base.id == "a0" and cfg.chains[0].models[1].parent == "a1"
    assert (cfg.statistics.resamples, cfg.statistics.null_draws) == (700, 600)  # one key replaced, the other kept
    assert cfg.evaluation.benchmarks == ["arith"] and cfg.evaluation.engine.max_new_tokens == 16
    # the included config itself is unchanged by being included
    assert [m.id for m in load_sweep_config(tmp_path / "configs" / "base.yaml").chains[0].models] == ["a1"]


def test_include_refuses_a_cycle_a_missing_file_and_a_chain_entry_that_redefines_an_included_chain(tmp_path):
    _write(tmp_path / "x.yaml", {**BASE, "include": "y.yaml"})
    _write(tmp_path / "y.yaml", {"include": "x.yaml"})
    with pytest.raises(ConfigError, match="include cycle"):
        load_sweep_config(tmp_path / "x.yaml")
    _write(tmp_path / "gone.yaml", {"include": "nowhere.yaml"})
    with pytest.raises(ConfigError, match="nowhere.yaml does not exist"):
        load_sweep_config(tmp_path / "gone.yaml")
    _write(tmp_path / "base.yaml", BASE)
    _write(
        tmp_path / "rebase.yaml",
        {"include": "base.yaml", "chains": [{"name": "a", "base": {"id": "z", "source": "tinychain:base"}}]},
    )
    with pytest.raises(ConfigError, match="chain 'a' is in the included config.*got base"):
        load_sweep_config(tmp_path / "rebase.yaml")
    _write(tmp_path / "two.yaml", {"include": ["base.yaml", "x.yaml"]})
    with pytest.raises(ConfigError, match="include must be the path of one sweep YAML"):
        load_sweep_config(tmp_path / "two.yaml")
