"""Sweeps: chains of models → a plan of units of work → executed, resumably, here or on a Dask cluster.

Plan, then execute. :func:`plan_sweep` expands a :class:`~grrr_stream.config.SweepConfig`
into units (generate the tiny chain, decompose a transition, summary statistics, one
comparison, one variant build, one transition's evaluation), each with a *key*: a hash of
everything that determines its result, including the keys of the units it reads from.
Outputs live under folders named by that key, so a changed setting produces new results
beside the old ones instead of mixing with them, and a setting that cannot change
results (device, progress display, tracking) leaves keys, and therefore results, alone.

A unit is done when its record under ``WORKDIR/.sweep/units/`` says so with the same key
and its output exists. The units themselves resume at a finer grain (matrix, variant,
prompt), so a kill at any moment loses at most the matrix / chunk of prompts in flight.
A failing unit is recorded with its error; units that need its output are *blocked*, the
rest go on. One sweep process per workdir (an advisory lock).
"""

from __future__ import annotations

import functools
import json
import math
import os
import socket
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, TextIO

from .config import (SweepConfig, TinyChainSpec, build_config, build_engine_settings, build_sampling_settings, clip,
                     result_settings, stable_hash)
from .errors import ConfigError, GrrrError, StoreError
from .locks import FileLock

SWEEP_FORMAT = 1
WORKER_KINDS = ("generate", "decompose", "variant", "evaluate")  # the heavy, GPU-bound kinds
KIND_ORDER = ("generate", "decompose", "stats", "compare", "variant", "evaluate")


# ---------------------------------------------------------------------------
# the plan


@dataclass(frozen=True)
class Transition:
    id: str
    chain: str
    parent: str       # model id (W0)
    child: str        # model id (W1)
    kind: str         # 'cumulative' (from the chain's base) or 'incremental' (from an intermediate model)
    method: Optional[str]
    domain: Optional[str]


@dataclass(frozen=True)
class Unit:
    id: str              # e.g. 'decompose/base-to-sft'
    kind: str            # one of KIND_ORDER
    label: str           # one line for humans
    key: str             # hash of everything its result depends on
    out: str             # its result folder
    deps: tuple[str, ...] = ()
    params: dict = field(default_factory=dict)  # JSON-able: what run_unit needs
    # order only: start after these have ended, whatever their outcome (the first
    # decomposition from a base computes the frames the others then read from the cache)
    after: tuple[str, ...] = ()

    @property
    def on_worker(self) -> bool:
        return self.kind in WORKER_KINDS


@dataclass
class Plan:
    config: SweepConfig
    workdir: Path
    units: list[Unit]                     # dependencies before dependents
    transitions: dict[str, Transition]
    models: dict[str, dict]               # model id → {'source', 'revision', 'chain', ...}

    def unit(self, uid: str) -> Unit:
        return self._index[uid]

    def __post_init__(self) -> None:
        self._index = {u.id: u for u in self.units}

    @property
    def key(self) -> str:
        return stable_hash({"name": self.config.name, "units": sorted(u.key for u in self.units),
                            "claims": self.config.claims.model_dump()}, 24)


def _select(selector: Any, transitions: dict[str, Transition], what: str, problems: list[str]) -> list[str]:
    if selector in (None, "none", False):
        return []
    if selector == "all":
        return list(transitions)
    if selector in ("cumulative", "incremental"):
        return [t for t, tr in transitions.items() if tr.kind == selector]
    if isinstance(selector, list):
        unknown = [s for s in selector if s not in transitions]
        if unknown:
            problems.append(f"{what}: unknown transition(s) {unknown}; planned: {sorted(transitions)}")
        return [s for s in selector if s in transitions]
    problems.append(f"{what}: expected cumulative, incremental, all, none or a list of transition ids, "
                    f"got {selector!r}")
    return []


