"""Workflows over finished stores: statistics, comparisons, variant builds.

The library functions behind ``grrr-stream stats``, ``compare`` and ``variants``: they
run the computation modules, write tables and figures, and log to MLflow.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from .config import stable_hash
from .decompose import transition_key
from .errors import ConfigError
from .store import StoredTransition, atomic_write_text, to_csv


def make_scheduler(address: Optional[str]) -> Any:
    """None/'threads'/'processes'/'synchronous' → a local Dask scheduler; anything else is the
    address of a running dask.distributed scheduler (e.g. tcp://10.0.0.5:8786)."""
    if address in (None, "", "threads", "processes", "synchronous", "sync"):
        return address or "threads"
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover - a core dependency
        raise ConfigError("--scheduler ADDRESS needs dask.distributed: pip install distributed") from None
    try:
        return Client(address, timeout="10s")
    except (OSError, TimeoutError) as e:
        raise ConfigError(f"cannot reach the Dask scheduler at {address}: {e}") from None


def transition_run(t: StoredTransition, tracking: dict):
    """The MLflow run of a stored transition (created, unfinished, if the decomposition was not tracked;
    a later tracked `decompose` of the same transition completes it)."""
    from . import tracking as trk

    m = t.manifest
    return trk.open_run(uri=tracking.get("uri"), experiment=tracking.get("experiment", "grrr_stream"),
                        key=transition_key(m["identity"]), run_name=f"{m['base']} → {m['post']}",
                        tags={"grrr.kind": "transition", "grrr.chain": m.get("chain") or "",
                              "grrr.method": m.get("method") or ""})


@dataclass
class StatsResult:
    out: Path
    long_rows: list[dict]
    files: list[Path]


def run_stats(stores: Sequence[Path], out: Path, *, resamples: int = 10_000, seed: int = 0,
              scheduler: Any = None, tracking: Optional[dict] = None) -> StatsResult:
    """Per-transition summaries with bootstrap CIs (paper Tables 3, 4, 7) as CSV files in ``out``."""
    from . import stats

    transitions = [StoredTransition(Path(s)) for s in stores]
    long_rows = stats.summary_tables(transitions, resamples=resamples, seed=seed, scheduler=scheduler)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name, rows in (("summary_long.csv", long_rows),
                       ("table_overall.csv", stats.wide_table(long_rows, "all")),
                       ("table_by_module.csv", stats.wide_table(long_rows, "module")),
                       ("table_by_layer.csv", stats.wide_table(long_rows, "layer"))):
        atomic_write_text(out / name, to_csv(rows))
        files.append(out / name)
    if tracking and tracking.get("enabled", True):
        for t in transitions:
            run = transition_run(t, tracking)
            mine = [r for r in long_rows if r["store"] == str(t.path)]
            tdir = out / f"per_transition_{stable_hash(str(t.path), 8)}"
            tdir.mkdir(exist_ok=True)
            atomic_write_text(tdir / f"stats_summary_resamples{resamples}_seed{seed}.csv", to_csv(mine))
            run.log_artifacts(sorted(tdir.iterdir()), "stats")
    return StatsResult(out, long_rows, files)


@dataclass
class CompareResult:
    out: Path
    comparisons: list
    summaries: list[dict]
    files: list[Path]
    run_ids: list[str]


def run_comparisons(pairs: Sequence[tuple[str, Path, Path]], out: Path, *, resamples: int = 10_000,
                    null_draws: int = 10_000, seed: int = 0, alpha: float = 0.05, scheduler: Any = None,
                    tracking: Optional[dict] = None) -> CompareResult:
    """Off-diagonal cosine geometry for each (kind, a, b); CSV/JSON + Figures 4/5 in ``out``."""
    from . import plots, stats

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    comparisons, summaries, files = [], [], []
    for kind, a_path, b_path in pairs:
        a, b = StoredTransition(Path(a_path)), StoredTransition(Path(b_path))
        comp = stats.compare(a, b, kind, resamples=resamples, null_draws=null_draws, seed=seed, alpha=alpha,
                             scheduler=scheduler)
        label = f"{a.label} vs {b.label}" if kind == "independent" else f"{a.label} then incr. to {b.label}"
        summary = {"label": label, **comp.summary()}
        stem = f"{kind}_{stable_hash([str(a.path), str(b.path)], 8)}"
        atomic_write_text(out / f"{stem}_per_matrix.csv", to_csv(comp.rows))
        atomic_write_text(out / f"{stem}.json", json.dumps(summary, indent=2))
        files += [out / f"{stem}_per_matrix.csv", out / f"{stem}.json"]
        comparisons.append((comp, a, b, stem))
        summaries.append(summary)
    atomic_write_text(out / "comparisons.csv", to_csv(summaries))
    files.append(out / "comparisons.csv")
    figs = [plots.cosine_medians(summaries, out / "offdiag_cosine_medians.png"),
            plots.norm_bars(summaries, out / "update_norms.png")]
    files += figs
    run_ids = []
    if tracking and tracking.get("enabled", True):
        from . import tracking as trk

        for (comp, a, b, stem), summary in zip(comparisons, summaries):
            settings = {"kind": comp.kind, "a": a.manifest["identity"], "b": b.manifest["identity"],
                        "statistic": "median cos_off", "resamples": resamples, "null_draws": null_draws,
                        "seed": seed, "alpha": alpha}
            run = trk.open_run(uri=tracking.get("uri"), experiment=tracking.get("experiment", "grrr_stream"),
                               key="comparison-" + stable_hash(settings, 24), run_name=summary["label"],
                               tags={"grrr.kind": "comparison", "grrr.comparison": comp.kind})
            run_ids.append(run.run_id)
            if run.complete:
                continue
            run.log_params({"kind": comp.kind, "a": a.label, "b": b.label, "a_store": str(a.path),
                            "b_store": str(b.path), "frame": a.manifest["identity"]["base_fingerprint"],
                            "frame_settings": json.dumps(a.manifest["settings"], sort_keys=True),
                            "statistic": "median cos_off", "resamples": resamples, "null_draws": null_draws,
                            "seed": seed, "alpha": alpha})
            run.log_metrics([(k, v, 0) for k, v in summary.items()
                             if isinstance(v, (int, float)) and not isinstance(v, bool)]
                            + [(f"cos_off/{r['module']}", r["cos_off"], r["layer"]) for r in comp.rows])
            run.set_tags({"grrr.verdict": comp.null.verdict})
            run.log_artifacts([out / f"{stem}_per_matrix.csv", out / f"{stem}.json", *figs])
            run.finish()
    return CompareResult(out, [c[0] for c in comparisons], summaries, files, run_ids)


@dataclass
class VariantsResult:
    out: Path
    summaries: list[dict]
    folders: list[Path]
    run_ids: list[str]


def run_variants(store: Path, out: Path, variants: Sequence[str], *, dtype: str = "float32",
                 rest_from: str = "post", device: str = "cpu", overwrite: bool = False,
                 max_shard_bytes: int = 2 * 2**30, tracking: Optional[dict] = None, stream=None) -> VariantsResult:
    """Build each variant of the transition in ``store`` as ``out/<variant>/`` (HF folder) plus
    ``out/<variant>.fidelity.csv``; log fidelity to a nested MLflow run per variant."""
    from .variants import VariantBuilder, parse_variant, write_variant

    specs = [parse_variant(v) for v in variants]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"variant names must be unique, got {names}")
    out = Path(out)
    summaries, folders, run_ids = [], [], []
    for spec in specs:
        builder = VariantBuilder(Path(store), spec, dtype=dtype, rest_from=rest_from, device=device)
        folder = out / spec.name
        summary = write_variant(builder, folder, max_shard_bytes=max_shard_bytes, overwrite=overwrite, stream=stream)
        summaries.append(summary)
        folders.append(folder)
        if tracking and tracking.get("enabled", True):
            run_ids.append(_track_variant(builder, folder, summary, tracking))
    return VariantsResult(out, summaries, folders, run_ids)


