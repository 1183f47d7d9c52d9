"""Running one unit, here or on a Dask worker: its kind's ``run`` (:data:`~.kinds.KINDS`), its log and its record.

A kind's ``run`` reads its unit's typed parameters and the :class:`~.context.RunContext` (the settings that do
not change results) and returns a small JSON-able summary for the unit's record.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from pathlib import Path

from ..columns import HEADLINE
from ..errors import GrrrError
from ..store.transition_store import TransitionStore
from ..tracking.run_log import missed
from ..tracking.runs import finite_metrics, log_transition_metrics
from ..unit_log import unit_log
from .context import RunContext
from .kinds import KINDS
from .records import Records
from .units import Unit
from .workdir import Workdir

__all__ = ["RunContext", "run_unit"]


def run_unit(u: Unit, ctx: RunContext) -> dict:
    """Execute one unit and record the outcome; never raises for a failure of the unit itself."""
    records = Records(Path(ctx.workdir))
    started = time.time()
    where = {"host": socket.gethostname(), "pid": os.getpid()}
    records.write(u, {"id": u.id, "key": u.key, "status": "running", "started": started, **where})
    if ctx.threads:
        import torch

        torch.set_num_threads(int(ctx.threads))

    missed_before = len(missed())
    log = Workdir(ctx.workdir).log(u.id)
    try:
        # vLLM's, transformers' and MLflow's own output (logging, warnings, progress bars, C++ prints)
        # goes to the unit's log; this package's progress lines stay on the terminal (unit_log.console)
        with unit_log(log, verbose=ctx.verbose):
            try:
                result = KINDS[u.kind].run(u, ctx)
            except KeyboardInterrupt:
                raise
            except BaseException:
                traceback.print_exc()  # into the log, after what the libraries said before the failure
                raise
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - recorded, reported, and the sweep goes on
        expected = isinstance(e, GrrrError)
        rec = {
            "id": u.id,
            "key": u.key,
            "status": "failed",
            "started": started,
            "seconds": time.time() - started,
            "error": f"{type(e).__name__}: {e} (its output: {log})",
            "expected": expected,
            "traceback": traceback.format_exc()[-6000:],
            "log": str(log),
            **where,
        }
        records.write(u, rec)
        return rec
    _log_headline(u, result or {}, ctx)
    rec = {
        "id": u.id,
        "key": u.key,
        "status": "done",
        "started": started,
        "seconds": time.time() - started,
        "result": result or {},
        "log": str(log),
        **where,
    }
    tracking_missed = missed()[missed_before:]  # done all the same: recorded in the sweep's pending folder
    if tracking_missed:
        rec["tracking"] = "not logged: " + "; ".join(tracking_missed)
    records.write(u, rec)
    return rec


def _log_headline(u: Unit, result: dict, ctx: RunContext) -> None:
    """A kind's headline columns of a transition (its ``columns``), from the unit's result, as metrics of the
    transition's MLflow run: the run of the store among the units it needs."""
    cols = [c for c in KINDS[u.kind].columns if c.shown_in(HEADLINE)]
    if not cols or not ctx.tracking.enabled:
        return
    manifests = [TransitionStore.read_manifest(Path(ctx.outs[d])) for d in u.deps if d in ctx.outs]
    manifest = next((m for m in manifests if m and m.get("identity")), None)
    if manifest is not None:
        log_transition_metrics(
            manifest, finite_metrics((c.name, result.get(c.name)) for c in cols), ctx.tracking, Path(u.out)
        )
