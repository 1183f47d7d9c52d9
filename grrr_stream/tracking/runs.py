"""Every MLflow run grrr_stream logs, one function per kind: transition (its decomposition), stats,
comparison, variant, evaluation and sweep. Each takes the typed results and settings of its work and
a config.TrackingConfig; nothing else builds MLflow run names, tags, params or metrics. Each builds
tracking.run_log.RunLog s (the intent: params, metrics, tags, artifact paths, measured times) and hands them to
tracking.run_log.deliver, which logs them now or records them beside the result for later (``folder``): a
tracking failure never fails the work. The MLflow client itself is tracking/mlflow_client.py."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from ..config import TrackingConfig, stable_hash
from ..files import atomic_write_text, read_csv, to_csv
from ..runtime.device import resolve_device
from . import mlflow_client as trk
from .run_log import RunLog, deliver


def enabled(tracking: Optional[TrackingConfig]) -> bool:
    return tracking is not None and tracking.enabled


def transition_key(identity: dict) -> str:
    """Deterministic MLflow key of a transition: its inputs' fingerprints and settings hash."""
    return "transition-" + stable_hash(identity, 24)


def _one(logs: list[RunLog], tracking: TrackingConfig, folder: Optional[Path]) -> Optional[str]:
    """Deliver ``logs``; the last one's run id (None when it was recorded for later)."""
    ids = deliver(logs, tracking, folder)
    return ids[-1] if ids else None


def _numbers(items) -> list[tuple[str, float, int]]:
    """(name, value, 0) of the finite numbers (not bools) among (name, value) pairs."""
    return [(k, v, 0) for k, v in items if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v)]


# ---------------------------------------------------------------------------
# transition (decomposition)


def transition_ref(t) -> dict:
    """Key, name and tags of a stored transition's run: found, or created unfinished if the decomposition
    was not tracked (a later tracked `decompose` of the same transition completes it)."""
    m = t.manifest
    return {"key": transition_key(m["identity"]), "name": f"{m['base']} → {m['post']}",
            "tags": {"grrr.kind": "transition", "grrr.chain": m.get("chain") or "",
                     "grrr.method": m.get("method") or ""}}


def log_decomposition(cfg, store, manifest: dict, rows: list[dict], summary: dict, started_ms: int,
                      seconds: float) -> str:
    """The transition's run from its decomposition (``cfg``: its DecomposeConfig, whose ``tracking`` it uses);
    missed logging is recorded in the store's ``.tracking/``."""
    params = {
        "base": cfg.base, "post": cfg.post, "method": cfg.method, "chain": cfg.chain,
        "device": str(resolve_device(cfg.device)), "compute_dtype": cfg.compute_dtype,
        "store_dtype": cfg.store_dtype, "core_rel_threshold": cfg.core_rel_threshold,
        "rank_thresholds": list(cfg.rank_thresholds), "modules": ",".join(cfg.modules),
        "module_pattern": cfg.module_pattern, "store": str(cfg.store.resolve()),
        "model_type": manifest["model_type"], "n_matrices": len(rows),
        **manifest["identity"],
        **{f"version.{k}": v for k, v in manifest["versions"].items()},
    }
    metrics = _decomposition_metrics(rows, summary)
    metrics.append(("work_seconds", seconds, 0))  # this attempt's decomposition, before any logging
    artifacts = [(store.path / f, None) for f in ("metrics.csv", "summary.csv", "summary.json")]
    artifacts += [(f, "figures") for f in sorted((store.path / "figures").glob("*.png"))]
    log = RunLog.of(cfg.tracking, key=transition_key(manifest["identity"]),
                    name=f"{Path(cfg.base).name} → {Path(cfg.post).name}",
                    tags={"grrr.kind": "transition", "grrr.chain": cfg.chain or "", "grrr.method": cfg.method or ""},
                    start_ms=started_ms, params=params, metrics=metrics, artifacts=artifacts)
    return _one([log], cfg.tracking, store.path)


