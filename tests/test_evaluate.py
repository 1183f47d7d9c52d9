"""Evaluation orchestration without vLLM: which engine runs which variant, the prompt format, the
diagnostics of every answer, and the paired differences (a stand-in engine answers deterministically
from the weights it holds; tests/test_evaluate_vllm.py runs the real engine)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

pytest.importorskip("math_verify", reason="grading needs math-verify (the eval extra)")

from conftest import no_track_config  # noqa: E402
from grrr_stream.config import EngineSettings  # noqa: E402
from grrr_stream.decompose import run_transition  # noqa: E402
from grrr_stream.synthetic import TINY, Update, make_transition  # noqa: E402
from grrr_stream.workflows import run_evaluation  # noqa: E402

SETTINGS = EngineSettings(max_new_tokens=32)


class StandInEngine:
    """Answers 'a+b' problems: right or wrong, cut off or not, with some 'Wait's, as a function of the
    weights it holds and the problem, so that variants differ and reruns agree."""

    started: list[tuple[Path, Path]] = []

    def __init__(self, model, settings, *, prompt_format=None):
        StandInEngine.started.append((Path(model), Path(prompt_format)))
        self.settings, self.digest, self.loads = settings, "", []

    def load_weights(self, tensors, **_):
        h = hashlib.sha256()
        for name, t in tensors:
            h.update(name.encode() + t.double().sum().item().hex().encode())
        self.digest = h.hexdigest()
        self.loads.append(self.digest)

    def prompts(self, problems, template, instruction):
        return [p.question for p in problems]

    def generate(self, prompts):
        from grrr_stream.evaluate import Generation

        out = []
        for p in prompts:
            h = int(hashlib.sha256((self.digest + p).encode()).hexdigest(), 16)
            answer = eval(p) if h % 3 else -1  # noqa: S307 - our own 'a+b' strings
            capped = h % 7 == 0
            out.append(Generation(f"Wait, {'Wait, ' * (h % 4)}\\boxed{{{answer}}}", 32 if capped else 5,
                                  "length" if capped else "stop"))
        return out

    def close(self):
        pass


@pytest.fixture()
def transition(tmp_path):
    base, post = make_transition(tmp_path / "m", TINY, family="qwen2", dtype="float32", update=Update(r_delta=2e-2))
    store = tmp_path / "s"
    run_transition(no_track_config(base=str(base), post=str(post), store=store))
    bench = tmp_path / "bench" / "sums"
    bench.mkdir(parents=True)
    bench.joinpath("test.jsonl").write_text("".join(
        json.dumps({"problem": f"{a}+{b}", "answer": str(a + b)}) + "\n" for a in range(7) for b in range(9)))
    return base, post, store, tmp_path / "bench"


def test_one_engine_on_the_post_model_when_configs_agree(transition, tmp_path):
    base, post, store, bench = transition
    StandInEngine.started = []
    logs: list[str] = []
    res = run_evaluation(store, tmp_path / "e", ["base", "full", "proj", "diag"], ["sums"], bench,
                         settings=SETTINGS, engine_factory=StandInEngine, log=logs.append)
    assert StandInEngine.started == [(post, post)]
    assert res.prompt["from"] == str(post) and res.prompt["files"]["generation_config.json"]
    saved = json.loads((tmp_path / "e" / "evaluation.json").read_text())
    assert saved["prompt_format"]["digest"] == res.prompt["digest"]
    assert saved["variants"]["diag"]["rest_from"] == "base" and saved["variants"]["full"]["config_from"] == "post"
    # diagnostics, recounted from the per-answer records
    recs = {v: [json.loads(x) for x in (tmp_path / "e" / v / "sums.jsonl").read_text().splitlines()]
            for v in ("base", "full", "proj", "diag")}
    acc = {r["variant"]: r for r in res.accuracy_rows}
    for v, rs in recs.items():
        assert acc[v]["answers"] == len(rs) == 63
        assert acc[v]["wait_per_answer"] == pytest.approx(sum(r["wait"] for r in rs) / len(rs))
        assert acc[v]["truncated"] == sum(r["finish_reason"] == "length" for r in rs) > 0
    assert any("cut off at max_new_tokens = 32" in m for m in logs)  # > 5 % capped: a loud warning
    # paired differences: every variant against full, base and proj; full against itself is exactly 0
    diffs = {r["variant"]: r for r in res.differences}
    assert (diffs["full"]["minus_full"], diffs["full"]["minus_full_ci_lo"], diffs["full"]["minus_full_ci_hi"]) \
        == (0.0, 0.0, 0.0)
    for v, rs in recs.items():
        mine = 100 * sum(r["correct"] for r in rs) / 63
        full = 100 * sum(r["correct"] for r in recs["full"]) / 63
        assert diffs[v]["minus_full"] == pytest.approx(mine - full, abs=1e-9)
    assert res.info["gain"] == pytest.approx(acc["full"]["average"] - acc["base"]["average"])
    assert "gain_ci_lo" in res.info and "full_minus_proj" in res.info
    assert (tmp_path / "e" / "table_differences.csv").is_file()


def test_base_config_that_differs_gets_its_own_engine_with_the_post_prompt_format(transition, tmp_path):
    base, post, store, bench = transition
    cfg = json.loads((base / "config.json").read_text())
    cfg["rope_theta"] = 500000.0  # changes the forward pass: base-config variants cannot run in the post engine
    (base / "config.json").write_text(json.dumps(cfg))
    StandInEngine.started = []
    logs: list[str] = []
    res = run_evaluation(store, tmp_path / "e", ["base", "full", "proj", "diag"], ["sums"], bench,
                         settings=SETTINGS, engine_factory=StandInEngine, log=logs.append)
    # one engine per config, each started once, each prompting as the post model does
    assert StandInEngine.started == [(base, post), (post, post)]
    assert any("rope_theta" in m and "engine on" in m for m in logs)
    meta = json.loads((tmp_path / "e" / "evaluation.json").read_text())["variants"]
    assert meta["proj"]["config_differences"] == ["rope_theta"] and meta["proj"]["config_from"] == "base"
    assert {r.variant for r in res.results} == {"base", "full", "proj", "diag"}
    # rest_from post puts every composed variant on the post model's config: one engine again
    StandInEngine.started = []
    run_evaluation(store, tmp_path / "p", ["full", "proj", "diag"], ["sums"], bench, settings=SETTINGS,
                   engine_factory=StandInEngine, rest_from="post", log=logs.append)
    assert StandInEngine.started == [(post, post)]


def test_a_rerun_scores_nothing_and_starts_no_engine(transition, tmp_path):
    _, _, store, bench = transition
    first = run_evaluation(store, tmp_path / "e", ["full", "offnull"], ["sums"], bench, settings=SETTINGS,
                           engine_factory=StandInEngine, log=lambda m: None)
    StandInEngine.started = []
    again = run_evaluation(store, tmp_path / "e", ["full", "offnull"], ["sums"], bench, settings=SETTINGS,
                           engine_factory=StandInEngine, log=lambda m: None)
    assert StandInEngine.started == [] and not any(r.scored_now for r in again.results)
    assert again.accuracy_rows == first.accuracy_rows and again.differences == first.differences


@pytest.mark.parametrize("line,match", [
    (b'{"problem": "1+1", "answer": "2"', "is not valid JSON"),          # a torn line
    (b'["1+1", "2"]', "is not a JSON object"),
    (b'{"problem": "1+1"}', "lacks a gold answer"),
    (b'{"problem": "1+1", "answer": null}', "lacks a gold answer"),      # not graded against 'None'
    (b'{"problem": "1+1", "answer": ""}', "lacks a gold answer"),
    (b'{"answer": "2"}', "lacks a question"),
    (b'{"problem": "1+1", "answer": "\xff\xfe"}', "is not valid UTF-8"),
])
def test_malformed_benchmark_lines_are_refused_with_file_and_line_or_skipped_when_lenient(tmp_path, line, match):
    from grrr_stream.errors import ConfigError
    from grrr_stream.evaluate import load_benchmark

    (tmp_path / "b").mkdir()
    good = json.dumps({"problem": "2+2", "answer": "4"}).encode()
    (tmp_path / "b" / "test.jsonl").write_bytes(good + b"\n" + line + b"\n" + good + b"\n")
    with pytest.raises(ConfigError, match=match) as e:
        load_benchmark("b", tmp_path)
    assert f"{tmp_path / 'b' / 'test.jsonl'}:2" in str(e.value) and "--lenient-benchmarks" in str(e.value)
    bench = load_benchmark("b", tmp_path, lenient=True)
    assert len(bench.problems) == 2 and bench.skipped == 1 and [p.idx for p in bench.problems] == [0, 1]


@pytest.mark.parametrize("name", ["..", ".hidden", "a/b", ""])
def test_benchmark_names_that_are_not_one_folder_name_are_refused(tmp_path, name):
    from grrr_stream.errors import ConfigError
    from grrr_stream.evaluate import load_benchmark

    with pytest.raises(ConfigError, match="benchmark name"):
        load_benchmark(name, tmp_path)