def plan_sweep(cfg: SweepConfig) -> Plan:
    """Every unit of the sweep, dependencies first; all config problems reported at once."""
    from . import tinychain
    from .variants import parse_variant

    workdir = Path(cfg.workdir).absolute()
    problems: list[str] = []
    units: list[Unit] = []

    # -- models and the generated tiny chain --------------------------------
    models: dict[str, dict] = {}
    for chain in cfg.chains:
        for i, m in enumerate([chain.base, *chain.models]):
            if m.id in models:
                problems.append(f"model id '{m.id}' is used twice (chains {models[m.id]['chain']} and {chain.name})")
                continue
            parent = None if i == 0 else (m.parent or chain.base.id)
            models[m.id] = {"source": m.source, "revision": m.revision, "chain": chain.name, "parent": parent,
                            "base": chain.base.id, "method": m.method, "domain": m.domain,
                            "confirmed": m.confirmed}
    generated = {mid: m["source"].split(":", 1)[1] for mid, m in models.items()
                 if m["source"].startswith("tinychain:")}
    gen_unit: Optional[Unit] = None
    uses_tiny_bench = any(e.enabled and e.bench_dir == "tinychain" for e in (cfg.evaluation, *cfg.extra_evaluations))
    if generated or uses_tiny_bench:
        bad = sorted(f"{mid} ({name})" for mid, name in generated.items() if name not in tinychain.MODELS)
        if bad:
            problems.append(f"tinychain sources name models {tinychain.MODELS}; got {bad}")
        tc = cfg.tinychain or TinyChainSpec()
        gen_key = stable_hash({"tinychain": tinychain.CHAIN_VERSION, "seed": tc.seed, "quick": tc.quick}, 24)
        out = workdir / "tinychain" / f"seed{tc.seed}{'-quick' if tc.quick else ''}"
        gen_unit = Unit("generate/tinychain", "generate", f"train the tiny chain (seed {tc.seed}"
                        f"{', quick' if tc.quick else ''})", gen_key, str(out),
                        params={"seed": tc.seed, "quick": tc.quick})
        units.append(gen_unit)

    @functools.lru_cache(maxsize=None)  # a base appears in several transitions: fingerprint it once
    def source(mid: str) -> tuple[str, dict]:
        """Path/Hub id handed to the decomposition, and what identifies it in keys."""
        m = models[mid]
        if mid in generated:
            path = str(Path(gen_unit.out) / generated[mid])
            return path, {"generated": gen_unit.key, "model": generated[mid]}
        src = m["source"]
        local = Path(src).expanduser()
        if local.exists() or src.startswith((".", "/", "~")):
            src = str(local.absolute())
            # a local folder is keyed by its path and its content's fingerprint: a checkpoint
            # replaced in place gets new results instead of passing for the old ones
            return src, {"source": src, "fingerprint": _fingerprint(local)}
        return src, {"source": src, "revision": m["revision"]}  # a Hub id: its revision pins it

    @functools.lru_cache(maxsize=None)
    def rest_check(tid: str) -> list[str]:
        """Why the W0 of a transition cannot supply the non-decomposed tensors of composed variants,
        known at plan time for local checkpoints only (generated and Hub ones are checked by the
        unit itself, before it builds anything)."""
        from .checkpoint import Checkpoint
        from .variants import rest_problems

        tr = transitions[tid]
        if tr.parent in generated or tr.child in generated:
            return []
        paths = [Path(source(m)[0]) for m in (tr.parent, tr.child)]
        if not all(p.is_dir() for p in paths):
            return []
        try:
            return rest_problems(*(Checkpoint.open(p) for p in paths))
        except (GrrrError, OSError):
            return []  # unreadable now: its decomposition fails with the real error

    # -- lineage → transitions ----------------------------------------------
    def ancestors(mid: str) -> list[str]:
        seen, cur = [], models[mid]["parent"]
        while cur is not None:
            if cur not in models or models[cur]["chain"] != models[mid]["chain"]:
                problems.append(f"model '{mid}': parent '{cur}' is not a model of chain {models[mid]['chain']}")
                return seen
            if cur in seen or cur == mid:
                problems.append(f"model '{mid}': its lineage has a cycle ({' → '.join([mid, *seen, cur])})")
                return seen
            seen.append(cur)
            cur = models[cur]["parent"]
        return seen

    n_problems = len(problems)
    lineage, broken = {}, set()
    for mid in models:
        lineage[mid] = ancestors(mid)
        if len(problems) > n_problems:
            broken.add(mid)
            n_problems = len(problems)
    transitions: dict[str, Transition] = {}
    d = cfg.decomposition
    for mid, m in models.items():
        if m["parent"] is None or mid in broken:
            continue
        base = m["base"]
        pairs = []
        if m["parent"] == base:
            pairs.append((base, "cumulative"))
        else:
            if d.incremental:
                pairs.append((m["parent"], "incremental"))
            if d.cumulative:
                pairs.append((base, "cumulative"))
        for parent, kind in pairs:
            tid = f"{parent}-to-{mid}"
            transitions[tid] = Transition(tid, m["chain"], parent, mid, kind, m["method"], m["domain"])

    # -- decompositions: one unit per transition; frames shared per W0 ---------
    frame_cache = workdir / "frames"
    dec_key: dict[str, str] = {}
    frame_producer: dict[str, str] = {}  # W0 model id → the decomposition that computes its frames
    for tid, tr in transitions.items():
        base_src, base_id = source(tr.parent)
        post_src, post_id = source(tr.child)
        # validated with the config already; the same fields as a one-transition config
        values = {**d.model_dump(mode="json", exclude={"incremental", "cumulative"}),
                  "base": base_src, "post": post_src, "base_revision": models[tr.parent]["revision"],
                  "post_revision": models[tr.child]["revision"], "frame_cache": str(frame_cache),
                  "method": tr.method, "chain": tr.chain}
        settings = result_settings(d)
        key = stable_hash({"base": base_id, "post": post_id, "settings": settings}, 24)
        dec_key[tid] = key
        deps = tuple(u for u in ("generate/tinychain",) if gen_unit and (tr.parent in generated or tr.child in generated))
        first = frame_producer.setdefault(tr.parent, f"decompose/{tid}")
        after = (first,) if first != f"decompose/{tid}" else ()
        units.append(Unit(f"decompose/{tid}", "decompose", f"decompose {tr.parent} → {tr.child} ({tr.kind})", key,
                          str(workdir / "stores" / f"{tid}-{key[:8]}"), deps, {**values, "transition": tid}, after))

    # -- statistics and comparisons --------------------------------------------
    s = cfg.statistics
    if s.enabled and dec_key:
        stat_settings = {"resamples": s.resamples, "seed": s.seed}
        key = stable_hash({"stores": sorted(dec_key.values()), **stat_settings}, 24)
        units.append(Unit("stats/summary", "stats", f"bootstrap summaries of {len(dec_key)} transition(s)", key,
                          str(workdir / "stats" / key[:8]), tuple(f"decompose/{t}" for t in dec_key),
                          {"transitions": list(dec_key), **stat_settings}))
        pairs: list[tuple[str, str, str, Optional[str]]] = []  # (kind, a, b, ancestor transition)
        from_base = {tr.child: tid for tid, tr in transitions.items() if tr.kind == "cumulative"}
        reduced = d.store_dtype in ("bfloat16", "float16")
        if s.sequential:
            for mid, m in models.items():
                p = m["parent"]
                if p is not None and p != m["base"] and p in from_base and mid in from_base:
                    pairs.append(("sequential", from_base[p], from_base[mid], None))
        if s.independent:
            # every pair of models neither of which descends from the other, at any depth, compared
            # as their updates from their nearest common ancestor (the base, or a shared parent)
            kids = sorted(from_base)
            for i, a in enumerate(kids):
                for b in kids[i + 1:]:
                    if models[a]["chain"] != models[b]["chain"] or a in lineage[b] or b in lineage[a]:
                        continue
                    anc = nearest_common_ancestor(lineage[a], lineage[b])
                    if anc == models[a]["base"]:
                        pairs.append(("independent", from_base[a], from_base[b], None))
                    elif anc in from_base:
                        pairs.append(("independent", from_base[a], from_base[b], from_base[anc]))
        if reduced and any(kind == "sequential" or c is not None for kind, _, _, c in pairs):
            problems.append(f"decomposition.store_dtype: {d.store_dtype} cannot feed sequential comparisons or "
                            "independent ones from a shared parent (they take differences of stored P, which keep "
                            "few bits in 16-bit floats): use store_dtype float32, or set statistics.sequential / "
                            "statistics.independent to false")
        if d.null_storage != "array" and any(kind == "sequential" or c is not None for kind, _, _, c in pairs):
            problems.append("decomposition.null_storage: norms cannot feed sequential comparisons or independent "
                            "ones from a shared parent (the increment's norm needs the null residual arrays): use "
                            "null_storage array, or set statistics.sequential / statistics.independent to false")
        cmp_settings = {"resamples": s.resamples, "null_draws": s.null_draws, "seed": s.seed, "alpha": s.alpha}
        for kind, a, b, c in pairs:
            if a not in dec_key or b not in dec_key:
                continue
            anc = {} if kind == "sequential" else {"ancestor": dec_key[c] if c is not None else "base"}
            key = stable_hash({"kind": kind, "a": dec_key[a], "b": dec_key[b], **anc, **cmp_settings}, 24)
            cid = f"{kind}/{a}--{b}"
            if kind == "sequential":
                label = f"compare {a} then {b} (sequential)"
            else:
                label = f"compare {a} vs {b} (independent, from {transitions[c].child if c else transitions[a].parent})"
            deps = (f"decompose/{a}", f"decompose/{b}") + ((f"decompose/{c}",) if c else ())
            units.append(Unit(f"compare/{cid}", "compare", label, key,
                              str(workdir / "comparisons" / f"{kind}-{a}--{b}-{key[:8]}"), deps,
                              {"kind": kind, "a": a, "b": b, "ancestor": c, **cmp_settings}))

    # -- variants -------------------------------------------------------------------
    v = cfg.variants
    specs = {}
    for name in v.names + [n for e in (cfg.evaluation, *cfg.extra_evaluations) for n in (e.variants or [])]:
        try:
            specs[name] = parse_variant(name)
        except ConfigError as e:
            problems.append(f"variant '{name}': {e}")
    from .variants import rest_refusal

    def refuse_rest(tid: str, names: list[str], where: str) -> bool:
        """A plan problem when rest_from: base meets a base that cannot supply the rest."""
        composed = [n for n in names if n in specs and specs[n].composed]
        bad = rest_check(tid) if composed and v.rest_from == "base" else []
        if bad:
            problems.append(rest_refusal(bad, f"{where}: {tid}: ").replace("Set rest_from", "Set variants.rest_from"))
        return bool(bad)

    if v.enabled and v.write_folders:
        for tid in _select(v.transitions, transitions, "variants.transitions", problems):
            if tid not in dec_key or refuse_rest(tid, v.names, "variants"):
                continue
            for name in v.names:
                if name not in specs:
                    continue
                spec = specs[name]
                settings = {"components": spec.components(), "dtype": v.dtype, "rest_from": v.rest_from}
                key = stable_hash({"store": dec_key[tid], **settings}, 24)
                units.append(Unit(f"variant/{tid}/{spec.name}", "variant", f"build {spec.name} of {tid}", key,
                                  str(workdir / "variants" / tid / f"{spec.name}-{key[:8]}"),
                                  (f"decompose/{tid}",),
                                  {"transition": tid, "variant": name, "dtype": v.dtype, "rest_from": v.rest_from,
                                   "shard_gb": v.shard_gb, "device": d.device}))

    # -- evaluation: one unit per (transition, suite of benchmarks); one engine each ----------
    evaluations = [e for e in (cfg.evaluation, *cfg.extra_evaluations) if e.enabled]
    suites = [e.suite for e in cfg.extra_evaluations]
    if None in suites or len(set(suites)) != len(suites):
        problems.append(f"extra_evaluations need distinct 'suite' names, got {suites}")
    for e in evaluations:
        names = e.variants if e.variants is not None else v.names
        bench_dir = e.bench_dir
        bench_id: Any = bench_dir
        if bench_dir == "tinychain":
            bench_dir, bench_id = str(Path(gen_unit.out) / "benchmarks"), {"generated": gen_unit.key}
        elif bench_dir == "bundled":
            from .evaluate import BUNDLED

            # keyed by content, not by where the package is installed
            bench_dir = str(BUNDLED)
            bench_id = {"bundled": {b: _file_digest(BUNDLED / b / "test.jsonl") for b in e.benchmarks}}
        elif not bench_dir.startswith("hub"):
            bench_dir = str(Path(bench_dir).expanduser().absolute())
            bench_id = {"dir": bench_dir, "sha256": {b: _file_digest(Path(bench_dir) / b / "test.jsonl")
                                                    for b in e.benchmarks}}
        settings = {"variants": {n: specs[n].components() for n in names if n in specs},
                    "benchmarks": list(e.benchmarks), "bench": bench_id, "limit": e.limit,
                    **({"lenient": True} if e.lenient else {}),  # absent when off: keys stay as they were
                    "template": e.template, "instruction": e.instruction, "rest_from": v.rest_from,
                    "engine": e.engine.result_fields(),
                    # how answers are drawn; pass@k, maj@k and the table metric are computed from the
                    # answers and never regenerate them (see output_complete)
                    **({"sampling": e.sampling.key_fields()} if e.sampling.key_fields() else {})}
        where = "evaluation" if e.suite is None else f"extra_evaluations[{e.suite}]"
        for tid in _select(e.transitions, transitions, f"{where}.transitions", problems):
            if tid not in dec_key or refuse_rest(tid, names, where):
                continue
            key = stable_hash({"store": dec_key[tid], **settings}, 24)
            deps = (f"decompose/{tid}",) + (("generate/tinychain",) if e.bench_dir == "tinychain" else ())
            suffix = "" if e.suite is None else f"/{e.suite}"
            units.append(Unit(f"evaluate/{tid}{suffix}", "evaluate",
                              f"evaluate {len(names)} variant(s) of {tid} on {', '.join(e.benchmarks)}"
                              + (f" (first {e.limit} each)" if e.limit else ""), key,
                              str(workdir / "evaluations" / f"{tid}{suffix.replace('/', '-')}-{key[:8]}"), deps,
                              {"transition": tid, "suite": e.suite, "variants": list(names),
                               "benchmarks": list(e.benchmarks), "bench_dir": bench_dir, "limit": e.limit,
                               "lenient": e.lenient,
                               "template": e.template, "instruction": e.instruction, "materialize": e.materialize,
                               "rest_from": v.rest_from, "engine": e.engine.model_dump(),
                               "sampling": e.sampling.model_dump(), "metric": e.metric}))
    if problems:
        problems = list(dict.fromkeys(problems))
        shown = [clip(p, 2000) for p in problems[:40]] + ([f"... and {len(problems) - 40} more"]
                                                           if len(problems) > 40 else [])
        raise ConfigError(f"sweep '{clip(cfg.name, 80)}' cannot be planned ({len(problems)} problem(s)):\n  "
                          + "\n  ".join(shown))
    units.sort(key=lambda u: KIND_ORDER.index(u.kind))  # stable: dependencies always come first
    return Plan(cfg, workdir, units, transitions, models)


