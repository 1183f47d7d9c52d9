"""One owner for ``--scheduler`` strings and Dask connections.

A scheduler is named the same way everywhere (decompose, sweep, stats, compare, bands):

    threads        this process, a thread pool (the default)
    synchronous    this process, one thread (debugging; also "sync")
    processes      Dask's multiprocessing scheduler (only for Dask graphs: stats, compare, bands)
    local:N        a LocalCluster of N worker processes started for this run, one thread each
    ADDRESS        a running dask.distributed scheduler, e.g. tcp://10.0.0.5:8786

Each command says which kinds it can use; :func:`parse_scheduler` is the only parser.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import ConfigError

# Dask resources a worker declares (dask worker ... --resources "GPU=1,GPU_MEMORY_GIB=80"), held by a task while
# it runs; what a sweep unit asks of them: grrr_stream/sweep/resources.py
GPU = "GPU"  # the worker's GPUs (count)
GPU_MEMORY = "GPU_MEMORY_GIB"  # its GPU memory in GiB, summed over its GPUs
HINT = "use threads, synchronous, processes, local:N (N worker processes) or a scheduler address (tcp://HOST:8786)"


@dataclass(frozen=True)
class Scheduler:
    kind: str  # "threads" | "synchronous" | "processes" | "local" | "address"
    workers: int = 0  # local:N
    address: str = ""  # ADDRESS

    @property
    def distributed(self) -> bool:
        """Work goes to dask.distributed workers (a cluster started here, or an existing one)."""
        return self.kind in ("local", "address")

    def __str__(self) -> str:
        return {"local": f"local:{self.workers}", "address": self.address}.get(self.kind, self.kind)


def parse_scheduler(text: Optional[str]) -> Scheduler:
    t = (text or "").strip()
    if t in ("", "threads", "local"):
        return Scheduler("threads")
    if t in ("synchronous", "sync"):
        return Scheduler("synchronous")
    if t == "processes":
        return Scheduler("processes")
    if t.startswith("local:"):
        try:
            n = int(t.split(":", 1)[1])
        except ValueError:
            raise ConfigError(f"scheduler {t!r}: use local:N with N worker processes") from None
        if n < 1:
            raise ConfigError("scheduler local:N needs N >= 1")
        return Scheduler("local", workers=n)
    if ":" in t:  # tcp://host:port, tls://..., host:port
        return Scheduler("address", address=check_address(t))
    raise ConfigError(f"scheduler {t[:200]!r} is not understood: {HINT}")


# what dask.distributed connects to (distributed.comm's backends); inproc:// is an address inside one process
SCHEMES = ("tcp", "tls", "ucx", "ws", "wss", "inproc")
_HOST_PORT = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9_.-]*):(?P<port>[0-9]{1,5})", re.ASCII)


def check_address(address: str) -> str:
    """``address`` if it is a scheduler address Dask can connect to (SCHEME://HOST:PORT or HOST:PORT), else one
    ConfigError that says what is wrong with it: checked before connecting, so a typo is not a traceback."""
    shown = repr(address[:200])
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if scheme in ("http", "https"):
        raise ConfigError(
            f"scheduler {shown} is a web address (a dashboard's?), not a Dask scheduler's: give the scheduler's "
            "tcp://HOST:PORT (default port 8786)"
        )
    if scheme not in SCHEMES:
        raise ConfigError(f"scheduler {shown}: unknown scheme {scheme[:40]!r}; Dask connects over {', '.join(SCHEMES)}")
    if scheme == "inproc":
        return address
    m = _HOST_PORT.fullmatch(rest)
    if m is None or not 1 <= int(m["port"]) <= 65535:
        raise ConfigError(f"scheduler {shown} is not {scheme}://HOST:PORT (a host name or address, a port 1-65535)")
    return address


def require(spec: Scheduler, allowed: tuple[str, ...], what: str) -> Scheduler:
    """Refuse a kind that ``what`` cannot use, saying which it can."""
    if spec.kind not in allowed:
        names = {
            "threads": "threads",
            "synchronous": "synchronous",
            "processes": "processes",
            "local": "local:N",
            "address": "a scheduler ADDRESS",
        }
        raise ConfigError(f"{what} cannot use --scheduler {spec}: it takes " + ", ".join(names[k] for k in allowed))
    return spec


def threads_per_local_worker(n_workers: int) -> int:
    """torch threads for each of ``n_workers`` worker processes on this host: its share of the cores."""
    return max(1, (os.cpu_count() or 1) // max(1, n_workers))


def open_client(spec: Scheduler) -> tuple[Any, Any]:
    """(dask.distributed Client, LocalCluster to close or None) for a distributed ``spec``."""
    from distributed import Client, LocalCluster

    if spec.kind == "local":
        # one task per worker at a time: torch's thread count is per process, and each task sets it
        cluster = LocalCluster(n_workers=spec.workers, threads_per_worker=1, processes=True, dashboard_address=None)
        return Client(cluster), cluster
    seconds = connect_timeout()
    probe(spec.address, seconds)
    try:
        return Client(spec.address, timeout=seconds), None
    except (OSError, TimeoutError) as e:
        raise ConfigError(f"cannot reach the Dask scheduler at {spec.address}: {e}") from None


def check_reachable(text: Optional[str]) -> None:
    """A --scheduler string parsed and, when it is an address, its scheduler asked to answer: before a command
    does any work, so an unusable scheduler costs seconds, not the work done before it is first needed."""
    spec = parse_scheduler(text)
    if spec.kind == "address":
        probe(spec.address, connect_timeout())


def connect_timeout() -> float:
    """Seconds to reach a scheduler and hear its answer: Dask's ``distributed.comm.timeouts.connect`` (30 s unless
    set; DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=10s in the environment)."""
    import dask
    import distributed  # noqa: F401 - its config defaults are registered only when it is imported
    from dask.utils import parse_timedelta

    return float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), default="seconds"))


def probe(address: str, seconds: float) -> None:
    """Refuse, in about ``seconds``, an address where no Dask scheduler answers: nothing listens, something
    accepts the connection and stays silent (Dask's own handshake would wait for it forever), or another kind of
    server (a web server, a Dask worker) answers. The exchange runs in a thread of its own, so that a peer that
    holds it cannot hold the caller: past the deadline the thread is left behind."""
    import queue
    import threading

    if address.startswith("inproc://"):
        return
    where = f"the Dask scheduler at {address}"
    _listening(address, seconds, where)
    answers: "queue.Queue[tuple[str, Any]]" = queue.Queue()

    def ask() -> None:
        try:
            answers.put(("ok", asyncio_run(_identity(address, seconds), seconds)))
        except BaseException as e:  # noqa: BLE001 - every failure is told to the caller
            answers.put(("error", e))

    threading.Thread(target=ask, name="grrr-scheduler-probe", daemon=True).start()
    try:
        how, what = answers.get(timeout=seconds + 5)
    except queue.Empty:
        how, what = "error", TimeoutError()
    if how == "error":
        raise ConfigError(f"cannot use {where}: {_why(what, seconds)}") from None
    kind = what.get("type") if isinstance(what, dict) else None
    if kind != "Scheduler":
        raise ConfigError(
            f"cannot use {where}: what answers there is {'a Dask ' + str(kind) if kind else 'not Dask'}, "
            "not a scheduler (give the address the scheduler printed: tcp://HOST:8786 by default)"
        )


def _listening(address: str, seconds: float, where: str) -> None:
    """Refuse an address of a TCP scheme where nothing accepts a connection within ``seconds`` (told apart from a
    peer that accepts and stays silent, which only the exchange after it finds)."""
    import socket

    scheme, sep, rest = address.partition("://")
    if sep and scheme not in ("tcp", "tls", "ws", "wss"):  # ucx: not a plain TCP port
        return
    m = _HOST_PORT.fullmatch(rest if sep else address)
    if m is None:
        return
    try:
        socket.create_connection((m["host"].strip("[]"), int(m["port"])), timeout=seconds).close()
    except OSError as e:
        raise ConfigError(
            f"cannot use {where}: nothing answers there ({e.strerror or type(e).__name__}; is the scheduler running, "
            "and the host and port right?)"
        ) from None


def asyncio_run(coro: Any, seconds: float) -> Any:
    import asyncio

    return asyncio.run(asyncio.wait_for(coro, seconds))


async def _identity(address: str, seconds: float) -> Any:
    """The peer's answer to Dask's ``identity`` request, after the connection's handshake."""
    from distributed.comm import connect

    comm = await connect(address, timeout=seconds)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def _why(error: BaseException, seconds: float) -> str:
    """One line for what went wrong in :func:`probe`."""
    import asyncio

    if isinstance(error, (TimeoutError, asyncio.TimeoutError)):
        return (
            f"something accepted the connection but gave no Dask answer within {seconds:g} s "
            "(not a Dask scheduler, or one too busy to answer)"
        )
    text = " ".join(str(error).split())[:300] or type(error).__name__
    if isinstance(error, OSError) and "Timed out trying to connect" in text:
        return f"nothing answers there within {seconds:g} s (is the scheduler running, and the host and port right?)"
    return f"it did not answer as a Dask scheduler ({type(error).__name__}: {text})"


def close(client: Any, cluster: Any) -> None:
    if client is not None:
        client.close()
    if cluster is not None:
        cluster.close()


def compute_scheduler(text: Optional[str]) -> Any:
    """What ``dask.compute(..., scheduler=)`` takes for a --scheduler string: a local scheduler's name,
    or a Client (kept open for the life of the process, like Dask's own default client)."""
    spec = parse_scheduler(text)
    if not spec.distributed:
        return spec.kind
    return open_client(spec)[0]


def workers_per_host(client: Any) -> dict[str, int]:
    """How many workers each host of the cluster runs (their share of a host's cores)."""
    hosts = Counter(host_of(addr) for addr in client.scheduler_info()["workers"])
    return dict(hosts)


def gpu_task(client: Any, device: str) -> dict:
    """``client.submit`` keywords for a task on ``device``: one GPU when the device is 'cuda[:N]' and some worker
    declares GPUs (else none: a cluster without declared resources places tasks anywhere)."""
    if not device.startswith("cuda"):
        return {}
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    return {"resources": {GPU: 1}} if any(GPU in (w.get("resources") or {}) for w in workers) else {}


def host_of(address: str) -> str:
    """'tcp://10.0.0.5:40123' → '10.0.0.5'."""
    rest = address.split("://", 1)[-1]
    return rest.rsplit(":", 1)[0]
