"""A tracking failure never costs the work (issue 23): an unreachable target is found in seconds,
the work is done and kept, the missed logging is recorded beside the result and logged later into
the run an uninterrupted command would have made; a fresh SQLite store opened by several processes
at once. Real SQLite files and real processes; the only server address is a closed loopback port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from grrr_stream.cli.entry import EXIT_TRACKING, main

CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens on loopback here
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _decompose(pair, store, *extra) -> list[str]:
    base, post = pair
    return [
        "decompose",
        "--base",
        str(base),
        "--post",
        str(post),
        "--store",
        str(store),
        "--no-progress",
        "--method",
        "SFT",
        "--chain",
        "toy",
        *map(str, extra),
    ]


def _only_run(uri: str):
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("grrr_stream")
    runs = client.search_runs([exp.experiment_id]) if exp else []
    assert len(runs) == 1, [r.info.run_name for r in runs]
    return client, runs[0]


def test_unreachable_server_costs_seconds_and_keeps_the_work(planted_f64, tmp_path, capsys):
    t0 = time.monotonic()
    rc = main(_decompose(planted_f64, tmp_path / "s", "--tracking-uri", CLOSED))
    seconds = time.monotonic() - t0
    _, err = capsys.readouterr()
    assert rc == EXIT_TRACKING, err
    assert seconds < 60, seconds  # MLflow's own retries took 4 min 12 s here
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "tracking: not logged" in line]
    assert lines == ["base → post: tracking: not logged (tracking target unreachable at start); will retry"], err
    from grrr_stream.store.transition_store import TransitionStore

    assert (
        TransitionStore.read_manifest(tmp_path / "s")["complete"] is True and (tmp_path / "s" / "metrics.csv").is_file()
    )
    (pending,) = (tmp_path / "s" / ".tracking").glob("*.json")
    (log,) = json.loads(pending.read_text())
    assert log["uri"] == CLOSED and log["key"].startswith("transition-") and log["end_ms"] > log["start_ms"]
    # artifacts are recorded by path, not copied
    assert str(tmp_path / "s" / "metrics.csv") in [a[0] for a in log["artifacts"]]
    # the same command again: nothing recomputed, still recorded once, same exit status
    assert main(_decompose(planted_f64, tmp_path / "s", "--tracking-uri", CLOSED)) == EXIT_TRACKING
    assert len(list((tmp_path / "s" / ".tracking").glob("*.json"))) == 2  # the rerun's own, kept apart
    # required: refused before any work, one message
    rc = main(_decompose(planted_f64, tmp_path / "r", "--tracking-uri", CLOSED, "--tracking-required"))
    _, err = capsys.readouterr()
    assert rc == 2 and "cannot be reached (connection refused)" in err and "Traceback" not in err
    assert not (tmp_path / "r" / "metrics.csv").exists()


def _fields(client: MlflowClient, run) -> dict:
    """Everything of a run a user sees, less what differs between two executions (ids, work_seconds)."""
    rid = run.info.run_id
    histories = {
        k: sorted((m.step, m.value) for m in client.get_metric_history(rid, k))
        for k in run.data.metrics
        if k != "work_seconds"
    }

    def artifacts(path=None):
        out = []
        for a in client.list_artifacts(rid, path):
            out += artifacts(a.path) if a.is_dir else [a.path]
        return out

    return {
        "name": run.info.run_name,
        "status": run.info.status,
        "params": run.data.params,
        "tags": {k: v for k, v in run.data.tags.items()},
        "metrics": histories,
        "artifacts": sorted(artifacts()),
    }


def test_outage_then_rerun_logs_the_run_an_uninterrupted_command_logs(planted_f64, tmp_path, capsys):
    # uninterrupted
    on_time = f"sqlite:///{tmp_path / 'a' / 'mlflow.db'}"
    (tmp_path / "a").mkdir()
    assert main(_decompose(planted_f64, tmp_path / "s", "--tracking-uri", on_time)) == 0
    # an outage: the SQLite file's folder cannot be opened (a file stands in its place), then it can
    later = f"sqlite:///{tmp_path / 'b' / 'mlflow.db'}"
    (tmp_path / "b").write_text("not a folder")
    store = tmp_path / "s"  # the same store: nothing computed again, only logged
    assert main(_decompose(planted_f64, store, "--tracking-uri", later)) == EXIT_TRACKING
    (pending,) = (store / ".tracking").glob("*.json")
    (recorded,) = json.loads(pending.read_text())
    capsys.readouterr()
    (tmp_path / "b").unlink()
    replayed_at = time.time() * 1000
    assert main(_decompose(planted_f64, store, "--tracking-uri", later)) == 0  # the same command again
    assert not list((store / ".tracking").glob("*.json"))
    ca, a = _only_run(on_time)
    cb, b = _only_run(later)
    fa, fb = _fields(ca, a), _fields(cb, b)
    assert fa == fb
    # the replayed run spans the recorded work, not the replay
    assert (b.info.start_time, b.info.end_time) == (recorded["start_ms"], recorded["end_ms"]) < (replayed_at,) * 2
    assert b.info.end_time - b.info.start_time >= 1000 * b.data.metrics["work_seconds"] > 0
    assert [m.timestamp for m in cb.get_metric_history(b.info.run_id, "f_null")] == [recorded["end_ms"]]
    # once logged, nothing again: no duplicate run, no second history point
    assert main(_decompose(planted_f64, store, "--tracking-uri", later)) == 0
    cb, b2 = _only_run(later)
    assert b2.info.run_id == b.info.run_id and _fields(cb, b2)["metrics"] == fb["metrics"]


def test_track_verb_logs_what_was_recorded(planted_f64, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'gone' / 'mlflow.db'}"
    (tmp_path / "gone").write_text("not a folder")
    assert main(_decompose(planted_f64, tmp_path / "s", "--tracking-uri", uri)) == EXIT_TRACKING
    assert main(["track", str(tmp_path / "s")]) == EXIT_TRACKING  # still gone: kept
    assert len(list((tmp_path / "s" / ".tracking").glob("*.json"))) == 1
    elsewhere = f"sqlite:///{tmp_path / 'mlflow.db'}"
    capsys.readouterr()
    assert main(["track", str(tmp_path / "s"), "--tracking-uri", elsewhere]) == 0
    assert "logged 1 recorded logging(s)" in capsys.readouterr().out
    _, run = _only_run(elsewhere)
    assert run.info.status == "FINISHED" and run.data.tags["grrr.complete"] == "true"
    assert main(["track", str(tmp_path / "s")]) == 0  # nothing left


_OPEN_AND_LOG = """
import sys
from grrr_stream.tracking import mlflow_client as tracking
run = tracking.open_run(uri=sys.argv[1], experiment="grrr_stream", key="k" + sys.argv[2], run_name=sys.argv[2])
run.log_metrics([("m", 1.0, 0)])
run.finish()
"""


def _all_at_once(commands: list[list[str]], cwd: Path) -> list[tuple[int, str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MLFLOW_TRACKING_URI", None)
    procs = [
        subprocess.Popen(c, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for c in commands
    ]
    return [(p.wait(timeout=600), p.communicate()[0][-3000:]) for p in procs]


def test_processes_opening_a_fresh_sqlite_store_at_once_all_succeed(tmp_path):
    """Four processes, one fresh SQLite file: MLflow creates its schema in whichever opens it first."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = _all_at_once([[sys.executable, "-c", _OPEN_AND_LOG, uri, str(i)] for i in range(4)], tmp_path)
    assert [rc for rc, _ in done] == [0] * 4, done
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("grrr_stream").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["0", "1", "2", "3"]


