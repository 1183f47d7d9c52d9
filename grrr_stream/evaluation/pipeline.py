"""Evaluating the variants of a stored transition (``grrr-stream evaluate`` and the sweep's evaluate units).

:func:`run_evaluation` takes an :class:`EvaluationRequest` (what the caller decides) and runs it in
named steps: prepare (every refusal, the benchmarks, the variant builders, the prompt format), score
every variant on every benchmark (one engine alive at a time: :mod:`.engine_loop`), tabulate, write the files,
log to MLflow.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..config import TrackingConfig
from ..errors import ConfigError
from ..files import atomic_write_text, ensure_folder, to_csv
from ..store.transition_store import StoredTransition
from ..tracking import model_runs, runs
from ..variants.builder import VariantBuilder
from ..variants.channels import load_channels
from ..variants.spec import parse_variants
from . import engine as engine_module
from .benchmarks import Benchmark, load_benchmark, resolve_bench_dir
from .designs import design_of
from .dtype_choice import resolve_engine_dtype
from .engine import Engine
from .engine_loop import EngineSlot, Scores
from .prompts import DEFAULT_INSTRUCTION, prompt_format
from .scoring import problem_rows
from .settings import EvaluationOptions
from .shared_answers import SharedAnswers
from .tables import accuracy_table, diagnostics_table, retention_tables

RECORD_FILE = "evaluation.json"  # written last: what was evaluated and its summary (a sweep unit's marker)
# the tables of a results folder that others read (a sweep's report): name → file
TABLES = {
    "accuracy": "accuracy.csv",
    "retention": "table_retention.csv",
    "removal": "table_removal.csv",
    "solved_lost": "solved_lost.csv",
    "metrics": "metrics.csv",
}


@dataclass(frozen=True)
class EvaluationRequest:
    """What to evaluate: variants of the transition in ``store`` on ``benchmarks`` (read from ``bench_dir``:
    'bundled', 'hub[:OWNER/REPO]' or a folder of ``<name>/test.jsonl``), with every setting that decides
    the results (``options``), written to ``out``.

    ``options`` (:class:`~.settings.EvaluationOptions`, shared with the command's flags and a sweep's
    evaluation section): ``materialize='engine'`` streams each variant into a running engine; ``'folder'``
    writes each variant under ``out/_variants`` and starts a fresh engine on it (deleted afterwards unless
    ``keep_variants``). ``sampling`` (default greedy) draws n answers per problem in one request each;
    ``metric`` ('avg' = avg@n, 'pass@k', 'maj@k') is the accuracy of the tables. Sampled results go to
    ``out/sampled-n…-T…-p…-s…/`` (with ``nest_sampled``), so that results of other sampling settings stay
    beside them and a finished setting is never generated again. Differences between variants come with
    paired bootstrap intervals over problems (``resamples``, ``bootstrap_seed``).
    """

    store: Path
    out: Path
    variants: Sequence[str]
    benchmarks: Sequence[str]
    bench_dir: Path | str
    options: EvaluationOptions = field(default_factory=EvaluationOptions)
    keep_variants: bool = False
    rest_from: str = "base"  # the variants' setting (a sweep's variants.rest_from), not the evaluation's
    channels: Optional[Path] = None  # channels.json of the outlier channels (channel variants only)
    # engine.dtype auto: the store of the last step into W1 when W1 was trained from an intermediate model
    # (its parts are judged too: :func:`.dtype_choice.resolve_engine_dtype`)
    last_step: Optional[Path] = None
    resamples: int = 10_000
    bootstrap_seed: int = 0
    informative_points: float = 1.0  # informative: full − base ≥ this (the sweep's claims.informative_points)
    nest_sampled: bool = True
    progress: bool = False  # generation progress (prompts done / total, ETA) on the terminal; not in any key
    # answers shared with the other evaluations of the same checkpoints (a sweep's WORKDIR/answers: each model is
    # decoded once per setting, :mod:`.shared_answers`); None: this evaluation's own only
    shared: Optional[Path] = None


@dataclass
class EvaluationResult:
    out: Path
    results: list  # BenchmarkResult
    accuracy_rows: list[dict]
    table56: list[dict]
    table8: list[dict]
    info: dict
    fidelity: dict[str, dict]
    files: list[Path]
    run_ids: list[str]
    differences: list[dict] = field(default_factory=list)  # paired bootstrap CIs against full, base, proj
    prompt: dict = field(default_factory=dict)  # the prompt format every variant was asked in
    solved_lost: list[dict] = field(default_factory=list)  # problems full solves and a variant loses, and reverse
    metric: str = "avg"  # the accuracy the tables use
    spans: dict = field(default_factory=dict)  # variant → (start, end) of its scoring, epoch seconds
    design: str = "fixed"  # the design's name as results hold it (:attr:`.designs.base.EvaluationDesign.recorded`)
    own_problems: bool = False  # the design's: each variant's numbers rest on the problems it answered
    design_params: dict = field(default_factory=dict)  # the design and its settings, as MLflow params


def run_evaluation(
    request: EvaluationRequest,
    *,
    tracking: Optional[TrackingConfig] = None,
    log=print,
    engine_factory: Optional[Callable[..., Any]] = None,
) -> EvaluationResult:
    """Evaluate variants of a stored transition on benchmarks with vLLM; resumable at prompt level.

    Every variant is prompted in the post model's format (tokenizer, chat template, generation config).
    An engine runs on the post model; variants whose config or tensor layout is the base's and differs
    from the post model's (see :meth:`VariantBuilder.runs_in_post_engine`) get an engine of their own on
    the base model. Messages go to ``log``; ``engine_factory`` replaces :class:`engine.Engine` (tests).
    """
    started = time.time()  # the MLflow runs, opened after the evaluation, start here
    evaluation = _prepare(request, log)
    scores = _score(evaluation, engine_factory or Engine, log)
    res = _tabulate(evaluation, scores, log)
    res.info.update(engine_dtype=evaluation.dtype_choice.dtype, engine_dtype_reason=evaluation.dtype_choice.reason)
    res.spans = scores.spans
    res.files = _write_tables(evaluation, res)
    design = design_of(request.options.design)
    if design.write is not None:
        res.files.append(design.write(evaluation, scores, res.differences))
    _write_problem_tables(evaluation, scores.keys_of)
    res.files.append(_write_record(evaluation, res))
    if runs.enabled(tracking):
        res.run_ids = model_runs.log_evaluation(
            evaluation.transition,
            [evaluation.builders[n] for n in evaluation.names],
            evaluation.benches,
            res,
            evaluation.options,
            tracking,
            started=started,
            seconds=time.time() - started,
        )
    return res


@dataclass
class _Evaluation:
    """A request made concrete: its results folder, benchmarks, variant builders and engine homes; ``options``
    are the request's with the engine dtype resolved (``dtype_choice``: which and why)."""

    request: EvaluationRequest
    options: EvaluationOptions
    dtype_choice: Any  # dtype_choice.EngineChoice
    transition: StoredTransition
    out: Path
    instruction: str
    benches: list[Benchmark]
    names: list[str]
    builders: dict[str, Any]  # variant name → VariantBuilder
    post_folder: Path
    prompt: dict
    homes: dict[str, Path]  # variant name → the model folder its engine runs on
    shared: Optional[SharedAnswers] = None  # the sweep's shared answers of checkpoint variants


