"""`sweep --dry-run` names the local checkpoints decompose would refuse (a FIFO shard, a truncated header, a
missing folder) with decompose's own message, instead of "disk: known once its checkpoints are here"."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from grrr_stream.cli import entry as cli
from grrr_stream.config import DecomposeConfig
from grrr_stream.decompose.run import run_transition
from grrr_stream.errors import GrrrError
from grrr_stream.fixtures.synthetic import TINY, write_model


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dry_run_sources")
    write_model(root / "base", TINY, family="qwen2", dtype="float32", seed=0)
    write_model(root / "good", TINY, family="qwen2", dtype="float32", seed=1)
    shard = root / "base" / "model.safetensors"
    for name in ("fifo", "truncated"):
        (root / name).mkdir()
        shutil.copy(root / "base" / "config.json", root / name)
    os.mkfifo(root / "fifo" / "model.safetensors")
    (root / "truncated" / "model.safetensors").write_bytes(shard.read_bytes()[:40])  # header cut short
    return {
        "base": root / "base",
        "good": root / "good",
        "fifo": root / "fifo",
        "truncated": root / "truncated",
        "missing": root / "missing",
    }


def _decompose_error(base: Path, post: Path, tmp_path: Path) -> str:
    """What the decompose command itself says for this pair (run, not predicted)."""
    cfg = DecomposeConfig(
        base=str(base), post=str(post), store=tmp_path / "s", device="cpu", progress=False, tracking={"enabled": False}
    )
    with pytest.raises(GrrrError) as e:
        run_transition(cfg)
    return str(e.value)


def test_dry_run_names_broken_local_sources_as_decompose_does(sources, tmp_path, capsys):
    models = [{"id": k, "source": str(sources[k])} for k in ("good", "fifo", "truncated", "missing")]
    cfg = {
        "name": "t",
        "workdir": str(tmp_path / "w"),
        "chains": [{"name": "c", "base": {"id": "base", "source": str(sources["base"])}, "models": models}],
        "decomposition": {"device": "cpu"},
        "evaluation": {"enabled": False},
        "tracking": {"enabled": False},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(cfg))
    assert cli.main(["sweep", str(tmp_path / "s.yaml"), "--dry-run"]) == 0  # the rest of the sweep can run
    out = capsys.readouterr().out
    assert "3 local checkpoint(s) cannot be read" in out and "known only once" not in out
    for name, words in (("fifo", "is a FIFO"), ("truncated", "is truncated"), ("missing", "does not exist")):
        said = _decompose_error(sources["base"], sources[name], tmp_path / name)
        assert words in said
        assert f"  {name}: {said}\n" in out  # decompose's own message, word for word
        line = next(x for x in out.splitlines() if f"stores/base-to-{name}-" in x)
        assert f"[cannot run: {name} cannot be read, see below]" in line and "known once" not in line
    good = next(x for x in out.splitlines() if "stores/base-to-good-" in x)
    assert "[disk: " in good and "cannot" not in good
    assert not (tmp_path / "w").exists()