def _track_variant(builder, folder: Path, summary: dict, tracking: dict) -> str:
    import csv

    from . import tracking as trk

    t = builder.transition
    parent = transition_run(t, tracking)
    meta = builder.metadata()
    run = trk.open_run(uri=tracking.get("uri"), experiment=tracking.get("experiment", "grrr_stream"),
                       key="variant-" + stable_hash(meta, 24), run_name=f"{t.label} [{builder.spec.name}]",
                       tags={"grrr.kind": "variant", "grrr.variant": builder.spec.name},
                       parent_run_id=parent.run_id)
    if run.complete:
        return run.run_id
    comps = builder.spec.components()
    run.log_params({"variant": builder.spec.name, "components": json.dumps(comps, sort_keys=True),
                    "seed": comps.get("random_removal_seed"), "dtype": builder.dtype, "rest_from": builder.rest_from,
                    "store": str(t.path), "folder": str(folder.resolve())})
    with open(folder.with_name(folder.name + ".fidelity.csv")) as f:  # also there when the build was skipped
        rows = list(csv.DictReader(f))
    metrics = [(k, v, 0) for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
               and math.isfinite(v)]
    metrics += [(f"fidelity/{r['module']}", float(r["fidelity"]), int(r["layer"])) for r in rows
                if math.isfinite(float(r["fidelity"]))]
    run.log_metrics(metrics)
    run.log_artifacts([folder.with_name(folder.name + ".fidelity.csv")])
    run.finish()
    return run.run_id


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