def _prepare(request: EvaluationRequest, log) -> _Evaluation:
    """Every refusal (settings, variant names, a rest source the base cannot supply) before an engine starts."""
    opts = request.options  # validated when made (the metric against the sampling, materialize, limit)
    instruction = opts.instruction if opts.instruction is not None else DEFAULT_INSTRUCTION
    specs = parse_variants(request.variants)
    names = [s.name for s in specs]
    _check_design(opts, names)
    t = StoredTransition(Path(request.store))
    out = ensure_folder(Path(request.out), "--out")
    if request.nest_sampled and opts.sampling.key_fields() is not None:
        out = ensure_folder(out / opts.sampling.folder_name(), "--out")
    benches = _load_benchmarks(request, out, log)
    # 'auto' resolved here, before any engine: the variants are built in the dtype the engine runs, so that
    # their fidelity reports measure its rounding, and answers are keyed by it
    step = StoredTransition(Path(request.last_step)) if request.last_step is not None else None
    choice = resolve_engine_dtype(t, specs, opts.engine, last_step=step)
    if opts.engine.dtype == "auto":
        log(
            f"engine dtype auto: {choice.dtype} ({choice.reason}"
            + (f"; per-matrix shares {choice.source}, {choice.seconds:.1f} s)" if choice.source else ")")
        )
    resolved = opts.model_copy(update={"engine": opts.engine.resolved(choice.dtype)})
    vdtype = choice.dtype
    post_folder = Path(t.manifest["post_folder"])
    prompt = prompt_format(post_folder, opts.template, instruction)
    # on the CPU, not the "auto" default: the vLLM engine holds the GPU's memory while variants are built
    channel_set = (
        load_channels(request.channels) if request.channels is not None and any(s.channels for s in specs) else None
    )
    builders = {
        s.name: VariantBuilder(t.path, s, dtype=vdtype, rest_from=request.rest_from, device="cpu", channels=channel_set)
        for s in specs
    }
    homes = {n: post_folder if builders[n].runs_in_post_engine() else Path(builders[n].home.folder) for n in names}
    shared = SharedAnswers(request.shared, log) if request.shared is not None else None
    return _Evaluation(
        request, resolved, choice, t, out, instruction, benches, names, builders, post_folder, prompt, homes, shared
    )


