"""Executing a plan: the units still to run, in dependency order, in this process or on Dask workers.

:class:`Frontier` owns the order: ``graphlib.TopologicalSorter`` releases a unit once its
dependencies and the units it must start after have ended, and among the units that can go,
the one earliest in the plan goes first (so one process runs the plan in its printed order).
A unit whose dependency failed is blocked at once, when the failure is known, not when its
last dependency ends. The executors only say where a unit runs: :class:`LocalExecutor`
here, one at a time; :class:`DaskExecutor` the heavy kinds on the cluster's workers.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import replace
from graphlib import TopologicalSorter
from typing import Any, Optional

from ..runtime.cluster import open_client, parse_scheduler, require, threads_per_local_worker
from .context import RunContext
from .display import Display
from .kinds import KINDS
from .records import BLOCKING, Records, blockers
from .resources import Needs, Offer, submit_options
from .runners import run_unit
from .units import Unit


class Frontier:
    """The units still to run, handed out in plan order as what they wait for ends.

    The sorter's graph has two nodes per unit: its start, and its end. A start waits for the ends
    of the unit's dependencies and of the units it starts after; an end waits for nothing, and is
    marked done when the unit ends: finished, failed, or blocked, which can be known before the
    unit's own dependencies have ended (one of them failed while another still runs)."""

    def __init__(self, todo: list[Unit]):
        ids = {u.id for u in todo}
        self._position = {u.id: i for i, u in enumerate(todo)}
        self._dependents: dict[str, list[str]] = {}
        for u in todo:
            for d in u.deps:
                self._dependents.setdefault(d, []).append(u.id)
        graph = {("start", u.id): [("end", d) for d in (*u.deps, *u.after) if d in ids] for u in todo}
        self._sorter = TopologicalSorter({**graph, **{("end", uid): [] for uid in ids}})
        self._sorter.prepare()
        self._candidates: list[tuple[int, str]] = []  # a heap by plan position
        self._unended = set(ids)
        self._waiting: dict[str, Unit] = {u.id: u for u in todo}  # neither started nor blocked yet, in plan order
        self._release()

    @property
    def waiting(self) -> list[Unit]:
        """The units neither started nor blocked yet, in plan order."""
        return list(self._waiting.values())

    @property
    def active(self) -> bool:
        return bool(self._unended)

    def _release(self) -> None:
        for step, uid in self._sorter.get_ready():
            if step == "start":  # (an end node is ready from the outset: it is done when its unit ends)
                heapq.heappush(self._candidates, (self._position[uid], uid))

    def next(self) -> Optional[Unit]:
        """The earliest unit in the plan that can start or is blocked; None while all wait on running ones."""
        while self._candidates:
            _, uid = heapq.heappop(self._candidates)
            u = self._waiting.pop(uid, None)  # by id: a list's search would make the whole run quadratic
            if u is not None:  # else: queued twice (blocked, then released), handled already
                return u
        return None

    def ended(self, u: Unit, state: str) -> None:
        self._unended.discard(u.id)
        if state in BLOCKING:  # what needs it can be reported blocked now
            for uid in self._dependents.get(u.id, ()):
                heapq.heappush(self._candidates, (self._position[uid], uid))
        self._sorter.done(("end", u.id))
        self._release()


class LocalExecutor:
    """Every unit in this process, one at a time."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.running: list[Unit] = []  # a unit here has ended when start() returns

    def start(self, u: Unit) -> Optional[dict]:
        return run_unit(u, self.ctx)

    def next_ended(self) -> tuple[Unit, dict]:
        raise RuntimeError("nothing runs in the background of a local sweep")


class DaskExecutor:
    """The heavy kinds on the cluster's workers; statistics and comparisons here, where they hand their
    own Dask graphs to the same cluster. ``needs`` (unit id → :class:`~.resources.Needs`) and ``workers``
    (:func:`~.placement.place`) send each unit to a worker that holds what it needs; without them, anywhere."""

    def __init__(
        self,
        client: Any,
        ctx: RunContext,
        needs: Optional[dict[str, Needs]] = None,
        workers: Optional[list[Offer]] = None,
    ):
        from distributed import as_completed

        self.client, self.ctx = client, ctx
        self.needs, self.workers = needs or {}, workers or []
        self._futures: dict[Any, Unit] = {}
        self._completed = as_completed(loop=client.loop)  # this client's loop, not whichever client is the default

    @property
    def running(self) -> list[Unit]:
        return list(self._futures.values())

    def start(self, u: Unit) -> Optional[dict]:
        """The unit's record if it ran here; None if it was sent to a worker."""
        if not KINDS[u.kind].on_worker:
            return run_unit(u, replace(self.ctx, client=self.client))
        where = submit_options(self.needs[u.id], self.workers) if u.id in self.needs else {}
        fut = self.client.submit(
            run_unit, u, self.ctx.for_worker(), pure=False, key=f"grrr-{u.id}-{time.time_ns()}", **where
        )
        self._futures[fut] = u
        self._completed.add(fut)
        return None

    def next_ended(self) -> tuple[Unit, dict]:
        fut = next(self._completed)
        u = self._futures.pop(fut)
        try:
            return u, fut.result()
        except Exception as e:  # noqa: BLE001 - a worker died or could not run it
            rec = {"id": u.id, "key": u.key, "status": "failed", "error": f"{type(e).__name__}: {e}", "seconds": 0.0}
            Records(self.ctx.workdir).write(u, rec)
            return u, rec


def execute_units(
    todo: list[Unit], states: dict[str, str], executor: LocalExecutor | DaskExecutor, display: Display
) -> list[str]:
    """Run ``todo`` (dependencies first), updating ``states``; the ids of the units that ran, in order."""
    frontier = Frontier(todo)
    ran: list[str] = []

    def finish(u: Unit, rec: dict) -> None:
        states[u.id] = rec["status"]
        ran.append(u.id)
        display.end(u, rec, frontier.waiting + executor.running)
        frontier.ended(u, rec["status"])

    while frontier.active:
        u = frontier.next()
        if u is None:  # everything that can go is running: wait for one to end
            finish(*executor.next_ended())
            continue
        bad = blockers(u, states)
        if bad:
            states[u.id] = "blocked"
            display.say(f"blocked {u.id}: needs {', '.join(bad)}")
            frontier.ended(u, "blocked")
            continue
        display.start(u, running=len(executor.running) + 1)
        rec = executor.start(u)
        if rec is None:
            states[u.id] = "running"
        else:
            finish(u, rec)
    return ran


def make_client(address: Optional[str]):
    """(client or None, cluster to close or None, torch threads per worker or None)."""
    spec = require(parse_scheduler(address), ("threads", "synchronous", "local", "address"), "a sweep")
    if not spec.distributed:
        return None, None, None
    client, cluster = open_client(spec)
    # one unit per worker at a time; torch gets the worker's share of the cores
    return client, cluster, (threads_per_local_worker(spec.workers) if cluster is not None else None)
