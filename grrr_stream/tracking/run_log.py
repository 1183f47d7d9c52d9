"""A run's logging as data: what :mod:`.runs` or :mod:`.model_runs` wants logged to one MLflow run, applied now,
or recorded beside the result and applied later.

Tracking is the last step of a unit's work and must never cost the work. :func:`deliver` applies
:class:`RunLog` s under the TrackingConfig's time limits; if MLflow cannot be reached (or fails), it
prints one line per run, "tracking: not logged (REASON); will retry", writes the logs as JSON into the
pending folder (the result's ``.tracking/``, or the one the caller names: a sweep's) and notes the miss
(:func:`missed`, for the exit status). A later delivery to the same folder, the same command run again,
or ``grrr-stream track`` applies what is pending first (:func:`flush`). A log holds the intent, not a
copy of the data: params, metric values with their steps, tags, the *paths* of artifact files and the
measured start and end; applied later it gives the run it would have given on time (found by key, the
recorded times, metric points stamped with the recorded end), never a second one.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence, TextIO

from ..config import TrackingConfig, clip, stable_hash
from ..errors import TrackingStoreError, TrackingUnavailableError
from ..files import atomic_write_text, read_csv
from ..locks import FileLock
from . import mlflow_client

PENDING = ".tracking"  # the folder, in a result's folder, of what could not be logged
_MISSED: list[str] = []  # this process's misses: "run name: reason"
_AT_START = ["tracking target unreachable at start"]  # why this process only records: what its preflight found
_LOCK = threading.Lock()
SHOW_TRACEBACKS = False  # --debug: print the traceback of a failed logging too


def metric_name(name: object) -> str:
    """A metric name MLflow accepts (letters, digits, ``_ - . / :`` and spaces): the sampled accuracies'
    ``pass@k`` and ``maj@k`` are logged as ``pass_at_k`` and ``maj_at_k`` (MLflow refuses '@'), any other
    character as '_'."""
    return re.sub(r"[^\w\-./: ]", "_", str(name).replace("@", "_at_"))


@dataclass
class RunLog:
    """Everything one MLflow run is to receive. ``parent``: the (key, name, tags and its own ``parent``) of the
    run it nests in, found or created; ``adopt``: kinds of this sweep's runs (``sweep``) to nest under this
    run; ``once``: a run already complete receives nothing; ``first_metrics`` and
    ``tables`` go only to a run not complete before; ``changed_metrics_only``: a metric whose latest
    logged value is the same is not logged again (reruns add no history)."""

    uri: Optional[str]
    experiment: str
    key: str
    name: str
    tags: dict = field(default_factory=dict)
    sweep: Optional[str] = None
    parent: Optional[dict] = None
    start_ms: Optional[int] = None
    end_ms: int = field(default_factory=mlflow_client.now_ms)
    once: bool = True
    params: dict = field(default_factory=dict)
    metrics: list = field(default_factory=list)  # [name, value, step]
    first_metrics: list = field(default_factory=list)
    changed_metrics_only: bool = False
    set_tags: dict = field(default_factory=dict)
    artifacts: list = field(default_factory=list)  # [file, artifact folder or None]
    datasets: list = field(default_factory=list)  # [name, sha256, file, rows, context]
    tables: list = field(default_factory=list)  # [csv file, artifact file]
    finish: bool = True
    adopt: list = field(default_factory=list)  # kinds of the sweep's runs nested under this one

    def __post_init__(self) -> None:
        # MLflow keeps params and tags as text and metrics as (name, float, int step): the same values
        # whether logged now or after a round trip through the recorded JSON
        self.params = {str(k): str(v)[:6000] for k, v in self.params.items()}
        self.set_tags = {str(k): str(v) for k, v in self.set_tags.items()}
        self.metrics = [[metric_name(k), float(v), int(s)] for k, v, s in self.metrics]
        self.first_metrics = [[metric_name(k), float(v), int(s)] for k, v, s in self.first_metrics]

    @classmethod
    def of(cls, tracking: TrackingConfig, **fields) -> "RunLog":
        # the target resolved now ($MLFLOW_TRACKING_URI, the working directory): a replay from elsewhere
        # logs where this command would have
        return cls(
            uri=mlflow_client.resolve_uri(tracking.uri), experiment=tracking.experiment, sweep=tracking.sweep, **fields
        )

    def to_json(self) -> dict:
        d = asdict(self)
        d["artifacts"] = [[str(p), a] for p, a in self.artifacts]
        d["datasets"] = [[n, s, str(p), r, c] for n, s, p, r, c in self.datasets]
        d["tables"] = [[str(p), a] for p, a in self.tables]
        return d


def _open_parents(log: RunLog, ref: Optional[dict], made: list) -> Optional[str]:
    """The run id of ``ref`` (a parent: key, name, tags, its own parent), found or created with its parents;
    runs created here (placeholders: their own work is not logged yet) are appended to ``made``."""
    if not ref:
        return None
    grand = _open_parents(log, ref.get("parent"), made)
    run = mlflow_client.open_run(
        uri=log.uri,
        experiment=log.experiment,
        key=ref["key"],
        run_name=ref["name"],
        tags=ref.get("tags"),
        parent_run_id=grand,
        start_ms=log.start_ms,
        sweep=log.sweep,
        resume=False,
    )
    if run.created:
        made.append(run)
    return run.run_id


def apply(log: RunLog) -> str:
    """Log ``log`` to its run (found by key, else created); the run's id."""
    made: list = []
    parent_id = _open_parents(log, log.parent, made)
    run = mlflow_client.open_run(
        uri=log.uri,
        experiment=log.experiment,
        key=log.key,
        run_name=log.name,
        tags=log.tags,
        parent_run_id=parent_id,
        start_ms=log.start_ms,
        sweep=log.sweep,
    )
    for placeholder in made:  # a parent made for this run ends with it (finished, not complete)
        placeholder.close_placeholder(log.end_ms)
    if log.adopt and log.sweep:
        run.adopt(log.sweep, log.adopt)
    if run.complete and log.once:
        return run.run_id
    was_complete = run.complete
    run.log_params(log.params)
    for name, sha, path, rows, context in log.datasets:
        run.log_datasets([(name, sha, Path(path), rows)], context=context)
    metrics = [tuple(m) for m in log.metrics] + ([] if was_complete else [tuple(m) for m in log.first_metrics])
    if log.changed_metrics_only:
        have = run.logged_metrics()
        metrics = [m for m in metrics if have.get(m[0]) != m[1]]
    run.log_metrics(metrics, timestamp_ms=log.end_ms)
    run.set_tags(log.set_tags)
    by_folder: dict[Optional[str], list[Path]] = {}
    for path, folder in log.artifacts:
        if Path(path).is_file():  # a file removed since the work is not there to log
            by_folder.setdefault(folder, []).append(Path(path))
    for folder, paths in by_folder.items():
        run.log_artifacts(paths, folder)
    if not was_complete:
        for path, artifact_file in log.tables:
            if Path(path).is_file():
                run.log_table(read_csv(Path(path)), artifact_file)
    if log.finish:
        run.finish(end_ms=log.end_ms)
    return run.run_id