def _check_design(opts: EvaluationOptions, names: Sequence[str]) -> None:
    """What the evaluation's design refuses, before an engine starts."""
    problems = design_of(opts.design).check(opts, names)
    if problems:
        raise ConfigError("; ".join(problems))


def _load_benchmarks(request: EvaluationRequest, out: Path, log) -> list[Benchmark]:
    # 'bundled', 'hub[:REPO]' or a folder
    bench_dir = resolve_bench_dir(request.bench_dir, request.benchmarks, out, log=log)
    opts = request.options
    benches = [load_benchmark(b, bench_dir, limit=opts.limit, lenient=opts.lenient) for b in request.benchmarks]
    for b in benches:
        if b.skipped:
            log(f"WARNING: {b.path}: {b.skipped} malformed line(s) skipped (lenient loading)")
    return benches


def _score(evaluation: _Evaluation, make_engine: Callable[..., Any], log) -> Scores:
    """Every variant on every benchmark as the design orders them, variants that need the same engine one after
    the other (one engine alive at a time)."""
    homes = [evaluation.homes[m] for m in evaluation.names]
    order = sorted(evaluation.names, key=lambda n: homes.index(evaluation.homes[n]))
    scores, slot = Scores(), EngineSlot(make_engine, evaluation)
    try:
        design_of(evaluation.request.options.design).score(evaluation, order, slot, scores, log)
    finally:
        slot.close()
    return scores


def _tabulate(evaluation: _Evaluation, scores: Scores, log) -> EvaluationResult:
    """The tables (accuracy, retention, removal, solved/lost) and the paired differences between variants."""
    req, builders = evaluation.request, evaluation.builders
    flat = [r for n in evaluation.names for r in scores.results[n]]
    acc = accuracy_table(flat, [b.name for b in evaluation.benches], req.options.metric)
    used = {builders[n].rest_from for n in evaluation.names if builders[n].spec.composed}
    t56, t8, info = retention_tables(
        acc, rest_from=used.pop() if len(used) == 1 else None, informative_points=req.informative_points
    )
    fallbacks = sorted({builders[n].rest_fallback for n in evaluation.names if builders[n].rest_fallback})
    info["rest_from_requested"] = req.rest_from
    if fallbacks:
        info["rest_fallback"] = fallbacks[0]
    design = design_of(req.options.design)
    diffs, lost = design.differences(evaluation, scores, flat, acc, info)
    warn_truncated(acc, req.options.engine.max_new_tokens, log)
    return EvaluationResult(
        evaluation.out,
        flat,
        acc,
        t56,
        t8,
        info,
        scores.fidelity,
        [],
        [],
        diffs,
        evaluation.prompt,
        lost,
        req.options.metric,
        design=design.recorded,
        own_problems=design.own_problems,
        design_params=design.params(req.options),
    )


