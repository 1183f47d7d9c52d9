"""The only module that touches MLflow.

One run per transition, found again by a deterministic key stored in the tag
``grrr.key``: rerunning a finished transition logs nothing new, and a run left
unfinished by a crash is resumed rather than duplicated.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Iterable, Optional

from .errors import MissingDependencyError

KEY_TAG = "grrr.key"
COMPLETE_TAG = "grrr.complete"
_BATCH = 900  # MLflow accepts at most 1000 metrics per log_batch call


def _mlflow():
    try:
        import mlflow
        from mlflow.tracking import MlflowClient
    except ImportError:  # pragma: no cover - a core dependency
        raise MissingDependencyError("MLflow tracking needs mlflow: pip install mlflow (or pass --no-track)") from None
    return mlflow, MlflowClient


def resolve_uri(uri: Optional[str]) -> str:
    """Explicit URI, else $MLFLOW_TRACKING_URI, else a SQLite file in the working directory."""
    if uri:
        return uri
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def _experiment_id(client, name: str, uri: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    artifact_location = None
    if uri.startswith("sqlite:///"):
        # keep artifacts beside the database instead of in whatever cwd is current
        db = Path(uri[len("sqlite:///"):])
        artifact_location = (db.parent / "mlartifacts").resolve().as_uri()
    return client.create_experiment(name, artifact_location=artifact_location)


class TrackedRun:
    """A handle on the MLflow run of one unit of work (transition, comparison, ...)."""

    def __init__(self, client, run_id: str, complete: bool, existing_params: dict[str, str]):
        self.client = client
        self.run_id = run_id
        self.complete = complete
        self._params = dict(existing_params)

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        # A param, once logged, cannot change; values that differ on a resumed run
        # (e.g. another device) are kept as first logged.
        new = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in self._params]
        for i in range(0, len(new), 90):
            self.client.log_batch(self.run_id, params=new[i:i + 90])
        self._params.update({p.key: p.value for p in new})

    def log_metrics(self, metrics: Iterable[tuple[str, float, int]]) -> None:
        """(name, value, step) triples, batched."""
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        batch = [Metric(k, float(v), ts, int(s)) for k, v, s in metrics]
        for i in range(0, len(batch), _BATCH):
            self.client.log_batch(self.run_id, metrics=batch[i:i + _BATCH])

    def log_artifacts(self, paths: Iterable[Path], artifact_path: Optional[str] = None) -> None:
        for p in paths:
            self.client.log_artifact(self.run_id, str(p), artifact_path)

    def log_table(self, rows: list[dict], artifact_file: str) -> None:
        """Rows as an MLflow table artifact (shown as a table in the run's artifact view)."""
        cols: list[str] = []
        for r in rows:
            cols += [k for k in r if k not in cols]
        self.client.log_table(self.run_id, data={c: [r.get(c) for r in rows] for c in cols},
                              artifact_file=artifact_file)

    def set_tags(self, tags: dict[str, Any]) -> None:
        for k, v in tags.items():
            self.client.set_tag(self.run_id, k, str(v))

    def logged_metrics(self) -> dict[str, float]:
        """Latest value of every metric already logged to this run."""
        return dict(self.client.get_run(self.run_id).data.metrics)

    def finish(self) -> None:
        self.client.set_tag(self.run_id, COMPLETE_TAG, "true")
        self.client.set_terminated(self.run_id, "FINISHED")


def prepare(uri: Optional[str], experiment: str) -> str:
    """Create the tracking store and the experiment now, in this process. Several worker
    processes opening a fresh SQLite store at once would all run its schema migrations
    and collide ('duplicate column name'); after this they only read and append."""
    _, MlflowClient = _mlflow()
    uri = resolve_uri(uri)
    return _experiment_id(MlflowClient(tracking_uri=uri), experiment, uri)


def open_run(*, uri: Optional[str], experiment: str, key: str, run_name: str,
             tags: Optional[dict[str, str]] = None, parent_run_id: Optional[str] = None) -> TrackedRun:
    """Find the run tagged with ``key`` or create it."""
    _, MlflowClient = _mlflow()
    uri = resolve_uri(uri)
    client = MlflowClient(tracking_uri=uri)
    exp_id = _experiment_id(client, experiment, uri)
    found = client.search_runs([exp_id], filter_string=f"tags.`{KEY_TAG}` = '{key}'", max_results=10)
    if found:
        # prefer a finished one; several can only exist if created outside this tool
        found.sort(key=lambda r: (r.data.tags.get(COMPLETE_TAG) != "true", r.info.start_time))
        run = found[0]
        complete = run.data.tags.get(COMPLETE_TAG) == "true"
        if not complete and run.info.status != "RUNNING":
            client.update_run(run.info.run_id, status="RUNNING")
        return TrackedRun(client, run.info.run_id, complete, run.data.params)
    all_tags = {KEY_TAG: key, **(tags or {})}
    if parent_run_id:
        all_tags["mlflow.parentRunId"] = parent_run_id
    run = client.create_run(exp_id, run_name=run_name, tags=all_tags)
    return TrackedRun(client, run.info.run_id, False, {})

