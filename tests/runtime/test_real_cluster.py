"""The command line's cluster path as a user runs it (issue 60): a real ``dask scheduler`` and two ``dask worker``
processes, and the installed console script in a fresh process with ``--scheduler tcp://…``. Nothing the test
process imported can stand in for what the console script loads itself (Dask's ``distributed`` config, for
one, is registered only when ``distributed`` is imported). The results must equal a local run's, bit for bit:
each worker and the local run use one torch thread (LAPACK's last bits depend on the count)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from helpers.common import assert_same, results_snapshot
from helpers.processes import console_script, stop_group

from grrr_stream.fixtures.synthetic import TINY, Update, write_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


@pytest.fixture
def cluster(tmp_path):
    """(address, worker pids) of a scheduler on 127.0.0.1 with two one-thread workers, torn down by group."""
    sched_file = tmp_path / "scheduler.json"
    env = {**os.environ, **ONE_THREAD}
    logs = tmp_path / "dask-logs"
    logs.mkdir()
    procs = [
        subprocess.Popen(
            [console_script("dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(sched_file)],
            stdout=open(logs / "scheduler.log", "w"), stderr=subprocess.STDOUT, start_new_session=True, env=env,
        )
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not sched_file.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sched_file.is_file(), (logs / "scheduler.log").read_text()
        procs.append(
            subprocess.Popen(
                [console_script("dask"), "worker", "--scheduler-file", str(sched_file), "--nworkers", "2",
                 "--nthreads", "1", "--no-dashboard", "--local-directory", str(tmp_path / "dask-space")],
                stdout=open(logs / "workers.log", "w"), stderr=subprocess.STDOUT, start_new_session=True, env=env,
            )
        )  # fmt: skip
        address = json.loads(sched_file.read_text())["address"]
        from distributed import Client

        with Client(address, timeout=60) as c:
            c.wait_for_workers(2, timeout=120)
            pids = set(c.run(os.getpid).values())
        yield address, pids
    finally:
        for p in reversed(procs):
            stop_group(p)


def sweep_yaml(models: Path, workdir: Path, path: Path) -> Path:
    cfg = {
        "name": "cluster",
        "workdir": str(workdir),
        "chains": [
            {
                "name": "syn",
                "base": {"id": "base", "source": str(models / "base")},
                "models": [
                    {"id": "sft", "source": str(models / "sft"), "parent": "base", "method": "SFT"},
                    {"id": "rl", "source": str(models / "rl"), "parent": "sft", "method": "GRPO"},
                    {"id": "sibling", "source": str(models / "sibling"), "method": "SFT"},
                ],
            }
        ],
        "decomposition": {"device": "cpu"},
        "statistics": {"resamples": 200, "null_draws": 200},
        "variants": {"names": ["base", "full", "diag", "randrm-0"], "transitions": ["base-to-rl"]},
        "evaluation": {"enabled": False},
        "tracking": {"enabled": False},
        "progress": False,
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_the_console_script_runs_a_sweep_on_a_real_scheduler_and_matches_a_local_run(cluster, tmp_path):
    address, worker_pids = cluster
    models = tmp_path / "models"
    sft, rl, sib = Update(r_delta=2e-2), Update(r_delta=5e-3, seed=1), Update(r_delta=2e-2, seed=2)
    for name, updates in {"base": (), "sft": (sft,), "rl": (sft, rl), "sibling": (sib,)}.items():
        write_model(models / name, TINY, family="qwen2", dtype="float32", updates=updates, max_shard_bytes=200_000)
    env = {**os.environ, **ONE_THREAD}
    env.pop("PYTHONPATH", None)  # the installed package, as a user has it

    def sweep(name: str, *extra: str) -> subprocess.CompletedProcess:
        cfg = sweep_yaml(models, tmp_path / name, tmp_path / f"{name}.yaml")
        return subprocess.run(
            [console_script(), "sweep", str(cfg), *extra],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip

    remote = sweep("remote", "--scheduler", address)
    assert remote.returncode == 0, remote.stdout[-3000:] + remote.stderr[-3000:]
    assert "Traceback" not in remote.stdout + remote.stderr
    local = sweep("local")
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]

    records = [json.loads(p.read_text()) for p in (tmp_path / "remote" / ".sweep" / "units").glob("*.json")]
    ran_on = {r["pid"] for r in records if r["id"].split("/")[0] in ("decompose", "variant")}
    assert ran_on and ran_on <= worker_pids, (ran_on, worker_pids)  # the heavy units ran in the workers
    assert_same(results_snapshot(tmp_path / "remote"), results_snapshot(tmp_path / "local"))
