"""One transition spread over Dask workers (grrr_stream.decompose.spread): the same bytes as a one-process run,
a worker or the driver killed mid-transition, and the one scheduler parser (grrr_stream.runtime.cluster)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers.common import no_track_config, store_snapshot

from grrr_stream.checkpoints.arch import MatrixName
from grrr_stream.decompose.run import run_transition
from grrr_stream.decompose.spread import BATCH, batches
from grrr_stream.errors import ConfigError
from grrr_stream.fixtures.synthetic import TINY, ModelShape, Update, make_transition
from grrr_stream.runtime.cluster import parse_scheduler, require

REPO = Path(__file__).resolve().parents[2]
# large enough that a transition takes seconds on one core, so a kill lands mid-run
MEDIUM = ModelShape(hidden=384, intermediate=1024, layers=6, heads=6, kv_heads=2)


def assert_same_store(a: Path, b: Path) -> None:
    """Every array bit for bit, every matrix's attributes and metrics.csv equal."""
    A, B = store_snapshot(a), store_snapshot(b)
    assert sorted(A) == sorted(B)
    differ = [k for k in A if (A[k] != B[k] if isinstance(A[k], str) else A[k].tobytes() != B[k].tobytes())]
    assert not differ, f"{len(differ)} entries differ, e.g. {differ[:5]}"


def complete_count(store: Path) -> int:
    n = 0
    for meta in (store / "matrices").glob("*/zarr.json"):
        try:
            n += bool(json.loads(meta.read_text()).get("attributes", {}).get("complete"))
        except (json.JSONDecodeError, OSError):
            pass  # being written
    return n


def wait_for(predicate, timeout: float, what: str) -> None:
    t0 = time.time()
    while not predicate():
        if time.time() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


# -- the scheduler parser ---------------------------------------------------------------------


def test_one_scheduler_parser_for_every_command():
    assert parse_scheduler(None).kind == "threads" and not parse_scheduler("threads").distributed
    assert parse_scheduler("sync").kind == "synchronous"
    assert parse_scheduler("local:3").workers == 3 and parse_scheduler("local:3").distributed
    assert parse_scheduler("tcp://10.0.0.5:8786").address == "tcp://10.0.0.5:8786"
    assert parse_scheduler("127.0.0.1:8786").kind == "address"
    for bad, why in (("local:x", "local:N"), ("local:0", "N >= 1"), ("fast please", "not understood")):
        with pytest.raises(ConfigError, match=why):
            parse_scheduler(bad)
    with pytest.raises(ConfigError, match="decompose cannot use --scheduler processes"):
        require(parse_scheduler("processes"), ("threads", "local"), "decompose")


def test_decompose_refuses_the_multiprocessing_scheduler(tmp_path):
    base, post = make_transition(tmp_path / "pair", TINY, dtype="float32")
    with pytest.raises(ConfigError, match="processes"):
        run_transition(no_track_config(base=str(base), post=str(post), store=tmp_path / "s", scheduler="processes"))
    assert not (tmp_path / "s").exists()


# -- batches ----------------------------------------------------------------------------------


def test_batches_follow_layers_and_are_named_by_their_matrices():
    ms = [
        MatrixName(layer=layer_index, module=f"m{i}", name=f"L{layer_index}.m{i}")
        for layer_index in (0, 1)
        for i in range(BATCH + 3)
    ]
    ms.append(MatrixName(layer=2, module="m0", name="L2.m0"))
    got = batches(ms)
    assert [len(b) for _, b in got] == [BATCH, 3, BATCH, 3, 1]
    assert all(len({m.layer for m in b}) == 1 for _, b in got)
    assert [m for _, b in got for m in b] == ms  # plan order, nothing lost or repeated
    assert len({i for i, _ in got}) == len(got)
    # the same batch gets the same id whatever else is planned (a rerun finds the lock of an orphan's batch)
    assert batches(ms[BATCH:])[0][0] == got[1][0]


# -- LocalCluster (default suite: a few seconds) ------------------------------------------------


def one_process_reference(base: Path, post: Path, store: Path, tmp: Path) -> None:
    """The one-process run, with one compute thread, in a fresh process: once vLLM's CPU backend has run
    in this test process (tests/evaluation/test_evaluate_vllm.py), torch.set_num_threads no longer takes effect
    here, and LAPACK's last bits depend on the thread count."""
    cfg = tmp / "one_thread.yaml"
    cfg.write_text(yaml.safe_dump({"cpu_threads": 1}))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grrr_stream.cli",
            "decompose",
            "--base",
            str(base),
            "--post",
            str(post),
            "--store",
            str(store),
            "--config",
            str(cfg),
            "--no-track",
            "--no-progress",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=600,
    )


