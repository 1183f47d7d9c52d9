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
    if ":" in t and not any(c.isspace() for c in t):  # tcp://host:port, tls://..., host:port
        return Scheduler("address", address=t)
    raise ConfigError(f"scheduler {t!r} is not understood: {HINT}")


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
    try:
        return Client(spec.address, timeout="10s"), None
    except (OSError, TimeoutError) as e:
        raise ConfigError(f"cannot reach the Dask scheduler at {spec.address}: {e}") from None


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