def nearest_common_ancestor(ancestors_a: list[str], ancestors_b: list[str]) -> Optional[str]:
    """The first of A's ancestors (nearest first) that is also B's."""
    shared = set(ancestors_b)
    return next((m for m in ancestors_a if m in shared), None)


def _fingerprint(folder: Path) -> Optional[str]:
    """Sampled content fingerprint of a local checkpoint (reads ~1 MiB per shard), or None when it
    cannot be read yet (its decomposition then fails with the real error)."""
    from .checkpoint import Checkpoint

    try:
        return Checkpoint.open(folder).fingerprint()
    except (GrrrError, OSError):
        return None


def _file_digest(path: Path) -> Optional[str]:
    import hashlib

    if not path.is_file():
        return None  # a missing benchmark fails its evaluation unit, with the path in the error
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------
# records: what is done, failed, running


class Records:
    """One JSON file per (unit, key) under WORKDIR/.sweep/units, replaced atomically. Keyed
    files keep the record of a setting you switch away from and back to."""

    def __init__(self, workdir: Path):
        self.dir = Path(workdir) / ".sweep" / "units"

    def path(self, unit: Unit) -> Path:
        return self.dir / f"{unit.id.replace('/', '__')}@{unit.key[:12]}.json"

    def read(self, unit: Unit) -> Optional[dict]:
        try:
            return json.loads(self.path(unit).read_text())
        except (OSError, ValueError):
            return None

    def write(self, unit: Unit, record: dict) -> None:
        from .store import atomic_write_text

        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path(unit), json.dumps(record, indent=2, default=str))


