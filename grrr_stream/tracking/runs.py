"""Every MLflow run grrr_stream logs, one function per kind: transition (its decomposition), stats,
comparison, variant, evaluation and sweep. Each takes the typed results and settings of its work and
a config.TrackingConfig; nothing else builds MLflow run names, tags, params or metrics. The runs nest as the
work does (sweep → transition → variant → evaluation; statistics and comparisons under the sweep), each with a
one-sentence description and a handful of headline metrics at step 0; the detail goes to table artifacts. Each builds
tracking.run_log.RunLog s (the intent: params, metrics, tags, artifact paths, measured times) and hands them to
tracking.run_log.deliver, which logs them now or records them beside the result for later (``folder``): a
tracking failure never fails the work. The MLflow client itself is tracking/mlflow_client.py."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Optional, Sequence

from ..config import TrackingConfig, stable_hash
from ..files import atomic_write_text, to_csv
from ..geometry.analyses import headline_metrics
from ..runtime.device import resolve_device
from . import mlflow_client
from .run_log import RunLog, deliver


def enabled(tracking: Optional[TrackingConfig]) -> bool:
    return tracking is not None and tracking.enabled


def transition_key(identity: dict) -> str:
    """Deterministic MLflow key of a transition: its inputs' fingerprints and settings hash."""
    return "transition-" + stable_hash(identity, 24)


def _deliver_last(logs: list[RunLog], tracking: TrackingConfig, folder: Optional[Path]) -> Optional[str]:
    """Deliver ``logs``; the last one's run id (None when it was recorded for later)."""
    ids = deliver(logs, tracking, folder)
    return ids[-1] if ids else None


NOTE = mlflow_client.NOTE_TAG


def transition_name(manifest: dict) -> str:
    """A transition's one spelling in MLflow: its two models' folder names, "base → sft"."""
    return f"{Path(manifest['base']).name} → {Path(manifest['post']).name}"