UNDECODABLE = "Could not decode to UTF-8"  # SQLite's words for a text column holding other bytes


def reason(e: BaseException) -> str:
    """A failure of MLflow in a few words, with the remedy where there is one (its messages hold the whole retry
    history; ours are already one line)."""
    text = str(e)
    if isinstance(e, TrackingStoreError):
        return text
    for marker, say in (
        (
            UNDECODABLE,
            "the tracking database holds text that is not UTF-8 (a tag or value written outside MLflow): drop or "
            "repair it, or log to another experiment or database (--experiment, --tracking-uri)",
        ),
        ("Connection refused", "connection refused"),
        ("Read timed out", "no answer in time"),
        ("ConnectTimeout", "no answer in time"),
        ("timed out", "no answer in time"),
        ("Name or service not known", "unknown host"),
        ("already exists", "schema race"),
    ):
        if marker in text:
            return say
    first = text.strip().splitlines()[0] if text.strip() else ""
    return clip(f"{type(e).__name__}: {first}", 200)


def pending_dir(tracking: TrackingConfig, folder: Optional[Path]) -> Optional[Path]:
    if tracking.pending_dir:
        return Path(tracking.pending_dir)
    return Path(folder) / PENDING if folder is not None else None


def missed() -> list[str]:
    """The runs this process could not log ("name: reason")."""
    with _LOCK:
        return list(_MISSED)


def record(logs: Sequence[RunLog], pending: Path) -> None:
    """Write ``logs`` into the pending folder, named so that a name sort is the order of recording."""
    pending.mkdir(parents=True, exist_ok=True)
    name = f"{mlflow_client.now_ms()}-{os.getpid()}-{stable_hash([log.key for log in logs], 8)}.json"
    atomic_write_text(pending / name, json.dumps([log.to_json() for log in logs], indent=1))


def say_missed(names: Sequence[str], why: str, stream: Optional[TextIO] = None, later: str = "will retry") -> None:
    """One line per unit of work whose logging was missed, noted for the exit status."""
    for name in names:
        (stream or sys.stderr).write(f"{name}: tracking: not logged ({why}); {later}\n")
    with _LOCK:
        _MISSED.extend(f"{name}: {why}" for name in names)


def _miss(logs: Sequence[RunLog], why: str, pending: Optional[Path], stream: TextIO) -> None:
    if pending is not None:
        record(logs, pending)
    later = "will retry" if pending is not None else "not recorded"
    say_missed([log.name for log in logs[:1]], why, stream, later)  # one line per unit of work


