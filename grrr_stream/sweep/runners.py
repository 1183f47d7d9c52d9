"""Running one unit, here or on a Dask worker: one runner per kind of unit, and its record.

A runner reads its unit's typed parameters and the :class:`RunContext` (the settings that do
not change results) and returns a small JSON-able summary for the unit's record.
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

from ..config import TrackingConfig
from ..errors import GrrrError
from ..progress import Progress
from ..unit_log import log_path, unit_log
from .records import Records
from .runners_channels import run_channel_stats_unit, run_channels_unit
from .units import CompareParams, DecomposeParams, EvaluateParams, GenerateParams, StatsParams, Unit, VariantParams


@dataclass(frozen=True)
class RunContext:
    """What a unit is run with that cannot change its result. It travels to Dask workers, less ``client``."""

    workdir: str
    tracking: TrackingConfig             # pickled as the pydantic object to Dask workers
    progress: bool
    device: Optional[str]
    threads: Optional[int]                # torch threads of a worker process (its share of the cores)
    stores: dict[str, str] = field(default_factory=dict)  # transition id → its decomposition's store
    # claims.informative_points, for an evaluation's own informative flag (recorded beside it in evaluation.json;
    # the report's informative.csv recomputes it with the current setting)
    informative_points: float = 1.0
    client: Any = None                    # the Dask client, for units run in the scheduler's process
    verbose: bool = False                 # third-party output live on the terminal too, not only in its log

    def for_worker(self) -> "RunContext":
        return replace(self, client=None)

    @property
    def scheduler(self) -> Any:
        return self.client or "threads"


def run_unit(u: Unit, ctx: RunContext) -> dict:
    """Execute one unit and record the outcome; never raises for a failure of the unit itself."""
    records = Records(Path(ctx.workdir))
    started = time.time()
    where = {"host": socket.gethostname(), "pid": os.getpid()}
    records.write(u, {"id": u.id, "key": u.key, "status": "running", "started": started, **where})
    if ctx.threads:
        import torch

        torch.set_num_threads(int(ctx.threads))
    from ..tracking.run_log import missed

    missed_before = len(missed())
    log = log_path(ctx.workdir, u.id)
    try:
        # vLLM's, transformers' and MLflow's own output (logging, warnings, progress bars, C++ prints)
        # goes to the unit's log; this package's progress lines stay on the terminal (unit_log.console)
        with unit_log(log, verbose=ctx.verbose):
            try:
                result = _RUNNERS[u.kind](u, ctx)
            except KeyboardInterrupt:
                raise
            except BaseException:
                traceback.print_exc()  # into the log, after what the libraries said before the failure
                raise
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - recorded, reported, and the sweep goes on
        expected = isinstance(e, GrrrError)
        rec = {"id": u.id, "key": u.key, "status": "failed", "started": started, "seconds": time.time() - started,
               "error": f"{type(e).__name__}: {e} (its output: {log})", "expected": expected,
               "traceback": traceback.format_exc()[-6000:], "log": str(log), **where}
        records.write(u, rec)
        return rec
    rec = {"id": u.id, "key": u.key, "status": "done", "started": started, "seconds": time.time() - started,
           "result": result or {}, "log": str(log), **where}
    tracking_missed = missed()[missed_before:]  # done all the same: recorded in WORKDIR/.sweep/tracking
    if tracking_missed:
        rec["tracking"] = "not logged: " + "; ".join(tracking_missed)
    records.write(u, rec)
    return rec


def _run_generate(u: Unit, ctx: RunContext) -> dict:
    from ..fixtures.tinychain import build_chain

    p: GenerateParams = u.params
    build_chain(Path(u.out), seed=p.seed, quick=p.quick, progress=ctx.progress, retrain=p.retrain)
    meta = json.loads((Path(u.out) / "chain.json").read_text())
    return {"accuracy": meta.get("accuracy"), "seconds": meta.get("seconds", {}).get("total"),
            "origin": meta.get("origin", "trained")}


def _run_decompose(u: Unit, ctx: RunContext) -> dict:
    from ..decompose.run import run_transition

    p: DecomposeParams = u.params
    run = {"progress": ctx.progress, "tracking": ctx.tracking, **({"device": ctx.device} if ctx.device else {})}
    cfg = p.config(u.out, source=u.id, **run)
    from ..decompose.spread import in_dask_worker

    if in_dask_worker() is not None:  # a sweep on a cluster: the transition's matrices go to all its workers
        from distributed import worker_client

        with worker_client() as client:  # secedes: this task only coordinates, its slot takes a batch
            res = run_transition(cfg, client=client)
    else:
        res = run_transition(cfg)
    overall = next(r for r in res.summary_rows if r["scope"] == "all")
    return {"matrices": len(res.rows), "computed": res.computed, "frames_reused": res.frames_reused,
            "spread_over": len(res.workers),
            **{k: overall[f"{k}_mean"] for k in ("f_diag", "f_off", "f_null", "r_delta")}}


def _run_stats(u: Unit, ctx: RunContext) -> dict:
    from ..stats.run import run_stats

    p: StatsParams = u.params
    stores = [Path(ctx.stores[t]) for t in p.transitions]
    res = run_stats(stores, Path(u.out), resamples=p.resamples, seed=p.seed, scheduler=ctx.scheduler,
                    tracking=ctx.tracking)
    return {"files": [str(f) for f in res.files]}


def _run_compare(u: Unit, ctx: RunContext) -> dict:
    from ..stats.run import run_comparisons

    p: CompareParams = u.params
    ancestor = Path(ctx.stores[p.ancestor]) if p.ancestor else None
    res = run_comparisons([(p.comparison, Path(ctx.stores[p.a]), Path(ctx.stores[p.b]), ancestor)], Path(u.out),
                          resamples=p.resamples, null_draws=p.null_draws, seed=p.seed, alpha=p.alpha,
                          scheduler=ctx.scheduler, tracking=ctx.tracking)
    s = res.summaries[0]
    return {k: s[k] for k in ("median_cos_off", "ci_lo", "ci_hi", "p_value", "verdict")}


def _run_variant(u: Unit, ctx: RunContext) -> dict:
    from ..runtime.device import resolve_device
    from ..variants.spec import parse_variant
    from ..variants.builder import VariantBuilder, write_variant
    from ..tracking.runs import log_variant

    p: VariantParams = u.params
    builder = VariantBuilder(Path(ctx.stores[p.transition]), parse_variant(p.variant), dtype=p.dtype,
                             rest_from=p.rest_from, device=str(resolve_device(ctx.device or p.device)),
                             channels=p.channels)
    started = time.time()
    # a half-written folder of a killed build is replaced (its completion marker is written last)
    summary = write_variant(builder, Path(u.out), max_shard_bytes=int(p.shard_gb * 2**30), overwrite=True,
                            progress=ctx.progress)
    if ctx.tracking.enabled:
        log_variant(builder, Path(u.out), summary, ctx.tracking, started=started, seconds=time.time() - started)
    return {k: summary[k] for k in ("fidelity", "fidelity_max", "energy_survived")}


def _run_evaluate(u: Unit, ctx: RunContext) -> dict:
    from ..evaluation.pipeline import EvaluationRequest, run_evaluation

    # vLLM logs every weight swap at INFO and dozens of harmless kernel-registration warnings per
    # engine: kept at WARNING (set VLLM_LOGGING_LEVEL=INFO for more); they go to the unit's log
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    p: EvaluateParams = u.params
    reporter = Progress(0, enabled=ctx.progress)
    log = lambda msg: reporter.message(f"  [{u.id}] {msg}")  # noqa: E731 (a one-line callback)
    request = EvaluationRequest(Path(ctx.stores[p.transition]), Path(u.out), list(p.variants), list(p.benchmarks),
                                Path(p.bench_dir) if not p.bench_dir.startswith("hub") else p.bench_dir,
                                settings=p.engine, materialize=p.materialize, limit=p.limit, lenient=p.lenient,
                                template=p.template, instruction=p.instruction, sampling=p.sampling,
                                metric=p.metric, nest_sampled=False, rest_from=p.rest_from,
                                channels=Path(p.channels) if p.channels else None,
                                informative_points=ctx.informative_points, progress=ctx.progress)
    res = run_evaluation(request, tracking=ctx.tracking, log=log)
    return {"average": {r["variant"]: r["average"] for r in res.accuracy_rows}, "gain": res.info.get("gain")}


_RUNNERS: dict[str, Callable[[Unit, RunContext], dict]] = {
    "generate": _run_generate, "decompose": _run_decompose, "stats": _run_stats, "compare": _run_compare,
    "variant": _run_variant, "evaluate": _run_evaluate, "channels": run_channels_unit,
    "channel-stats": run_channel_stats_unit,
}
