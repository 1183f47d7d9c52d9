"""tools/simulate.py verdicts (tools/simulate_verdicts.py): the verdict box's family false-contradiction rate on
planted studies, run as a user runs it; its bad arguments end in one line and exit 2."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "simulate.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "verdicts", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.timeout(300)
def test_when_every_claim_holds_the_box_rarely_says_contradicts_at_either_structure():
    done = _run("--studies", "200")
    assert done.returncode == 0, done.stderr
    lines = re.findall(
        r"^structure (\w+): family false-contradiction rate ([\d.]+) over 200 studies", done.stdout, re.M
    )
    assert [name for name, _ in lines] == ["demo", "paper"]
    assert all(float(rate) <= 0.05 for _, rate in lines), done.stdout  # the target is ≤ 5 %, family-wise
    # a planted violation is found: f_diag 100-300× isotropic contradicts "every RL step" in every study
    assert re.search(r"power under 'f_diag 100-300× isotropic': .*rl-fdiag 1\.00", done.stdout)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--studies", "0"], "--studies must be between"),
        (["--within", "1"], "--within must be in [0, 1)"),
        (["--structures", "nope"], "--structures takes demo, paper or both"),
        (["--seed", "-1"], "--seed must be in"),
    ],
)
def test_bad_arguments_are_one_line(args, needle):
    done = _run(*args)
    assert done.returncode == 2 and needle in done.stderr and "Traceback" not in done.stderr
