"""Scoring variants of an evaluation on its benchmarks, for the designs (:mod:`.designs`) to order: the one engine
alive (:class:`EngineSlot`), each variant's weights streamed into it or written to a folder of its own, the
answers already there reused. ``evaluation`` is the pipeline's prepared evaluation (its request, options,
benchmarks, variant builders and engine homes)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from ..files import remove_tree
from ..progress import Progress, fmt_seconds
from .scoring import BenchmarkResult, evaluation_key, score_benchmark, scored


@dataclass
class Scores:
    results: dict[str, list[BenchmarkResult]] = field(default_factory=dict)  # variant → one per benchmark
    fidelity: dict[str, dict] = field(default_factory=dict)  # variant → fidelity summary
    keys_of: dict[str, dict[str, str]] = field(default_factory=dict)  # variant → benchmark → key
    spans: dict[str, tuple[float, float]] = field(default_factory=dict)  # variant → its scoring's start, end
    bar: Any = None  # Progress over (variant, benchmark) pairs
    outcome: Any = None  # what the design keeps of its run beyond the results (the adaptive one: its rounds)


class EngineSlot:
    """The one engine alive: started on a variant's home, kept while the next variant shares it."""

    def __init__(self, make_engine: Callable[..., Any], evaluation: Any):
        self.make_engine, self.evaluation = make_engine, evaluation
        self.engine: Any = None
        self.home: Optional[Path] = None
        self.loaded: Optional[str] = None  # the variant whose weights the engine holds

    def on(self, name: str, log) -> Any:
        """The engine for variant ``name``, started (after closing another) when it runs elsewhere."""
        evaluation, home = self.evaluation, self.evaluation.homes[name]
        if self.engine is None or self.home != home:
            self.close()
            if home != evaluation.post_folder:
                log(
                    f"{name}: its config or tensor layout is the base model's and differs from the post "
                    f"model's ({', '.join(evaluation.builders[name].config_differences()) or 'tensor names/shapes'}); "
                    f"running it in an engine on {home}"
                )
            self.engine, self.home, self.loaded = start_engine(self.make_engine, home, evaluation, log), home, None
        return self.engine

    def holding(self, name: str, scores: "Scores", log) -> Any:
        """The engine with variant ``name``'s weights streamed in (not again while it holds them)."""
        active = self.on(name, log)
        if self.loaded != name:
            _stream_variant(self.evaluation, name, active, scores, log)
            self.loaded = name
        return active

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine, self.loaded = None, None


def start_engine(make_engine: Callable[..., Any], home: Path, evaluation: Any, log) -> Any:
    """An engine on ``home`` (vLLM's import and start: tens of seconds on a CPU, said before and after)."""
    if evaluation.request.progress:
        log(f"starting the engine on {home}")
    began = time.monotonic()
    engine = make_engine(home, evaluation.options.engine, prompt_format=evaluation.post_folder)
    engine.progress = evaluation.request.progress
    if evaluation.request.progress:
        log(f"engine started in {fmt_seconds(time.monotonic() - began)}")
    return engine


def keys_for(evaluation: Any, name: str) -> dict[str, str]:
    """Benchmark → the key of variant ``name``'s answers on it."""
    opts, meta = (
        evaluation.options,
        evaluation.builders[name].metadata(),
    )  # the engine dtype resolved: answers keyed by it
    return {
        b.name: evaluation_key(
            b, meta, opts.engine, opts.template, evaluation.instruction, evaluation.prompt["digest"], opts.sampling
        )
        for b in evaluation.benches
    }


def _stream_variant(evaluation: Any, name: str, active: Any, scores: Scores, log) -> None:
    """Variant ``name``'s tensors streamed into the running engine; its fidelity report kept."""
    builder = evaluation.builders[name]
    layout = builder.layout()
    shown = Progress(len(layout), label=f"  [variant {name}: weights] ", enabled=evaluation.request.progress)
    active.load_weights(
        shown.track(builder.tensors(), lambda t: t[0]),
        scratch=evaluation.out / "_swap",
        layout=layout,
        config=builder.config(),
    )
    scores.fidelity[name] = builder.report.summary()
    from ..variants.fidelity import store_warning

    warning = store_warning(scores.fidelity[name])  # a 16-bit store's rounding (write_variant prints its own)
    if warning:
        log(warning)


@contextlib.contextmanager
def sharing(evaluation: Any, keys_of: dict[str, dict[str, str]]) -> Iterator[None]:
    """Around scoring the variants of ``keys_of`` (variant → benchmark → key): what the sweep's shared answers hold
    for those that are a checkpoint another transition evaluated is copied in first (it counts as answered), and
    what they answered is shared after, a failure's included."""
    shared = evaluation.shared
    mine = [n for n in keys_of if shared is not None and shared.shares(evaluation, n)]
    for n in mine:
        shared.take(evaluation, n, keys_of[n])
    try:
        yield
    finally:
        for n in mine:
            shared.give(evaluation, n, keys_of[n])


def score_variant(evaluation: Any, name: str, slot: EngineSlot, scores: Scores, log) -> None:
    keys = keys_for(evaluation, name)
    scores.keys_of[name] = keys
    with sharing(evaluation, {name: keys}):
        _score_variant(evaluation, name, slot, scores, keys, log)


def _score_variant(evaluation: Any, name: str, slot: EngineSlot, scores: Scores, keys: dict, log) -> None:
    req, builder = evaluation.request, evaluation.builders[name]
    have = {b.name: scored(evaluation.out, name, b, keys[b.name], req.options.sampling) for b in evaluation.benches}
    if all(have.values()):
        log(f"{name}: all {len(evaluation.benches)} benchmark(s) already scored")
        scores.results[name] = list(have.values())
        scores.bar.skip(len(evaluation.benches))  # not work of this run: the ETA's rate leaves it out
        return
    if req.options.materialize == "engine":
        active = slot.holding(name, scores, log)
        scores.results[name] = _score_benchmarks(evaluation, name, active, keys, have, log, scores.bar)
        return
    from ..variants.builder import write_variant

    folder = evaluation.out / "_variants" / name
    scores.fidelity[name] = write_variant(
        builder, folder, overwrite=True, within=evaluation.out / "_variants", progress=req.progress
    )
    active = start_engine(slot.make_engine, folder, evaluation, log)
    try:
        scores.results[name] = _score_benchmarks(evaluation, name, active, keys, have, log, scores.bar)
    finally:
        active.close()
        if not req.keep_variants:
            remove_tree(folder, within=evaluation.out / "_variants")


def _score_benchmarks(
    evaluation: Any,
    name: str,
    active: Any,
    keys: dict[str, str],
    have: dict[str, Optional[BenchmarkResult]],
    log,
    bar: Any,
) -> list[BenchmarkResult]:
    """Variant ``name`` (loaded in ``active``) on every benchmark not yet scored under its key; ``bar``
    (a Progress over the evaluation's (variant, benchmark) pairs) advanced after each."""
    req, results = evaluation.request, []
    for b in evaluation.benches:
        if have[b.name]:
            results.append(have[b.name])
            bar.skip()
            continue
        r = score_benchmark(
            active,
            b,
            name,
            evaluation.out,
            keys[b.name],
            template=req.options.template,
            instruction=evaluation.instruction,
            sampling=req.options.sampling,
            log=log,
        )
        log(
            f"{name} / {b.name}: {r.accuracy:.1f} % of {r.n}"
            + (f" ({r.truncated} cut off at {req.options.engine.max_new_tokens} tokens)" if r.truncated else "")
        )
        results.append(r)
        bar.advance(f"{name} / {b.name}")
    return results
