"""The user-facing tools (tools/simulate.py and its subcommands, simulate_rounds.py, chain_regime.py,
train_tiny_chain.py) refuse absurd or missing arguments as the CLI does: one line on stderr naming the argument,
exit status 2, no traceback, before any work; and train_tiny_chain.py writes only into a folder that is new, empty
or its own, leaving a user's files alone. Nothing here trains a chain."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"

pytestmark = pytest.mark.timeout(120)

HUGE = str(10**20)


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, f"tools/{tool}.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=100
    )


def _refused(done: subprocess.CompletedProcess, needle: str) -> str:
    """The one error line of a refusal (argparse's usage lines may come before it)."""
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    errors = [line for line in lines if ": error: " in line]
    assert len(errors) == 1 and lines[-1] == errors[0], done.stderr
    assert all(line.startswith(("usage:", " ")) for line in lines[:-1]), done.stderr
    assert needle in errors[0], errors[0]
    return errors[0]


@pytest.fixture()
def places(tmp_path):
    (tmp_path / "a_file").write_text("not a folder\n")
    (tmp_path / "empty").mkdir()
    return tmp_path


# (tool, arguments, what the error line names); {tmp} is a folder holding a_file and empty/
CASES = [
    ("simulate", ["designs", "--seed", HUGE], "--seed"),
    ("simulate", ["designs", "--chunk", "0"], "--chunk"),
    ("simulate", ["designs", "--precisions", "2,nan"], "--precisions"),
    ("simulate", ["designs", "--json", "{tmp}/missing/out.json"], "--json"),
    ("simulate", ["betting", "--paths", "-1"], "--paths"),
    ("simulate", ["allocation", "--disagreement", "1.5"], "--disagreement"),
    ("simulate", ["verdicts", "--noise", "inf"], "--noise"),
    ("simulate_rounds", ["--studies", "0"], "--studies"),
    ("simulate_rounds", ["--lookahead", "nan"], "--lookahead"),
    ("simulate_rounds", ["--replay", "{tmp}/a_file"], "--replay"),
    ("simulate_rounds", ["--replay", "{tmp}/empty"], "empty/evaluation.json"),  # found at run time, still one line
    ("chain_regime", ["{tmp}/missing"], "argument chains"),
    ("chain_regime", ["{tmp}/empty"], "not a tiny chain's folder"),
    ("train_tiny_chain", ["--out", "{tmp}/x", "--seed", HUGE], "--seed: must be an integer in 0..4294967295"),
    ("train_tiny_chain", ["--out", "{tmp}/a_file"], "--out"),
    ("train_tiny_chain", ["--out", "{tmp}/a_file/sub"], "--out"),
    ("train_tiny_chain", [], "--out"),  # missing
]


@pytest.mark.parametrize("tool, args, needle", CASES, ids=[f"{t} {' '.join(a)}" for t, a, _ in CASES])
def test_a_bad_argument_is_one_line_and_exit_status_2(places, tool, args, needle):
    _refused(_run(tool, *(a.replace("{tmp}", str(places)) for a in args)), needle)


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def test_train_tiny_chain_refuses_a_folder_of_the_users_and_touches_nothing(tmp_path):
    mine = tmp_path / "mine"
    (mine / "benchmarks").mkdir(parents=True)
    (mine / "base").mkdir()
    (mine / "notes.txt").write_text("mine\n")
    (mine / "benchmarks" / "keep.jsonl").write_text('{"problem": "mine"}\n')
    (mine / "base" / "weights.txt").write_text("mine too\n")
    (mine / "chain.json").write_text('{"not": "a chain"}\n')  # a chain.json that is not the tool's record
    before = _snapshot(mine)
    line = _refused(_run("train_tiny_chain", "--out", str(mine), "--quiet"), str(mine))
    assert "pick an empty or new folder" in line
    assert _snapshot(mine) == before


def test_train_tiny_chain_writes_into_a_new_folder_and_again_into_its_own(tmp_path):
    """The shipped chain is copied (about a second, no training); a second run accepts the folder it wrote and
    leaves a file of the user's beside the chain alone."""
    out = tmp_path / "new" / "chain"
    done = _run("train_tiny_chain", "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "chain.json").read_text())["origin"] == "shipped"
    assert not (out / ".train_tiny_chain").exists()  # the mark goes once the chain is complete
    (out / "notes.txt").write_text("mine\n")
    done = _run("train_tiny_chain", "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert (out / "notes.txt").read_text() == "mine\n"


@pytest.fixture()
def train(monkeypatch):
    """tools/train_tiny_chain.py as a module (tool_args beside it importable)."""
    import importlib.util

    monkeypatch.syspath_prepend(str(TOOLS))
    spec = importlib.util.spec_from_file_location("train_tiny_chain", TOOLS / "train_tiny_chain.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_folders_train_tiny_chain_takes(train, tmp_path):
    assert train.refusal(tmp_path / "new") is None
    assert train.refusal(tmp_path) is None  # empty
    (tmp_path / "notes.txt").write_text("mine\n")
    assert "pick an empty or new folder" in train.refusal(tmp_path)
    (tmp_path / train.OWNED).write_text("{}\n")  # a run of its own that was cut short
    assert train.refusal(tmp_path) is None
    (tmp_path / train.OWNED).unlink()
    record = {"version": 1, "seed": 0, "quick": False, "settings": {}}
    (tmp_path / "chain.json").write_text(json.dumps(record))
    assert train.refusal(tmp_path) is None


def test_train_tiny_chain_marks_its_folder_while_writing_and_its_checksums_omit_the_mark(train, tmp_path, monkeypatch):
    from grrr_stream.fixtures.tinychain_shipped import write_checksums

    out = tmp_path / "chain"
    seen = []

    def build(folder, **kw):  # stands in for training: writes a model file, the record and the checksums
        seen.append((folder / train.OWNED).is_file())
        (folder / "base").mkdir()
        (folder / "base" / "model.safetensors").write_bytes(b"weights")
        (folder / "chain.json").write_text("{}\n")
        write_checksums(folder)
        return {}

    monkeypatch.setattr(train, "build_chain", build)
    train.write(out, seed=7, quick=True, progress=False, retrain=True)
    assert seen == [True] and not (out / train.OWNED).exists()
    sums = (out / "SHA256SUMS").read_text()
    assert "base/model.safetensors" in sums and train.OWNED not in sums

    def killed(folder, **kw):
        (folder / "chain.json").unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "build_chain", killed)
    with pytest.raises(KeyboardInterrupt):
        train.write(out, seed=7, quick=True, progress=False, retrain=True)
    assert (out / train.OWNED).is_file() and train.refusal(out) is None  # a rerun may finish what it began


def test_the_tools_bounds_are_the_products():
    sys.path.insert(0, str(TOOLS))
    try:
        import tool_args
    finally:
        sys.path.remove(str(TOOLS))
    from grrr_stream.config import COUNT_MAX, SEED_MAX

    assert (tool_args.SEED_MAX, tool_args.COUNT_MAX) == (SEED_MAX, COUNT_MAX)