# the file each kind of unit writes last: a unit is done only when its record says so *and* this is there
_COMPLETION = {"generate": "chain.json", "stats": "table_overall.csv", "compare": "comparisons.csv",
               "variant": "grrr_variant.json", "evaluate": "evaluation.json"}


def output_complete(unit: Unit) -> bool:
    """A cheap check that a unit's result folder still holds a finished result."""
    out = Path(unit.out)
    if unit.kind == "decompose":
        from .store import TransitionStore

        manifest = TransitionStore.read_manifest(out) or {}
        matrices = out / "matrices"
        return (bool(manifest.get("complete")) and (out / "metrics.csv").is_file() and matrices.is_dir()
                and sum(1 for p in matrices.iterdir() if p.is_dir()) >= len(manifest.get("matrices", ())))
    marker = _COMPLETION.get(unit.kind)
    if marker is None or not (out / marker).is_file():
        return False
    if unit.kind == "evaluate":  # tables of another metric or pass@k / maj@k: summarised again (no generation)
        try:
            meta = json.loads((out / marker).read_text())
        except (OSError, ValueError):
            return False
        want = unit.params.get("sampling") or {}
        have = meta.get("sampling") or {}
        return (meta.get("metric", "avg") == unit.params.get("metric", "avg")
                and all(list(have.get(k) or ()) == list(want.get(k) or ()) for k in ("pass_k", "maj_k")))
    return True


def unit_state(unit: Unit, records: Records) -> tuple[str, Optional[dict]]:
    """'done', 'failed', 'interrupted' (started, never finished), 'damaged' (recorded done, but its result
    folder is gone or incomplete: redone), 'stale' (an evaluation whose tables are for other metrics:
    summarised again, no generation) or 'pending'."""
    rec = records.read(unit)
    if rec is None or rec.get("key") != unit.key:
        return "pending", None
    status = rec.get("status")
    if status == "done":
        if output_complete(unit):
            return "done", rec
        if unit.kind == "evaluate" and (Path(unit.out) / "evaluation.json").is_file():
            return "stale", rec  # other metrics asked for now: summarised again from its answers
        return "damaged", rec
    if status == "failed":
        return "failed", rec
    if status == "running":
        return "interrupted", rec
    return "pending", None


# ---------------------------------------------------------------------------
# running one unit (here or on a Dask worker)


def run_unit(unit: dict, ctx: dict) -> dict:
    """Execute one unit and record the outcome; never raises for a failure of the unit itself.

    ``unit`` is :class:`Unit` as a dict (it travels to Dask workers), ``ctx`` holds the
    settings that do not change results: tracking, progress, device, torch threads.
    """
    u = Unit(**{**unit, "deps": tuple(unit["deps"]), "after": tuple(unit["after"])})
    records = Records(Path(ctx["workdir"]))
    started = time.time()
    where = {"host": socket.gethostname(), "pid": os.getpid()}
    records.write(u, {"id": u.id, "key": u.key, "status": "running", "started": started, **where})
    if ctx.get("threads"):
        import torch

        torch.set_num_threads(int(ctx["threads"]))
    try:
        result = _RUNNERS[u.kind](u, ctx)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - recorded, reported, and the sweep goes on
        expected = isinstance(e, GrrrError)
        rec = {"id": u.id, "key": u.key, "status": "failed", "started": started, "seconds": time.time() - started,
               "error": f"{type(e).__name__}: {e}", "expected": expected,
               "traceback": traceback.format_exc()[-6000:], **where}
        records.write(u, rec)
        return rec
    rec = {"id": u.id, "key": u.key, "status": "done", "started": started, "seconds": time.time() - started,
           "result": result or {}, **where}
    records.write(u, rec)
    return rec


def _store_of(ctx: dict, tid: str) -> str:
    return ctx["stores"][tid]


def _run_generate(u: Unit, ctx: dict) -> dict:
    from .tinychain import build_chain

    build_chain(Path(u.out), seed=u.params["seed"], quick=u.params["quick"], progress=ctx["progress"])
    meta = json.loads((Path(u.out) / "chain.json").read_text())
    return {"accuracy": meta.get("accuracy"), "seconds": meta.get("seconds", {}).get("total")}


