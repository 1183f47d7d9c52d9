"""A model several transitions evaluate is decoded once per setting (issue 62, its first part): in a sweep whose
base → sft and base → rl both evaluate the base, the second takes the base's answers from the first, generating none
of them; its answers equal a fresh decode's; a changed or moved line of the shared file is not reused; a composed
variant, and a checkpoint under other settings, is keyed apart and never shares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grrr_stream.evaluation.answers import read_answers
from grrr_stream.evaluation.shared_answers import FOLDER, REUSED

pytestmark = pytest.mark.timeout(600)


def _sweep(root: Path, share: bool = True):
    """The report tests' small sweep, counting what the stand-in engine is asked per loaded weights."""
    from helpers import stand_in
    from helpers.report_sweep import run_small_sweep

    from grrr_stream.evaluation.shared_answers import SharedAnswers

    asked: dict[str, int] = {}

    class Counting(stand_in.StandInEngine):
        def generate(self, prompts, sampling=None):
            asked[self.digest] = asked.get(self.digest, 0) + len(prompts)
            return super().generate(prompts, sampling)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stand_in, "StandInEngine", Counting)
        if not share:
            mp.setattr(SharedAnswers, "shares", staticmethod(lambda evaluation, name: False))
        res = run_small_sweep(root)
    assert res.ok, res.states
    return res, asked


def _answers(res, transition: str, variant: str) -> dict[int, dict]:
    (u,) = [u for u in res.plan.units if u.kind == "evaluate" and u.params.transition == transition]
    path = Path(u.out) / variant / "sums.jsonl"
    (key,) = {json.loads(line)["key"] for line in path.read_text().splitlines()}
    drop = ("key", REUSED)
    return {i: {k: v for k, v in r.items() if k not in drop} for i, r in read_answers(path, key).done.items()}


def test_a_base_two_transitions_evaluate_is_decoded_once_and_answers_as_a_fresh_decode(tmp_path):
    shared, asked = _sweep(tmp_path / "shared")
    plain, asked_plain = _sweep(tmp_path / "plain", share=False)
    # 30 problems; the base of base → rl is the base of base → sft: the base's weights are asked 30 prompts, not 60,
    # and every other model as often as in plain decoding
    saved = {d: asked_plain[d] - asked.get(d, 0) for d in asked_plain}
    assert asked.keys() == asked_plain.keys() and sorted(v for v in saved.values() if v) == [30], saved
    (base_weights,) = [d for d, v in saved.items() if v]
    assert asked_plain[base_weights] == 60
    reused = _answers(shared, "base-to-rl", "base")
    assert reused == _answers(plain, "base-to-rl", "base") == _answers(shared, "base-to-sft", "base")
    assert len(reused) == 30
    # the records say where they came from; full differs between the two transitions and is not shared
    (u,) = [u for u in shared.plan.units if u.kind == "evaluate" and u.params.transition == "base-to-rl"]
    lines = [json.loads(x) for x in (Path(u.out) / "base" / "sums.jsonl").read_text().splitlines()]
    assert all(REUSED in r for r in lines)
    assert not any(REUSED in json.loads(x) for x in (Path(u.out) / "full" / "sums.jsonl").read_text().splitlines())
    assert not any(REUSED in json.loads(x) for x in (Path(u.out) / "diag" / "sums.jsonl").read_text().splitlines())
    # the tables are those of plain decoding
    twin = next(p for p in plain.plan.units if p.id == u.id)
    assert (Path(u.out) / "accuracy.csv").read_text() == (Path(twin.out) / "accuracy.csv").read_text()


def test_a_damaged_shared_line_is_answered_again_not_reused(tmp_path):
    first, _ = _sweep(tmp_path / "w")
    pool = Path(first.plan.workdir) / FOLDER
    base = _answers(first, "base-to-sft", "base")

    def holds(p: Path) -> dict:
        (key,) = {json.loads(line)["key"] for line in p.read_text().splitlines()}
        return {i: {k: v for k, v in r.items() if k != "key"} for i, r in read_answers(p, key).done.items()}

    (shared_file,) = [p for p in pool.rglob("sums.jsonl") if holds(p) == base]  # the base's, among base and fulls'
    assert len(list(pool.rglob("sums.jsonl"))) == 3
    lines = shared_file.read_text().splitlines(keepends=True)
    rec = json.loads(lines[3])
    rec["correct"] = not rec["correct"]
    lines[3] = json.dumps(rec) + "\n"
    shared_file.write_text("".join(lines))
    (u,) = [u for u in first.plan.units if u.kind == "evaluate" and u.params.transition == "base-to-rl"]
    import shutil

    shutil.rmtree(Path(u.out) / "base")  # its base answered again: it takes what verifies and answers the rest
    again, asked = _sweep(tmp_path / "w")
    assert u.id in again.ran
    assert list(asked.values()) == [1]  # the changed line's problem alone, by the base alone
    assert _answers(again, "base-to-rl", "base") == base


def test_the_shared_key_covers_what_decides_an_answer():
    """Another engine dtype, prompt format, instruction, sampling, benchmark file or weights is another key."""
    from types import SimpleNamespace

    from grrr_stream.evaluation.settings import EvaluationOptions, SamplingSettings
    from grrr_stream.evaluation.shared_answers import model_key

    class Builder:
        def config(self):
            return {"hidden_size": 8}

    def evaluation(**kw):
        opts = kw.pop("options", EvaluationOptions())
        return SimpleNamespace(options=opts, builders={"base": Builder()}, instruction=kw.pop("instruction", "x"),
                               prompt={"digest": kw.pop("prompt", "p")})  # fmt: skip

    bench = SimpleNamespace(name="sums", sha256="a" * 64, problems=[1, 2, 3])
    key = model_key(evaluation(), "base", bench, "w")
    assert key == model_key(evaluation(), "base", bench, "w")
    others = [
        model_key(evaluation(), "base", bench, "w2"),
        model_key(evaluation(options=EvaluationOptions(engine={"dtype": "bfloat16"})), "base", bench, "w"),
        model_key(evaluation(prompt="q"), "base", bench, "w"),
        model_key(evaluation(instruction="y"), "base", bench, "w"),
        model_key(evaluation(options=EvaluationOptions(template="plain")), "base", bench, "w"),
        model_key(
            evaluation(options=EvaluationOptions(sampling=SamplingSettings(n=2, temperature=0.5))), "base", bench, "w"
        ),
        model_key(evaluation(), "base", SimpleNamespace(name="sums", sha256="b" * 64, problems=[1, 2, 3]), "w"),
    ]
    assert len({key, *others}) == 1 + len(others)