def run_evaluation(store: Path, out: Path, variants: Sequence[str], benchmarks: Sequence[str], bench_dir: Path, *,
                   settings=None, materialize: str = "engine", keep_variants: bool = False,
                   limit: Optional[int] = None, template: str = "chat", instruction: Optional[str] = None,
                   rest_from: str = "post", tracking: Optional[dict] = None, log=print) -> EvaluationResult:
    """Evaluate variants of a stored transition on benchmarks with vLLM; resumable at prompt level.

    ``materialize='engine'`` streams each variant into one running engine; ``'folder'`` writes
    each variant under ``out/_variants`` and starts a fresh engine on it (deleted afterwards
    unless ``keep_variants``).
    """
    import shutil

    from . import evaluate as ev
    from .config import EngineSettings
    from .variants import VariantBuilder, parse_variant, write_variant

    settings = settings or EngineSettings()
    instruction = instruction if instruction is not None else ev.DEFAULT_INSTRUCTION
    if materialize not in ("engine", "folder"):
        raise ConfigError("materialize must be 'engine' or 'folder'")
    specs = [parse_variant(v) for v in variants]
    t = StoredTransition(Path(store))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if str(bench_dir).startswith("hub:") or str(bench_dir) == "hub":
        # 'hub' or 'hub:OWNER/REPO': fetch <name>/test.jsonl files once into the results folder
        repo = str(bench_dir)[4:] or ev.HUB_REPO
        bench_dir = out / "_benchmarks"
        for b in benchmarks:
            if not (bench_dir / b / "test.jsonl").is_file():
                ev.fetch_benchmark_from_hub(b, bench_dir, repo)
    benches = [ev.load_benchmark(b, bench_dir, limit=limit) for b in benchmarks]
    vdtype = settings.dtype if settings.dtype != "auto" else "float32"
    engine = None
    results, fidelity = [], {}
    try:
        for spec in specs:
            builder = VariantBuilder(t.path, spec, dtype=vdtype, rest_from=rest_from)
            meta = builder.metadata()
            keys = {b.name: ev.evaluation_key(b, meta, settings, template, instruction) for b in benches}
            have = {b.name: ev.scored(out, spec.name, b.name, keys[b.name]) for b in benches}
            if all(have.values()):
                log(f"{spec.name}: all {len(benches)} benchmark(s) already scored")
                results += list(have.values())
                continue
            folder = None
            if materialize == "engine":
                if engine is None:
                    engine = ev.Engine(Path(t.manifest["post_folder"]), settings)
                engine.load_weights(builder.tensors(), scratch=out / "_swap", layout=builder.layout(),
                                    config=builder.config())
                fidelity[spec.name] = builder.report.summary()
                active = engine
            else:
                folder = out / "_variants" / spec.name
                fidelity[spec.name] = write_variant(builder, folder, overwrite=True)
                active = ev.Engine(folder, settings)
            try:
                for b in benches:
                    if have[b.name]:
                        results.append(have[b.name])
                        continue
                    r = ev.score_benchmark(active, b, spec.name, out, keys[b.name], template=template,
                                           instruction=instruction)
                    log(f"{spec.name} / {b.name}: {r.accuracy:.1f} % of {r.n}")
                    results.append(r)
            finally:
                if materialize == "folder":
                    active.close()
                    if not keep_variants and folder is not None:
                        shutil.rmtree(folder, ignore_errors=True)
    finally:
        if engine is not None:
            engine.close()
    acc = ev.accuracy_table(results, [b.name for b in benches])
    t56, t8, info = ev.retention_tables(acc)
    files = []
    for name, rows in (("accuracy.csv", acc), ("table_retention.csv", t56), ("table_removal.csv", t8)):
        atomic_write_text(out / name, to_csv(rows))
        files.append(out / name)
    atomic_write_text(out / "evaluation.json", json.dumps(
        {"store": str(t.path), "engine": settings.model_dump(), "versions": ev.engine_versions(),
         "benchmarks": {b.name: {"sha256": b.sha256, "n": len(b.problems), "path": str(b.path)} for b in benches},
         "info": info, "fidelity": fidelity}, indent=2, default=str))
    files.append(out / "evaluation.json")
    run_ids = []
    if tracking and tracking.get("enabled", True):
        run_ids = _track_evaluation(t, specs, benches, results, acc, info, fidelity, settings, vdtype, rest_from,
                                    template, instruction, out, files, tracking)
    return EvaluationResult(out, results, acc, t56, t8, info, fidelity, files, run_ids)


