"""A scheduler address is checked before any connection, and a peer that is no Dask scheduler is refused in
bounded time with one line (issue 47): a malformed address or an unknown scheme, nothing listening, something
that accepts the connection and never answers (Dask's own handshake waits for it forever), a web server, a
Dask worker. Only 127.0.0.1; Dask's connect timeout is set to 2 s, and each command runs in a thread joined
with a deadline, so a regression fails instead of hanging the suite."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import threading
import time

import dask
import distributed  # noqa: F401 (its config defaults loaded before the fixture sets one of them)
import pytest
import yaml
from helpers.processes import console_script

from grrr_stream.cli.entry import main
from grrr_stream.errors import ConfigError

TIMEOUT_S = 2
DEADLINE_S = 60  # well past TIMEOUT_S + the probe's 5 s of grace on a loaded machine, well short of a hang


@pytest.fixture(autouse=True)
def _short_connect_timeout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with dask.config.set({"distributed.comm.timeouts.connect": f"{TIMEOUT_S}s"}):
        yield


@pytest.fixture
def silent_peer():
    """tcp://127.0.0.1:PORT of a server that accepts every connection and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held, stop = [], threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    for c in held:
        c.close()
    server.close()


@pytest.fixture
def web_server():
    """tcp://127.0.0.1:PORT of an HTTP server (a dashboard's port given for the scheduler's)."""

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # the test's stderr is the command's
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"tcp://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"tcp://127.0.0.1:{port}"


def bounded(capsys, argv: list[str]) -> tuple[int, str, float]:
    """(exit status, stderr, seconds) of the command, which must end within DEADLINE_S."""
    out: dict = {}
    began = time.monotonic()
    thread = threading.Thread(target=lambda: out.setdefault("rc", main(argv)), daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    assert not thread.is_alive(), f"{argv} still runs after {DEADLINE_S} s"
    return out["rc"], capsys.readouterr().err, time.monotonic() - began


def assert_one_line_refusal(rc: int, err: str, *needles: str) -> None:
    """Exit 2 and one line of ours that says it all (a library's stray log line beside it is not ours to judge)."""
    assert rc == 2, err
    assert "Traceback" not in err, err
    ours = [line for line in err.splitlines() if line.startswith("grrr-stream")]
    assert len(ours) == 1 and ours[0].startswith("grrr-stream: error: "), err
    for n in needles:
        assert n in ours[0], f"{n!r} not in {err}"


def stats_argv(tmp_path, address: str) -> list[str]:
    return ["stats", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"), "--scheduler", address, "--no-track"]


@pytest.mark.parametrize(
    "address, needle",
    [
        ("http://127.0.0.1:8787", "is a web address"),
        ("foo://127.0.0.1:8786", "unknown scheme 'foo'"),
        ("tcp://127.0.0.1", "is not tcp://HOST:PORT"),
        ("tcp://127.0.0.1:99999", "is not tcp://HOST:PORT"),
        ("tcp://:8786", "is not tcp://HOST:PORT"),
        ("127.0.0.1:80/x", "is not tcp://HOST:PORT"),
    ],
)
def test_a_malformed_address_is_refused_before_connecting(tmp_path, capsys, address, needle):
    rc, err, _ = bounded(capsys, stats_argv(tmp_path, address))
    assert_one_line_refusal(rc, err, needle)
    cfg = tmp_path / "s.yaml"
    chain = {"name": "a", "base": {"id": "a0", "source": "tinychain:base"}}
    cfg.write_text(yaml.safe_dump({"name": "s", "workdir": "w", "chains": [chain], "scheduler": address}))
    rc, err, _ = bounded(capsys, ["sweep", str(cfg), "--dry-run"])
    assert rc == 2 and "scheduler: Value error" in err and needle in err and "Traceback" not in err, err
    rc, err, _ = bounded(capsys, ["sweep", str(cfg), "--dry-run", "--scheduler", address])
    assert rc == 2 and needle in err and "Traceback" not in err, err


def test_a_silent_peer_is_refused_in_bounded_time(tmp_path, capsys, silent_peer):
    rc, err, seconds = bounded(capsys, stats_argv(tmp_path, silent_peer))
    assert_one_line_refusal(rc, err, silent_peer, f"gave no Dask answer within {TIMEOUT_S} s")
    assert seconds < TIMEOUT_S + 20
    # a sweep asks before it plans or writes anything
    cfg = tmp_path / "s.yaml"
    chain = {"name": "a", "base": {"id": "a0", "source": "tinychain:base"}}
    cfg.write_text(yaml.safe_dump({"name": "s", "workdir": "w", "chains": [chain]}))
    rc, err, seconds = bounded(capsys, ["sweep", str(cfg), "--scheduler", silent_peer, "--no-track"])
    assert_one_line_refusal(rc, err, "gave no Dask answer")
    assert seconds < TIMEOUT_S + 20 and not (tmp_path / "w").exists()


def test_a_web_server_and_a_closed_port_are_refused_in_bounded_time(tmp_path, capsys, web_server):
    rc, err, seconds = bounded(capsys, stats_argv(tmp_path, web_server))
    assert_one_line_refusal(rc, err, web_server, "cannot use the Dask scheduler")
    assert seconds < TIMEOUT_S + 20
    address = closed_port()
    rc, err, seconds = bounded(capsys, stats_argv(tmp_path, address))
    assert_one_line_refusal(rc, err, address, "nothing answers there")
    assert seconds < TIMEOUT_S + 20


def test_a_scheduler_is_accepted_and_a_worker_refused():
    from distributed import LocalCluster

    from grrr_stream.runtime.cluster import check_reachable, parse_scheduler

    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, protocol="tcp", host="127.0.0.1", dashboard_address=None
    ) as cluster:
        check_reachable(cluster.scheduler_address)
        worker = next(iter(cluster.scheduler_info["workers"]))
        assert parse_scheduler(worker).kind == "address"
        with pytest.raises(ConfigError, match="is a Dask Worker, not a scheduler"):
            check_reachable(worker)


@pytest.mark.timeout(120)
def test_the_console_script_reads_dasks_connect_timeout_and_refuses_a_closed_port(tmp_path):
    """In a fresh process, as a user runs it: Dask's ``distributed`` config exists only once ``distributed`` is
    imported, which this test process has done and the console script, before connecting, had not."""
    address = closed_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    cfg = tmp_path / "s.yaml"
    chain = {"name": "a", "base": {"id": "a0", "source": "tinychain:base"}}
    cfg.write_text(yaml.safe_dump({"name": "s", "workdir": "w", "chains": [chain]}))
    for argv in (stats_argv(tmp_path, address), ["sweep", str(cfg), "--scheduler", address, "--no-track"]):
        done = subprocess.run([console_script(), *argv], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=100)  # fmt: skip
        assert_one_line_refusal(done.returncode, done.stderr, address, "nothing answers there")
    assert not (tmp_path / "w").exists()
