"""Every shipped config validates, and its first line says how to run it."""

from __future__ import annotations

from pathlib import Path

import pytest

from grrr_stream.config import load_config

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def test_there_are_configs():
    assert CONFIGS


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_validates(path):
    assert path.read_text().startswith("# Run:")
    cfg = load_config(path)
    assert cfg.base and cfg.post and cfg.store
