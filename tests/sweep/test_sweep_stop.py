"""A sweep stopped with SIGTERM (``kill``, a batch system's time limit) says that it was stopped and prints the
exact command that resumes it, which a shell runs as printed (issue 47). One subprocess sweep over synthetic
checkpoints, every wait bounded; the handler itself in-process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from grrr_stream.fixtures.synthetic import TINY, Update, write_model

DEADLINE_S = 240


def _running(workdir: Path) -> bool:
    """Whether some unit has started (its record says running or done)."""
    for p in (workdir / ".sweep" / "units").glob("*.json"):
        try:
            if json.loads(p.read_text())["status"] in ("running", "done"):
                return True
        except (ValueError, KeyError, OSError):
            pass
    return False


def test_sigterm_says_stopped_and_prints_the_command_that_resumes(tmp_path):
    models = tmp_path / "models dir é"  # the resume command quotes what needs quoting
    siblings = [f"s{i}" for i in range(3)]
    for i, name in enumerate(["base", *siblings]):
        updates = () if name == "base" else (Update(r_delta=2e-2, seed=i),)
        write_model(models / name, TINY, family="qwen2", dtype="float32", seed=0, updates=updates)
    cfg = {
        "name": "stopped",
        "workdir": "work",  # relative: the printed command must run from this folder
        "chains": [
            {
                "name": "syn",
                "base": {"id": "base", "source": str(models / "base")},
                "models": [{"id": s, "source": str(models / s), "method": "SFT"} for s in siblings],
            }
        ],
        "decomposition": {"device": "cpu"},
        "statistics": {"enabled": False},
        "variants": {"enabled": False},
        "evaluation": {"enabled": False},
        "tracking": {"enabled": False},
        "progress": False,
    }
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "grrr_stream.cli", "sweep", "sweep.yaml", "--no-track"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while proc.poll() is None and not _running(tmp_path / "work") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, "the sweep ended before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("grrr-stream: stopped by SIGTERM; what finished is kept. Resume with: cd "), last
    command = last.split("Resume with: ", 1)[1]
    assert command.endswith("-m grrr_stream.cli sweep sweep.yaml --no-track"), command

    # the command as printed, run by a shell from elsewhere, finds the config and the workdir (a dry run: the
    # full rerun's resume is tests/sweep/test_sweep.py's kill -9 test)
    again = subprocess.run(
        f"{command} --dry-run", shell=True, cwd="/", env=env, capture_output=True, text=True, timeout=DEADLINE_S
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"sweep stopped: 3 units in {tmp_path / 'work'}" in again.stdout, again.stdout[-3000:]


def test_the_handler_raises_stopped_only_while_a_command_runs(monkeypatch, tmp_path):
    from grrr_stream.cli.entry import Stopped, _interrupted, resume_command, stopped_by_sigterm

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Stopped):
        with stopped_by_sigterm():
            os.kill(os.getpid(), signal.SIGTERM)  # delivered to this (the main) thread at once
            time.sleep(5)  # never reached
    assert signal.getsignal(signal.SIGTERM) is before  # restored for whatever runs next in this process
    monkeypatch.chdir(tmp_path)
    words = ["sweep", "my config's.yaml", "--workdir", "a b"]
    assert resume_command(words).startswith(f"cd {tmp_path} && ")
    assert resume_command(words).endswith(""" -m grrr_stream.cli sweep 'my config'"'"'s.yaml' --workdir 'a b'""")
    assert _interrupted(Stopped("SIGTERM"), words) == 143 and _interrupted(KeyboardInterrupt(), words) == 130