@pytest.mark.slow  # four decompose processes (torch and MLflow imports each): ~40 s on two cores
def test_decompose_processes_on_one_fresh_sqlite_store_all_succeed(planted_f64, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    modules = ["q_proj", "k_proj", "v_proj", "o_proj"]  # four transitions: one run each
    done = _all_at_once(
        [
            [
                sys.executable,
                "-m",
                "grrr_stream.cli",
                *_decompose(planted_f64, tmp_path / m, "--tracking-uri", uri, "--modules", m),
            ]
            for m in modules
        ],
        tmp_path,
    )
    assert [rc for rc, _ in done] == [0] * 4, done
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("grrr_stream").experiment_id])
    assert sorted(r.data.params["modules"] for r in runs) == sorted(modules)
    assert all(r.info.status == "FINISHED" for r in runs)


def test_a_failure_after_the_check_is_one_line_and_recorded(tmp_path, capsys):
    """The server goes away between the start's check and a unit's logging."""
    from grrr_stream.config import TrackingConfig
    from grrr_stream.tracking import run_log

    t = TrackingConfig(uri=CLOSED)
    log = run_log.RunLog.of(t, key="k", name="unit", params={"a": (1, 2)}, metrics=[("m", 1, 3)])
    before = len(run_log.missed())
    t0 = time.monotonic()
    assert run_log.deliver([log], t, tmp_path) is None
    assert time.monotonic() - t0 < 10
    err = capsys.readouterr().err
    assert err == "unit: tracking: not logged (connection refused); will retry\n"
    assert run_log.missed()[before:] == ["unit: connection refused"]
    (f,) = (tmp_path / ".tracking").glob("*.json")
    (d,) = json.loads(f.read_text())
    assert d["params"] == {"a": "(1, 2)"} and d["metrics"] == [["m", 1.0, 3]]  # as MLflow will keep them