def _run_decompose(u: Unit, ctx: dict) -> dict:
    from .decompose import run_transition

    values = {k: v for k, v in u.params.items() if k != "transition"}
    values.update(store=u.out, progress=ctx["progress"], tracking=ctx["tracking"])
    if ctx.get("device"):
        values["device"] = ctx["device"]
    cfg = build_config(values, source=u.id)
    from .spread import in_dask_worker

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


def _scheduler(ctx: dict):
    return ctx.get("_client") or "threads"


def _run_stats(u: Unit, ctx: dict) -> dict:
    from .workflows import run_stats

    stores = [Path(_store_of(ctx, t)) for t in u.params["transitions"]]
    res = run_stats(stores, Path(u.out), resamples=u.params["resamples"], seed=u.params["seed"],
                    scheduler=_scheduler(ctx), tracking=ctx["tracking"])
    return {"files": [str(f) for f in res.files]}


def _run_compare(u: Unit, ctx: dict) -> dict:
    from .workflows import run_comparisons

    p = u.params
    ancestor = Path(_store_of(ctx, p["ancestor"])) if p.get("ancestor") else None
    res = run_comparisons([(p["kind"], Path(_store_of(ctx, p["a"])), Path(_store_of(ctx, p["b"])), ancestor)],
                          Path(u.out),
                          resamples=p["resamples"], null_draws=p["null_draws"], seed=p["seed"], alpha=p["alpha"],
                          scheduler=_scheduler(ctx), tracking=ctx["tracking"])
    s = res.summaries[0]
    return {k: s[k] for k in ("median_cos_off", "ci_lo", "ci_hi", "p_value", "verdict")}


def _run_variant(u: Unit, ctx: dict) -> dict:
    from .runtime import resolve_device
    from .variants import VariantBuilder, parse_variant, write_variant
    from .workflows import track_variant

    p = u.params
    builder = VariantBuilder(Path(_store_of(ctx, p["transition"])), parse_variant(p["variant"]), dtype=p["dtype"],
                             rest_from=p["rest_from"], device=str(resolve_device(ctx.get("device") or p["device"])))
    started = time.time()
    # a half-written folder of a killed build is replaced (its completion marker is written last)
    summary = write_variant(builder, Path(u.out), max_shard_bytes=int(p["shard_gb"] * 2**30), overwrite=True)
    if ctx["tracking"].get("enabled", True):
        track_variant(builder, Path(u.out), summary, ctx["tracking"], started=started, seconds=time.time() - started)
    return {k: summary[k] for k in ("fidelity", "fidelity_max", "energy_survived")}


def _run_evaluate(u: Unit, ctx: dict) -> dict:
    from .workflows import run_evaluation

    # vLLM logs every weight swap at INFO and dozens of harmless kernel-registration
    # warnings per engine; a sweep shows its errors only (set VLLM_LOGGING_LEVEL to see more)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    p = u.params
    log = (lambda msg: print(f"  [{u.id}] {msg}", file=sys.stderr, flush=True)) if ctx["progress"] else (lambda m: None)
    res = run_evaluation(Path(_store_of(ctx, p["transition"])), Path(u.out), p["variants"], p["benchmarks"],
                         Path(p["bench_dir"]) if not p["bench_dir"].startswith("hub") else p["bench_dir"],
                         settings=build_engine_settings(p["engine"]), materialize=p["materialize"],
                         limit=p["limit"], lenient=p.get("lenient", False), template=p["template"],
                         instruction=p["instruction"], sampling=build_sampling_settings(p.get("sampling") or {}),
                         metric=p.get("metric", "avg"), nest_sampled=False,
                         rest_from=p["rest_from"], tracking=ctx["tracking"], log=log)
    return {"average": {r["variant"]: r["average"] for r in res.accuracy_rows}, "gain": res.info.get("gain")}


_RUNNERS: dict[str, Callable[[Unit, dict], dict]] = {
    "generate": _run_generate, "decompose": _run_decompose, "stats": _run_stats, "compare": _run_compare,
    "variant": _run_variant, "evaluate": _run_evaluate,
}


# ---------------------------------------------------------------------------
# executing the plan


class SweepLock(FileLock):
    """One sweep process per workdir."""

    def __init__(self, workdir: Path):
        super().__init__(Path(workdir) / ".sweep" / "lock")

    def busy(self, holder: str) -> Exception:
        return StoreError(f"another grrr-stream sweep is running on {self.path.parent.parent} ({holder}); "
                          "wait for it to finish (`grrr-stream status CONFIG` shows its progress) or stop it "
                          "before starting this one")


@dataclass
class SweepResult:
    plan: Plan
    states: dict[str, str]               # unit id → done | failed | blocked | pending
    records: dict[str, Optional[dict]]
    ran: list[str]                       # units executed in this call
    report_files: list[Path]
    run_id: Optional[str] = None
    claims: dict = field(default_factory=dict)  # evaluation suite → claims.summarise(...)

    @property
    def failed(self) -> list[str]:
        return [u for u, s in self.states.items() if s == "failed"]

    @property
    def ok(self) -> bool:
        return all(s == "done" for s in self.states.values())


class _Display:
    """Units done / total, the unit that just ended, and an ETA from this run's unit timings."""

    def __init__(self, total: int, done: int, enabled: bool, stream: TextIO):
        self.total, self.done, self.enabled, self.stream = total, done, enabled, stream
        self.t0 = time.monotonic()
        self.by_kind: dict[str, list[float]] = {}

    def say(self, text: str) -> None:
        if self.enabled:
            print(f"[sweep] {text}", file=self.stream, flush=True)

    def start(self, unit: Unit, running: int = 1) -> None:
        also = f" ({running} units running)" if running > 1 else ""
        self.say(f"[{self.done}/{self.total} done] start {unit.id}: {unit.label}{also}")

    def end(self, unit: Unit, rec: dict, pending: Iterable[Unit]) -> None:
        self.done += 1
        secs = float(rec.get("seconds") or 0.0)
        self.by_kind.setdefault(unit.kind, []).append(secs)
        status = "done" if rec["status"] == "done" else "FAILED"
        tail = f" — {rec['error']}" if rec["status"] != "done" else ""
        self.say(f"[{self.done}/{self.total}] {status} {unit.id} in {secs:.1f} s{tail} | {self._eta(pending)}")

    def _eta(self, pending: Iterable[Unit]) -> str:
        """From this run's mean time per unit kind; units of a kind not timed yet are counted, not
        guessed (one 6-minute training unit says nothing about a 0.3 s variant build)."""
        from .progress import fmt_seconds

        rest, untimed = 0.0, 0
        for u in pending:
            ts = self.by_kind.get(u.kind)
            if ts:
                rest += sum(ts) / len(ts)
            else:
                untimed += 1
        elapsed = f"elapsed {fmt_seconds(time.monotonic() - self.t0)}"
        if untimed:
            return f"{elapsed}, ETA ≥ {fmt_seconds(rest)} + {untimed} unit(s) of kinds not timed yet"
        return f"{elapsed}, ETA ~{fmt_seconds(rest)}"


