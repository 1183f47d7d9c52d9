"""Every MLflow run grrr_stream logs: the names, keys and shared tags of the runs, and one function per kind of
run over stores and sweeps (stats, comparison, channel statistics, sweep); the runs of the work on models
(a transition's decomposition, its variants and their evaluation) are :mod:`.model_runs`. Each takes the typed
results and settings of its work and a config.TrackingConfig; nothing else builds MLflow run names, tags, params or
metrics. The runs nest as the work does (sweep → transition → variant → evaluation; statistics and comparisons
under the sweep), each with a one-sentence description and a handful of headline metrics at step 0; the detail goes
to table artifacts. Each builds tracking.run_log.RunLog s (the intent: params, metrics, tags, artifact paths,
measured times) and hands them to tracking.run_log.deliver, which logs them now or records them beside the result
for later (``folder``): a tracking failure never fails the work. The MLflow client itself is
tracking/mlflow_client.py."""

from __future__ import annotations

import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from ..config import TrackingConfig, stable_hash
from ..files import atomic_write_text, to_csv
from ..store.manifest import transition_label
from . import mlflow_client, run_log
from .mlflow_view import HEADLINE_COLUMNS
from .run_log import RunLog, deliver


def enabled(tracking: Optional[TrackingConfig]) -> bool:
    return tracking is not None and tracking.enabled


def transition_key(identity: dict) -> str:
    """Deterministic MLflow key of a transition: its inputs' fingerprints and settings hash."""
    return "transition-" + stable_hash(identity, 24)


def deliver_last(logs: list[RunLog], tracking: TrackingConfig, folder: Optional[Path]) -> Optional[str]:
    """Deliver ``logs``; the last one's run id (None when it was recorded for later)."""
    ids = deliver(logs, tracking, folder)
    return ids[-1] if ids else None


NOTE = mlflow_client.NOTE_TAG


def transition_name(manifest: dict) -> str:
    """A transition's one spelling in MLflow: "base1 → sft1" (:func:`~grrr_stream.store.manifest.transition_label`)."""
    return transition_label(manifest)