def test_a_half_logged_run_is_completed_without_logging_a_point_twice(tmp_path):
    from grrr_stream.config import TrackingConfig
    from grrr_stream.tracking import mlflow_client as tracking
    from grrr_stream.tracking import run_log

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    t = TrackingConfig(uri=uri)
    points = [("f/q", 0.5, 0), ("f/q", 0.25, 1), ("g", 2.0, 0)]
    log = run_log.RunLog.of(t, key="k", name="unit", start_ms=tracking.now_ms() - 1000, metrics=points)
    half = tracking.open_run(uri=uri, experiment=t.experiment, key="k", run_name="unit")
    half.log_metrics(points[:2])  # then the server died
    (rid,) = run_log.deliver([log], t, tmp_path)
    client = MlflowClient(tracking_uri=uri)
    assert sorted((m.step, m.value) for m in client.get_metric_history(rid, "f/q")) == [(0, 0.5), (1, 0.25)]
    assert [m.value for m in client.get_metric_history(rid, "g")] == [2.0]
    run = client.get_run(rid)
    assert run.info.status == "FINISHED" and run.info.end_time == log.end_ms


def test_a_recorded_log_names_the_target_resolved_when_recorded(tmp_path, monkeypatch):
    from grrr_stream.config import TrackingConfig
    from grrr_stream.tracking import run_log

    log = run_log.RunLog.of(TrackingConfig(), key="k", name="unit")  # no URI: the working directory's file
    assert log.uri == f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", CLOSED)
    assert run_log.RunLog.of(TrackingConfig(), key="k", name="unit").uri == CLOSED


def test_sampled_accuracy_metrics_are_logged_under_names_mlflow_accepts(tmp_path):
    """pass@k / maj@k (sampled evaluations) are refused by MLflow as metric names; they are logged as
    pass_at_k / maj_at_k, and the run is logged, not recorded for a retry that would fail forever."""
    from grrr_stream.config import TrackingConfig
    from grrr_stream.tracking import run_log

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    t = TrackingConfig(uri=uri)
    log = run_log.RunLog.of(
        t,
        key="k",
        name="unit",
        metrics=[("pass@4/math500", 0.5, 0), ("maj@8/aime24", 0.25, 0), ("acc/math500", 0.4, 0)],
    )
    ids = run_log.deliver([log], t, tmp_path)
    assert ids is not None and not run_log.pending_files(tmp_path / ".tracking")
    logged = MlflowClient(tracking_uri=uri).get_run(ids[0]).data.metrics
    assert logged == {"pass_at_4/math500": 0.5, "maj_at_8/aime24": 0.25, "acc/math500": 0.4}
