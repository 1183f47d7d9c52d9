"""Scoring one benchmark for one variant, resumably: generations as JSONL, graded, summarised per metric.

Results are kept per (variant, benchmark) as a JSONL of generations, appended a chunk of
prompts at a time (an interrupted evaluation resumes at the first unanswered prompt),
plus a JSON summary written atomically when the benchmark is fully scored (a scored
benchmark is never scored again). Both carry a key over everything that can change
the generations: benchmark checksum, prompt, variant, engine settings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from ..config import stable_hash
from ..files import atomic_write_text
from ..progress import Progress
from .answers import AnswersFile, read_answers, summary_text, verified_summary
from .answers import answered as answered_records
from .benchmarks import Benchmark, Problem
from .engine import Engine, Generation
from .grading import Grade, answers_equivalent, count_wait, grade
from .prompts import DEFAULT_INSTRUCTION
from .settings import EngineSettings, SamplingSettings


@dataclass
class BenchmarkResult:
    """One variant on one benchmark. Counts are over all answers (problems × samples)."""

    variant: str
    benchmark: str
    n: int  # problems
    accuracy: float  # percent: avg@n, the mean accuracy over samples (greedy accuracy when samples = 1)
    wait_mean: float  # "Wait" per answer
    no_answer: int
    parse_failed: int
    timeouts: int
    sha256: str
    key: str
    scored_now: bool = False
    extra: dict = field(default_factory=dict)
    too_long: int = 0  # prompts longer than the model's context: not generated, counted wrong
    truncated: int = 0  # answers cut off at max_new_tokens (finish reason 'length'): lower-bound accuracy
    wait_total: int = 0  # "Wait" tokens over all answers (pooled means divide by the answers)
    correct_bits: str = ""  # '1'/'0' per problem for the first sample, in benchmark order
    samples: int = 1  # answers per problem
    metrics: dict = field(default_factory=dict)  # 'avg', 'pass@k', 'maj@k' → percent
    scores: dict = field(default_factory=dict)  # the same → per-problem value in [0, 1] (paired statistics)
    tokens: list = field(default_factory=list)  # generated tokens of every answer (problem-major)
    tokens_correct: int = 0  # tokens summed over correct answers
    answers_correct: int = 0

    @property
    def answers(self) -> int:
        return self.n * self.samples


def _read_done(path: Path, key: str) -> dict[int, dict]:
    return read_answers(path, key).done


def result_path(out: Path, variant: str, benchmark: str) -> Path:
    return Path(out) / variant / f"{benchmark}.json"


def scored(
    out: Path, variant: str, bench: Benchmark, key: str, sampling: Optional[SamplingSettings] = None
) -> Optional[BenchmarkResult]:
    """The finished result of ``variant`` on ``bench`` under ``key``, or None. A finished benchmark whose
    summary lacks a metric asked for now (a pass@k or maj@k added later) is summarised again from its
    records, without generating anything."""
    sampling = sampling or SamplingSettings()
    p = result_path(out, variant, bench.name)
    if not p.is_file():
        return None
    d = verified_summary(p)
    if d is not None and d.get("key") != key:
        return None
    if d is not None:
        res = _result_of(d)
        if res is not None and set(sampling.metrics()) <= set(res.metrics):
            return res
    done = _read_done(Path(out) / variant / f"{bench.name}.jsonl", key)
    if any(pr.idx not in done for pr in bench.problems):
        return None

    res = summarise_records(
        [done[pr.idx] for pr in bench.problems],
        variant=variant,
        benchmark=bench.name,
        sampling=sampling,
        sha256=bench.sha256,
        key=key,
    )
    atomic_write_text(p, summary_text({k: v for k, v in res.__dict__.items() if k != "scored_now"}))
    return res


def _result_of(d: dict) -> Optional[BenchmarkResult]:
    try:
        return BenchmarkResult(**{k: v for k, v in d.items() if k in BenchmarkResult.__dataclass_fields__})
    except TypeError:  # a field missing: summarised again from the records
        return None


def evaluation_key(
    bench: Benchmark,
    variant_meta: dict,
    settings: EngineSettings,
    template: str,
    instruction: str,
    prompt_digest: str = "",
    sampling: Optional[SamplingSettings] = None,
) -> str:
    fields = {
        "benchmark": bench.name,
        "sha256": bench.sha256,
        "n": len(bench.problems),
        "variant": variant_meta,
        "engine": settings.result_fields(),
        "template": template,
        "instruction": instruction,
        "prompt_format": prompt_digest,
    }
    drawn = (sampling or SamplingSettings()).key_fields()
    if drawn is not None:  # greedy results keep the keys they always had; pass@k / maj@k are not generated
        fields["sampling"] = drawn
    return stable_hash(fields, 24)


def problem_rows(out: Path, variant: str, bench: Benchmark, key: str) -> list[dict]:
    """One row per answer of ``variant`` on ``bench`` (problem id = its index in the benchmark file)."""
    done = _read_done(Path(out) / variant / f"{bench.name}.jsonl", key)
    rows = []
    for p in bench.problems:
        rec = done.get(p.idx)
        if rec is None:
            continue
        for s, a in enumerate(_answers(rec)):
            rows.append(
                {
                    "variant": variant,
                    "benchmark": bench.name,
                    "problem": p.idx,
                    "sample": s,
                    "gold": p.gold,
                    "extracted": a.get("extracted"),
                    "status": a["status"],
                    "correct": bool(a["correct"]),
                    "tokens": int(a["tokens"]),
                    "finish_reason": a.get("finish_reason", ""),
                    "wait": int(a["wait"]),
                }
            )
    return rows


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with c correct answers among n samples: 1 − C(n−c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_correct(answers: Sequence[dict], k: int) -> bool:
    """maj@k of one problem: the answers of the first k samples are grouped by equivalence (math-verify
    decides), the largest group wins (ties: the group seen first), and it is right when its answers are."""
    groups: list[list[dict]] = []
    for a in answers[:k]:
        if a.get("extracted") is None:
            continue
        for g in groups:
            if answers_equivalent(g[0]["extracted"], a["extracted"]):
                g.append(a)
                break
        else:
            groups.append([a])
    if not groups:
        return False
    best = max(groups, key=len)  # max keeps the first of equal sizes
    return bool(best[0]["correct"])


def _answers(rec: dict) -> list[dict]:
    """Every answer of a per-problem record (its samples, or the record itself for one answer)."""
    return rec.get("samples") or [rec]


def problem_scores(rec: dict, sampling: SamplingSettings) -> dict[str, float]:
    """The per-problem value of every metric the sampling settings compute."""
    answers = _answers(rec)
    n, c = len(answers), sum(bool(a["correct"]) for a in answers)
    out = {"avg": c / n}
    out.update({f"pass@{k}": pass_at_k(n, c, k) for k in sampling.pass_k})
    out.update({f"maj@{k}": float(majority_correct(answers, k)) for k in sampling.maj_k})
    return out


def _answer(gen: Generation, gold: str) -> dict:
    g = grade(gen.text, gold) if gen.text is not None else Grade(None, False, "prompt_too_long")
    return {
        "generation": gen.text or "",
        "tokens": gen.tokens,
        "finish_reason": gen.finish_reason,
        "extracted": g.extracted,
        "correct": g.correct,
        "status": g.status,
        "wait": count_wait(gen.text or ""),
    }


def score_benchmark(
    engine: Engine,
    bench: Benchmark,
    variant: str,
    out: Path,
    key: str,
    *,
    template: str = "chat",
    instruction: str = DEFAULT_INSTRUCTION,
    sampling: Optional[SamplingSettings] = None,
    chunk: int = 256,
    log=print,
) -> BenchmarkResult:
    """Generate and grade every problem not yet answered under ``key``; write the summary.

    One JSONL record per problem: the first answer's fields at the top level and, with more than
    one sample, every answer under ``samples``. With ``engine.progress``: a progress line of the problems
    answered and graded, with an ETA, over all chunks (the engine advances it as prompts finish)."""
    sampling = sampling or SamplingSettings()
    done, answered_now = answer_problems(
        engine,
        [(bench, p) for p in bench.problems],
        variant,
        out,
        {bench.name: key},
        template=template,
        instruction=instruction,
        sampling=sampling,
        chunk=chunk,
        log=log,
    )
    recs = [done[bench.name][p.idx] for p in bench.problems]
    res = summarise_records(
        recs,
        variant=variant,
        benchmark=bench.name,
        sampling=sampling,
        sha256=bench.sha256,
        key=key,
        scored_now=bool(answered_now),
    )
    atomic_write_text(
        result_path(out, variant, bench.name),
        summary_text({k: v for k, v in res.__dict__.items() if k != "scored_now"}),
    )
    return res


def answered(out: Path, variant: str, bench: Benchmark, key: str, log=None) -> dict[int, dict]:
    """The verified records of ``variant`` on ``bench`` under ``key``: problem idx → record (a stale, torn or
    damaged file's records that verify; the damage said through ``log``)."""
    return answered_records(Path(out) / variant / f"{bench.name}.jsonl", key, log)


def answer_problems(
    engine: Engine,
    problems: Sequence[tuple[Benchmark, Problem]],
    variant: str,
    out: Path,
    keys: dict[str, str],
    *,
    template: str = "chat",
    instruction: str = DEFAULT_INSTRUCTION,
    sampling: Optional[SamplingSettings] = None,
    chunk: int = 256,
    log=print,
) -> tuple[dict[str, dict[int, dict]], int]:
    """Generate and grade those of ``problems`` ((benchmark, problem) pairs, benchmarks mixed) not yet answered
    under their benchmark's key (``keys``), ``chunk`` prompts a batch, each batch appended to the variant's JSONL
    files (fsynced) before the next: a kill loses at most the batch in flight. Returns every record under the keys
    (benchmark → idx → record) and how many were answered now."""
    sampling = sampling or SamplingSettings()
    benches = {b.name: b for b, _ in problems}
    files = {name: AnswersFile(Path(out) / variant / f"{name}.jsonl", keys[name], log) for name in benches}
    done = {name: f.done for name, f in files.items()}
    todo = [(b, p) for b, p in problems if p.idx not in done[b.name]]
    label = next(iter(benches)) if len(benches) == 1 else f"{len(benches)} benchmarks"
    bar = Progress(
        len(todo), label=f"  [evaluate {variant} / {label}] ", enabled=bool(getattr(engine, "progress", False))
    )
    for i in range(0, len(todo), chunk):
        part = todo[i : i + chunk]
        engine.bar = bar
        try:
            outs = engine.generate(engine.prompts([p for _, p in part], template, instruction), sampling)
        finally:
            engine.bar = None
        records: dict[str, list[dict]] = {}
        for (b, p), gens_of_p in zip(part, outs):
            answers = [_answer(g, p.gold) for g in gens_of_p]
            rec = {"key": keys[b.name], "idx": p.idx, "question": p.question, "gold": p.gold, **answers[0]}
            if sampling.n > 1:
                rec["samples"] = answers
            records.setdefault(b.name, []).append(rec)
        for name, recs in records.items():
            files[name].append(recs)
        bar.advance_to(i + len(part), "problems")  # graded too (an engine without vLLM's bar: counted here)
    return done, len(todo)


def summarise_records(
    recs: Sequence[dict],
    *,
    variant: str,
    benchmark: str,
    sampling: SamplingSettings,
    sha256: str,
    key: str,
    scored_now: bool = False,
) -> BenchmarkResult:
    """A benchmark's result from its per-problem records (metrics, per-problem scores, diagnostics)."""
    answers = [a for r in recs for a in _answers(r)]
    per_problem = [problem_scores(r, sampling) for r in recs]
    n, m = len(recs), len(answers)
    scores = {k: [p[k] for p in per_problem] for k in sampling.metrics()}
    correct = [a for a in answers if a["correct"]]
    return BenchmarkResult(
        variant=variant,
        benchmark=benchmark,
        n=n,
        samples=sampling.n,
        accuracy=100.0 * sum(scores["avg"]) / n if n else 0.0,
        metrics={k: 100.0 * sum(v) / n if n else 0.0 for k, v in scores.items()},
        scores=scores,
        wait_mean=sum(a["wait"] for a in answers) / m if m else 0.0,
        no_answer=sum(a["status"] == "no_answer" for a in answers),
        parse_failed=sum(a["status"] in ("parse_failed", "error") for a in answers),
        timeouts=sum(a["status"] == "timeout" for a in answers),
        too_long=sum(a["status"] == "prompt_too_long" for a in answers),
        truncated=sum(a.get("finish_reason") == "length" for a in answers),
        wait_total=sum(a["wait"] for a in answers),
        tokens=[int(a["tokens"]) for a in answers],
        tokens_correct=sum(int(a["tokens"]) for a in correct),
        answers_correct=len(correct),
        correct_bits="".join("1" if r["correct"] else "0" for r in recs),
        sha256=sha256,
        key=key,
        scored_now=scored_now,
    )