def _write_tables(evaluation: _Evaluation, res: EvaluationResult) -> list[Path]:
    """The tables as CSV files in the results folder; returns their paths."""
    files = []
    # every metric of every variant and benchmark (the tables use `metric`)
    long = [
        {"variant": r.variant, "benchmark": r.benchmark, "metric": m, "value": v, "problems": r.n, "samples": r.samples}
        for r in res.results
        for m, v in (r.metrics or {"avg": r.accuracy}).items()
    ]
    for fname, rows in (
        (TABLES["accuracy"], res.accuracy_rows),
        (TABLES["retention"], res.table56),
        (TABLES["removal"], res.table8),
        ("table_differences.csv", res.differences),
        (TABLES["metrics"], long),
        (TABLES["solved_lost"], res.solved_lost),
        ("diagnostics.csv", diagnostics_table(res.results)),
    ):
        atomic_write_text(evaluation.out / fname, to_csv(rows))
        files.append(evaluation.out / fname)
    return files


def _write_problem_tables(evaluation: _Evaluation, keys_of: dict[str, dict[str, str]]) -> None:
    """Per-problem records as a table per variant: join variants on (benchmark, problem)."""
    for name in evaluation.names:
        rows = [row for b in evaluation.benches for row in problem_rows(evaluation.out, name, b, keys_of[name][b.name])]
        atomic_write_text(evaluation.out / name / "problems.csv", to_csv(rows))


def _write_record(evaluation: _Evaluation, res: EvaluationResult) -> Path:
    """``evaluation.json``: what was evaluated, how, with which versions, and the summary."""

    req = evaluation.request
    path = evaluation.out / RECORD_FILE
    atomic_write_text(
        path,
        json.dumps(
            {
                "store": str(evaluation.transition.path),
                "engine": evaluation.options.engine.model_dump(),
                "engine_dtype": evaluation.dtype_choice.record(),
                "versions": engine_module.engine_versions(),  # looked up when called: tests replace it
                "prompt_format": evaluation.prompt,
                "bootstrap": {"resamples": req.resamples, "seed": req.bootstrap_seed},
                "sampling": req.options.sampling.model_dump(),
                "metric": req.options.metric,
                **design_of(req.options.design).record(req.options),
                "benchmarks": {
                    b.name: {"sha256": b.sha256, "n": len(b.problems), "skipped": b.skipped, "path": str(b.path)}
                    for b in evaluation.benches
                },
                "variants": {n: evaluation.builders[n].metadata() for n in evaluation.names},
                "info": res.info,
                "fidelity": res.fidelity,
            },
            indent=2,
            default=str,
        ),
    )
    return path


TRUNCATION_WARN_PCT = 5.0  # above this share of capped answers an accuracy is a lower bound


def warn_truncated(acc_rows: Sequence[dict], max_new_tokens: int, log=print) -> None:
    for r in acc_rows:
        if r["truncated_pct"] > TRUNCATION_WARN_PCT:
            log(
                f"WARNING: {r['truncated']} of {r['answers']} answers of variant '{r['variant']}' "
                f"({r['truncated_pct']:.1f} %) were cut off at max_new_tokens = {max_new_tokens}: its accuracy "
                "and Wait count are lower bounds; raise max_new_tokens"
            )