def _make_client(address: Optional[str]):
    """(client or None, cluster to close or None, torch threads per worker or None)."""
    from .cluster import open_client, parse_scheduler, require, threads_per_local_worker

    spec = require(parse_scheduler(address), ("threads", "synchronous", "local", "address"), "a sweep")
    if not spec.distributed:
        return None, None, None
    client, cluster = open_client(spec)
    # one unit per worker at a time; torch gets the worker's share of the cores
    return client, cluster, (threads_per_local_worker(spec.workers) if cluster is not None else None)


def run_sweep(plan: Plan, *, scheduler: Optional[str] = None, tracking: Optional[dict] = None,
              progress: bool = True, device: Optional[str] = None, stream: Optional[TextIO] = None) -> SweepResult:
    """Execute every unit that is not done; record failures and go on with what does not depend on them."""
    stream = stream or sys.stderr
    started = time.time()  # the sweep's MLflow run, opened at the end, starts here
    tracking = dict(tracking or {"enabled": False})
    # every unit's run carries the sweep's tag: one search finds the whole sweep (not a result key)
    tracking["sweep"] = tracking.get("sweep") or plan.config.name
    from .files import ensure_folder

    ensure_folder(plan.workdir, "workdir")
    records = Records(plan.workdir)
    with SweepLock(plan.workdir):
        states = {u.id: unit_state(u, records)[0] for u in plan.units}
        todo = [u for u in plan.units if states[u.id] != "done"]
        for u in todo:  # failed or interrupted before: run again (dependents wait for the new outcome)
            states[u.id] = "pending"
        display = _Display(len(plan.units), len(plan.units) - len(todo), progress, stream)
        display.say(f"{plan.config.name}: {len(plan.units)} units, {len(plan.units) - len(todo)} already done, "
                    f"{len(todo)} to run")
        if tracking.get("enabled", True):
            from .tracking import prepare

            prepare(tracking.get("uri"), tracking.get("experiment", "grrr_stream"))
        client, cluster, threads = _make_client(scheduler)
        ctx = {"workdir": str(plan.workdir), "tracking": tracking, "progress": progress, "device": device,
               "threads": threads, "stores": {u.params["transition"]: u.out for u in plan.units
                                              if u.kind == "decompose"}}
        ran: list[str] = []
        try:
            _execute(plan, todo, states, ctx, client, display, ran)
        finally:
            if client is not None:
                client.close()
            if cluster is not None:
                cluster.close()
        recs = {u.id: records.read(u) for u in plan.units}
        files, claims_summary = write_report(plan, states, recs)
        result = SweepResult(plan, states, recs, ran, files, claims=claims_summary)
        if tracking.get("enabled", True):
            result.run_id = _track_sweep(plan, result, tracking, started)
    return result


def _execute(plan: Plan, todo: list[Unit], states: dict[str, str], ctx: dict, client, display: _Display,
             ran: list[str]) -> None:
    waiting = list(todo)
    futures: dict[Any, Unit] = {}
    ac = None
    if client is not None:
        from distributed import as_completed

        ac = as_completed()

    def finish(u: Unit, rec: dict) -> None:
        states[u.id] = rec["status"]
        ran.append(u.id)
        display.end(u, rec, waiting + list(futures.values()))

    while waiting or futures:
        progressed = False
        for u in list(waiting):
            bad = [d for d in u.deps if states.get(d) in ("failed", "blocked")]
            if bad:
                waiting.remove(u)
                states[u.id] = "blocked"
                display.say(f"blocked {u.id}: needs {', '.join(bad)}")
                progressed = True
                continue
            if not all(states.get(d) == "done" for d in u.deps):
                continue
            if any(states.get(a) in ("pending", "interrupted", "running") for a in u.after):
                continue
            waiting.remove(u)
            progressed = True
            display.start(u, running=len(futures) + 1)
            if client is not None and u.on_worker:
                fut = client.submit(run_unit, asdict(u), {k: v for k, v in ctx.items() if k != "_client"},
                                    pure=False, key=f"grrr-{u.id}-{time.time_ns()}")
                futures[fut] = u
                ac.add(fut)
                states[u.id] = "running"
            else:
                finish(u, run_unit(asdict(u), {**ctx, "_client": client} if client is not None else ctx))
                break  # re-scan: what just finished may unblock or block others
        if progressed:
            continue
        if futures:
            fut = next(ac)
            u = futures.pop(fut)
            try:
                rec = fut.result()
            except Exception as e:  # noqa: BLE001 - a worker died or could not run it
                rec = {"id": u.id, "key": u.key, "status": "failed", "error": f"{type(e).__name__}: {e}",
                       "seconds": 0.0}
                Records(plan.workdir).write(u, rec)
            finish(u, rec)
        elif not progressed:
            for u in waiting:  # unreachable: a dependency is neither done nor planned to run
                states[u.id] = "blocked"
            break


# ---------------------------------------------------------------------------
# status and report


