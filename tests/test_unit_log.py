"""A sweep unit's third-party output (Python warnings, fd-level writes from C++ or child processes) goes to its
log file, not the terminal; this package's own progress lines and a failed unit's error still reach the user."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import warnings
from pathlib import Path

from grrr_stream.config import TrackingConfig
from grrr_stream.progress import Progress
from grrr_stream.sweep.display import Display
from grrr_stream.sweep.kinds import KINDS
from grrr_stream.sweep.kinds.generate import GenerateParams
from grrr_stream.sweep.runners import RunContext, run_unit
from grrr_stream.sweep.units import Unit
from grrr_stream.sweep.workdir import Workdir
from grrr_stream.unit_log import console, unit_log


def _noise() -> None:
    """What vLLM does: a Python FutureWarning, a C++-style write to fd 2, a child process's stdout and stderr."""
    # what warnings.showwarning writes (pytest records warnings.warn in-process instead of printing them)
    sys.stderr.write(warnings.formatwarning("`foo` is deprecated", FutureWarning, __file__, 1))
    print("Loading safetensors checkpoint shards: 100%")
    os.write(2, b"NUMA node(s) seen by the C++ side\n")
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, warnings; print('child out'); "
            "print('child NUMA err', file=sys.stderr); warnings.warn('child says', FutureWarning)",
        ],
        check=True,
    )


def test_third_party_output_goes_to_the_log_and_own_lines_to_the_terminal(tmp_path, capfd):
    log = tmp_path / "logs" / "u.log"
    with unit_log(log):
        _noise()
        Progress(2).message("[own] matrix 1 of 2")
    after = "printed after the unit"
    print(after)
    out, err = capfd.readouterr()
    text = log.read_text()
    for said in (
        "FutureWarning: `foo`",
        "Loading safetensors",
        "NUMA node(s)",
        "child out",
        "child NUMA err",
        "FutureWarning: child says",
    ):
        assert said in text and said not in out + err
    assert "[own] matrix 1 of 2" in err and "[own]" not in text  # the package's own progress stays on the terminal
    assert after in out and after not in text  # descriptors restored after the unit
    assert console() is sys.stderr


def test_verbose_copies_to_the_terminal_too(tmp_path, capfd):
    log = tmp_path / "v.log"
    with unit_log(log, verbose=True):
        _noise()
    out, err = capfd.readouterr()
    text = log.read_text()
    for said in ("FutureWarning", "NUMA node(s)", "child out", "child NUMA err"):
        assert said in text and said in out + err


def _unit(tmp_path: Path) -> Unit:
    params = GenerateParams(seed=0, quick=True, chain_version=1)
    return Unit.of("generate/tinychain", "train the tiny chain", params, lambda k: tmp_path / "out" / k)


def test_failed_unit_names_its_log_and_the_error_reaches_the_user(tmp_path, capfd, monkeypatch):
    def failing(u, ctx):
        _noise()
        raise ValueError("the engine died")

    monkeypatch.setitem(KINDS, "generate", dataclasses.replace(KINDS["generate"], run=failing))
    ctx = RunContext(str(tmp_path), TrackingConfig(enabled=False), progress=True, device="cpu", threads=None)
    u = _unit(tmp_path)
    rec = run_unit(u, ctx)
    log = Workdir(tmp_path).log(u.id)
    assert rec["status"] == "failed" and str(log) in rec["error"] and "the engine died" in rec["error"]
    text = log.read_text()
    assert "NUMA node(s)" in text and "Traceback" in text and "ValueError: the engine died" in text
    display = Display(1, 0, True, sys.stderr)
    display.end(u, rec, [])
    out, err = capfd.readouterr()
    assert "FAILED generate/tinychain" in err and str(log) in err and "the engine died" in err
    assert "NUMA" not in out + err and "FutureWarning" not in out + err


def test_a_quiet_unit_leaves_no_log(tmp_path, capfd):
    with unit_log(tmp_path / "q.log"):
        pass
    assert not (tmp_path / "q.log").exists()