def _numbers(items) -> list[tuple[str, float, int]]:
    """(name, value, 0) of the finite numbers (not bools) among (name, value) pairs."""
    return [(k, v, 0) for k, v in items if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


# ---------------------------------------------------------------------------
# transition (decomposition)


def transition_ref(t) -> dict:
    """Key, name and tags of a stored transition's run: found, or created unfinished if the decomposition
    was not tracked (a later tracked `decompose` of the same transition completes it)."""
    m = t.manifest
    return {
        "key": transition_key(m["identity"]),
        "name": transition_name(m),
        "tags": _transition_tags(m, m.get("chain"), m.get("method")),
    }


def _transition_tags(manifest: dict, chain: Optional[str], method: Optional[str]) -> dict:
    name = transition_name(manifest)
    how = f" ({method})" if method else ""
    return {
        "grrr.kind": "transition",
        "grrr.chain": chain or "",
        "grrr.method": method or "",
        NOTE: f"The update {name}{how} decomposed in the base's singular frame: metrics are means over its "
        f"matrices; per-matrix values in metrics.csv, per module in summary.csv.",
    }


def log_decomposition(
    cfg, store, manifest: dict, rows: list[dict], summary: dict, started_ms: int, seconds: float
) -> str:
    """The transition's run from its decomposition (``cfg``: its DecomposeConfig, whose ``tracking`` it uses);
    missed logging is recorded in the store's ``.tracking/``."""
    params = {
        "base": cfg.base,
        "post": cfg.post,
        "method": cfg.method,
        "chain": cfg.chain,
        "device": str(resolve_device(cfg.device)),
        "compute_dtype": cfg.compute_dtype,
        "store_dtype": cfg.store_dtype,
        "core_rel_threshold": cfg.core_rel_threshold,
        "rank_thresholds": list(cfg.rank_thresholds),
        "modules": ",".join(cfg.modules),
        "module_pattern": cfg.module_pattern,
        "store": str(cfg.store.resolve()),
        "model_type": manifest["model_type"],
        "n_matrices": len(rows),
        **manifest["identity"],
        **{f"version.{k}": v for k, v in manifest["versions"].items()},
    }
    metrics = _decomposition_metrics(summary)
    metrics.append(("work_seconds", seconds, 0))  # this attempt's decomposition, before any logging
    # the detail: per matrix (metrics.csv) and per module and expert scope (summary.csv), shown as tables
    artifacts = [(store.path / f, None) for f in ("metrics.csv", "summary.csv", "summary.json")]
    artifacts += [(f, "figures") for f in sorted((store.path / "figures").glob("*.png"))]
    log = RunLog.of(
        cfg.tracking,
        key=transition_key(manifest["identity"]),
        name=transition_name(manifest),
        tags=_transition_tags(manifest, cfg.chain, cfg.method),
        start_ms=started_ms,
        params=params,
        metrics=metrics,
        artifacts=artifacts,
    )
    return _deliver_last([log], cfg.tracking, store.path)


# A transition's headline metrics: means over all its matrices (summary scope "all"), under their plain names
# (the runs table's columns, mlflow_client.HEADLINE_COLUMNS); the rest of the summary's means are kept too, few.
_HEADLINE = ("f_diag", "f_off", "f_null", "r_delta", "sv_cos")
_ALSO = ("delta_fro", "delta_max", "dsr_pct", "alpha")


def _decomposition_metrics(summary: dict) -> list[tuple[str, float, int]]:
    """The means over every matrix of the transition (no per-matrix or per-module series: those are the
    artifacts metrics.csv and summary.csv, shown as tables)."""
    overall = summary["scopes"].get("all", {})
    return _numbers((k, overall.get(f"{k}_mean")) for k in _HEADLINE + _ALSO + headline_metrics())


# ---------------------------------------------------------------------------
# stats and comparisons


def log_stats(
    transitions: Sequence,
    long_rows: list[dict],
    out: Path,
    tracking: TrackingConfig,
    *,
    resamples: int,
    seed: int,
    started: Optional[float] = None,
) -> None:
    """Each transition's bootstrap summaries as artifacts of its run, and a statistics run (nested under its sweep's
    run) with the tables over all of them; ``started``: when the statistics began (epoch seconds)."""
    logs = []
    for t in transitions:
        ref = transition_ref(t)
        mine = [r for r in long_rows if r["store"] == str(t.path)]
        tdir = out / f"per_transition_{stable_hash(str(t.path), 8)}"
        tdir.mkdir(exist_ok=True)
        atomic_write_text(tdir / f"stats_summary_resamples{resamples}_seed{seed}.csv", to_csv(mine))
        logs.append(
            RunLog.of(
                tracking, **ref, once=False, finish=False, artifacts=[(f, "stats") for f in sorted(tdir.iterdir())]
            )
        )
    names = [transition_name(t.manifest) for t in transitions]
    settings = {"transitions": [t.manifest["identity"] for t in transitions], "resamples": resamples, "seed": seed}
    logs.append(
        RunLog.of(
            tracking,
            key="statistics-" + stable_hash(settings, 24),
            name="statistics",
            tags={
                "grrr.kind": "statistics",
                NOTE: f"Bootstrap summaries ({resamples} resamples over matrices) of {len(names)} transitions: "
                f"{', '.join(names)}; the tables are its artifacts.",
            },
            params={"transitions": ", ".join(names), "resamples": resamples, "seed": seed},
            metrics=[("transitions", len(transitions), 0)]
            + ([("work_seconds", time.time() - started, 0)] if started is not None else []),
            start_ms=int(started * 1000) if started is not None else None,
            artifacts=[(f, None) for f in sorted(Path(out).glob("*.csv"))],
        )
    )
    deliver(logs, tracking, out)


def log_comparison(
    comp,
    a,
    b,
    c,
    summary: dict,
    files: Sequence[Path],
    tracking: TrackingConfig,
    *,
    resamples: int,
    null_draws: int,
    seed: int,
    alpha: float,
    started: float,
    seconds: float,
) -> str:
    """The run of one comparison of stores ``a`` and ``b`` (``c``: their ancestor's, or None); ``files``:
    its per-matrix CSV, its JSON and the figures."""
    settings = {
        "kind": comp.kind,
        "a": a.manifest["identity"],
        "b": b.manifest["identity"],
        "statistic": "median cos_off",
        "resamples": resamples,
        "null_draws": null_draws,
        "seed": seed,
        "alpha": alpha,
    }
    if c is not None:
        settings["ancestor"] = c.manifest["identity"]
    params = {
        "kind": comp.kind,
        "a": a.label,
        "b": b.label,
        "a_store": str(a.path),
        "b_store": str(b.path),
        "ancestor": comp.ancestor_label or "",
        "ancestor_store": str(c.path) if c is not None else "",
        "frame": a.manifest["identity"]["base_fingerprint"],
        "frame_settings": json.dumps(a.manifest["settings"], sort_keys=True),
        "statistic": "median cos_off",
        "resamples": resamples,
        "null_draws": null_draws,
        "seed": seed,
        "alpha": alpha,
    }
    # headline numbers only; the per-matrix cosines are the artifact *_per_matrix.csv
    metrics = _numbers((k, summary.get(k)) for k in _COMPARISON) + [("work_seconds", seconds, 0)]
    name_a, name_b = transition_name(a.manifest), transition_name(b.manifest)
    note = (
        f"The {comp.kind} comparison of the updates {name_a} and {name_b}: median over matrices of the cosine "
        f"of their off-diagonal parts, with its bootstrap interval and the isotropic null band."
    )
    log = RunLog.of(
        tracking,
        key="comparison-" + stable_hash(settings, 24),
        name=f"{comp.kind}: {name_a} vs {name_b}",
        tags={"grrr.kind": "comparison", "grrr.comparison": comp.kind, NOTE: note},
        start_ms=int(started * 1000),
        params=params,
        metrics=metrics,
        set_tags={"grrr.verdict": comp.null.verdict},
        artifacts=[(f, None) for f in files],
    )
    return _deliver_last([log], tracking, Path(files[0]).parent if files else None)


_COMPARISON = ("median_cos_off", "ci_lo", "ci_hi", "null_lo", "null_hi", "p_value", "n_matrices")


def log_channel_stats(
    store: Path, rows: list[dict], layer_rows: list[dict], files: Sequence[Path], tracking: TrackingConfig
) -> None:
    """A transition's energy on its W0's outlier channels, on the transition's run: over all its matrices,
    ``channels/COMPONENT/{energy_share,ratio}``, ``channels/channel_share`` and ``channels/count``; the two CSV
    files (every group with its interval and p-value, every layer; ``layer_rows`` are that second file's) as
    artifacts under ``channels/``."""
    from ..store.transition_store import StoredTransition

    t = StoredTransition(Path(store))
    # the group of all matrices only: the reader/writer/module groups and the layers are in the CSV files
    metrics = _numbers(
        (f"channels/{r['component']}/{k}", r[k]) for r in rows if r["group"] == "all" for k in ("energy_share", "ratio")
    )
    if rows:
        metrics += _numbers(
            [("channels/channel_share", rows[0]["channel_share"]), ("channels/count", rows[0]["channels"])]
        )
    log = RunLog.of(
        tracking,
        **transition_ref(t),
        once=False,
        finish=False,
        metrics=metrics,
        changed_metrics_only=True,
        artifacts=[(Path(f), "channels") for f in files],
    )
    deliver([log], tracking, Path(files[0]).parent if files else None)


# ---------------------------------------------------------------------------
# variants and their evaluation


def variant_params(builder) -> dict:
    """What a variant is built from, as MLflow params (the same for its build and its evaluation)."""
    comps = builder.spec.components()
    return {
        "variant": builder.spec.name,
        "components": json.dumps(comps, sort_keys=True),
        "seed": comps.get("random_removal_seed"),
        "dtype": builder.dtype,
        "rest_from": builder.rest_from or "-",
        "rest_from_requested": builder.rest_requested,
        "rest_fallback": builder.rest_fallback or "",
        "config_from": builder.home_side,
        "prompt_format_from": "post",
        # a channel variant: which channel set it keeps (other variants' params stay as they were)
        **(
            {"channels_" + k: v for k, v in builder.channels.metadata().items()}
            if getattr(builder, "channels", None) is not None
            else {}
        ),
    }


def variant_ref(builder) -> dict:
    """Key, name, tags and parent (its transition's run) of a variant's run: a variant built (``variants``, a
    sweep's variant unit) and the same variant evaluated share it, when built with the same settings."""
    t = builder.transition
    name = builder.spec.name
    return {
        "key": "variant-" + stable_hash(builder.metadata(), 24),
        "name": name,
        "parent": transition_ref(t),
        "tags": {
            "grrr.kind": "variant",
            "grrr.variant": name,
            NOTE: f"The variant {name} of {transition_name(t.manifest)} ({builder.dtype}); its evaluations "
            f"are nested under it, the per-matrix fidelity is its artifact *.fidelity.csv.",
        },
    }


_VARIANT = ("fidelity", "fidelity_max", "energy_survived", "store_error_max", "matrices")


def log_variant(
    builder, folder: Path, summary: dict, tracking: TrackingConfig, *, started: float, seconds: float
) -> str:
    """The variant's run, nested in its transition's; ``started`` (epoch seconds) and ``seconds``: when its
    build began and how long it took (a build skipped as already done takes no time)."""
    t = builder.transition
    params = {**variant_params(builder), "store": str(t.path), "folder": str(folder.resolve())}
    # headline numbers; every matrix's fidelity is the csv artifact
    metrics = _numbers((k, summary.get(k)) for k in _VARIANT) + [("work_seconds", seconds, 0)]
    ref = variant_ref(builder)
    log = RunLog.of(
        tracking,
        key=ref["key"],
        name=ref["name"],
        tags=ref["tags"],
        parent=ref["parent"],
        start_ms=int(started * 1000),
        params=params,
        metrics=metrics,
        artifacts=[(folder.with_name(folder.name + ".fidelity.csv"), None)],
    )
    return _deliver_last([log], tracking, folder.parent)


def log_evaluation(
    t, builders: Sequence, benches: Sequence, res, options, tracking: TrackingConfig, *, started: float, seconds: float
) -> list[str]:
    """One run per variant, nested under the variant's run (under the transition's). Each spans the scoring of its
    variant (``res.spans``; the whole evaluation when not measured), its ``work_seconds``. ``options``: the
    evaluation's, its engine's dtype resolved (its engine, template and sampling are logged; the dtype chosen and
    why, ``res.info``'s ``engine_dtype`` and ``engine_dtype_reason``, as tags: 'auto' resolved to a dtype shares
    the runs of that dtype, whose params cannot change)."""
    from ..evaluation import engine

    settings, template, sampling = options.engine, options.template, options.sampling

    ref = transition_ref(t)
    logs = [RunLog.of(tracking, **ref, once=False, finish=False, artifacts=[(f, "evaluation") for f in res.files])]
    versions = engine.engine_versions()
    on = ", ".join(b.name for b in benches)
    for builder in builders:
        name = builder.spec.name
        began, ended = (getattr(res, "spans", None) or {}).get(name, (started, started + seconds))
        settings_key = {
            "transition": t.manifest["identity"],
            "variant": builder.metadata(),
            "engine": settings.result_fields(),
            "template": template,
            "prompt": res.prompt,
        }
        if sampling.key_fields() is not None:
            settings_key["sampling"] = sampling.key_fields()
        params = {
            **variant_params(builder),
            "template": template,
            "prompt_format": res.prompt["digest"],
            "metric": res.metric,
            **{f"sampling.{k}": v for k, v in sampling.model_dump().items()},
            **{f"engine.{k}": v for k, v in settings.model_dump(exclude={"auto_min_energy"}).items()},
            **{f"version.{k}": v for k, v in versions.items()},
        }
        params.update({f"sha256.{b.name}": b.sha256 for b in benches})
        params.update({f"n.{b.name}": len(b.problems) for b in benches})
        params["design"] = options.design
        if options.design != "fixed":  # where each variant stopped and why: the run's metrics and tags below
            params.update({f"sequential.{k}": v for k, v in options.sequential.model_dump(mode="json").items()})
        note = (
            f"The variant {name} of {transition_name(t.manifest)} evaluated on {on}: average accuracy (%), "
            f"retention (its accuracy as % of full's) and minus_full (points) with its paired bootstrap interval."
        )
        logs.append(
            RunLog.of(
                tracking,
                key="evaluation-" + stable_hash(settings_key, 24),
                name=f"{name} on {on}",
                # mlflow.runType 'evaluation': the runs table opens the parent of such a run on a first visit
                tags={
                    "grrr.kind": "evaluation",
                    "grrr.variant": name,
                    "mlflow.runType": "evaluation",
                    NOTE: note,
                    **_stop_tags(res, name),
                },
                set_tags={
                    f"grrr.{k}": str(res.info[k])[:5000]
                    for k in ("engine_dtype", "engine_dtype_reason")
                    if k in res.info
                },
                parent=variant_ref(builder),
                start_ms=int(began * 1000),
                end_ms=math.ceil(ended * 1000),
                once=False,
                params=params,
                # the benchmark files as dataset inputs: the runs table's Dataset column
                datasets=[(b.name, b.sha256, b.path, len(b.problems), "evaluation") for b in benches],
                # a metric already logged with this value is not logged again (reruns add no history); the
                # first evaluation's time only to a new run (a rerun, scoring nothing new, is not it)
                metrics=_evaluation_metrics(res, name),
                changed_metrics_only=True,
                first_metrics=[("work_seconds", ended - began, 0)],
                artifacts=[(f, "generations") for f in sorted((res.out / name).glob("*.jsonl"))],
                tables=[(res.out / name / "problems.csv", "problems.json")],
            )
        )
    return (deliver(logs, tracking, res.out) or [None])[1:]


def _stop_tags(res, name: str) -> dict:
    """Under the sequential design: how many problems the variant's numbers rest on and why it stopped."""
    d = {r["variant"]: r for r in res.differences}.get(name, {})
    if getattr(res, "design", "fixed") == "fixed" or "problems" not in d:
        return {}
    return {"grrr.design": res.design, "grrr.problems": str(d["problems"]), "grrr.stopped": d.get("stopped", "")}


_ACCURACY_METRICS = ("truncated_pct", "tokens_mean", "wait_per_answer")


def _evaluation_metrics(res, name: str) -> list[tuple[str, float, int]]:
    """The headline metrics of variant ``name`` of an EvaluationResult: its accuracy on each benchmark and on
    average, retention and the paired difference to full with its interval, a few diagnostics. The rest (every
    metric of every benchmark, per problem) is in the evaluation's CSV files and the run's problems table."""
    mine = [r for r in res.results if r.variant == name]
    metrics = [(f"acc/{r.benchmark}", r.accuracy, 0) for r in mine]
    row = {r["variant"]: r for r in res.accuracy_rows}.get(name, {})
    if row.get("average") is not None:
        metrics.append(("average", row["average"], 0))
    metrics += [(k, row[k], 0) for k in _ACCURACY_METRICS if row.get(k) is not None]
    d = {r["variant"]: r for r in res.differences}.get(name, {})
    metrics += [
        (k.replace("retention_full_pct", "retention").replace("retention_full", "retention"), v, 0)
        for k, v in d.items()
        if k.startswith(("minus_full", "retention_full")) and isinstance(v, float) and math.isfinite(v)
    ]
    if isinstance(d.get("problems"), int):  # the sequential design: the problems the numbers rest on
        metrics.append(("problems", float(d["problems"]), 0))
    if name in res.fidelity:
        metrics += _numbers([("fidelity", res.fidelity[name].get("fidelity"))])
    return metrics


# ---------------------------------------------------------------------------
# sweep


# the runs a sweep's run holds (those nested deeper hang under a transition or a variant)
_UNDER_SWEEP = ("transition", "comparison", "statistics")


def sweep_ref(plan) -> dict:
    """Key, name and tags of a sweep's run (keyed by its plan)."""
    name = plan.config.name
    return {
        "key": "sweep-" + plan.key,
        "name": f"sweep {name}",
        "tags": {
            "grrr.kind": "sweep",
            NOTE: f"The sweep {name}: its transitions (each with its variants and their evaluations), "
            f"statistics and comparisons are nested under it; its report is the artifact report/.",
        },
    }


def log_sweep(plan, result, tracking: TrackingConfig, started: float, html=None) -> Optional[str]:
    """One MLflow run per sweep (keyed by its plan), with the unit counts and the report, that holds the sweep's
    transition, statistics and comparison runs; it spans this invocation from ``started`` (a resumed sweep's run
    spans all invocations). ``html(run_id)``: writes the HTML report, which names the run, before the report's
    files are logged. The claims are the table report/claims.csv, not metrics."""
    counts = {s: sum(1 for v in result.states.values() if v == s) for s in ("done", "failed", "blocked", "pending")}
    params = {
        "name": plan.config.name,
        "workdir": str(plan.workdir),
        "units": len(plan.units),
        "transitions": ",".join(plan.transitions),
        "config": json.dumps(plan.config.model_dump(mode="json"), sort_keys=True),
    }
    metrics = [(f"units_{k}", v, 0) for k, v in counts.items()] + [("work_seconds", time.time() - started, 0)]
    ref = {**sweep_ref(plan), "start_ms": int(started * 1000)}
    # the report's files first (the run stays open), then the HTML page, which names the run it is logged
    # with: once its id is known, or without it when the logging is recorded for later
    before = [f for f in result.report_files if f != result.html]
    first = RunLog.of(
        tracking,
        **ref,
        params=params,
        metrics=metrics,
        adopt=list(_UNDER_SWEEP),
        artifacts=[(f, "report") for f in before],
        finish=False,
    )
    run_id = _deliver_last([first], tracking, plan.workdir)
    if html is None:
        return run_id
    page = html(run_id)
    # the page is logged on every run (a rerun rewrites it: the logged copy stays the one on disk), then the
    # run is finished if it was not before (a finished run keeps its end)
    logs = [
        RunLog.of(tracking, **ref, once=False, finish=False, artifacts=[(page, "report")]),
        RunLog.of(tracking, **ref, finish=result.ok),
    ]
    return _deliver_last(logs, tracking, plan.workdir) or run_id


def sweep_runs(tracking: TrackingConfig) -> list[dict]:
    """The runs tagged with the sweep (``tracking.sweep``): run_id, experiment_id, name, kind, status and parent,
    for the HTML report's provenance; [] when the store cannot be read."""
    try:
        with mlflow_client.limits(tracking.timeout_s, tracking.retries):  # provenance: never a long wait
            exp_id, found = mlflow_client.find_runs(
                tracking.uri, tracking.experiment, f"tags.`{mlflow_client.SWEEP_TAG}` = '{tracking.sweep}'"
            )
    except Exception:  # noqa: BLE001 - provenance only: the page is written without the list
        return []
    return sorted(
        ({"experiment_id": exp_id, **{k: r[k] for k in ("run_id", "name", "kind", "status", "parent")}} for r in found),
        key=lambda r: (r["kind"], r["name"]),
    )
