"""Evaluating the variants of a stored transition (``grrr-stream evaluate`` and the sweep's evaluate units).

:func:`run_evaluation` takes an :class:`EvaluationRequest` (what the caller decides) and runs it in
named steps: prepare (every refusal, the benchmarks, the variant builders, the prompt format), score
every variant on every benchmark (one engine alive at a time), tabulate, write the files, log to MLflow.
"""

from __future__ import annotations

import json
import time
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..config import TrackingConfig
from ..errors import ConfigError
from ..files import atomic_write_text, ensure_folder, remove_tree, to_csv
from ..progress import Progress, fmt_seconds
from ..store.transition_store import StoredTransition
from ..tracking import runs
from .benchmarks import Benchmark, load_benchmark, resolve_bench_dir
from .engine import Engine
from .prompts import DEFAULT_INSTRUCTION, prompt_format
from .scoring import BenchmarkResult, evaluation_key, problem_rows, score_benchmark, scored
from .settings import EvaluationOptions, build_evaluation_options
from .tables import accuracy_table, diagnostics_table, retention_tables, solved_lost

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
    resamples: int = 10_000
    bootstrap_seed: int = 0
    informative_points: float = 1.0  # informative: full − base ≥ this (the sweep's claims.informative_points)
    nest_sampled: bool = True
    progress: bool = False  # generation progress (prompts done / total, ETA) on the terminal; not in any key
    # The keywords of the options before they were one object (settings= is the options' engine), still taken
    # so that scripts written against them keep working; folded into ``options`` and not kept apart.
    settings: InitVar[Any] = None
    sampling: InitVar[Any] = None
    metric: InitVar[Optional[str]] = None
    materialize: InitVar[Optional[str]] = None
    limit: InitVar[Optional[int]] = None
    lenient: InitVar[Optional[bool]] = None
    template: InitVar[Optional[str]] = None
    instruction: InitVar[Optional[str]] = None

    def __post_init__(self, settings, sampling, metric, materialize, limit, lenient, template, instruction) -> None:
        legacy = {
            "engine": settings,
            "sampling": sampling,
            "metric": metric,
            "materialize": materialize,
            "limit": limit,
            "lenient": lenient,
            "template": template,
            "instruction": instruction,
        }
        given = {k: v for k, v in legacy.items() if v is not None}
        if given:
            object.__setattr__(
                self, "options", build_evaluation_options({**self.options.model_dump(), **given})
            )  # frozen


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
    design: str = "fixed"  # 'sequential': variants rest on their own problems


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
    ev = _prepare(request, log)
    scores = _score_variants(ev, engine_factory or Engine, log)
    res = _tabulate(ev, scores, log)
    res.info.update(engine_dtype=ev.dtype_choice.dtype, engine_dtype_reason=ev.dtype_choice.reason)
    res.spans = scores.spans
    res.files = _write_tables(ev, res)
    if scores.sequential is not None:
        from .sequential import write_record

        res.files.append(write_record(ev.out, *scores.sequential, res.differences))
    _write_problem_tables(ev, scores.keys_of)
    res.files.append(_write_record(ev, res))
    if runs.enabled(tracking):
        res.run_ids = runs.log_evaluation(
            ev.transition,
            [ev.builders[n] for n in ev.names],
            ev.benches,
            res,
            ev.options,
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


def _prepare(request: EvaluationRequest, log) -> _Evaluation:
    """Every refusal (settings, variant names, a rest source the base cannot supply) before an engine starts."""
    from ..variants.builder import VariantBuilder
    from ..variants.channels import load_channels
    from ..variants.spec import parse_variants
    from .dtype_choice import resolve_engine_dtype

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
    choice = resolve_engine_dtype(t, specs, opts.engine)
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
    return _Evaluation(
        request, resolved, choice, t, out, instruction, benches, names, builders, post_folder, prompt, homes
    )


def _check_design(opts: EvaluationOptions, names: Sequence[str]) -> None:
    """The sequential design compares every variant with full, streamed into one engine."""
    if opts.design != "sequential":
        return
    problems = []
    if "full" not in names or len(names) < 2:
        problems.append(
            f"design: sequential compares variants with full: evaluate full and at least one other "
            f"variant (got {', '.join(names)})"
        )
    if opts.materialize != "engine":
        problems.append(
            "design: sequential swaps variants in and out of one engine a few times each: it needs materialize: engine"
        )
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


@dataclass
class _Scores:
    results: dict[str, list[BenchmarkResult]] = field(default_factory=dict)  # variant → one per benchmark
    fidelity: dict[str, dict] = field(default_factory=dict)  # variant → fidelity summary
    keys_of: dict[str, dict[str, str]] = field(default_factory=dict)  # variant → benchmark → key
    spans: dict[str, tuple[float, float]] = field(default_factory=dict)  # variant → its scoring's start, end
    bar: Any = None  # Progress over (variant, benchmark) pairs
    sequential: Any = None  # (SequentialRun, SequentialOutcome) under the sequential design


class _EngineSlot:
    """The one engine alive: started on a variant's home, kept while the next variant shares it."""

    def __init__(self, make_engine: Callable[..., Any], ev: _Evaluation):
        self.make_engine, self.ev = make_engine, ev
        self.engine: Any = None
        self.home: Optional[Path] = None
        self.loaded: Optional[str] = None  # the variant whose weights the engine holds

    def on(self, name: str, log) -> Any:
        """The engine for variant ``name``, started (after closing another) when it runs elsewhere."""
        ev, home = self.ev, self.ev.homes[name]
        if self.engine is None or self.home != home:
            self.close()
            if home != ev.post_folder:
                log(
                    f"{name}: its config or tensor layout is the base model's and differs from the post "
                    f"model's ({', '.join(ev.builders[name].config_differences()) or 'tensor names/shapes'}); "
                    f"running it in an engine on {home}"
                )
            self.engine, self.home, self.loaded = _start_engine(self.make_engine, home, ev, log), home, None
        return self.engine

    def holding(self, name: str, scores: "_Scores", log) -> Any:
        """The engine with variant ``name``'s weights streamed in (not again while it holds them)."""
        active = self.on(name, log)
        if self.loaded != name:
            _stream_variant(self.ev, name, active, scores, log)
            self.loaded = name
        return active

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine, self.loaded = None, None


def _start_engine(make_engine: Callable[..., Any], home: Path, ev: _Evaluation, log) -> Any:
    """An engine on ``home`` (vLLM's import and start: tens of seconds on a CPU, said before and after)."""
    if ev.request.progress:
        log(f"starting the engine on {home}")
    began = time.monotonic()
    engine = make_engine(home, ev.options.engine, prompt_format=ev.post_folder)
    engine.progress = ev.request.progress
    if ev.request.progress:
        log(f"engine started in {fmt_seconds(time.monotonic() - began)}")
    return engine


def _score_variants(ev: _Evaluation, make_engine: Callable[..., Any], log) -> _Scores:
    """Every variant on every benchmark, variants that need the same engine one after the other; with
    ``request.progress``, a progress line over the (variant, benchmark) pairs with an ETA."""
    homes = [ev.homes[m] for m in ev.names]
    order = sorted(ev.names, key=lambda n: homes.index(ev.homes[n]))
    scores, slot = _Scores(), _EngineSlot(make_engine, ev)
    if ev.request.options.design == "sequential":
        try:
            _score_sequential(ev, order, slot, scores, log)
        finally:
            slot.close()
        return scores
    scores.bar = Progress(
        len(ev.names) * len(ev.benches), label=f"  [evaluate {ev.transition.label}] ", enabled=ev.request.progress
    )
    try:
        for name in order:
            began = time.time()  # each variant's own time (an engine it starts included), for its MLflow run
            _score_variant(ev, name, slot, scores, log)
            scores.spans[name] = (began, time.time())
    finally:
        slot.close()
    return scores


def _keys(ev: _Evaluation, name: str) -> dict[str, str]:
    """Benchmark → the key of variant ``name``'s answers on it."""
    opts, meta = ev.options, ev.builders[name].metadata()  # the engine dtype resolved: answers keyed by it
    return {
        b.name: evaluation_key(b, meta, opts.engine, opts.template, ev.instruction, ev.prompt["digest"], opts.sampling)
        for b in ev.benches
    }


def _stream_variant(ev: _Evaluation, name: str, active: Any, scores: _Scores, log) -> None:
    """Variant ``name``'s tensors streamed into the running engine; its fidelity report kept."""
    builder = ev.builders[name]
    layout = builder.layout()
    shown = Progress(len(layout), label=f"  [variant {name}: weights] ", enabled=ev.request.progress)
    active.load_weights(
        shown.track(builder.tensors(), lambda t: t[0]), scratch=ev.out / "_swap", layout=layout, config=builder.config()
    )
    scores.fidelity[name] = builder.report.summary()
    from ..variants.fidelity import store_warning

    warning = store_warning(scores.fidelity[name])  # a 16-bit store's rounding (write_variant prints its own)
    if warning:
        log(warning)


def _score_sequential(ev: _Evaluation, order: list[str], slot: _EngineSlot, scores: _Scores, log) -> None:
    """Every variant under the sequential design (:mod:`.sequential`), full first."""
    from .sequential import REFERENCE, SequentialRun

    names = [REFERENCE] + [n for n in order if n != REFERENCE]
    scores.keys_of = {n: _keys(ev, n) for n in names}
    began = time.time()
    run = SequentialRun(
        ev.benches,
        names,
        scores.keys_of,
        ev.out,
        ev.options,
        ev.instruction,
        lambda name: slot.holding(name, scores, log),
        log,
    )
    scores.sequential = (run, run.run())
    scores.results = scores.sequential[1].results
    scores.spans = {n: (began, time.time()) for n in names}


def _score_variant(ev: _Evaluation, name: str, slot: _EngineSlot, scores: _Scores, log) -> None:
    req, builder = ev.request, ev.builders[name]
    keys = _keys(ev, name)
    scores.keys_of[name] = keys
    have = {b.name: scored(ev.out, name, b, keys[b.name], req.options.sampling) for b in ev.benches}
    if all(have.values()):
        log(f"{name}: all {len(ev.benches)} benchmark(s) already scored")
        scores.results[name] = list(have.values())
        scores.bar.skip(len(ev.benches))  # not work of this run: the ETA's rate leaves it out
        return
    if req.options.materialize == "engine":
        active = slot.holding(name, scores, log)
        scores.results[name] = _score_benchmarks(ev, name, active, keys, have, log, scores.bar)
        return
    from ..variants.builder import write_variant

    folder = ev.out / "_variants" / name
    scores.fidelity[name] = write_variant(
        builder, folder, overwrite=True, within=ev.out / "_variants", progress=req.progress
    )
    active = _start_engine(slot.make_engine, folder, ev, log)
    try:
        scores.results[name] = _score_benchmarks(ev, name, active, keys, have, log, scores.bar)
    finally:
        active.close()
        if not req.keep_variants:
            remove_tree(folder, within=ev.out / "_variants")


def _score_benchmarks(
    ev: _Evaluation,
    name: str,
    active: Any,
    keys: dict[str, str],
    have: dict[str, Optional[BenchmarkResult]],
    log,
    bar: Any,
) -> list[BenchmarkResult]:
    """Variant ``name`` (loaded in ``active``) on every benchmark not yet scored under its key; ``bar``
    (a Progress over the evaluation's (variant, benchmark) pairs) advanced after each."""
    req, results = ev.request, []
    for b in ev.benches:
        if have[b.name]:
            results.append(have[b.name])
            bar.skip()
            continue
        r = score_benchmark(
            active,
            b,
            name,
            ev.out,
            keys[b.name],
            template=req.options.template,
            instruction=ev.instruction,
            sampling=req.options.sampling,
        )
        log(
            f"{name} / {b.name}: {r.accuracy:.1f} % of {r.n}"
            + (f" ({r.truncated} cut off at {req.options.engine.max_new_tokens} tokens)" if r.truncated else "")
        )
        results.append(r)
        bar.advance(f"{name} / {b.name}")
    return results


def _tabulate(ev: _Evaluation, scores: _Scores, log) -> EvaluationResult:
    """The tables (accuracy, retention, removal, solved/lost) and the paired differences between variants."""
    from ..stats import claims

    req, builders = ev.request, ev.builders
    flat = [r for n in ev.names for r in scores.results[n]]
    acc = accuracy_table(flat, [b.name for b in ev.benches], req.options.metric)
    used = {builders[n].rest_from for n in ev.names if builders[n].spec.composed}
    t56, t8, info = retention_tables(
        acc, rest_from=used.pop() if len(used) == 1 else None, informative_points=req.informative_points
    )
    fallbacks = sorted({builders[n].rest_fallback for n in ev.names if builders[n].rest_fallback})
    info["rest_from_requested"] = req.rest_from
    if fallbacks:
        info["rest_fallback"] = fallbacks[0]
    if scores.sequential is not None:
        diffs = _sequential_differences(ev, scores, acc, info, req.informative_points)
        lost: list[dict] = []  # the variants rest on different problems: nothing to set side by side
    else:
        per_problem = claims.transition_scores(
            claims.correctness_of(flat, metric=req.options.metric),
            transition=ev.transition.label,
            resamples=req.resamples,
            seed=req.bootstrap_seed,
        )
        diffs = claims.difference_rows(per_problem)
        informative = claims.informative_rows([per_problem], informative_points=req.informative_points)[0]
        info.update({k: v for k, v in informative.items() if k not in ("transition", "kind")})
        lost = solved_lost(flat, req.options.metric)
    warn_truncated(acc, req.options.engine.max_new_tokens, log)
    return EvaluationResult(
        ev.out,
        flat,
        acc,
        t56,
        t8,
        info,
        scores.fidelity,
        [],
        [],
        diffs,
        ev.prompt,
        lost,
        req.options.metric,
        design=req.options.design,
    )


def _sequential_differences(
    ev: _Evaluation, scores: _Scores, acc: list[dict], info: dict, informative_points: float
) -> list[dict]:
    """The sequential design's difference rows, and its gain full − base (paired, anytime-valid) in ``info``."""
    from .sequential import difference_rows

    run, outcome = scores.sequential
    rows = difference_rows(run, outcome, ev.transition.label, {r["variant"]: r["average"] for r in acc})
    base = next((r for r in rows if r["variant"] == "base"), None)
    if base is not None:
        gain = -base["minus_full"]
        info.update(
            gain=gain,
            gain_ci_lo=-base["minus_full_ci_hi"],
            gain_ci_hi=-base["minus_full_ci_lo"],
            informative=gain >= informative_points,
            gain_problems=base["problems"],
            interval="anytime-valid",
        )
        info["informative_within_ci"] = bool(info["informative"] and info["gain_ci_lo"] < informative_points)
    info["design"] = "sequential"
    info["problems"] = {r["variant"]: r["problems"] for r in rows}
    return rows


def _write_tables(ev: _Evaluation, res: EvaluationResult) -> list[Path]:
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
        atomic_write_text(ev.out / fname, to_csv(rows))
        files.append(ev.out / fname)
    return files


def _write_problem_tables(ev: _Evaluation, keys_of: dict[str, dict[str, str]]) -> None:
    """Per-problem records as a table per variant: join variants on (benchmark, problem)."""
    for name in ev.names:
        rows = [row for b in ev.benches for row in problem_rows(ev.out, name, b, keys_of[name][b.name])]
        atomic_write_text(ev.out / name / "problems.csv", to_csv(rows))


def _write_record(ev: _Evaluation, res: EvaluationResult) -> Path:
    """``evaluation.json``: what was evaluated, how, with which versions, and the summary."""
    from .engine import engine_versions  # looked up when called: tests replace it to skip importing vLLM

    req = ev.request
    path = ev.out / RECORD_FILE
    atomic_write_text(
        path,
        json.dumps(
            {
                "store": str(ev.transition.path),
                "engine": ev.options.engine.model_dump(),
                "engine_dtype": ev.dtype_choice.record(),
                "versions": engine_versions(),
                "prompt_format": ev.prompt,
                "bootstrap": {"resamples": req.resamples, "seed": req.bootstrap_seed},
                "sampling": req.options.sampling.model_dump(),
                "metric": req.options.metric,
                "design": req.options.design,
                **(
                    {"sequential": req.options.sequential.model_dump(mode="json")}
                    if req.options.design != "fixed"
                    else {}
                ),
                "benchmarks": {
                    b.name: {"sha256": b.sha256, "n": len(b.problems), "skipped": b.skipped, "path": str(b.path)}
                    for b in ev.benches
                },
                "variants": {n: ev.builders[n].metadata() for n in ev.names},
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
