"""The only module that touches MLflow.

One run per unit of work, found again by a deterministic key stored in the tag
``grrr.key``: rerunning finished work logs nothing new, and a run left unfinished by a
crash is resumed rather than duplicated. A run's start and end times span the work it
records (callers pass the measured start), the units of a sweep carry the sweep's tag
``grrr.sweep`` and nest under its run (:meth:`TrackedRun.adopt`), and the experiment
is marked as a model-training one and carries the view that the addresses the tool prints
open (both in :mod:`.mlflow_view`).

Every request runs under the limits of a TrackingConfig (:func:`limits`: seconds per request,
retries), so an unreachable server costs seconds, not MLflow's default minutes; a fresh SQLite
file is created under a file lock (:func:`client`), so processes starting together do not race
on its schema. What to log, and what happens when it cannot be logged, is :mod:`.run_log`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from ..errors import MissingDependencyError, TrackingStoreError
from ..locks import FileLock
from .mlflow_view import views

KEY_TAG = "grrr.key"
COMPLETE_TAG = "grrr.complete"
SWEEP_TAG = "grrr.sweep"
# MLflow 3's experiment kind. The UI's experiment-kind selector writes this tag; kinds that end in
# "_inferred" (and "no_inferred_type") are the UI's own guesses, so they are replaced, whereas a
# kind somebody chose in the UI is kept.
KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"
_GUESSED_KINDS = {"", "no_inferred_type", "genai_development_inferred", "custom_model_development_inferred"}
PARENT_TAG = "mlflow.parentRunId"  # MLflow's nesting: the runs table shows a run under this one
NOTE_TAG = "mlflow.note.content"  # a run's description (the run page's "Description")
DATASET_CONTEXT_TAG = "mlflow.data.context"  # what mlflow.log_input(..., context=...) writes
DIGEST_CHARS = 16  # MLflow stores at most 36 characters of a dataset digest; the full sha256 goes in its profile
_BATCH = 900  # MLflow accepts at most 1000 metrics per log_batch call


def _mlflow():
    try:
        import mlflow
        from mlflow.tracking import MlflowClient
    except ImportError:  # pragma: no cover - a core dependency
        raise MissingDependencyError("MLflow tracking needs mlflow: pip install mlflow (or pass --no-track)") from None
    # its SQL layer logs every database error with a traceback before raising it; the error is caught where it is
    # raised and said in one line with its remedy (run_log.reason), the traceback with --debug
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    return mlflow, MlflowClient


def resolve_uri(uri: Optional[str]) -> str:
    """Explicit URI, else $MLFLOW_TRACKING_URI, else a SQLite file in the working directory."""
    if uri:
        return uri
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def now_ms() -> int:
    """Wall-clock time as MLflow stores run times (milliseconds since the epoch), rounded up: an end
    read after a measured span is never before it."""
    return math.ceil(time.time() * 1000)


@contextlib.contextmanager
def limits(timeout_s: int, retries: int) -> Iterator[None]:
    """MLflow's HTTP client reads its time limits from the environment at every request: set them
    for the requests made inside the block (then restore them). ``timeout_s``: seconds to connect and
    to wait for each answer; ``retries``: further attempts after a failed one, 1 s, 2 s, ... apart
    (MLflow's defaults, 120 s and 7 retries with backoff 2, took 4 min 12 s on a closed port)."""
    values = {
        "MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(timeout_s)),
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(int(retries)),
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
        "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0",
    }
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_OPENED: set[str] = set()  # SQLite URIs this process has opened (their schema exists)


def client(uri: str):
    """An MlflowClient for ``uri``. MLflow creates a SQLite store's schema when a process first opens
    it; processes doing that at once on a fresh file collide ('table runs already exists'), so the
    first open in each process holds an exclusive lock on a file beside the database."""
    _, MlflowClient = _mlflow()
    if not uri.startswith("sqlite:///") or uri in _OPENED:
        return MlflowClient(tracking_uri=uri)

    db = Path(uri[len("sqlite:///") :])
    if not db.parent.is_dir():  # not there (a share not mounted): MLflow says so, the lock creates nothing
        return MlflowClient(tracking_uri=uri)
    with FileLock(db.with_name(db.name + ".grrr-lock"), wait=True):
        made = MlflowClient(tracking_uri=uri)
    _OPENED.add(uri)
    return made


def _experiment_id(client, name: str, uri: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":  # someone deleted it: not undone behind their back
            raise TrackingStoreError(
                f"the MLflow experiment {name!r} is deleted; restore it (MLflow's UI, or `mlflow experiments "
                f"restore --experiment-id {exp.experiment_id}`) or pick another name with --experiment"
            )
        if exp.tags.get(KIND_TAG, "") in _GUESSED_KINDS:  # created by an older grrr-stream, or by hand
            client.set_experiment_tag(exp.experiment_id, KIND_TAG, TRAINING_KIND)
        for tag, state in views().items():
            if exp.tags.get(tag) != state:  # older grrr-stream, or other columns
                client.set_experiment_tag(exp.experiment_id, tag, state)
        return exp.experiment_id
    artifact_location = None
    if uri.startswith("sqlite:///"):
        # keep artifacts beside the database instead of in whatever cwd is current
        db = Path(uri[len("sqlite:///") :])
        artifact_location = (db.parent / "mlartifacts").resolve().as_uri()
    try:
        return client.create_experiment(
            name, artifact_location=artifact_location, tags={KIND_TAG: TRAINING_KIND, **views()}
        )
    except Exception:  # noqa: BLE001 - another process created it first: use theirs
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


class TrackedRun:
    """A handle on the MLflow run of one unit of work (transition, comparison, ...)."""

    def __init__(
        self,
        client,
        run_id: str,
        complete: bool,
        existing_params: dict[str, str],
        existing_metrics: Iterable[str] = (),
        created: bool = False,
        experiment_id: str = "",
    ):
        self.client = client
        self.run_id = run_id
        self.complete = complete
        self.created = created  # made by this handle (not found by its key)
        self.experiment_id = experiment_id
        self._params = dict(existing_params)
        self._metric_keys = set(existing_metrics)  # metrics an earlier, interrupted attempt logged
        self._added = False  # whether this handle logged a param, metric or dataset

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        # A param, once logged, cannot change; values that differ on a resumed run
        # (e.g. another device) are kept as first logged.
        new = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in self._params]
        for i in range(0, len(new), 90):
            self.client.log_batch(self.run_id, params=new[i : i + 90])
        self._added |= bool(new)
        self._params.update({p.key: p.value for p in new})

    def log_metrics(self, metrics: Iterable[tuple[str, float, int]], timestamp_ms: Optional[int] = None) -> None:
        """(name, value, step) triples, batched, stamped ``timestamp_ms`` (default now). A point an
        interrupted earlier attempt already logged to this run is not logged twice."""
        from mlflow.entities import Metric

        ts = now_ms() if timestamp_ms is None else int(timestamp_ms)
        metrics = list(metrics)
        logged = self._logged_points({k for k, _, _ in metrics} & self._metric_keys)
        batch = [Metric(k, float(v), ts, int(s)) for k, v, s in metrics if (k, int(s), float(v)) not in logged]
        for i in range(0, len(batch), _BATCH):
            self.client.log_batch(self.run_id, metrics=batch[i : i + _BATCH])
        self._added |= bool(batch)

    def _logged_points(self, keys: set[str]) -> set[tuple[str, int, float]]:
        """(name, step, value) of every point logged to these metrics (only asked on a resumed run)."""
        return {(k, m.step, m.value) for k in keys for m in self.client.get_metric_history(self.run_id, k)}

    def log_artifacts(self, paths: Iterable[Path], artifact_path: Optional[str] = None) -> None:
        for p in paths:
            self.client.log_artifact(self.run_id, str(p), artifact_path)

    def log_table(self, rows: list[dict], artifact_file: str) -> None:
        """Rows as an MLflow table artifact (shown as a table in the run's artifact view)."""
        cols: list[str] = []
        for r in rows:
            cols += [k for k in r if k not in cols]
        self.client.log_table(
            self.run_id, data={c: [r.get(c) for r in rows] for c in cols}, artifact_file=artifact_file
        )

    def set_tags(self, tags: dict[str, Any]) -> None:
        for k, v in tags.items():
            self.client.set_tag(self.run_id, k, str(v))

    def logged_metrics(self) -> dict[str, float]:
        """Latest value of every metric already logged to this run."""
        return dict(self.client.get_run(self.run_id).data.metrics)

    def log_datasets(self, datasets: Iterable[tuple[str, str, Path, int]], context: str = "evaluation") -> None:
        """(name, sha256, file, rows) of each data file the run used, as MLflow dataset inputs (the
        runs table's Dataset column). One already logged with the same name and digest is skipped,
        so a rerun adds nothing."""

        from mlflow.entities import Dataset, DatasetInput, InputTag

        have = {(d.dataset.name, d.dataset.digest) for d in self.client.get_run(self.run_id).inputs.dataset_inputs}
        new = []
        for name, sha256, path, rows in datasets:
            digest = sha256[:DIGEST_CHARS]
            if (name, digest) in have:
                continue
            have.add((name, digest))
            source = json.dumps({"uri": str(Path(path).resolve())})
            ds = Dataset(
                name=name,
                digest=digest,
                source_type="local",
                source=source,
                profile=json.dumps({"num_rows": rows, "sha256": sha256}),
            )
            new.append(DatasetInput(ds, tags=[InputTag(DATASET_CONTEXT_TAG, context)]))
        if new:
            self.client.log_inputs(self.run_id, datasets=new)
            self._added = True

    def close_placeholder(self, end_ms: int) -> None:
        """End a run opened only as a parent (its own work not logged yet): FINISHED, but not marked complete,
        so that the work's own logging later fills and completes it; not left "running" meanwhile."""
        self.client.set_terminated(self.run_id, "FINISHED", end_time=end_ms)

    def adopt(self, sweep: str, kinds: Iterable[str]) -> int:
        """Nest under this run every run of the sweep ``sweep`` (tag ``grrr.sweep``) whose kind (tag
        ``grrr.kind``) is one of ``kinds`` and that is not under it yet; how many were moved. A run that a later
        sweep reuses moves to that sweep's run (a run has one parent, and the sweep tag names the last sweep)."""
        moved = 0
        for r in _search(self.client, [self.experiment_id], f"tags.`{SWEEP_TAG}` = '{_quote(sweep)}'"):
            if (
                r.info.run_id != self.run_id
                and r.data.tags.get("grrr.kind") in set(kinds)
                and r.data.tags.get(PARENT_TAG) != self.run_id
            ):
                self.client.set_tag(r.info.run_id, PARENT_TAG, self.run_id)
                moved += 1
        return moved

    def finish(self, end_ms: Optional[int] = None) -> None:
        """Mark the run complete; it ends at ``end_ms`` (when its work ended; default now). A finished
        run that this rerun added nothing to keeps its end time (a rerun is no work of the run's)."""
        if self.complete and not self._added:
            return
        self.client.set_tag(self.run_id, COMPLETE_TAG, "true")
        self.client.set_terminated(self.run_id, "FINISHED", end_time=now_ms() if end_ms is None else end_ms)


def prepare(uri: Optional[str], experiment: str) -> str:
    """Create the tracking store and the experiment now, in this process. Several worker
    processes opening a fresh SQLite store at once would all run its schema migrations
    and collide ('duplicate column name'); after this they only read and append."""
    uri = resolve_uri(uri)
    return _experiment_id(client(uri), experiment, uri)


def _quote(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("'", "\\'")


def _search(mlc, experiment_ids: list[str], filter_string: str, max_results: int = 5000) -> list:
    """Every run matching ``filter_string`` (pages followed)."""
    out, token = [], None
    while True:
        page = mlc.search_runs(
            experiment_ids, filter_string=filter_string, max_results=min(max_results, 1000), page_token=token
        )
        out += list(page)
        token = page.token
        if not token or len(out) >= max_results:
            return out


def find_runs(uri: Optional[str], experiment: str, filter_string: str) -> tuple[str, list[dict]]:
    """The experiment's id and the runs matching ``filter_string``: run_id, name, kind (tag grrr.kind), status,
    parent (run id or ''), start and end (ms)."""
    uri = resolve_uri(uri)
    mlc = client(uri)
    exp_id = _experiment_id(mlc, experiment, uri)
    return exp_id, [
        {
            "run_id": r.info.run_id,
            "name": r.info.run_name,
            "kind": r.data.tags.get("grrr.kind", ""),
            "status": r.info.status,
            "parent": r.data.tags.get(PARENT_TAG, ""),
            "start_ms": r.info.start_time,
            "end_ms": r.info.end_time,
        }
        for r in _search(mlc, [exp_id], filter_string)
    ]


def open_run(
    *,
    uri: Optional[str],
    experiment: str,
    key: str,
    run_name: str,
    tags: Optional[dict[str, str]] = None,
    parent_run_id: Optional[str] = None,
    start_ms: Optional[int] = None,
    sweep: Optional[str] = None,
    resume: bool = True,
) -> TrackedRun:
    """Find the run tagged with ``key`` or create it.

    ``start_ms``: when the work this run records began (a new run starts then, not now, since most
    callers log after the work). A resumed run keeps the start of its first attempt, so its span
    covers every attempt. ``sweep``: the sweep this work belongs to, the tag ``grrr.sweep``; it is
    set on a found run too (finished or not), so that a sweep that reuses earlier work finds it. ``resume``:
    an unfinished run found is marked running again (False: a run only opened as a parent stays as it is)."""
    uri = resolve_uri(uri)
    mlc = client(uri)
    exp_id = _experiment_id(mlc, experiment, uri)
    found = mlc.search_runs([exp_id], filter_string=f"tags.`{KEY_TAG}` = '{key}'", max_results=10)
    if found:
        # prefer a finished one; several can only exist if created outside this tool
        found.sort(key=lambda r: (r.data.tags.get(COMPLETE_TAG) != "true", r.info.start_time))
        run = found[0]
        complete = run.data.tags.get(COMPLETE_TAG) == "true"
        if resume and not complete and run.info.status != "RUNNING":
            mlc.update_run(run.info.run_id, status="RUNNING")
        if sweep and run.data.tags.get(SWEEP_TAG) != sweep:
            mlc.set_tag(run.info.run_id, SWEEP_TAG, sweep)
        # the name and description of an older version's run are brought up to date
        if run.info.run_name != run_name:
            mlc.update_run(run.info.run_id, name=run_name)
        note = (tags or {}).get(NOTE_TAG)
        if note and run.data.tags.get(NOTE_TAG) != note:
            mlc.set_tag(run.info.run_id, NOTE_TAG, note)
        if parent_run_id and run.data.tags.get(PARENT_TAG) != parent_run_id:  # nested as the work nests now
            mlc.set_tag(run.info.run_id, PARENT_TAG, parent_run_id)
        return TrackedRun(mlc, run.info.run_id, complete, run.data.params, set(run.data.metrics), experiment_id=exp_id)
    all_tags = {KEY_TAG: key, **(tags or {})}
    if parent_run_id:
        all_tags[PARENT_TAG] = parent_run_id
    if sweep:
        all_tags[SWEEP_TAG] = sweep
    run = mlc.create_run(exp_id, start_time=start_ms, run_name=run_name, tags=all_tags)
    return TrackedRun(mlc, run.info.run_id, False, {}, created=True, experiment_id=exp_id)
