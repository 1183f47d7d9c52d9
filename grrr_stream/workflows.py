"""Workflows over finished stores: statistics, comparisons, variant builds.

The library functions behind ``grrr-stream stats``, ``compare`` and ``variants``: they
run the computation modules, write tables and figures, and log to MLflow.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from . import runs
from .config import TrackingConfig, stable_hash, tracking_config
from .errors import ConfigError
from .files import atomic_write_text, ensure_folder, remove_tree, to_csv
from .store import StoredTransition


def make_scheduler(address: Optional[str]) -> Any:
    """What Dask graphs (stats, compare, bands) run on for a --scheduler string (grrr_stream.cluster)."""
    from .cluster import compute_scheduler

    return compute_scheduler(address)


@dataclass
class StatsResult:
    out: Path
    long_rows: list[dict]
    files: list[Path]


def run_stats(stores: Sequence[Path], out: Path, *, resamples: int = 10_000, seed: int = 0,
              scheduler: Any = None, tracking: TrackingConfig | dict | None = None) -> StatsResult:
    """Per-transition summaries with bootstrap CIs (paper Tables 3, 4, 7) as CSV files in ``out``."""
    from . import stats

    transitions = [StoredTransition(Path(s)) for s in stores]
    long_rows = stats.summary_tables(transitions, resamples=resamples, seed=seed, scheduler=scheduler)
    out = ensure_folder(Path(out), "--out")
    files = []
    for name, rows in (("summary_long.csv", long_rows),
                       ("table_overall.csv", stats.wide_table(long_rows, "all")),
                       ("table_by_module.csv", stats.wide_table(long_rows, "module")),
                       ("table_by_layer.csv", stats.wide_table(long_rows, "layer"))):
        atomic_write_text(out / name, to_csv(rows))
        files.append(out / name)
    if runs.enabled(tracking := tracking_config(tracking)):
        runs.log_stats(transitions, long_rows, out, tracking, resamples=resamples, seed=seed)
    return StatsResult(out, long_rows, files)


def run_bands(stores: Sequence[Path], out: Path, *, edges: Sequence[int] = (16, 64, 256),
              scheduler: Any = None) -> list[Path]:
    """Principal-band energies of finished stores from their stored P (``grrr-stream bands``): per matrix,
    mean per module and per layer, and a figure per transition, in ``out``."""
    from . import plots, stats

    out = ensure_folder(Path(out), "--out")
    files = []
    all_rows = []
    for path in stores:
        t = StoredTransition(Path(path))
        rows = [{"transition": t.label, **r} for r in stats.band_rows(t, edges, scheduler=scheduler)]
        all_rows += rows
        stem = stable_hash(str(t.path), 8)
        files.append(plots.band_energy_by_module(rows, list(edges), out / f"band_energy_by_module_{stem}.png",
                                                 t.label))
    cols = [k for k in all_rows[0] if k.startswith("band") or k == "f_null"] if all_rows else []
    for scope in ("module", "layer"):
        groups: dict[tuple, list[dict]] = {}
        for r in all_rows:
            groups.setdefault((r["transition"], r[scope]), []).append(r)
        table = [{"transition": tr, scope: s, "n": len(rs), **{c: sum(r[c] for r in rs) / len(rs) for c in cols}}
                 for (tr, s), rs in groups.items()]
        atomic_write_text(out / f"bands_by_{scope}.csv", to_csv(table))
        files.append(out / f"bands_by_{scope}.csv")
    atomic_write_text(out / "bands.csv", to_csv(all_rows))
    files.append(out / "bands.csv")
    return files


@dataclass
class CompareResult:
    out: Path
    comparisons: list
    summaries: list[dict]
    files: list[Path]
    run_ids: list[str]


def comparison_label(kind: str, a: StoredTransition, b: StoredTransition, ancestor_label: Optional[str]) -> str:
    if kind == "sequential":
        return f"{a.label} then incr. to {b.label}"
    if kind == "cumulative":
        return f"{a.label} vs {b.label} (cumulative)"
    return f"{a.label} vs {b.label} (from {ancestor_label})"


def run_comparisons(pairs: Sequence[tuple], out: Path, *, resamples: int = 10_000,
                    null_draws: int = 10_000, seed: int = 0, alpha: float = 0.05, scheduler: Any = None,
                    tracking: TrackingConfig | dict | None = None) -> CompareResult:
    """Off-diagonal cosine geometry for each (kind, a, b) or (kind, a, b, ancestor) of stores;
    CSV/JSON + Figures 4/5 in ``out``. ``ancestor``: the store of base → C, C the nearest common
    ancestor of an independent pair (None or absent: C is the base)."""
    from . import plots, stats

    out = ensure_folder(Path(out), "--out")
    comparisons, summaries, files = [], [], []
    for pair in pairs:
        kind, a_path, b_path = pair[:3]
        c_path = pair[3] if len(pair) > 3 else None
        a, b = StoredTransition(Path(a_path)), StoredTransition(Path(b_path))
        c = StoredTransition(Path(c_path)) if c_path is not None else None
        started = time.time()
        comp = stats.compare(a, b, kind, ancestor=c, resamples=resamples, null_draws=null_draws, seed=seed,
                             alpha=alpha, scheduler=scheduler)
        summary = {"label": comparison_label(kind, a, b, comp.ancestor_label), **comp.summary()}
        stem = f"{kind}_{stable_hash([str(a.path), str(b.path)] + ([str(c.path)] if c else []), 8)}"
        atomic_write_text(out / f"{stem}_per_matrix.csv", to_csv(comp.rows))
        atomic_write_text(out / f"{stem}.json", json.dumps(summary, indent=2))
        files += [out / f"{stem}_per_matrix.csv", out / f"{stem}.json"]
        comparisons.append((comp, a, b, c, stem, started, time.time() - started))
        summaries.append(summary)
    atomic_write_text(out / "comparisons.csv", to_csv(summaries))
    files.append(out / "comparisons.csv")
    figs = [plots.cosine_medians(summaries, out / "offdiag_cosine_medians.png"),
            plots.norm_bars(summaries, out / "update_norms.png")]
    files += figs
    run_ids = []
    if runs.enabled(tracking := tracking_config(tracking)):
        run_ids = [runs.log_comparison(comp, a, b, c, summary, [out / f"{stem}_per_matrix.csv", out / f"{stem}.json",
                                                              *figs], tracking, resamples=resamples,
                                       null_draws=null_draws, seed=seed, alpha=alpha, started=started,
                                       seconds=seconds)
                   for (comp, a, b, c, stem, started, seconds), summary in zip(comparisons, summaries)]
    return CompareResult(out, [c[0] for c in comparisons], summaries, files, run_ids)


@dataclass
class VariantsResult:
    out: Path
    summaries: list[dict]
    folders: list[Path]
    run_ids: list[str]


def run_variants(store: Path, out: Path, variants: Sequence[str], *, dtype: str = "float32",
                 rest_from: str = "base", device: str = "auto", overwrite: bool = False,
                 max_shard_bytes: int = 2 * 2**30, tracking: TrackingConfig | dict | None = None, stream=None) -> VariantsResult:
    """Build each variant of the transition in ``store`` as ``out/<variant>/`` (HF folder) plus
    ``out/<variant>.fidelity.csv``; log fidelity to a nested MLflow run per variant."""
    from .variants import VariantBuilder, parse_variant, write_variant

    specs = [parse_variant(v) for v in variants]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"variant names must be unique, got {names}")
    summaries, folders, run_ids = [], [], []
    tracking = tracking_config(tracking)
    # every refusal (rest source, dtype) before the first folder is written
    builders = [VariantBuilder(Path(store), spec, dtype=dtype, rest_from=rest_from, device=device) for spec in specs]
    out = ensure_folder(Path(out), "--out")
    _check_variant_space(builders, out, overwrite, stream)
    for spec, builder in zip(specs, builders):
        folder = out / spec.name
        started = time.time()
        summary = write_variant(builder, folder, max_shard_bytes=max_shard_bytes, overwrite=overwrite, stream=stream,
                                within=out)
        summaries.append(summary)
        folders.append(folder)
        if runs.enabled(tracking):
            run_ids.append(runs.log_variant(builder, folder, summary, tracking, started=started,
                                            seconds=time.time() - started))
    return VariantsResult(out, summaries, folders, run_ids)


def _check_variant_space(builders, out: Path, overwrite: bool, stream=None) -> None:
    """Say what the variant folders still to build will take (from the layout: exact), and refuse
    before the first one when they cannot all fit."""
    from .diskplan import DiskNeed, check_space, describe
    from .variants import variant_folder_done

    needs = [DiskNeed(b.spec.name, out, sum(t.nbytes for t in b.layout())) for b in builders
             if overwrite or not variant_folder_done(out / b.spec.name, b.metadata())]
    if not needs:
        return
    (stream or sys.stderr).write(f"disk: {len(needs)} variant folder(s) in {out}: {describe(needs)}\n")
    check_space(needs, f"{len(needs)} variant folder(s) in {out}",
                "Free space, build fewer variants at a time, or point --out at another disk.")


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
    prompt: dict = field(default_factory=dict)             # the prompt format every variant was asked in
    solved_lost: list[dict] = field(default_factory=list)  # problems full solves and a variant loses, and reverse
    metric: str = "avg"                                    # the accuracy the tables use


def run_evaluation(store: Path, out: Path, variants: Sequence[str], benchmarks: Sequence[str], bench_dir: Path | str, *,
                   settings=None, materialize: str = "engine", keep_variants: bool = False,
                   limit: Optional[int] = None, template: str = "chat", instruction: Optional[str] = None,
                   rest_from: str = "base", tracking: TrackingConfig | dict | None = None, log=print, resamples: int = 10_000,
                   bootstrap_seed: int = 0, engine_factory=None, lenient: bool = False, sampling=None,
                   metric: str = "avg", nest_sampled: bool = True) -> EvaluationResult:
    """Evaluate variants of a stored transition on benchmarks with vLLM; resumable at prompt level.

    ``materialize='engine'`` streams each variant into a running engine; ``'folder'`` writes
    each variant under ``out/_variants`` and starts a fresh engine on it (deleted afterwards
    unless ``keep_variants``). Every variant is prompted in the post model's format
    (tokenizer, chat template, generation config). An engine runs on the post model; variants
    whose config or tensor layout is the base's and differs from the post model's (see
    :meth:`VariantBuilder.runs_in_post_engine`) get an engine of their own on the base model.
    Differences between variants come with paired bootstrap intervals over problems
    (``resamples``, ``bootstrap_seed``). ``sampling`` (default greedy) draws n answers per problem in
    one request each; ``metric`` ('avg' = avg@n, 'pass@k', 'maj@k') is the accuracy of the tables.
    Sampled results go to ``out/sampled-n…-T…-p…-s…/`` (with ``nest_sampled``), so that results of
    other sampling settings stay beside them and a finished setting is never generated again.
    ``engine_factory`` replaces :class:`evaluate.Engine` (tests).
    """
    from . import claims
    from . import evaluate as ev
    from .eval_settings import EngineSettings, SamplingSettings, check_metric
    from .variants import VariantBuilder, parse_variant, write_variant

    started = time.time()  # the MLflow runs, opened after the evaluation, start here
    settings = settings or EngineSettings()
    sampling = sampling or SamplingSettings()
    check_metric(metric, sampling)
    instruction = instruction if instruction is not None else ev.DEFAULT_INSTRUCTION
    if materialize not in ("engine", "folder"):
        raise ConfigError("materialize must be 'engine' or 'folder'")
    specs = [parse_variant(v) for v in variants]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"variant names must be unique, got {names}")
    t = StoredTransition(Path(store))
    out = ensure_folder(Path(out), "--out")
    if nest_sampled and sampling.key_fields() is not None:
        out = ensure_folder(out / sampling.folder_name(), "--out")
    bench_dir = ev.resolve_bench_dir(bench_dir, benchmarks, out, log=log)  # 'bundled', 'hub[:REPO]' or a folder
    benches = [ev.load_benchmark(b, bench_dir, limit=limit, lenient=lenient) for b in benchmarks]
    for b in benches:
        if b.skipped:
            log(f"WARNING: {b.path}: {b.skipped} malformed line(s) skipped (lenient loading)")
    vdtype = settings.dtype if settings.dtype != "auto" else "float32"
    post_folder = Path(t.manifest["post_folder"])
    prompt = ev.prompt_format(post_folder, template, instruction)
    make_engine = engine_factory or ev.Engine
    # every refusal (a rest source the base cannot supply) before an engine starts
    # on the CPU, not the "auto" default: the vLLM engine holds the GPU's memory while variants are built
    builders = {s.name: VariantBuilder(t.path, s, dtype=vdtype, rest_from=rest_from, device="cpu") for s in specs}

    def engine_home(name: str) -> Path:
        b = builders[name]
        return post_folder if b.runs_in_post_engine() else Path(b.home.folder)

    # variants that need the same engine run one after the other: one engine alive at a time
    homes = {n: engine_home(n) for n in names}
    order = sorted(names, key=lambda n: [homes[m] for m in names].index(homes[n]))
    engine, engine_at = None, None
    results, fidelity, keys_of = {}, {}, {}
    try:
        for name in order:
            builder = builders[name]
            meta = builder.metadata()
            keys = {b.name: ev.evaluation_key(b, meta, settings, template, instruction, prompt["digest"], sampling)
                    for b in benches}
            keys_of[name] = keys
            have = {b.name: ev.scored(out, name, b, keys[b.name], sampling) for b in benches}
            if all(have.values()):
                log(f"{name}: all {len(benches)} benchmark(s) already scored")
                results[name] = list(have.values())
                continue
            folder = None
            if materialize == "engine":
                if engine is None or engine_at != homes[name]:
                    if engine is not None:
                        engine.close()
                        engine = None
                    if homes[name] != post_folder:
                        log(f"{name}: its config or tensor layout is the base model's and differs from the post "
                            f"model's ({', '.join(builder.config_differences()) or 'tensor names/shapes'}); "
                            f"running it in an engine on {homes[name]}")
                    engine, engine_at = make_engine(homes[name], settings, prompt_format=post_folder), homes[name]
                engine.load_weights(builder.tensors(), scratch=out / "_swap", layout=builder.layout(),
                                    config=builder.config())
                fidelity[name] = builder.report.summary()
                active = engine
            else:
                folder = out / "_variants" / name
                fidelity[name] = write_variant(builder, folder, overwrite=True, within=out / "_variants")
                active = make_engine(folder, settings, prompt_format=post_folder)
            try:
                results[name] = []
                for b in benches:
                    if have[b.name]:
                        results[name].append(have[b.name])
                        continue
                    r = ev.score_benchmark(active, b, name, out, keys[b.name], template=template,
                                           instruction=instruction, sampling=sampling)
                    log(f"{name} / {b.name}: {r.accuracy:.1f} % of {r.n}"
                        + (f" ({r.truncated} cut off at {settings.max_new_tokens} tokens)" if r.truncated else ""))
                    results[name].append(r)
            finally:
                if materialize == "folder":
                    active.close()
                    if not keep_variants and folder is not None:
                        remove_tree(folder, within=out / "_variants")
    finally:
        if engine is not None:
            engine.close()
    flat = [r for n in names for r in results[n]]
    acc = ev.accuracy_table(flat, [b.name for b in benches], metric)
    used = {builders[n].rest_from for n in names if builders[n].spec.composed}
    t56, t8, info = ev.retention_tables(acc, rest_from=used.pop() if len(used) == 1 else None)
    fallbacks = sorted({builders[n].rest_fallback for n in names if builders[n].rest_fallback})
    info["rest_from_requested"] = rest_from
    if fallbacks:
        info["rest_fallback"] = fallbacks[0]
    scores = claims.transition_scores(claims.correctness_of(flat, metric=metric), transition=t.label,
                                      resamples=resamples,
                                      seed=bootstrap_seed)
    diffs = claims.difference_rows(scores)
    informative = claims.informative_rows([scores])[0]
    info.update({k: v for k, v in informative.items() if k not in ("transition", "kind")})
    warn_truncated(acc, settings.max_new_tokens, log)
    files = []
    # every metric of every variant and benchmark (the tables above use `metric`)
    long = [{"variant": r.variant, "benchmark": r.benchmark, "metric": m, "value": v, "problems": r.n,
             "samples": r.samples} for r in flat for m, v in (r.metrics or {"avg": r.accuracy}).items()]
    lost = ev.solved_lost(flat, metric)
    for fname, rows in (("accuracy.csv", acc), ("table_retention.csv", t56), ("table_removal.csv", t8),
                        ("table_differences.csv", diffs), ("metrics.csv", long), ("solved_lost.csv", lost),
                        ("diagnostics.csv", ev.diagnostics_table(flat))):
        atomic_write_text(out / fname, to_csv(rows))
        files.append(out / fname)
    # per-problem records as a table per variant: join variants on (benchmark, problem)
    for name in names:
        rows = [row for b in benches for row in ev.problem_rows(out, name, b, keys_of[name][b.name])]
        atomic_write_text(out / name / "problems.csv", to_csv(rows))
    atomic_write_text(out / "evaluation.json", json.dumps(
        {"store": str(t.path), "engine": settings.model_dump(), "versions": ev.engine_versions(),
         "prompt_format": prompt, "bootstrap": {"resamples": resamples, "seed": bootstrap_seed},
         "sampling": sampling.model_dump(), "metric": metric,
         "benchmarks": {b.name: {"sha256": b.sha256, "n": len(b.problems), "skipped": b.skipped, "path": str(b.path)}
                        for b in benches},
         "variants": {n: builders[n].metadata() for n in names},
         "info": info, "fidelity": fidelity}, indent=2, default=str))
    files.append(out / "evaluation.json")
    res = EvaluationResult(out, flat, acc, t56, t8, info, fidelity, files, [], diffs, prompt, lost, metric)
    if runs.enabled(tracking := tracking_config(tracking)):
        res.run_ids = runs.log_evaluation(t, [builders[n] for n in names], benches, res, settings, template,
                                          sampling, tracking, started=started, seconds=time.time() - started)
    return res


TRUNCATION_WARN_PCT = 5.0  # above this share of capped answers an accuracy is a lower bound


def warn_truncated(acc_rows: Sequence[dict], max_new_tokens: int, log=print) -> None:
    for r in acc_rows:
        if r["truncated_pct"] > TRUNCATION_WARN_PCT:
            log(f"WARNING: {r['truncated']} of {r['answers']} answers of variant '{r['variant']}' "
                f"({r['truncated_pct']:.1f} %) were cut off at max_new_tokens = {max_new_tokens}: its accuracy "
                "and Wait count are lower bounds; raise max_new_tokens")
