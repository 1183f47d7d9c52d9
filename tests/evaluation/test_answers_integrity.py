"""Answers files and summaries read back only as far as they verify: a flipped correctness bit, a deleted, duplicated
or moved line is found by the records' chained digests and those problems are answered again (the sequential
design's rows then equal an undamaged run's); a summary whose digest does not match is summarised again from the
records; a file written before records were chained is taken as it is and sealed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grrr_stream.evaluation.answers import AnswersFile, read_answers, sealed_lines, summary_text, verified_summary


def _recs(n: int, key: str = "k") -> list[dict]:
    return [{"key": key, "idx": i, "correct": i % 2 == 0, "generation": f"answer {i}"} for i in range(n)]


def _write(path: Path, recs: list[dict]) -> list[str]:
    text, _ = sealed_lines(recs)
    path.write_text(text)
    return text.splitlines(keepends=True)


def test_undamaged_file_verifies_whole(tmp_path):
    p = tmp_path / "a.jsonl"
    _write(p, _recs(5))
    a = read_answers(p, "k")
    assert sorted(a.done) == list(range(5)) and not a.damage and a.clean()
    assert all("chain" not in r for r in a.done.values())


@pytest.mark.parametrize(
    "damage, dropped",
    [
        ("flip", {2}),  # the changed line only
        ("delete", {2, 3}),  # the deleted line's problem is missing, the next line fails its link
        ("duplicate", set()),  # the copy fails its link; the original and the rest verify
        ("swap", {2, 3, 4}),  # each moved line and the one after fail their links
    ],
)
def test_a_changed_deleted_duplicated_or_moved_line_is_found(tmp_path, damage, dropped):
    p = tmp_path / "a.jsonl"
    lines = _write(p, _recs(6))
    if damage == "flip":
        lines[2] = lines[2].replace('"correct": true', '"correct": false')
    elif damage == "delete":
        del lines[2]
    elif damage == "duplicate":
        lines.insert(3, lines[2])
    else:
        lines[2], lines[3] = lines[3], lines[2]
    p.write_text("".join(lines))
    a = read_answers(p, "k")
    assert a.damage and not a.clean()
    assert set(range(6)) - set(a.done) == dropped
    assert all(a.done[i] == r for i, r in enumerate(_recs(6)) if i in a.done)  # what is kept is what was written
    logged: list[str] = []
    f = AnswersFile(p, "k", log=logged.append)
    assert len(logged) == 1 and str(p) in logged[0] and "answered again" in logged[0]
    assert read_answers(p, "k").clean() and set(read_answers(p, "k").done) == set(f.done)  # rewritten, re-chained


def test_a_torn_last_line_is_a_kill_not_damage_and_appends_follow_a_whole_line(tmp_path):
    p = tmp_path / "a.jsonl"
    lines = _write(p, _recs(3))
    p.write_text("".join(lines) + lines[0][:20])
    a = read_answers(p, "k")
    assert not a.damage and sorted(a.done) == [0, 1, 2] and not a.clean()
    f = AnswersFile(p, "k", log=lambda m: pytest.fail(m))
    f.append(_recs(4)[3:])
    assert sorted(read_answers(p, "k").done) == [0, 1, 2, 3] and read_answers(p, "k").clean()


def test_a_file_of_unchained_records_is_taken_and_sealed(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in _recs(3)))
    assert sorted(read_answers(p, "k").done) == [0, 1, 2] and read_answers(p, "k").legacy
    AnswersFile(p, "k", log=lambda m: pytest.fail(m))
    assert read_answers(p, "k").clean()
    # once sealed, a line without its chain is damage, not an old record
    lines = p.read_text().splitlines(keepends=True)
    r = json.loads(lines[1])
    del r["chain"]
    lines[1] = json.dumps(r) + "\n"
    p.write_text("".join(lines))
    assert 1 not in read_answers(p, "k").done and read_answers(p, "k").damage


def test_a_summary_is_taken_only_when_its_digest_matches(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(summary_text({"key": "k", "accuracy": 50.0, "correct_bits": "1010"}))
    assert verified_summary(p)["correct_bits"] == "1010"
    p.write_text(p.read_text().replace("1010", "1011"))
    assert verified_summary(p) is None
    p.write_text(json.dumps({"key": "k", "accuracy": 50.0}))  # no digest: summarised again
    assert verified_summary(p) is None
    p.write_text("[1, 2]")
    assert verified_summary(p) is None


def test_a_changed_fixed_design_summary_is_summarised_again_without_generating(tmp_path):
    """A correctness bit flipped in a finished benchmark's summary (``<variant>/<benchmark>.json``): the rerun does
    not take it; it summarises the benchmark again from its verified answers, generating nothing, and the tables
    equal the first run's."""
    pytest.importorskip("math_verify", reason="grading needs math-verify (the eval extra)")
    from helpers.stand_in import SETTINGS, StandInEngine, sums_transition

    from grrr_stream.evaluation.pipeline import EvaluationRequest, run_evaluation
    from grrr_stream.evaluation.settings import EvaluationOptions

    _, _, store, bench = sums_transition(tmp_path / "t", n_a=4, n_b=5)

    def request():
        return EvaluationRequest(
            store, tmp_path / "e", ["full", "diag"], ["sums"], bench, EvaluationOptions(engine=SETTINGS)
        )

    first = run_evaluation(request(), engine_factory=StandInEngine, log=lambda m: None)
    summary = tmp_path / "e" / "diag" / "sums.json"
    d = json.loads(summary.read_text())
    bits = d["correct_bits"]
    d["correct_bits"] = ("0" if bits[0] == "1" else "1") + bits[1:]
    d["accuracy"] = 100.0 - d["accuracy"]
    summary.write_text(json.dumps(d))
    assert verified_summary(summary) is None

    class Refusing(StandInEngine):
        def generate(self, prompts, sampling=None):
            raise AssertionError("nothing is generated again")

    again = run_evaluation(request(), engine_factory=Refusing, log=lambda m: None)
    assert again.accuracy_rows == first.accuracy_rows
    assert verified_summary(summary)["correct_bits"] == bits