def unit_disk_needs(plan: Plan) -> dict[str, Optional[list]]:
    """unit id → what it will write (a list of diskplan.DiskNeed), from the checkpoint headers, for the
    decompositions and variant builds whose checkpoints are on this machine; None where the size is not
    known before the checkpoints are (Hub downloads, the generated tiny chain). Other units write little."""
    from .checkpoint import Checkpoint
    from .decompose import plan_transition
    from .diskplan import DiskNeed, ITEMSIZE, transition_needs

    opened: dict[str, Optional[Checkpoint]] = {}

    def local(src: str) -> Optional[Checkpoint]:
        if src not in opened:
            try:
                opened[src] = Checkpoint.open(Path(src)) if Path(src).is_dir() else None
            except (GrrrError, OSError):
                opened[src] = None
        return opened[src]

    out: dict[str, Optional[list]] = {}
    bases: dict[str, str] = {}  # transition id → base source
    for u in plan.units:
        if u.kind == "decompose":
            p = u.params
            bases[p["transition"]] = p["base"]
            ck, post = local(p["base"]), local(p["post"])
            if ck is None or post is None:
                out[u.id] = None
                continue
            try:  # the decomposition's own planning: the same matrices, experts and fused blocks
                cfg = build_config({k: v for k, v in p.items() if k != "transition"} | {"store": u.out})
                names = plan_transition(ck, post, cfg).matrices
            except GrrrError:
                out[u.id] = None  # the unit itself will say what is wrong
                continue
            out[u.id] = transition_needs(
                [ck.matrix_shape(m) for m in names], Path(u.out), Path(p["frame_cache"]),
                store_dtype=p["store_dtype"], compute_dtype=p["compute_dtype"],
                null_storage=p.get("null_storage", "array"), core_truncated=p.get("core_rel_threshold") is not None,
                # a later decomposition from the same W0 finds its frames in the cache
                frames_cached_fraction=1.0 if u.after else 0.0)
        elif u.kind == "variant":
            ck = local(bases.get(u.params["transition"], ""))
            if ck is None:
                out[u.id] = None
                continue
            item = ITEMSIZE[u.params["dtype"]]
            size = sum(math.prod(t.shape) * item if t.is_floating else t.nbytes for t in ck.tensors.values())
            out[u.id] = [DiskNeed("variant", Path(u.out), size)]
    return out


def sweep_status(plan: Plan) -> list[dict]:
    """One row per unit: id, kind, state (done / pending / failed / blocked / interrupted / running), detail."""
    records = Records(plan.workdir)
    running = SweepLock(plan.workdir).held()
    states: dict[str, str] = {}
    rows = []
    for u in plan.units:
        state, rec = unit_state(u, records)
        if state == "interrupted" and running:
            state = "running"
        if state in ("pending", "interrupted", "damaged", "stale") and \
                any(states.get(d) in ("failed", "blocked") for d in u.deps):
            state = "blocked"
        states[u.id] = state
        detail = ""
        if state == "failed":
            detail = rec.get("error", "")
        elif state == "done":
            detail = f"{rec.get('seconds', 0):.1f} s"
        elif state == "blocked":
            detail = "needs " + ", ".join(d for d in u.deps if states.get(d) in ("failed", "blocked"))
        elif state == "damaged":
            detail = "recorded done, but its result folder is missing or incomplete; the next run redoes it"
        elif state == "stale":
            detail = "its tables are for another metric or pass@k/maj@k; the next run recomputes them from the " \
                     "recorded answers (no generation)"
        elif state in ("pending", "interrupted", "running"):
            detail = _partial_progress(u)
        rows.append({"unit": u.id, "kind": u.kind, "state": state, "detail": detail, "out": u.out})
    return rows


def _partial_progress(u: Unit) -> str:
    """What a unit already holds from an earlier, unfinished run (it resumes from there)."""
    out = Path(u.out)
    if u.kind == "decompose" and (out / "matrices").is_dir():
        from .store import TransitionStore

        manifest = TransitionStore.read_manifest(out) or {}
        total = len(manifest.get("matrices", []))
        done = len(TransitionStore(out, None).completed())
        return f"{done}/{total} matrices stored" if total else ""
    if u.kind == "evaluate" and out.is_dir():
        scored = sorted(p.parent.name + "/" + p.stem for p in out.glob("*/*.json"))
        return f"{len(scored)} of {len(u.params['variants']) * len(u.params['benchmarks'])} variant×benchmark scored"
    return ""


def _read_csv(path: Path) -> list[dict]:
    import csv

    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_report(plan: Plan, states: dict[str, str], records: dict[str, Optional[dict]]) -> tuple[list[Path], dict]:
    """Sweep-level tables and figures in WORKDIR/report from the units that are done; returns the
    files and the claims summary (:func:`grrr_stream.claims.summarise`, one per evaluation suite)."""
    from . import plots
    from .store import atomic_write_text, to_csv

    rep = plan.workdir / "report"
    rep.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    done = [u for u in plan.units if states.get(u.id) == "done"]

    def put(name: str, rows: list[dict]) -> None:
        if rows:
            atomic_write_text(rep / name, to_csv(rows))
            files.append(rep / name)

    status_rows = [{"unit": u.id, "kind": u.kind, "state": states.get(u.id, "pending"),
                    "seconds": round(float((records.get(u.id) or {}).get("seconds") or 0.0), 2),
                    "error": (records.get(u.id) or {}).get("error", "") if states.get(u.id) == "failed" else "",
                    "out": u.out} for u in plan.units]
    put("units.csv", status_rows)

    trows = []
    for u in done:
        if u.kind != "decompose":
            continue
        tr = plan.transitions[u.params["transition"]]
        summary = json.loads((Path(u.out) / "summary.json").read_text())["scopes"]["all"]
        # paper Tables 3 and 4: energy shares, relative size, stable ranks and their change, α, numerical ranks
        cols = ["f_diag", "f_off", "f_null", "r_delta", "sr_w0", "sr_w1", "dsr_pct", "alpha"]
        cols += sorted(k[:-5] for k in summary if k.startswith("nrank_") and k.endswith("_mean"))
        # beyond the paper: principal bands, subspace angles, sparsity, component survival
        cols += [k[:-5] for k in summary if k.endswith("_mean")
                 and k.startswith(("band", "angle", "frac_", "bfloat16_kept_", "float16_kept_"))]
        trows.append({"transition": tr.id, "chain": tr.chain, "kind": tr.kind, "from": tr.parent, "to": tr.child,
                      "method": tr.method or "", "domain": tr.domain or "", "n": summary["n"],
                      **{f"{k}_mean": summary.get(f"{k}_mean") for k in cols}, "store": u.out})
    put("transitions.csv", trows)
    edge = next((e for e in (64, 16, 256) if trows and trows[0].get(f"band{e}_off_principal_mean") is not None), None)
    if edge is not None:
        files.append(plots.band_energy_by_transition(trows, edge, rep / "band_energy.png"))

    summaries = []
    for u in done:
        if u.kind == "compare":
            for r in _read_csv(Path(u.out) / "comparisons.csv"):
                summaries.append({"comparison": u.id.split("/", 1)[1], **r})
    put("comparisons.csv", summaries)
    if summaries:
        numeric = [{k: _num(v) for k, v in s.items()} for s in summaries]
        files.append(plots.cosine_medians(numeric, rep / "offdiag_cosine_medians.png"))
        files.append(plots.norm_bars(numeric, rep / "update_norms.png"))

    stats = [u for u in done if u.kind == "stats"]
    if stats:
        put("stats_overall.csv", _read_csv(Path(stats[0].out) / "table_overall.csv"))

    acc, retention, removal, lost = [], [], [], []
    scores_by_suite: dict[str, list] = {}
    rest: dict[tuple[str, str], dict] = {}
    for u in done:
        if u.kind != "evaluate":
            continue
        tr = plan.transitions[u.params["transition"]]
        suite = u.params.get("suite") or ""
        label = {"transition": tr.id + (f" [{suite}]" if suite else ""), "kind": tr.kind, "from": tr.parent,
                 "to": tr.child}
        acc += [{**label, **r} for r in _read_csv(Path(u.out) / "accuracy.csv")]
        retention += [{**label, **r} for r in _read_csv(Path(u.out) / "table_retention.csv")]
        removal += [{**label, **r} for r in _read_csv(Path(u.out) / "table_removal.csv")]
        lost += [{**label, **r} for r in _read_csv(Path(u.out) / "solved_lost.csv")]
        scores = _transition_scores(u, tr, plan.config.claims)
        if scores is not None:
            scores_by_suite.setdefault(suite, []).append(scores)
            try:
                info = json.loads((Path(u.out) / "evaluation.json").read_text()).get("info", {})
            except (OSError, ValueError):
                info = {}
            # how composed variants were built: proj equals full under rest_from post, and a fallback is news
            rest[(suite, tr.id)] = {"rest_from": info.get("rest_from") or "", "note": info.get("note", ""),
                                    "rest_fallback": info.get("rest_fallback", "")}
    put("accuracy.csv", acc)
    put("retention.csv", retention)
    put("removal.csv", removal)
    put("solved_lost.csv", lost)
    claims_summary = _write_claims(plan, scores_by_suite, rest, put)
    return files, claims_summary


