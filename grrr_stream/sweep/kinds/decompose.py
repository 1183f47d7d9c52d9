"""``decompose/<transition>``: one transition W0 → W1 into its Zarr store (:func:`grrr_stream.run_transition`).

The first decomposition from each W0 computes its frames into the shared cache, and the others from that
W0 start after it (and read them). Its section: ``decomposition``. Its report rows: ``transitions.csv`` (the
paper's Tables 3 and 4 per transition, with the change of numerical rank) and, in the report's data under its
``NAME``, the matrices' rows for the HTML page's heatmaps."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Optional

from ... import plots
from ...columns import CONSOLE, JOINED, TRANSITIONS, VALUE, Column, Schema
from ...config import DecomposeConfig, DecompositionSettings, build_config, result_settings
from ...decompose.plan import plan_transition
from ...decompose.run import run_transition
from ...decompose.spread import in_dask_worker
from ...dtypes import ITEMSIZE
from ...errors import GrrrError
from ...forecast import target as tgt  # a device to forecast for (--forecast-for)
from ...forecast import work
from ...geometry.analyses import MATRIX_COLUMNS
from ...geometry.analyses.bands import DEFAULT_BAND_EDGES, OFF_PRINCIPAL, band_key
from ...geometry.metrics import NRANK_W0, NRANK_W1, PAPER_COLUMNS
from ...runtime.diskplan import transition_needs
from ...store.transition_store import TransitionStore
from ..context import PlanContext, Problems, RunContext
from ..estimate import DiskFacts, UnitForecast, cpu_cores
from ..resources import Needs, cpu_needs, gpu_needs, uses_gpu
from ..rows import Report, Row, TableRows, read_rows, rectangular
from ..sections import Section
from ..units import Transition, Unit, UnitParams
from .base import Kind, Planned

NAME = "decompose"  # the kind's name: its units' ``kind``, the registry's key; spelled only here

STORES = "stores"  # WORKDIR/stores/<transition>-<key8>
FRAMES = "frames"  # the frame cache shared by the decompositions from one W0
METRICS = "metrics.csv"  # the store's per-matrix rows (store.transition_store writes them)
SUMMARY = "summary.json"
TABLE = "transitions.csv"
BANDS_FIGURE = "band_energy.png"  # in WORKDIR/report
OVERHEAD_S = 2.0  # per transition: tables, figures, summary (1.2-2.3 s on the demo's 14 matrices, quiet)


class SweepDecomposition(DecompositionSettings):
    """The ``decomposition`` section: the single-transition settings, and which transitions a chain gives."""

    incremental: bool = True  # parent → child for every child
    cumulative: bool = True  # base → child where the parent is not the base


class DecomposeParams(UnitParams):
    """One transition W0 → W1. Keyed by what identifies the two checkpoints and the result settings;
    the paths, revisions and labels only say where to read and how to label the run."""

    kind: ClassVar[str] = NAME
    transition: str
    base: str  # path or Hub id handed to the decomposition
    post: str
    base_id: dict[str, Any]  # what identifies W0 in keys (see sources.Sources)
    post_id: dict[str, Any]
    base_revision: Optional[str]
    post_revision: Optional[str]
    frame_cache: str
    method: Optional[str]
    chain: str
    settings: DecompositionSettings  # the sweep's decomposition section, less its transition choice
    # "W0 id → W1 id", the transition's name in MLflow (two chains' models share folder names: seed1/base, seed2/base)
    label: Optional[str] = None

    def key_content(self) -> dict:
        return {"base": self.base_id, "post": self.post_id, "settings": result_settings(self.settings)}

    def config(self, store: str, source: str = "arguments", **run: Any) -> DecomposeConfig:
        """The one-transition config this unit runs (``run``: progress, tracking, device)."""
        values = {
            **self.settings.model_dump(mode="json"),
            "base": self.base,
            "post": self.post,
            "base_revision": self.base_revision,
            "post_revision": self.post_revision,
            "frame_cache": self.frame_cache,
            "method": self.method,
            "chain": self.chain,
            "label": self.label,
            "store": store,
            **run,
        }
        return build_config(values, source=source)


def unit_id(transition: str) -> str:
    return f"{NAME}/{transition}"


def keys(ctx: PlanContext) -> dict[str, str]:
    """transition → the key of its decomposition, for the kinds planned after this one."""
    return {u.params.transition: u.key for u in ctx.units_of(NAME)}


def store_of(ctx: RunContext, transition: str) -> Path:
    """Where a transition's decomposition keeps its store, for a unit that reads it."""
    return Path(ctx.outs[unit_id(transition)])