def deliver(
    logs: Sequence[RunLog], tracking: TrackingConfig, folder: Optional[Path] = None, *, stream: Optional[TextIO] = None
) -> Optional[list[str]]:
    """Apply ``logs`` in order (the runs' ids), or record them in the pending folder (None). Never raises
    for MLflow; what was pending in that folder is applied first (so a parent keeps its recorded times)."""
    stream = stream or sys.stderr
    pending = pending_dir(tracking, folder)
    if tracking.defer and pending is not None:  # a sweep's unit: its sweep logs it in the background
        record(logs, pending)
        return None
    if tracking.record_only:
        _miss(logs, _AT_START[-1], pending, stream)
        return None
    with mlflow_client.limits(tracking.timeout_s, tracking.retries):
        try:
            earlier = flush(pending) if pending is not None else FlushResult()
            if earlier.error:  # the target still fails: do not wait on it a second time
                raise _Earlier(earlier.error)
            return [apply(log) for log in logs]
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - tracking never fails the work
            if SHOW_TRACEBACKS:
                import traceback

                traceback.print_exc(file=stream)
            _miss(logs, str(e) if isinstance(e, _Earlier) else reason(e), pending, stream)
            return None


class _Earlier(Exception):
    """Earlier logging in the same folder could not be applied either."""


@dataclass
class FlushResult:
    logged: int = 0
    left: int = 0
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.left == 0


def pending_files(folder: Path) -> list[Path]:
    return sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else []


def flush(folder: Path, *, dry: bool = False, uri: Optional[str] = None) -> FlushResult:
    """Apply the logs pending in ``folder`` in the order they were recorded, deleting each file once
    all its logs are applied; stops at the first failure. ``uri``: log there instead of the recorded
    target. Another process flushing the same folder makes this one skip it."""
    files = pending_files(folder)
    res = FlushResult(left=len(files))
    if not files or dry:
        return res
    try:
        lock = FileLock(Path(folder) / ".lock").__enter__()
    except Exception:  # noqa: BLE001 - held by another process: it is logging them
        return res
    try:
        for f in files:
            try:
                logs = [RunLog(**d) for d in json.loads(f.read_text())]
            except (OSError, ValueError, TypeError):
                continue  # unreadable (torn by a crash before its rename): not ours to delete
            try:
                for log in logs:
                    if uri:
                        log.uri = uri
                    apply(log)
            except KeyboardInterrupt:
                raise
            except Exception as e:  # noqa: BLE001 - still unreachable: keep it for the next try
                res.error = reason(e)
                return res
            f.unlink()
            res.logged += 1
            res.left -= 1
        return res
    finally:
        lock.__exit__(None, None, None)


def find_pending(paths: Iterable[Path], pending: Iterable[Path] = ()) -> list[Path]:
    """The pending folders in or just below each of ``paths`` (PATH/.tracking, PATH/*/.tracking: a result, a
    folder of results), and each of ``pending``, folders the caller knows to be pending folders (a sweep's,
    whose layout is the sweep's to know), that exist."""
    out: list[Path] = []
    for p in map(Path, paths):
        cands = [p] if p.name == PENDING else [p / PENDING, *sorted(p.glob(f"*/{PENDING}"))]
        out += [c for c in cands if c.is_dir() and c not in out]
    out += [c for c in map(Path, pending) if c.is_dir() and c not in out]
    return out


def preflight(tracking: TrackingConfig, stream: Optional[TextIO] = None) -> TrackingConfig:
    """Check the tracking target once, before heavy work. Reachable: ``tracking`` as it is. Unreachable:
    refuse if ``tracking.required``, else say so and return it set to record only (the work goes on, what
    it would log is recorded for ``grrr-stream track``)."""
    if not tracking.enabled or tracking.record_only or tracking.defer:
        return tracking
    try:
        with mlflow_client.limits(tracking.timeout_s, tracking.retries):
            mlflow_client.prepare(tracking.uri, tracking.experiment)
        return tracking
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - whatever MLflow raises, the answer is "unreachable"
        why, uri = reason(e), mlflow_client.resolve_uri(tracking.uri)
        answers = isinstance(e, TrackingStoreError) or UNDECODABLE in str(e)  # reached, but refusing this work
        if answers:
            _AT_START.append(why)
        if SHOW_TRACEBACKS:
            import traceback

            traceback.print_exc(file=stream or sys.stderr)
    if tracking.required:
        raise TrackingUnavailableError(
            f"the MLflow tracking target {uri} cannot be reached ({why}) and tracking.required is set. Start the "
            "server (tracking/serve.sh), point --tracking-uri elsewhere, or unset tracking.required to work "
            "without it and log later with `grrr-stream track`."
        )
    verb = "cannot take this work" if answers else "cannot be reached"
    (stream or sys.stderr).write(
        f"tracking: {uri} {verb} ({why}); working without it (what is not "
        "logged is recorded; `grrr-stream track` or the same command logs it later)\n"
    )
    return tracking.model_copy(update={"record_only": True})