def _transition_scores(u: Unit, tr: Transition, c):
    """Paired bootstrap scores of an evaluation unit's variants from its per-problem results
    (None for results written before per-problem correctness was recorded)."""
    from . import claims
    from .evaluate import result_path

    metric = u.params.get("metric", "avg")
    correct: dict[str, dict[str, object]] = {}
    for v in u.params["variants"]:
        name = v.partition("=")[0].strip()
        for b in u.params["benchmarks"]:
            try:
                summary = json.loads(result_path(Path(u.out), name, b).read_text())
            except (OSError, ValueError):
                return None
            values = (summary.get("scores") or {}).get(metric) or (summary.get("correct_bits") if metric == "avg"
                                                                    else None)
            if not values:
                return None
            correct.setdefault(name, {})[b] = values
    return claims.transition_scores(correct, transition=tr.id, kind=tr.kind, resamples=c.resamples, seed=c.seed)


def _write_claims(plan: Plan, scores_by_suite: dict[str, list], rest: dict, put) -> dict:
    from . import claims

    c = plan.config.claims
    out: dict[str, dict] = {}
    diffs, info, claim_rows = [], [], []
    for suite, scores in scores_by_suite.items():
        s = claims.summarise(scores, within_points=c.within_points, informative_points=c.informative_points,
                             retention_floor_pct=c.retention_floor_pct, level=c.level)
        out[suite] = s
        tag = {"suite": suite or "main"}
        diffs += [{**tag, **r} for r in s["differences"]]
        for r in s["informative"]:
            r.update(rest.get((suite, r["transition"]), {}))
        info += [{**tag, **r} for r in s["informative"]]
        claim_rows += [{**tag, "informative_transitions": s["counts"]["informative"], **r} for r in s["claims"]]
    put("differences.csv", diffs)
    put("informative.csv", info)
    put("claims.csv", claim_rows)
    return out


def _num(v: str) -> Any:
    try:
        return float(v)
    except (TypeError, ValueError):
        return v


def _track_sweep(plan: Plan, result: SweepResult, tracking: dict, started: float) -> str:
    """One MLflow run per sweep (keyed by its plan), with the unit counts and the report; it spans
    this invocation from ``started`` (a resumed sweep's run spans all invocations)."""
    from . import tracking as trk

    counts = {s: sum(1 for v in result.states.values() if v == s) for s in ("done", "failed", "blocked", "pending")}
    run = trk.open_run(uri=tracking.get("uri"), experiment=tracking.get("experiment", "grrr_stream"),
                       key="sweep-" + plan.key, run_name=f"sweep {plan.config.name}",
                       tags={"grrr.kind": "sweep"}, start_ms=int(started * 1000), sweep=tracking["sweep"])
    if run.complete:
        return run.run_id
    run.log_params({"name": plan.config.name, "workdir": str(plan.workdir), "units": len(plan.units),
                    "transitions": ",".join(plan.transitions),
                    "config": json.dumps(plan.config.model_dump(mode="json"), sort_keys=True)})
    metrics = [(f"units_{k}", v, 0) for k, v in counts.items()] + [("work_seconds", time.time() - started, 0)]
    for suite, s in result.claims.items():
        pre = "claims/" + (f"{suite}/" if suite else "")
        metrics += [(f"{pre}{k}", v, 0) for k, v in s["counts"].items()]
        for r in s["claims"]:
            for k in ("within_k", "within_k_ci_lo", "within_k_ci_hi", "retention_median_pct",
                      "retention_median_ci_lo", "retention_median_ci_hi", "retention_min_pct", "retention_max_pct",
                      "at_floor", "at_floor_ci_lo", "at_floor_ci_hi"):
                if isinstance(r.get(k), (int, float)) and math.isfinite(r[k]):
                    metrics.append((f"{pre}{r['variant']}/vs_{r['reference']}/{k}", float(r[k]), 0))
    run.log_metrics(metrics)
    run.log_artifacts(result.report_files, "report")
    if result.ok:
        run.finish()
    return run.run_id