def by_transition(units: list[Unit]) -> dict[str, Unit]:
    """transition → its decompose unit, among a plan's units."""
    return {u.params.transition: u for u in units if u.kind == NAME}


def plan(ctx: PlanContext) -> tuple[list[Unit], Problems]:
    """One unit per transition."""
    d, sources = ctx.cfg.decomposition, ctx.sources
    settings = DecompositionSettings.model_validate(d.model_dump(exclude={"incremental", "cumulative"}))
    units: list[Unit] = []
    frame_producer: dict[str, str] = {}  # W0 model id → the decomposition that computes its frames
    for tid, tr in ctx.transitions.items():
        (base_src, base_id), (post_src, post_id) = sources.resolve(tr.parent), sources.resolve(tr.child)
        params = DecomposeParams(
            transition=tid,
            base=base_src,
            post=post_src,
            base_id=base_id,
            post_id=post_id,
            base_revision=sources.models[tr.parent].revision,
            post_revision=sources.models[tr.child].revision,
            frame_cache=str(ctx.workdir.folder(FRAMES)),
            method=tr.method,
            chain=tr.chain,
            settings=settings,
            label=f"{tr.parent} → {tr.child}",
        )
        gens = tuple(dict.fromkeys(sources.made[m][0].id for m in (tr.parent, tr.child) if m in sources.made))
        uid = unit_id(tid)
        first = frame_producer.setdefault(tr.parent, uid)
        units.append(
            Unit.of(
                uid,
                f"decompose {tr.parent} → {tr.child} ({tr.kind})",
                params,
                ctx.keyed(STORES, tid),
                gens,
                (first,) if first != uid else (),
            )
        )
    return units, []


def run(u: Unit, ctx: RunContext) -> dict:
    p: DecomposeParams = u.params
    run_args = {"progress": ctx.progress, "tracking": ctx.tracking, **({"device": ctx.device} if ctx.device else {})}
    cfg = p.config(u.out, source=u.id, **run_args)
    if in_dask_worker() is not None:  # a sweep on a cluster: the transition's matrices go to all its workers
        from distributed import worker_client

        with worker_client() as client:  # secedes: this task only coordinates, its slot takes a batch
            res = run_transition(cfg, client=client)
    else:
        res = run_transition(cfg)
    overall = next(r for r in res.summary_rows if r["scope"] == "all")
    return {
        "matrices": len(res.rows),
        "computed": res.computed,
        "frames_reused": res.frames_reused,
        "spread_over": len(res.workers),
        **{c.name: overall[c.headline] for c in PAPER_COLUMNS.summarised(overall, CONSOLE)},
    }


def complete(u: Unit) -> bool:
    """The store's manifest says complete, its metrics table is there and every matrix has its folder."""
    out = Path(u.out)
    manifest = TransitionStore.read_manifest(out) or {}
    matrices = out / "matrices"
    return (
        bool(manifest.get("complete"))
        and (out / METRICS).is_file()
        and matrices.is_dir()
        and sum(1 for p in matrices.iterdir() if p.is_dir()) >= len(manifest.get("matrices", ()))
    )


def progress(u: Unit) -> str:
    out = Path(u.out)
    if not (out / "matrices").is_dir():
        return ""

    manifest = TransitionStore.read_manifest(out) or {}
    total = len(manifest.get("matrices", []))
    done = len(TransitionStore(out, None).completed())
    return f"{done}/{total} matrices stored" if total else ""


