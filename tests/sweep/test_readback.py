"""What a sweep reads back is checked before it is used: ``grrr-stream report`` on a workdir whose saved config or a
unit record is valid JSON of another shape, or whose finished units rest on a checkpoint that cannot be read now,
refuses in one line naming the file (exit status 2, no traceback) and leaves the page as it was."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grrr_stream.fixtures.synthetic import TINY, Update, write_model
from grrr_stream.sweep import Records, plan_sweep, run_sweep, sweep_status
from grrr_stream.sweep.config import SweepConfig

SFT = Update(r_delta=2e-2, plant=(0.25, 0.45, 0.30))


def _config(models: Path, workdir: Path) -> dict:
    return {
        "name": "readback",
        "workdir": str(workdir),
        "chains": [
            {
                "name": "syn",
                "base": {"id": "base", "source": str(models / "base")},
                "models": [{"id": "sft", "source": str(models / "sft"), "method": "SFT"}],
            }
        ],
        "decomposition": {"device": "cpu"},
        "statistics": {"enabled": False},
        "variants": {"names": ["base", "full"], "transitions": "cumulative", "write_folders": False},
        "evaluation": {"enabled": False},
        "tracking": {"enabled": False},
        "progress": False,
    }


@pytest.fixture
def copy(tmp_path):
    """A finished base → sft sweep (decomposition and two variants); keys hold the checkpoints' paths, so each test
    runs its own."""
    for name, updates in {"base": (), "sft": (SFT,)}.items():
        write_model(tmp_path / "models" / name, TINY, family="qwen2", dtype="float32", seed=0, updates=updates)
    cfg = SweepConfig.model_validate(_config(tmp_path / "models", tmp_path / "w"))
    assert run_sweep(plan_sweep(cfg), progress=False).ok
    return tmp_path, cfg


def _report(workdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grrr_stream.cli", "report", str(workdir)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _refused(proc: subprocess.CompletedProcess, *names: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
    assert lines[0].startswith("grrr-stream: error:") and len(lines) <= 10, proc.stderr  # one message
    for n in names:
        assert n in proc.stderr, proc.stderr


@pytest.mark.parametrize("content", ["[1, 2]", '{"name": 5}'])
def test_a_saved_config_of_another_shape_is_refused_naming_it(copy, content):
    root, _ = copy
    saved = root / "w" / "report" / "config.json"
    saved.write_text(content)
    page = (root / "w" / "report" / "index.html").read_bytes()
    _refused(_report(root / "w"), str(saved))
    assert (root / "w" / "report" / "index.html").read_bytes() == page


@pytest.mark.parametrize("content", ["[1]", '{"key": 5, "status": "done"}'])
def test_a_unit_record_of_another_shape_is_refused_by_report_and_redone_by_the_sweep(copy, content):
    root, cfg = copy
    plan = plan_sweep(cfg)
    unit = plan.units[0]
    path = Records(plan.workdir).path(unit)
    path.write_text(content)
    page = (root / "w" / "report" / "index.html").read_bytes()
    _refused(_report(root / "w"), str(path))
    assert (root / "w" / "report" / "index.html").read_bytes() == page
    assert Records(plan.workdir).read(unit) is None  # the sweep sees it as not done: it redoes the unit
    again = run_sweep(plan_sweep(cfg), progress=False)
    assert again.ok and unit.id in again.ran
    assert Records(plan.workdir).read(unit)["status"] == "done"
    assert _report(root / "w").returncode == 0


def test_a_vanished_source_checkpoint_never_turns_a_finished_page_pending(copy):
    root, _ = copy
    page = (root / "w" / "report" / "index.html").read_bytes()
    shutil.rmtree(root / "models" / "sft")
    _refused(_report(root / "w"), "sft")
    assert (root / "w" / "report" / "index.html").read_bytes() == page


def _tiny_config(workdir: Path, variants: list[str]) -> SweepConfig:
    return SweepConfig.model_validate(
        {
            "name": "tiny-readback",
            "workdir": str(workdir),
            "chains": [
                {
                    "name": "tiny",
                    "base": {"id": "base", "source": "tinychain:base"},
                    "models": [{"id": "sft", "source": "tinychain:sft", "method": "SFT"}],
                }
            ],
            "decomposition": {"device": "cpu"},
            "statistics": {"enabled": False},
            "variants": {"names": variants, "transitions": "cumulative", "write_folders": True},
            "evaluation": {"enabled": False},
            "tracking": {"enabled": False},
            "progress": False,
        }
    )


def test_a_float_changed_in_the_copied_tiny_chain_is_found_and_the_chain_written_again(tmp_path):
    """The units downstream of the tiny chain are keyed by the unit that writes it, not by its bytes: a float
    changed in place after the sweep makes that unit damaged; the rerun writes the chain again (the bytes the
    results rest on), and a variant added afterwards is built from those, not from the changed weights."""
    import hashlib

    from grrr_stream.fixtures.tinychain import shipped_available

    if not shipped_available(0, False):
        pytest.skip("this install ships no tiny chain (training it takes minutes)")
    cfg = _tiny_config(tmp_path / "w", ["base", "full"])
    assert run_sweep(plan_sweep(cfg), progress=False).ok
    model = next((tmp_path / "w" / "tinychain").glob("*/sft/model.safetensors"))
    original = hashlib.sha256(model.read_bytes()).hexdigest()
    blob = bytearray(model.read_bytes())
    blob[-64] ^= 0x40  # a bit of a float in the last tensor
    model.write_bytes(bytes(blob))
    states = {r["unit"]: r["state"] for r in sweep_status(plan_sweep(cfg))}
    assert states["generate/tinychain"] == "damaged"
    again = run_sweep(plan_sweep(_tiny_config(tmp_path / "w", ["base", "full", "diag"])), progress=False)
    assert again.ok and "generate/tinychain" in again.ran and any(u.startswith("variant/") for u in again.ran)
    assert hashlib.sha256(model.read_bytes()).hexdigest() == original
    # a recorded file list the chain written again does not match: refused, naming the file
    files = model.parents[1] / "files.json"
    data = json.loads(files.read_text())
    rel = model.relative_to(model.parents[1]).as_posix()
    data["files"][rel][1] = "0" * 64
    files.write_text(json.dumps(data))
    failed = run_sweep(plan_sweep(cfg), progress=False)
    assert not failed.ok
    rec = Records(failed.plan.workdir).read(failed.plan.unit("generate/tinychain"))
    assert rec["status"] == "failed" and rel in rec["error"] and "GrrrError" in rec["error"]


def test_a_finished_units_file_of_another_shape_is_refused_naming_its_folder(copy):
    """The report rows of a kind are read back from what its finished units wrote: a store summary that is valid
    JSON of another shape is refused, naming the unit's folder, instead of a TypeError."""
    root, cfg = copy
    unit = next(u for u in plan_sweep(cfg).units if u.kind == "decompose")
    (Path(unit.out) / "summary.json").write_text("[1]")
    page = (root / "w" / "report" / "index.html").read_bytes()
    _refused(_report(root / "w"), str(Path(unit.out)))
    assert (root / "w" / "report" / "index.html").read_bytes() == page
