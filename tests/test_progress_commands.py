"""The long commands show progress lines with an ETA (issue 35 §2), checked on the tiny synthetic pair: the
evaluation (per benchmark, the variant's weights streamed into the engine, the (variant, benchmark) pairs; a
stand-in engine), ``variants``, ``stats`` and ``compare`` (their Dask tasks; ``bands`` uses the same helper).
The reporter's clock is faked, 11 s more at every call (past the 10 s between lines off a terminal), so that
lines print whatever the machine's speed; what is checked is which lines come, never a timing."""

from __future__ import annotations

import re

import pytest
from helpers.common import SteppingClock
from helpers.stand_in import SETTINGS, StandInEngine, sums_transition

from grrr_stream import progress as progress_module
from grrr_stream.cli.entry import main

LINE = r"\[ *(\d+)/(\d+)\] +\d+\.\d% \| (.+) \| \d+\.\d\d s/it \| ETA (\S+)$"


@pytest.fixture(scope="module")
def transition(tmp_path_factory):
    return sums_transition(tmp_path_factory.mktemp("progress"))


@pytest.fixture()
def clock(monkeypatch):
    monkeypatch.setattr(progress_module.time, "monotonic", SteppingClock())


def _lines(err: str, label: str) -> list[re.Match]:
    """The progress lines of ``label``, each checked against the reporter's format."""
    found = [ln[len(label) :] for ln in err.splitlines() if ln.startswith(label + "[")]
    matches = [re.match(LINE, ln) for ln in found]
    assert found and all(matches), (label, err)
    return matches


def _ends(matches: list[re.Match]) -> None:
    last = matches[-1]
    assert last.group(1) == last.group(2) and last.group(4) == "0s"  # the final count, nothing left


def test_evaluation_shows_each_benchmark_the_weights_and_the_pairs(transition, tmp_path, clock, capsys):
    pytest.importorskip("math_verify", reason="grading needs math-verify (the eval extra)")
    from grrr_stream.evaluation.pipeline import EvaluationRequest, run_evaluation
    from grrr_stream.evaluation.settings import EvaluationOptions

    base, post, store, bench = transition
    logs: list[str] = []
    request = EvaluationRequest(
        store, tmp_path / "e", ["base", "full"], ["sums"], bench, EvaluationOptions(engine=SETTINGS), progress=True
    )
    run_evaluation(request, engine_factory=StandInEngine, log=logs.append)
    err = capsys.readouterr().err
    for variant in ("base", "full"):
        problems = _lines(err, f"  [evaluate {variant} / sums] ")
        _ends(problems)
        assert problems[-1].group(2) == "63" and problems[-1].group(3) == "problems"
        weights = _lines(err, f"  [variant {variant}: weights] ")
        _ends(weights)
        assert len(weights) == int(weights[-1].group(2)) > 1  # one line per tensor streamed into the engine
    pairs = _lines(err, "  [evaluate base→post] ")
    assert [m.group(3) for m in pairs] == ["base / sums", "full / sums"] and pairs[-1].group(4) == "0s"
    assert logs[0] == f"starting the engine on {post}" and re.fullmatch(r"engine started in \d+s", logs[1])
    # again: everything scored, nothing to count but the pairs found done (no line for them)
    run_evaluation(request, engine_factory=StandInEngine, log=logs.append)
    assert "[evaluate" not in capsys.readouterr().err


def test_variants_stats_and_compare_commands(transition, tmp_path, clock, capsys):
    base, post, store, bench = transition
    assert (
        main(["variants", "--store", str(store), "--out", str(tmp_path / "v"), "--variant", "randrm-0", "--no-track"])
        == 0
    )  # a random-removal control
    err = capsys.readouterr().err
    _ends(_lines(err, "  [variant randrm-0] "))
    assert [m.group(3) for m in _lines(err, "[variants] ")] == ["randrm-0"]
    assert main(["stats", str(store), "--out", str(tmp_path / "s"), "--resamples", "200", "--no-track"]) == 0
    _ends(_lines(capsys.readouterr().err, "[stats] "))
    assert (
        main(
            [
                "compare",
                "--cumulative",
                str(store),
                str(store),
                "--out",
                str(tmp_path / "c"),
                "--resamples",
                "200",
                "--null-draws",
                "200",
                "--no-track",
            ]
        )
        == 0
    )
    _ends(_lines(capsys.readouterr().err, "[compare 1/1 cumulative] "))
    assert (
        main(["stats", str(store), "--out", str(tmp_path / "s2"), "--resamples", "200", "--no-track", "--no-progress"])
        == 0
    )
    assert "[stats]" not in capsys.readouterr().err