_PER_MATRIX = ("f_diag", "f_off", "f_null", "r_delta", "delta_fro", "sv_cos", "delta_max",
               "sr_w0", "sr_delta", "sr_w1", "dsr_pct", "alpha")


def _decomposition_metrics(rows: list[dict], summary: dict) -> list[tuple[str, float, int]]:
    metrics: list[tuple[str, float, int]] = []
    for r in rows:
        if r.get("expert") is not None:
            # one series per (metric, module) with the layer as step has no place for E experts a layer; their
            # values are in metrics.csv (logged below) and aggregated in the per-module and per-expert scopes
            continue
        metrics += [(f"{k}/{r['module']}", r[k], r["layer"]) for k in _PER_MATRIX if math.isfinite(r[k])]
    for scope, srow in summary["scopes"].items():
        suffix = "" if scope == "all" else f"/{scope}"
        for k in summary["metrics"]:
            if f"{k}_mean" in srow:  # a metric some modules lack (an angle above their size)
                metrics.append((f"mean/{k}{suffix}", srow[f"{k}_mean"], 0))
                metrics.append((f"std/{k}{suffix}", srow[f"{k}_std"], 0))
        # update sparsity: pooled over the scope's entries (geometry.analyses.pooled_sparsity), not a mean
        metrics += [(f"pooled/{k[:-7]}{suffix}", v, 0) for k, v in srow.items() if k.endswith("_pooled")]
    return metrics


# ---------------------------------------------------------------------------
# stats and comparisons


def log_stats(transitions: Sequence, long_rows: list[dict], out: Path, tracking: TrackingConfig, *,
              resamples: int, seed: int) -> None:
    """Each transition's bootstrap summaries as artifacts of its run."""
    logs = []
    for t in transitions:
        ref = transition_ref(t)
        mine = [r for r in long_rows if r["store"] == str(t.path)]
        tdir = out / f"per_transition_{stable_hash(str(t.path), 8)}"
        tdir.mkdir(exist_ok=True)
        atomic_write_text(tdir / f"stats_summary_resamples{resamples}_seed{seed}.csv", to_csv(mine))
        logs.append(RunLog.of(tracking, **ref, once=False, finish=False,
                              artifacts=[(f, "stats") for f in sorted(tdir.iterdir())]))
    deliver(logs, tracking, out)