def disk(u: Unit, facts: DiskFacts) -> Optional[list]:
    """What the store and the frame cache will hold, from the checkpoints' headers (None: not here yet)."""
    p: DecomposeParams = u.params
    ck, post = facts.checkpoints.get(p.base), facts.checkpoints.get(p.post)
    if ck is None or post is None:
        return None
    try:  # the decomposition's own planning: the same matrices, experts and fused blocks
        names = plan_transition(ck, post, p.config(u.out)).matrices
    except GrrrError:
        return None  # the unit itself will say what is wrong
    return _needs(p, u, [ck.matrix_shape(m) for m in names])


def _needs(p: DecomposeParams, u: Unit, shapes: list) -> list:
    s = p.settings
    return transition_needs(
        shapes,
        Path(u.out),
        Path(p.frame_cache),
        store_dtype=s.store_dtype,
        compute_dtype=s.compute_dtype,
        null_storage=s.null_storage,
        core_truncated=s.core_rel_threshold is not None,
        # a later decomposition from the same W0 finds its frames in the cache
        frames_cached_fraction=1.0 if u.after else 0.0,
    )


def estimate(u: Unit, facts) -> UnitForecast:
    """SVD and projection flops of W0's shapes at the device's measured rate."""
    p: DecomposeParams = u.params
    base = facts.get(p.base, p.base_revision)
    facts.get(p.post, p.post_revision)  # the post's shapes are looked up too: the forecast names its source
    down = [facts.fetch(p.base, p.base_revision), facts.fetch(p.post, p.post_revision)]
    download = None if None in down else sum(down)
    write, rates = facts.write(u), facts.rates
    if base.shapes is None or rates is None:
        return UnitForecast(u.id, u.kind, download, write, None, None, f"shapes {base.where}")
    flops = sum(work.decompose_flops(s, frame_cached=bool(u.after)) for s in base.shapes)
    if write is None:  # checkpoints not here yet: the same disk model from the shapes known now
        write = sum(n.bytes for n in _needs(p, u, base.shapes))
    ram = work.decompose_ram(
        base.shapes,
        ITEMSIZE[p.settings.compute_dtype],
        1 if getattr(p.settings, "cpu_threads", None) else cpu_cores(rates),
    )
    seconds = tgt.decompose_seconds(base.shapes, rates, frame_cached=bool(u.after)) + OVERHEAD_S
    gpu = tgt.decompose_gpu_bytes(base.shapes, ITEMSIZE[p.settings.compute_dtype]) if tgt.on_gpu(rates) else None
    return UnitForecast(
        u.id,
        u.kind,
        download,
        write,
        ram,
        seconds,
        f"{len(base.shapes)} matrices ({base.where}), {flops / 1e12:.3g} TFLOP",
        flops,
        gpu,
    )


def needs(u: Unit, forecast: Optional[UnitForecast], device: Optional[str]) -> Needs:
    """A GPU only on device 'cuda' (the run's --device, else the config's; 'auto' and 'cpu' run on any worker);
    on a cluster the unit's matrix batches hold it, and its own task only coordinates them."""
    dev = device or u.params.settings.device
    found = gpu_needs(forecast) if uses_gpu(dev) else cpu_needs(u, forecast)
    return replace(found, spread=True)


def report(plan: Planned, done: list[Unit], rep: Report) -> list[TableRows]:
    """transitions.csv, and each store's matrix rows for the page's heatmaps (``rep.data[NAME]``)."""
    out, matrices = [], rep.data.setdefault(NAME, {})
    for u in done:
        tr = plan.transitions[u.params.transition]
        matrices[tr.id] = read_rows(Path(u.out) / METRICS)
        out.append(transition_row(tr, Path(u.out), matrices[tr.id]))
    return [TableRows(TABLE, rectangular(out))]


def write(rep: Report) -> list[Path]:
    trows = rep.rows(TABLE)
    edge = next(
        (e for e in (64, *DEFAULT_BAND_EDGES) if trows and trows[0].get(OFF_PRINCIPAL.at(edge=e).headline) is not None),
        None,
    )
    if edge is None:
        return []
    return [plots.band_energy_by_transition(trows, edge, rep.folder / BANDS_FIGURE, band_key(headline=True))]


