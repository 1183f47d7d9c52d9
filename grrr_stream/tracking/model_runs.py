"""The MLflow runs of the work on models: a transition's decomposition (its run), each variant built from it (nested
under it) and each variant's evaluation (nested under the variant). Their names, keys and shared tags are
:mod:`.runs`'s, which the statistics, comparison and sweep runs use too; each function here builds
tracking.run_log.RunLog s and hands them to tracking.run_log.deliver, so a tracking failure never fails the work."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

from ..columns import HEADLINE, VS_ISO
from ..config import TrackingConfig, stable_hash
from ..geometry.analyses import MATRIX_COLUMNS
from ..runtime.device import resolve_device
from .mlflow_view import TRANSITION_HEADLINE
from .run_log import RunLog, deliver
from .runs import NOTE, deliver_last, finite_metrics, transition_key, transition_name, transition_ref, transition_tags

# ---------------------------------------------------------------------------
# transition (decomposition)


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
        tags=transition_tags(manifest, cfg.chain, cfg.method),
        start_ms=started_ms,
        params=params,
        metrics=metrics,
        artifacts=artifacts,
    )
    return deliver_last([log], cfg.tracking, store.path)


def _decomposition_metrics(summary: dict) -> list[tuple[str, float, int]]:
    """A transition's headline metrics: each headline column's headline statistic over every matrix of the
    transition (summary scope "all"), under the column's plain name (no per-matrix or per-module series: those
    are the artifacts metrics.csv and summary.csv, shown as tables). A share whose scale depends on the shapes
    gives its ratio to its isotropic value where the runs' view shows it (``f_diag_vs_iso``: 0.03 at r = 128 is 4×,
    at r = 4096 120×); the other ratios are in summary.csv."""
    overall = summary["scopes"].get("all", {})
    cols = MATRIX_COLUMNS.summarised(overall, HEADLINE)
    ratios = [(c.stat(VS_ISO), overall.get(c.stat(VS_ISO))) for c in cols if c.stat(VS_ISO) in TRANSITION_HEADLINE]
    return finite_metrics([*((c.name, overall.get(c.headline)) for c in cols), *ratios])


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


def variant_run_name(variant: str, manifest: dict) -> str:
    """A variant's run name, unique in a sweep: "full · base → sft"."""
    return f"{variant} · {transition_name(manifest)}"


def variant_ref(builder) -> dict:
    """Key, name, tags and parent (its transition's run) of a variant's run: a variant built (``variants``, a
    sweep's variant unit) and the same variant evaluated share it, when built with the same settings."""
    t = builder.transition
    name = builder.spec.name
    return {
        "key": "variant-" + stable_hash(builder.metadata(), 24),
        # every transition has a 'full': the name says whose, so that no two runs of a sweep share a name
        "name": variant_run_name(name, t.manifest),
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
    metrics = finite_metrics((k, summary.get(k)) for k in _VARIANT) + [("work_seconds", seconds, 0)]
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
    return deliver_last([log], tracking, folder.parent)


def log_evaluation(
    t, builders: Sequence, benches: Sequence, res, options, tracking: TrackingConfig, *, started: float, seconds: float
) -> list[str]:
    """One run per variant, nested under the variant's run (under the transition's). Each spans the scoring of its
    variant (``res.spans``; the whole evaluation when not measured), its ``work_seconds``. ``options``: the
    evaluation's, its engine's dtype resolved (its engine, template and sampling are logged; the dtype chosen and
    why, ``res.info``'s ``engine_dtype`` and ``engine_dtype_reason``, as tags: 'auto' resolved to a dtype shares
    the runs of that dtype, whose params cannot change)."""
    from ..evaluation import engine  # the one upward import (tests/test_layers.py EXCEPTIONS), kept here

    ref = transition_ref(t)
    logs = [RunLog.of(tracking, **ref, once=False, finish=False, artifacts=[(f, "evaluation") for f in res.files])]
    versions = engine.engine_versions()
    for builder in builders:
        span = (getattr(res, "spans", None) or {}).get(builder.spec.name, (started, started + seconds))
        logs.append(_evaluation_log(t, builder, benches, res, options, tracking, versions=versions, span=span))
    return (deliver(logs, tracking, res.out) or [None])[1:]


def _evaluation_log(
    t,
    builder,
    benches: Sequence,
    res,
    options,
    tracking: TrackingConfig,
    *,
    versions: dict,
    span: tuple[float, float],
) -> RunLog:
    """The run of one variant's evaluation, spanning ``span`` (its start and end, epoch seconds)."""
    name = builder.spec.name
    began, ended = span
    on = ", ".join(b.name for b in benches)
    note = (
        f"The variant {name} of {transition_name(t.manifest)} evaluated on {on}: average accuracy (%), "
        f"retention (its accuracy as % of full's) and minus_full (points) with its paired bootstrap interval."
    )
    return RunLog.of(
        tracking,
        key=_evaluation_key(t, builder, res, options),
        name=f"{variant_run_name(name, t.manifest)} on {on}",
        # mlflow.runType 'evaluation': the runs table opens the parent of such a run on a first visit
        tags={
            "grrr.kind": "evaluation",
            "grrr.variant": name,
            "mlflow.runType": "evaluation",
            NOTE: note,
            **_stop_tags(res, name),
        },
        set_tags={
            f"grrr.{k}": str(res.info[k])[:5000] for k in ("engine_dtype", "engine_dtype_reason") if k in res.info
        },
        parent=variant_ref(builder),
        start_ms=int(began * 1000),
        end_ms=math.ceil(ended * 1000),
        once=False,
        params=_evaluation_params(builder, benches, res, options, versions),
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


def _evaluation_key(t, builder, res, options) -> str:
    """An evaluation run's key: what its numbers depend on (the variant, the engine's result settings, the
    template and prompt, and the sampling where it changes the result)."""
    settings_key = {
        "transition": t.manifest["identity"],
        "variant": builder.metadata(),
        "engine": options.engine.result_fields(),
        "template": options.template,
        "prompt": res.prompt,
    }
    if options.sampling.key_fields() is not None:
        settings_key["sampling"] = options.sampling.key_fields()
    return "evaluation-" + stable_hash(settings_key, 24)


def _evaluation_params(builder, benches: Sequence, res, options, versions: dict) -> dict:
    """An evaluation run's params: its variant's, the engine, template and sampling, the versions, each
    benchmark's digest and size, and the design with its settings (the design's own params)."""
    params = {
        **variant_params(builder),
        "template": options.template,
        "prompt_format": res.prompt["digest"],
        "metric": res.metric,
        **{f"sampling.{k}": v for k, v in options.sampling.model_dump().items()},
        **{f"engine.{k}": v for k, v in options.engine.model_dump(exclude={"auto_min_energy"}).items()},
        **{f"version.{k}": v for k, v in versions.items()},
    }
    params.update({f"sha256.{b.name}": b.sha256 for b in benches})
    params.update({f"n.{b.name}": len(b.problems) for b in benches})
    params.update(getattr(res, "design_params", None) or {"design": options.design})
    return params


def _stop_tags(res, name: str) -> dict:
    """Under a design where each variant rests on its own problems: how many and why it stopped."""
    d = {r["variant"]: r for r in res.differences}.get(name, {})
    if not getattr(res, "own_problems", False) or "problems" not in d:
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
    if isinstance(d.get("problems"), int):  # the adaptive design: the problems the numbers rest on
        metrics.append(("problems", float(d["problems"]), 0))
    if name in res.fidelity:
        metrics += finite_metrics([("fidelity", res.fidelity[name].get("fidelity"))])
    return metrics