def finite_metrics(items) -> list[tuple[str, float, int]]:
    """(name, value, 0) of the finite numbers (not bools) among (name, value) pairs."""
    return [(k, v, 0) for k, v in items if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


# ---------------------------------------------------------------------------
# transition: the run its decomposition logs (model_runs.log_decomposition), which other runs nest under


def transition_ref(t) -> dict:
    """Key, name and tags of a stored transition's run: found, or created unfinished if the decomposition
    was not tracked (a later tracked `decompose` of the same transition completes it)."""
    return manifest_ref(t.manifest)


def manifest_ref(m: dict) -> dict:
    """:func:`transition_ref` of the transition a store's manifest ``m`` describes."""
    return {
        "key": transition_key(m["identity"]),
        "name": transition_name(m),
        "tags": transition_tags(m, m.get("chain"), m.get("method")),
    }


def transition_tags(manifest: dict, chain: Optional[str], method: Optional[str]) -> dict:
    """A transition run's tags: its kind, chain and method, and its description."""
    name = transition_name(manifest)
    how = f" ({method})" if method else ""
    return {
        "grrr.kind": "transition",
        "grrr.chain": chain or "",
        "grrr.method": method or "",
        NOTE: f"The update {name}{how} decomposed in the base's singular frame: metrics are means over its "
        f"matrices; per-matrix values in metrics.csv, per module in summary.csv.",
    }


def log_transition_metrics(manifest: dict, metrics: list, tracking: TrackingConfig, folder: Path) -> None:
    """More headline metrics of a transition's run (a sweep kind's columns of it), logged to that run."""
    deliver(
        [RunLog.of(tracking, **manifest_ref(manifest), once=False, finish=False, metrics=metrics)], tracking, folder
    )


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
    statistic = {
        "statistic": "median cos_off",
        "resamples": resamples,
        "null_draws": null_draws,
        "seed": seed,
        "alpha": alpha,
    }
    # headline numbers only; the per-matrix cosines are the artifact *_per_matrix.csv
    metrics = finite_metrics((k, summary.get(k)) for k in _COMPARISON) + [("work_seconds", seconds, 0)]
    name_a, name_b = transition_name(a.manifest), transition_name(b.manifest)
    note = (
        f"The {comp.kind} comparison of the updates {name_a} and {name_b}: median over matrices of the cosine "
        f"of their off-diagonal parts, with its bootstrap interval and the isotropic null band."
    )
    log = RunLog.of(
        tracking,
        key=_comparison_key(comp, a, b, c, statistic),
        name=f"{comp.kind}: {name_a} vs {name_b}",
        tags={"grrr.kind": "comparison", "grrr.comparison": comp.kind, NOTE: note},
        start_ms=int(started * 1000),
        params=_comparison_params(comp, a, b, c, statistic),
        metrics=metrics,
        set_tags={"grrr.verdict": comp.null.verdict},
        artifacts=[(f, None) for f in files],
    )
    return deliver_last([log], tracking, Path(files[0]).parent if files else None)


_COMPARISON = ("median_cos_off", "ci_lo", "ci_hi", "null_lo", "null_hi", "p_value", "n_matrices")


def _comparison_key(comp, a, b, c, statistic: dict) -> str:
    """A comparison run's key: the kind, the two transitions (and their ancestor) and the statistic's settings."""
    settings = {"kind": comp.kind, "a": a.manifest["identity"], "b": b.manifest["identity"], **statistic}
    if c is not None:
        settings["ancestor"] = c.manifest["identity"]
    return "comparison-" + stable_hash(settings, 24)


def _comparison_params(comp, a, b, c, statistic: dict) -> dict:
    """A comparison run's params: the two stores (and their ancestor's), the frame they share and the statistic's
    settings."""
    return {
        "kind": comp.kind,
        "a": a.label,
        "b": b.label,
        "a_store": str(a.path),
        "b_store": str(b.path),
        "ancestor": comp.ancestor_label or "",
        "ancestor_store": str(c.path) if c is not None else "",
        "frame": a.manifest["identity"]["base_fingerprint"],
        "frame_settings": json.dumps(a.manifest["settings"], sort_keys=True),
        **statistic,
    }


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
    metrics = finite_metrics(
        (f"channels/{r['component']}/{k}", r[k]) for r in rows if r["group"] == "all" for k in ("energy_share", "ratio")
    )
    if rows:
        metrics += finite_metrics(
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


def verdict_log(
    verdicts: Sequence[tuple[str, str, str]], words: Sequence[str] = ()
) -> tuple[list[tuple[str, float, int]], dict]:
    """The sweep run's verdict from the report's verdict box (``verdicts``: claim id, verdict, what it rests on):
    per verdict the number of claims that have it (``claims_<verdict>``; the verdicts of ``words``, the ones the
    runs table shows as columns, are logged with 0 included so that its columns are filled), a tag per claim
    (``grrr.verdict.<claim id>``) and one summing them up (``grrr.verdict``)."""
    counts: dict[str, int] = {w: 0 for w in words}
    for _, word, _ in verdicts:
        counts[word] = counts.get(word, 0) + 1
    metrics = [(verdict_metric(w), n, 0) for w, n in counts.items() if n or verdict_metric(w) in HEADLINE_COLUMNS]
    tags = {f"grrr.verdict.{cid}": f"{word}: {why}"[:5000] for cid, word, why in verdicts}
    if verdicts:
        tags["grrr.verdict"] = ", ".join(f"{n} {w}" for w, n in counts.items() if n)
    return metrics, tags


def verdict_metric(word: str) -> str:
    """A verdict's count as a metric name: 'too few to tell' → claims_too_few_to_tell, "holds, outside the paper's
    range" → claims_holds_outside_the_paper_s_range (MLflow takes letters, digits and _ - . / in names)."""
    return "claims_" + re.sub(r"[^A-Za-z0-9]+", "_", word).strip("_")


def log_sweep(
    plan, result, tracking: TrackingConfig, started: float, html=None, verdicts=(), words=()
) -> Optional[str]:
    """One MLflow run per sweep (keyed by its plan), with the unit counts, the report and its verdict
    (:func:`verdict_log` of ``verdicts``: claim id, verdict, what it rests on; ``words``: every verdict), that
    holds the sweep's transition, statistics and comparison runs; it spans this invocation from ``started`` (a
    resumed sweep's run spans all invocations). ``html(run_id)``: writes the HTML report, which names the run,
    before the report's files are logged. The claims' statistics are the table report/claims.csv, not metrics."""
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
    run_id = deliver_last([first], tracking, plan.workdir)
    if html is None:
        return run_id
    page = html(run_id)
    # the page is logged on every run (a rerun rewrites it: the logged copy stays the one on disk), then the
    # run is finished if it was not before (a finished run keeps its end)
    # the verdict with the page it is read from, on every run: it changes as units finish
    v_metrics, v_tags = verdict_log(verdicts, words)
    logs = [
        RunLog.of(
            tracking,
            **ref,
            once=False,
            finish=False,
            artifacts=[(page, "report")],
            metrics=v_metrics,
            changed_metrics_only=True,
            set_tags=v_tags,
        ),
        RunLog.of(tracking, **ref, finish=result.ok),
    ]
    return deliver_last(logs, tracking, plan.workdir) or run_id


def sweep_runs(tracking: TrackingConfig) -> list[dict]:
    """The runs tagged with the sweep (``tracking.sweep``): run_id, experiment_id, name, kind, status and parent,
    for the HTML report's provenance; [] when the store cannot be read."""
    try:
        with mlflow_client.limits(tracking.timeout_s, tracking.retries):  # provenance: never a long wait
            exp_id, found = mlflow_client.find_runs(
                tracking.uri, tracking.experiment, f"tags.`{mlflow_client.SWEEP_TAG}` = '{tracking.sweep}'"
            )
    except Exception as e:  # noqa: BLE001 - provenance only: the page is written without the list, and says why
        print(f"tracking: the report's links to MLflow runs are left out ({run_log.reason(e)})", file=sys.stderr)
        return []
    return sorted(
        ({"experiment_id": exp_id, **{k: r[k] for k in ("run_id", "name", "kind", "status", "parent")}} for r in found),
        key=lambda r: (r["kind"], r["name"]),
    )