def matrix_rows(rep: Report) -> dict[str, list[Row]]:
    """transition id → its store's per-matrix rows (metrics.csv), as the report read them."""
    return rep.data.get(NAME, {})


def transition_row(tr: Transition, store: Path, matrix_rows: Optional[list[Row]] = None) -> Row:
    """One row of transitions.csv: the store's summary statistics (summary.json) of every column shown in
    transitions.csv (the paper's Tables 3 and 4, the numerical ranks in name order, then the analyses beyond the
    paper in summary.json's order: means first, then pooled figures, then texts) and, per rank threshold T, the
    change of numerical rank W0 → W1 (its mean over matrices and largest magnitude, from metrics.csv;
    ``matrix_rows``: those rows when the caller has read them already)."""
    summary = json.loads((store / SUMMARY).read_text())["scopes"]["all"]
    found = MATRIX_COLUMNS.ordered(MATRIX_COLUMNS.summarised(summary, TRANSITIONS))
    ranks = sorted((c for c in found if c.of(NRANK_W0) or c.of(NRANK_W1)), key=lambda c: c.name)
    paper = [c for c in found if PAPER_COLUMNS.column(c.name) is not None and c not in ranks]
    beyond = [c for c in found if PAPER_COLUMNS.column(c.name) is None]

    def stats(cols: list[Column], as_stored: bool = False) -> Row:
        names = [s for c in cols for s in c.transition_stats]
        if as_stored:  # in summary.json's order
            names = [k for k in summary if k in set(names)]
        return {s: summary.get(s) for s in names}

    row: Row = {
        "transition": tr.id,
        "chain": tr.chain,
        "kind": tr.kind,
        "from": tr.parent,
        "to": tr.child,
        "method": tr.method or "",
        "domain": tr.domain or "",
        "n": summary["n"],
        **stats(paper + ranks),
    }
    if matrix_rows is None:
        matrix_rows = read_rows(store / METRICS)
    row.update(_rank_changes(matrix_rows, [c.values["threshold"] for c in ranks if c.of(NRANK_W0)]))
    row.update(stats([c for c in beyond if c.aggregate.first], as_stored=True))
    row.update(stats([c for c in beyond if not c.aggregate.first and c.aggregate is not JOINED], as_stored=True))
    row.update(stats([c for c in beyond if c.aggregate is JOINED], as_stored=True))
    row["store"] = str(store)
    return row


# transitions.csv's rank changes per threshold T, from metrics.csv (Table 4)
RANK_CHANGE_MEAN = Column("nrank_change_{threshold}_mean", "Δ rank at {threshold}: mean", "count", aggregate=VALUE)
RANK_CHANGE_MAX = Column("nrank_change_{threshold}_maxabs", "Δ rank at {threshold}: max |·|", "count", aggregate=VALUE)
RANK_CHANGES = Schema((RANK_CHANGE_MEAN, RANK_CHANGE_MAX))


def _rank_changes(rows: list[Row], thresholds: list[str]) -> Row:
    """Per threshold T (as the store names it, e.g. '0.001'): nrank(W1) − nrank(W0) per matrix, its mean
    and its largest magnitude. The paper reads the rank change at T = 1e-3; at 1e-7 it counts rounding."""
    out: Row = {}
    for t in thresholds:
        w0, w1 = NRANK_W0.at(threshold=t).name, NRANK_W1.at(threshold=t).name
        d = [r[w1] - r[w0] for r in rows if isinstance(r.get(w1), int) and isinstance(r.get(w0), int)]
        out[RANK_CHANGE_MEAN.at(threshold=t).name] = sum(d) / len(d) if d else None
        out[RANK_CHANGE_MAX.at(threshold=t).name] = max(abs(x) for x in d) if d else None
    return out


KIND = Kind(
    name=NAME,
    params=DecomposeParams,
    plan=plan,
    run=run,
    marker=None,
    config=(Section("decomposition", SweepDecomposition),),
    tables=(TABLE,),
    on_worker=True,
    estimate=estimate,
    complete=complete,
    report=report,
    write=write,
    disk=disk,
    progress=progress,
    needs=needs,
)