def test_spread_over_local_cluster_writes_the_same_bytes(tmp_path):
    base, post = make_transition(tmp_path / "pair", TINY, family="qwen3", dtype="bfloat16", update=Update(r_delta=1e-2))
    one_process_reference(base, post, tmp_path / "one", tmp_path)
    spread = run_transition(
        no_track_config(base=str(base), post=str(post), store=tmp_path / "spread", cpu_threads=1, scheduler="local:2")
    )
    assert spread.computed == 2 * 7
    assert sum(spread.workers.values()) == 14 and all(a.startswith("tcp://") for a in spread.workers)
    assert (tmp_path / "one" / "summary.csv").read_text() == (tmp_path / "spread" / "summary.csv").read_text()
    assert_same_store(tmp_path / "one", tmp_path / "spread")
    # the finished store resumes to nothing, without starting a cluster
    again = run_transition(
        no_track_config(base=str(base), post=str(post), store=tmp_path / "spread", cpu_threads=1, scheduler="local:2")
    )
    assert again.computed == 0 and again.workers == {}


# -- real `dask scheduler` and `dask worker` processes on loopback (slow) -----------------------


@pytest.fixture(scope="module")
def medium_pair(tmp_path_factory):
    """A 42-matrix pair and its one-process reference store (one compute thread)."""
    root = tmp_path_factory.mktemp("spread_medium")
    base, post = make_transition(root / "pair", MEDIUM, family="qwen2", dtype="bfloat16", update=Update(r_delta=1e-2))
    one_process_reference(base, post, root / "reference", root)
    return base, post, root / "reference"


@pytest.fixture
def dask_processes(tmp_path):
    """A `dask scheduler` and two `dask worker` processes (no nanny: a killed worker stays dead)."""
    dask = Path(sys.executable).parent / "dask"
    if not dask.exists():
        pytest.skip("the dask command-line tool is not installed beside this Python")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    sfile = tmp_path / "scheduler.json"
    logs = [open(tmp_path / f"{n}.log", "w") for n in ("scheduler", "w0", "w1")]
    procs = [
        subprocess.Popen(
            [
                str(dask),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(sfile),
            ],
            env=env,
            stdout=logs[0],
            stderr=subprocess.STDOUT,
        )
    ]
    try:
        wait_for(lambda: sfile.is_file() and "address" in sfile.read_text(), 60, "the scheduler file")
        address = json.loads(sfile.read_text())["address"]
        for i in (0, 1):
            procs.append(
                subprocess.Popen(
                    [
                        str(dask),
                        "worker",
                        "--scheduler-file",
                        str(sfile),
                        "--nthreads",
                        "1",
                        "--no-nanny",
                        "--no-dashboard",
                        "--host",
                        "127.0.0.1",
                        "--memory-limit",
                        "0",
                        "--name",
                        f"w{i}",
                    ],
                    env=env,
                    cwd=tmp_path,
                    stdout=logs[i + 1],
                    stderr=subprocess.STDOUT,
                )
            )
        from distributed import Client

        with Client(address, timeout="30s") as c:
            c.wait_for_workers(2, timeout=90)
        yield address, procs[1:]
    finally:
        for p in reversed(procs):
            p.kill()
            p.wait()
        for f in logs:
            f.close()


def driver_command(base: Path, post: Path, store: Path, address: str, tmp: Path) -> list[str]:
    cfg = tmp / "decompose.yaml"
    cfg.write_text(yaml.safe_dump({"cpu_threads": 1}))  # the reference's thread count: the same bytes
    return [
        sys.executable,
        "-m",
        "grrr_stream.cli",
        "decompose",
        "--base",
        str(base),
        "--post",
        str(post),
        "--store",
        str(store),
        "--scheduler",
        address,
        "--config",
        str(cfg),
        "--no-track",
        "--no-progress",
    ]


@pytest.mark.slow
def test_worker_killed_mid_transition_run_still_finishes_correctly(medium_pair, dask_processes, tmp_path):
    base, post, reference = medium_pair
    address, workers = dask_processes
    store = tmp_path / "s"
    driver = subprocess.Popen(
        driver_command(base, post, store, address, tmp_path),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for(lambda: complete_count(store) >= 3, 180, "the first matrices")
    os.kill(workers[0].pid, signal.SIGKILL)
    done_at_kill = complete_count(store)
    out, _ = driver.communicate(timeout=300)
    assert driver.returncode == 0, out
    assert done_at_kill < 42, "the transition was over before the kill; make MEDIUM larger"
    assert workers[0].wait() == -signal.SIGKILL
    assert_same_store(reference, store)
    # every matrix was computed by one of the two workers; the survivor finished the run
    assert "matrices computed per Dask worker" in out


@pytest.mark.slow
def test_driver_killed_mid_transition_rerun_resumes(medium_pair, dask_processes, tmp_path):
    base, post, reference = medium_pair
    address, _ = dask_processes
    store = tmp_path / "s"
    cmd = driver_command(base, post, store, address, tmp_path)
    driver = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: complete_count(store) >= 3, 180, "the first matrices")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    done_at_kill = complete_count(store)
    assert done_at_kill < 42
    # the rerun starts while the dead driver's tasks may still run on the workers (batch locks)
    rerun = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "42 matrices" in rerun.stdout and "computed now" in rerun.stdout
    assert_same_store(reference, store)