def _track_evaluation(t, specs, benches, results, acc, info, fidelity, settings, vdtype, rest_from, template,
                      instruction, out, files, tracking) -> list[str]:
    from . import evaluate as ev

    parent = transition_run(t, tracking)
    parent.log_artifacts(files, "evaluation")
    versions = ev.engine_versions()
    avg = {r["variant"]: r["average"] for r in acc}
    run_ids = []
    for spec in specs:
        settings_key = {"transition": t.manifest["identity"], "variant": spec.components(), "name": spec.name,
                        "dtype": vdtype, "rest_from": rest_from, "engine": settings.result_fields(),
                        "template": template, "instruction": instruction}
        run = trk_open(tracking, key="evaluation-" + stable_hash(settings_key, 24),
                       name=f"{t.label} [{spec.name}] eval", parent=parent.run_id,
                       tags={"grrr.kind": "evaluation", "grrr.variant": spec.name})
        comps = spec.components()
        params = {"variant": spec.name, "components": json.dumps(comps, sort_keys=True),
                  "seed": comps.get("random_removal_seed"), "dtype": vdtype, "rest_from": rest_from,
                  "template": template, **{f"engine.{k}": v for k, v in settings.model_dump().items()},
                  **{f"version.{k}": v for k, v in versions.items()}}
        params.update({f"sha256.{b.name}": b.sha256 for b in benches})
        params.update({f"n.{b.name}": len(b.problems) for b in benches})
        run.log_params(params)
        have = run.logged_metrics()
        mine = [r for r in results if r.variant == spec.name]
        metrics = [(f"acc/{r.benchmark}", r.accuracy, 0) for r in mine]
        metrics += [(f"wait_mean/{r.benchmark}", r.wait_mean, 0) for r in mine]
        if avg.get(spec.name) is not None:
            metrics.append(("average", avg[spec.name], 0))
            if info.get("full"):
                metrics.append(("retention", 100.0 * avg[spec.name] / info["full"], 0))
        waits = [r.wait_mean for r in mine]
        if waits:
            metrics.append(("wait_mean", sum(waits) / len(waits), 0))
        if spec.name in fidelity:
            metrics += [(f"fidelity.{k}", v, 0) for k, v in fidelity[spec.name].items()
                        if isinstance(v, float) and math.isfinite(v)]
        # a metric already logged with this value is not logged again (reruns add no history)
        run.log_metrics([m for m in metrics if have.get(m[0]) != m[1]])
        run.log_artifacts(sorted((out / spec.name).glob("*.jsonl")), "generations")
        run.finish()
        run_ids.append(run.run_id)
    return run_ids


def trk_open(tracking: dict, *, key: str, name: str, parent: Optional[str], tags: dict):
    from . import tracking as trk

    return trk.open_run(uri=tracking.get("uri"), experiment=tracking.get("experiment", "grrr_stream"), key=key,
                        run_name=name, tags=tags, parent_run_id=parent)