def log_comparison(comp, a, b, c, summary: dict, files: Sequence[Path], tracking: TrackingConfig, *,
                   resamples: int, null_draws: int, seed: int, alpha: float, started: float,
                   seconds: float) -> str:
    """The run of one comparison of stores ``a`` and ``b`` (``c``: their ancestor's, or None); ``files``:
    its per-matrix CSV, its JSON and the figures."""
    settings = {"kind": comp.kind, "a": a.manifest["identity"], "b": b.manifest["identity"],
                "statistic": "median cos_off", "resamples": resamples, "null_draws": null_draws,
                "seed": seed, "alpha": alpha}
    if c is not None:
        settings["ancestor"] = c.manifest["identity"]
    params = {"kind": comp.kind, "a": a.label, "b": b.label, "a_store": str(a.path),
                    "b_store": str(b.path), "ancestor": comp.ancestor_label or "",
                    "ancestor_store": str(c.path) if c is not None else "",
                    "frame": a.manifest["identity"]["base_fingerprint"],
                    "frame_settings": json.dumps(a.manifest["settings"], sort_keys=True),
                    "statistic": "median cos_off", "resamples": resamples, "null_draws": null_draws,
                    "seed": seed, "alpha": alpha}
    metrics = ([(k, v, 0) for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
               + [(f"cos_off/{r['module']}", r["cos_off"], r["layer"]) for r in comp.rows]
               + [("work_seconds", seconds, 0)])
    log = RunLog.of(tracking, key="comparison-" + stable_hash(settings, 24), name=summary["label"],
                    tags={"grrr.kind": "comparison", "grrr.comparison": comp.kind}, start_ms=int(started * 1000),
                    params=params, metrics=metrics,
                    set_tags={"grrr.verdict": comp.null.verdict}, artifacts=[(f, None) for f in files])
    return _one([log], tracking, Path(files[0]).parent if files else None)


def log_channel_stats(store: Path, rows: list[dict], layer_rows: list[dict], files: Sequence[Path],
                      tracking: TrackingConfig) -> None:
    """A transition's energy on its W0's outlier channels, on the transition's run: per group (all, reader,
    writer, module=NAME) and component, ``channels/GROUP/COMPONENT/{energy_share,ratio,ci_lo,ci_hi,p_value}``;
    ``channels/channel_share`` and ``channels/count``; per layer ``channels/layer/COMPONENT/energy_share``
    (step: the layer); the two CSV files as artifacts under ``channels/``."""
    from ..store.transition_store import StoredTransition

    t = StoredTransition(Path(store))
    metrics = _numbers((f"channels/{r['group']}/{r['component']}/{k}", r[k]) for r in rows
                       for k in ("energy_share", "ratio", "ci_lo", "ci_hi", "p_value"))
    if rows:
        metrics += _numbers([("channels/channel_share", rows[0]["channel_share"]),
                             ("channels/count", rows[0]["channels"])])
    metrics += [(f"channels/layer/{r['component']}/energy_share", r["energy_share"], int(r["layer"]))
                for r in layer_rows if math.isfinite(r["energy_share"])]
    log = RunLog.of(tracking, **transition_ref(t), once=False, finish=False, metrics=metrics,
                    changed_metrics_only=True, artifacts=[(Path(f), "channels") for f in files])
    deliver([log], tracking, Path(files[0]).parent if files else None)


# ---------------------------------------------------------------------------
# variants and their evaluation


def variant_params(builder) -> dict:
    """What a variant is built from, as MLflow params (the same for its build and its evaluation)."""
    comps = builder.spec.components()
    return {"variant": builder.spec.name, "components": json.dumps(comps, sort_keys=True),
            "seed": comps.get("random_removal_seed"), "dtype": builder.dtype,
            "rest_from": builder.rest_from or "-", "rest_from_requested": builder.rest_requested,
            "rest_fallback": builder.rest_fallback or "", "config_from": builder.home_side,
            "prompt_format_from": "post",
            # a channel variant: which channel set it keeps (other variants' params stay as they were)
            **({"channels_" + k: v for k, v in builder.channels.metadata().items()}
               if getattr(builder, "channels", None) is not None else {})}


def log_variant(builder, folder: Path, summary: dict, tracking: TrackingConfig, *, started: float,
                seconds: float) -> str:
    """The variant's run, nested in its transition's; ``started`` (epoch seconds) and ``seconds``: when its
    build began and how long it took (a build skipped as already done takes no time)."""
    t = builder.transition
    params = {**variant_params(builder), "store": str(t.path), "folder": str(folder.resolve())}
    rows = read_csv(folder.with_name(folder.name + ".fidelity.csv"))  # also there when the build was skipped
    metrics = _numbers(summary.items())
    # per-matrix series for matrices outside the experts only (as in decompose's tracking: E experts a layer do
    # not fit one series per module); the csv artifact has every row
    metrics += [(f"fidelity/{r['module']}", float(r["fidelity"]), int(r["layer"])) for r in rows
                if math.isfinite(float(r["fidelity"])) and not r.get("expert")]
    metrics.append(("work_seconds", seconds, 0))
    log = RunLog.of(tracking, key="variant-" + stable_hash(builder.metadata(), 24),
                    name=f"{t.label} [{builder.spec.name}]",
                    tags={"grrr.kind": "variant", "grrr.variant": builder.spec.name}, parent=transition_ref(t),
                    start_ms=int(started * 1000), params=params, metrics=metrics,
                    artifacts=[(folder.with_name(folder.name + ".fidelity.csv"), None)])
    return _one([log], tracking, folder.parent)


def log_evaluation(t, builders: Sequence, benches: Sequence, res, settings, template: str, sampling,
                   tracking: TrackingConfig, *, started: float, seconds: float) -> list[str]:
    """One nested run per variant under the transition's run. The variants are evaluated together
    (one engine), so each run spans the whole evaluation and records its ``work_seconds``."""
    from ..evaluation import engine as ev

    ref = transition_ref(t)
    logs = [RunLog.of(tracking, **ref, once=False, finish=False, artifacts=[(f, "evaluation") for f in res.files])]
    versions = ev.engine_versions()
    for builder in builders:
        name = builder.spec.name
        settings_key = {"transition": t.manifest["identity"], "variant": builder.metadata(),
                        "engine": settings.result_fields(), "template": template, "prompt": res.prompt}
        if sampling.key_fields() is not None:
            settings_key["sampling"] = sampling.key_fields()
        params = {**variant_params(builder), "template": template, "prompt_format": res.prompt["digest"],
                  "metric": res.metric, **{f"sampling.{k}": v for k, v in sampling.model_dump().items()},
                  **{f"engine.{k}": v for k, v in settings.model_dump().items()},
                  **{f"version.{k}": v for k, v in versions.items()}}
        params.update({f"sha256.{b.name}": b.sha256 for b in benches})
        params.update({f"n.{b.name}": len(b.problems) for b in benches})
        logs.append(RunLog.of(
            tracking, key="evaluation-" + stable_hash(settings_key, 24), name=f"{t.label} [{name}] eval",
            tags={"grrr.kind": "evaluation", "grrr.variant": name}, parent=ref, start_ms=int(started * 1000),
            once=False, params=params,
            # the benchmark files as dataset inputs: the runs table's Dataset column
            datasets=[(b.name, b.sha256, b.path, len(b.problems), "evaluation") for b in benches],
            # a metric already logged with this value is not logged again (reruns add no history); the
            # first evaluation's time only to a new run (a rerun, scoring nothing new, is not it)
            metrics=_evaluation_metrics(res, name), changed_metrics_only=True,
            first_metrics=[("work_seconds", seconds, 0)],
            artifacts=[(f, "generations") for f in sorted((res.out / name).glob("*.jsonl"))],
            tables=[(res.out / name / "problems.csv", "problems.json")]))
    return (deliver(logs, tracking, res.out) or [None])[1:]


_ACCURACY_METRICS = ("wait_per_answer", "wait_per_1k_tokens", "truncated_pct", "tokens_mean", "tokens_median",
                     "tokens_mean_correct", "tokens_mean_wrong")


def _evaluation_metrics(res, name: str) -> list[tuple[str, float, int]]:
    """The metrics of variant ``name`` of an EvaluationResult."""
    mine = [r for r in res.results if r.variant == name]
    metrics = [(f"acc/{r.benchmark}", r.accuracy, 0) for r in mine]
    metrics += [(f"wait_mean/{r.benchmark}", r.wait_mean, 0) for r in mine]
    metrics += [(f"truncated/{r.benchmark}", float(r.truncated), 0) for r in mine]
    metrics += [(f"{m}/{r.benchmark}", v, 0) for r in mine for m, v in (r.metrics or {}).items() if m != "avg"]
    row = {r["variant"]: r for r in res.accuracy_rows}.get(name, {})
    if row.get("average") is not None:
        metrics.append(("average", row["average"], 0))
    if row:
        metrics += [(k, row[k], 0) for k in _ACCURACY_METRICS if row.get(k) is not None]
        metrics.append(("wait_mean", row["wait_per_answer"], 0))
    d = {r["variant"]: r for r in res.differences}.get(name, {})
    metrics += [(k if not k.startswith("retention_full") else "retention", v, 0) for k, v in d.items()
                if k.startswith(("minus_", "retention_")) and isinstance(v, float) and math.isfinite(v)]
    if name in res.fidelity:
        metrics += [(f"fidelity.{k}", v, 0) for k, v in res.fidelity[name].items()
                    if isinstance(v, float) and math.isfinite(v)]
    return metrics


# ---------------------------------------------------------------------------
# sweep


def log_sweep(plan, result, tracking: TrackingConfig, started: float, html=None) -> Optional[str]:
    """One MLflow run per sweep (keyed by its plan), with the unit counts and the report; it spans
    this invocation from ``started`` (a resumed sweep's run spans all invocations). ``html(run_id)``:
    writes the HTML report, which names the run, before the report's files are logged."""
    counts = {s: sum(1 for v in result.states.values() if v == s) for s in ("done", "failed", "blocked", "pending")}
    params = {"name": plan.config.name, "workdir": str(plan.workdir), "units": len(plan.units),
              "transitions": ",".join(plan.transitions),
              "config": json.dumps(plan.config.model_dump(mode="json"), sort_keys=True)}
    metrics = [(f"units_{k}", v, 0) for k, v in counts.items()] + [("work_seconds", time.time() - started, 0)]
    ref = {"key": "sweep-" + plan.key, "name": f"sweep {plan.config.name}", "tags": {"grrr.kind": "sweep"},
           "start_ms": int(started * 1000)}
    # the report's files first (the run stays open), then the HTML page, which names the run it is logged
    # with: once its id is known, or without it when the logging is recorded for later
    before = [f for f in result.report_files if f != result.html]
    first = RunLog.of(tracking, **ref, params=params, metrics=metrics + _claim_metrics(result.claims),
                      artifacts=[(f, "report") for f in before], finish=False)
    run_id = _one([first], tracking, plan.workdir)
    if html is None:
        return run_id
    page = html(run_id)
    # the page is logged on every run (a rerun rewrites it: the logged copy stays the one on disk), then the
    # run is finished if it was not before (a finished run keeps its end)
    logs = [RunLog.of(tracking, **ref, once=False, finish=False, artifacts=[(page, "report")]),
            RunLog.of(tracking, **ref, finish=result.ok)]
    return _one(logs, tracking, plan.workdir) or run_id


def sweep_runs(tracking: TrackingConfig) -> list[dict]:
    """The runs tagged with the sweep (``tracking.sweep``): run_id, experiment_id, name, kind and status, for
    the HTML report's provenance; [] when the store cannot be read."""
    from mlflow.tracking import MlflowClient

    try:
        with trk.limits(tracking.timeout_s, tracking.retries):  # provenance: never a long wait
            uri = trk.resolve_uri(tracking.uri)
            exp_id = trk.prepare(uri, tracking.experiment)
            found = MlflowClient(tracking_uri=uri).search_runs(
                [exp_id], filter_string=f"tags.`{trk.SWEEP_TAG}` = '{tracking.sweep}'", max_results=5000)
    except Exception:  # noqa: BLE001 - provenance only: the page is written without the list
        return []
    return sorted(({"run_id": r.info.run_id, "experiment_id": exp_id, "name": r.info.run_name,
                    "kind": r.data.tags.get("grrr.kind", ""), "status": r.info.status} for r in found),
                  key=lambda r: (r["kind"], r["name"]))


def _claim_metrics(claims: dict[str, Any]) -> list[tuple[str, float, int]]:
    """claims/<suite>/<variant>/vs_<reference>/<set>/<group>/<statistic> (with _ci_lo, _ci_hi); the set
    is 'informative' or 'all_evaluated'."""
    metrics: list[tuple[str, float, int]] = []
    for suite, s in claims.items():
        pre = "claims/" + (f"{suite}/" if suite else "")
        metrics += [(f"{pre}{k}", v, 0) for k, v in s["counts"].items()]
        for r in s["claims"]:
            name = f"{pre}{r['variant']}/vs_{r['reference']}/{r['set'].replace(' ', '_')}/{r['group']}/{r['statistic']}"
            metrics += _numbers((name + suffix, r[key]) for key, suffix in
                                (("value", ""), ("ci_lo", "_ci_lo"), ("ci_hi", "_ci_hi")))
    return metrics
