"""A real tracking server that goes away mid-sweep and comes back, and one behind a slow proxy
(issue 23). Servers are tracking/serve.sh processes on free loopback ports (tests/helpers/mlflow_ui.py);
every wait is bounded."""

from __future__ import annotations

import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from helpers.mlflow_ui import ROOT, serve
from helpers.processes import stop_group
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.slow  # several server starts and two sweeps: minutes
EXPERIMENT = "outage_test"


def _models(root: Path) -> Path:
    from grrr_stream.fixtures.synthetic import TINY, Update, write_model

    sft = Update(r_delta=2e-2, plant=(0.25, 0.45, 0.30))
    rl = Update(r_delta=5e-3, plant=(0.10, 0.70, 0.20), seed=1)
    for name, updates in {"base": (), "sft": (sft,), "rl": (sft, rl)}.items():
        write_model(root / name, TINY, family="qwen2", dtype="float32", seed=0, updates=updates)
    return root


def _sweep(models: Path, workdir: Path, uri: str) -> subprocess.Popen:
    cfg = {
        "name": "outage",
        "workdir": str(workdir),
        "chains": [
            {
                "name": "syn",
                "base": {"id": "base", "source": str(models / "base")},
                "models": [
                    {"id": "sft", "source": str(models / "sft"), "method": "SFT"},
                    {"id": "rl", "source": str(models / "rl"), "parent": "sft", "method": "GRPO"},
                ],
            }
        ],
        "decomposition": {"incremental": False, "device": "cpu"},
        "statistics": {"resamples": 200, "null_draws": 200, "independent": False},
        "variants": {"names": ["full", "diag"], "transitions": ["base-to-rl"]},
        "evaluation": {"enabled": False},
        "tracking": {"experiment": EXPERIMENT},
        "progress": False,
    }
    workdir.mkdir(parents=True)
    (workdir / "sweep.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "2"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.Popen(
        [sys.executable, "-m", "grrr_stream.cli", "sweep", str(workdir / "sweep.yaml"), "--tracking-uri", uri],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _done_units(workdir: Path) -> list[str]:
    import json

    out = []
    for p in (workdir / ".sweep" / "units").glob("*.json"):
        try:
            rec = json.loads(p.read_text())
        except ValueError:
            continue
        if rec.get("status") == "done":
            out.append(rec["id"])
    return out


def _runs(uri: str, workdir: Path) -> dict:
    """Every run of the experiment as what a user sees, paths of ``workdir`` written WORKDIR, keyed by
    (kind, name); nesting as the parent's name."""
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    names = {r.info.run_id: r.info.run_name for r in runs}
    w = str(workdir)

    def norm(v: str) -> str:
        return v.replace(w, "WORKDIR")

    def artifacts(rid, path=None):
        out = []
        for a in client.list_artifacts(rid, path):
            out += artifacts(rid, a.path) if a.is_dir else [a.path]
        # file stems carry a hash of their stores' paths (another workdir, another hash)
        return sorted(re.sub(r"_[0-9a-f]{8}(?=[._])", "_HASH", a) for a in out)

    keys = [r.data.tags["grrr.key"] for r in runs]
    assert len(set(keys)) == len(keys), "a run logged twice"
    out = {}
    for r in runs:
        # grrr.key: a variant's hashes its store's path, which differs between the two workdirs
        tags = {
            k: norm(v)
            for k, v in r.data.tags.items()
            if (not k.startswith("mlflow.") or k == "mlflow.runName") and k != "grrr.key"
        }
        key = (r.data.tags.get("grrr.kind"), r.info.run_name)
        assert key not in out, f"duplicate run {key}"
        out[key] = {
            "status": r.info.status,
            "tags": tags,
            "parent": names.get(r.data.tags.get("mlflow.parentRunId", "")),
            "params": {k: norm(v) for k, v in r.data.params.items() if k != "config"},
            "metrics": {
                k: sorted((m.step, round(m.value, 9)) for m in client.get_metric_history(r.info.run_id, k))
                for k in r.data.metrics
                if k != "work_seconds"
            },
            "datasets": sorted((d.dataset.name, d.dataset.digest) for d in r.inputs.dataset_inputs),
            "artifacts": artifacts(r.info.run_id),
            "span_covers_work": r.info.end_time - r.info.start_time >= 1000 * r.data.metrics.get("work_seconds", 0) - 1,
        }
    return out


def test_server_killed_mid_sweep_and_restarted_gives_the_uninterrupted_runs(tmp_path):
    models = _models(tmp_path / "models")
    with serve(tmp_path / "ref_server") as ref:  # the uninterrupted sweep
        t0 = time.monotonic()
        p = _sweep(models, tmp_path / "ref", ref.uri)
        out = p.communicate(timeout=600)[0]
        ref_seconds = time.monotonic() - t0
        assert p.returncode == 0, out[-3000:]
        expected = _runs(ref.uri, tmp_path / "ref")
    work = tmp_path / "outage"
    with serve(tmp_path / "server") as server:
        t0 = time.monotonic()
        p = _sweep(models, work, server.uri)
        deadline = time.monotonic() + 300
        while not any(u.startswith("decompose/") for u in _done_units(work)) and p.poll() is None:
            assert time.monotonic() < deadline, "no unit finished in 300 s"
            time.sleep(0.2)
        stop_group(server.proc)  # the server dies after the first transition
        out = p.communicate(timeout=600)[0]
        seconds = time.monotonic() - t0
    assert p.returncode == 3, out[-3000:]  # all the work done, logging missed
    assert "Traceback" not in out and "not logged" in out and "will retry" in out
    assert seconds < ref_seconds + 60, (seconds, ref_seconds)  # nothing waited on the server
    assert sorted(_done_units(work)) == sorted(_done_units(tmp_path / "ref"))
    assert list((work / ".sweep" / "tracking").glob("*.json"))
    with serve(tmp_path / "server") as again:  # the same store and artifacts, a new port
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        t = subprocess.run(
            [sys.executable, "-m", "grrr_stream.cli", "track", str(work), "--tracking-uri", again.uri],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert t.returncode == 0, t.stdout + t.stderr
        assert not list((work / ".sweep" / "tracking").glob("*.json"))
        got = _runs(again.uri, work)
    assert sorted(got) == sorted(expected)
    for key in expected:
        assert got[key] == expected[key], key


class DelayingProxy:
    """A loopback TCP proxy that holds back each response for ``delay`` seconds."""

    def __init__(self, upstream_port: int, delay: float):
        self.upstream, self.delay = upstream_port, delay
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._pipe, args=(conn,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        up = socket.create_connection(("127.0.0.1", self.upstream), timeout=30)
        held = False  # a request went up: hold back the first bytes of its answer
        with client, up:
            while not self.stop.is_set():
                ready, _, _ = select.select([client, up], [], [], 0.2)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    if s is client:
                        held = True
                        up.sendall(data)
                    else:
                        if held:
                            time.sleep(self.delay)
                            held = False
                        client.sendall(data)

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def test_slow_server_delays_only_the_logging(planted_f64, tmp_path, monkeypatch):
    from helpers.common import no_track_config

    from grrr_stream.decompose.run import run_transition
    from grrr_stream.tracking.run_log import missed

    monkeypatch.chdir(tmp_path)
    base, post = planted_f64
    delay = 3.0
    with serve(tmp_path / "server") as server:
        proxy = DelayingProxy(server.port, delay)
        try:
            uri = f"http://127.0.0.1:{proxy.port}"
            cfg = no_track_config(base=str(base), post=str(post), store=tmp_path / "s", tracking={"uri": uri})
            res = run_transition(cfg)
            # the delay fell on the logging after the matrices, not on them (compared within this run, not
            # with a machine-speed threshold: the logging's requests take ≥ delay each)
            assert res.run_id is not None and res.timings["tracking"] >= delay, res.timings
            assert res.timings["matrices_wall"] < res.timings["tracking"], res.timings
            # slower than the time limit: found at the start, the work goes on, logging recorded
            before = len(missed())
            cfg = no_track_config(
                base=str(base),
                post=str(post),
                store=tmp_path / "s2",
                tracking={"uri": uri, "timeout_s": 1, "experiment": "other"},
            )
            t0 = time.monotonic()
            res = run_transition(cfg)
            assert res.run_id is None and len(missed()) == before + 1
            assert time.monotonic() - t0 < 2 * delay + res.timings["matrices_wall"] + 10, res.timings
            assert list((tmp_path / "s2" / ".tracking").glob("*.json"))
        finally:
            proxy.close()


def test_slow_server_does_not_hold_up_a_sweeps_units(tmp_path):
    """Every MLflow answer 2 s late: each unit's logging (10+ requests) would take 20 s or more; the units
    record it and go on, and the sweep's tracker logs it all the same."""
    import json

    delay = 2.0
    models = _models(tmp_path / "models")
    with serve(tmp_path / "server") as server:
        proxy = DelayingProxy(server.port, delay)
        try:
            p = _sweep(models, tmp_path / "w", f"http://127.0.0.1:{proxy.port}")
            out = p.communicate(timeout=900)[0]
        finally:
            proxy.close()
        assert p.returncode == 0, out[-3000:]
        recs = [json.loads(f.read_text()) for f in (tmp_path / "w" / ".sweep" / "units").glob("*.json")]
        assert len(recs) == 6 and all(r["status"] == "done" for r in recs)
        slowest = max(recs, key=lambda r: r["seconds"])
        # its work, not its logging: a unit that logged itself would spend its 10+ requests × delay on it
        assert slowest["seconds"] < 10 * delay, slowest
        runs = _runs(server.uri, tmp_path / "w")
    assert sorted(k for k, _ in runs) == [
        "comparison",
        "statistics",
        "sweep",
        "transition",
        "transition",
        "variant",
        "variant",
    ]
    assert all(r["status"] == "FINISHED" and r["span_covers_work"] for r in runs.values())
