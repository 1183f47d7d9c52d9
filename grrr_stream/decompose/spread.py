"""One transition spread over the workers of a Dask cluster.

The driver (``run_transition``) plans the transition, opens the store and holds its lock as
always; the matrices still to do go out in batches (the matrices of one layer, at most
:data:`BATCH` of them), each a Dask task. A worker runs a batch through the same streaming
loop as a one-process run (``decompose.streaming.stream_matrices``: reader and writer threads, the same math),
reading only its batch's tensors from the memory-mapped checkpoints and writing only its
batch's matrix groups, each with its own completion record. So:

- results are bit-identical to a one-process run with the same compute thread count;
- a worker killed mid-batch loses only its unfinished matrices: Dask reruns the batch on
  another worker, which skips the matrices already complete and rewrites a torn one;
- a driver killed mid-run leaves complete matrices behind; the rerun does the rest. Tasks of
  the dead driver may still be running on the workers (a running thread cannot be stopped),
  so each batch takes a lock file of its own (a batch is named from the full plan, not from
  what is pending): a rerun's copy waits for the orphan, then finds its matrices done;
- frames go to the shared frame cache, which is already safe for concurrent writers.

Workers need the checkpoints, the store and the frame cache at the same paths as the driver
(one machine, or a shared filesystem); a worker that does not see them fails with that said.
"""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any, Optional

from ..checkpoints.arch import MatrixName
from ..checkpoints.reader import Checkpoint
from ..config import DecomposeConfig, stable_hash
from ..dtypes import torch_dtype
from ..errors import ConfigError
from ..locks import FileLock
from ..progress import Progress
from ..runtime.cluster import close, gpu_task, host_of, open_client, parse_scheduler, require, workers_per_host
from ..runtime.device import resolve_device
from ..runtime.phases import PhaseTimer
from ..store.frame_cache import FrameCache
from ..store.transition_store import TransitionStore, node_key
from .plan import TransitionPlan
from .stages import Pipeline
from .streaming import compute_layout, stream_matrices, torch_threads

BATCH = 8  # matrices per task: small enough to balance the workers, large enough to keep the pipeline busy
BATCH_LOCKS = ".batches"  # folder in the store

# torch's thread count is per process: tasks that share a worker process take turns
_ONE_AT_A_TIME = threading.Lock()


def batches(matrices: list[MatrixName]) -> list[tuple[str, list[MatrixName]]]:
    """(batch id, matrices) in plan order: consecutive matrices of one layer, at most BATCH each.
    The id depends only on the batch's names, so a rerun names the same batch the same way."""
    out: list[tuple[str, list[MatrixName]]] = []
    current: list[MatrixName] = []
    for m in matrices:
        if current and (m.layer != current[-1].layer or len(current) == BATCH):
            out.append(current)
            current = []
        current.append(m)
    if current:
        out.append(current)
    return [(f"layer{b[0].layer}-{stable_hash([m.name for m in b], 12)}", b) for b in out]


def run_spread(
    cfg: DecomposeConfig,
    plan: Any,
    pending: list[MatrixName],
    progress: Progress,
    base_fingerprint: str,
    folders: tuple[str, str],
    *,
    client: Any = None,
) -> tuple[int, int, list[str], dict[str, int]]:
    """Decompose ``pending`` on the cluster of ``cfg.scheduler`` (or ``client``).

    Returns (computed, frames reused, failures, matrices computed per worker address)."""
    own = None, None
    if client is None:
        spec = require(parse_scheduler(cfg.scheduler), ("local", "address"), "spreading a transition")
        progress.message(f"starting Dask: {spec}" if spec.kind == "local" else f"connecting to {spec}")
        own = open_client(spec)
        client = own[0]
    try:
        return _submit_and_collect(client, cfg, plan, pending, progress, base_fingerprint, folders)
    finally:
        close(*own)


def _submit_and_collect(
    client: Any,
    cfg: DecomposeConfig,
    plan: Any,
    pending: list[MatrixName],
    progress: Progress,
    base_fingerprint: str,
    folders: tuple[str, str],
) -> tuple[int, int, list[str], dict[str, int]]:
    from distributed import as_completed

    per_host = workers_per_host(client)
    if not per_host:
        raise ConfigError(f"the Dask cluster at {client.scheduler.address} has no workers")
    todo = {m.name for m in pending}
    run = uuid.uuid4().hex[:8]  # a rerun's tasks never share a key with a dead driver's still-running ones
    futures = {}
    on_gpu = gpu_task(client, cfg.device)  # a batch on 'cuda' holds a GPU of a worker that declares one
    for batch_id, batch in batches(plan.matrices):
        mine = [m for m in batch if m.name in todo]
        if mine:
            fut = client.submit(
                run_batch,
                cfg,
                folders,
                batch_id,
                mine,
                per_host,
                base_fingerprint,
                key=f"grrr-decompose-{batch_id}-{run}",
                pure=False,
                **on_gpu,
            )
            futures[fut] = mine
    progress.message(
        f"{len(todo)} matrices in {len(futures)} batches over {sum(per_host.values())} Dask "
        f"worker(s) on {len(per_host)} host(s)"
    )
    computed = reused = 0
    failures: list[str] = []
    by_worker: dict[str, int] = {}
    try:
        for fut in as_completed(list(futures)):
            out = fut.result()  # a task's exception (not a worker's death: Dask reruns those) ends the run
            computed += out["computed"]
            reused += out["reused"]
            failures += out["failures"]
            by_worker[out["worker"]] = by_worker.get(out["worker"], 0) + out["computed"]
            for m in futures[fut]:
                progress.advance(m.name)
    finally:
        client.cancel(list(futures))  # no-op for finished ones; stops queued work on Ctrl-C or an error
    return computed, reused, failures, by_worker


def run_batch(
    cfg: DecomposeConfig,
    folders: tuple[str, str],
    batch_id: str,
    matrices: list[MatrixName],
    per_host: dict[str, int],
    base_fingerprint: str,
) -> dict:
    """On a worker: decompose this batch's matrices that are not complete yet into the store."""
    from distributed import get_worker

    address = get_worker().address
    store = TransitionStore.attach(cfg.store)
    with _ONE_AT_A_TIME, FileLock(store.path / BATCH_LOCKS / f"{node_key(batch_id)}.lock", wait=True):
        todo = [m for m in matrices if not store.is_complete(m.name)]
        if not todo:  # an orphan of a killed driver, or a rerun after a worker died, did them
            return {"worker": address, "computed": 0, "reused": 0, "failures": []}
        plan = TransitionPlan(Checkpoint.open(folders[0]), Checkpoint.open(folders[1]), todo)
        device = resolve_device(cfg.device)
        share = max(1, (os.cpu_count() or 1) // max(1, per_host.get(host_of(address), 1)))
        layout = compute_layout(cfg, device, plan, available=share)
        with torch_threads(layout.threads):
            pipeline = Pipeline(
                cfg,
                plan,
                store,
                FrameCache(cfg.frame_cache_path()),
                device,
                torch_dtype(cfg.compute_dtype),
                PhaseTimer(None),
                base_fingerprint,
            )
            computed, reused, failures = stream_matrices(pipeline, todo, Progress(len(todo), enabled=False), layout)
    return {"worker": address, "computed": computed, "reused": reused, "failures": failures}


def in_dask_worker() -> Optional[Any]:
    """The dask.distributed worker running this code, or None."""
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None
