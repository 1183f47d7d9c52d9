"""Rewriting a sweep's report (``grrr-stream report``): the tables, figures and page of WORKDIR/report from the
units that are done, running nothing."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from ..config import TrackingConfig, format_validation_error
from ..errors import ConfigError, GrrrError
from ..report import CONFIG_FILE
from .config import SweepConfig, load_sweep_config
from .plan import plan_sweep
from .records import Records
from .run import SweepResult, write_pages
from .status import sweep_status
from .tables import write_report
from .workdir import Workdir


@dataclass
class RewrittenReport:
    config: SweepConfig
    states: dict[str, str]  # unit id → done | failed | blocked | pending
    page: Path  # WORKDIR/report/index.html


def saved_sweep_config(workdir: Path) -> SweepConfig:
    """The sweep config a run saved in ``workdir`` (its report/config.json), with that workdir."""
    import json

    from pydantic import ValidationError

    workdir = Path(workdir)
    saved = Workdir(workdir).report / CONFIG_FILE
    if not saved.is_file():
        raise ConfigError(
            f"{workdir} holds no {saved.relative_to(workdir)}: not the workdir of a sweep run "
            "by this version; give the sweep's config YAML instead"
        )
    try:
        data = json.loads(saved.read_text())
        if not isinstance(data, dict):
            raise ValueError(f"holds a JSON {type(data).__name__}, not the sweep's config (an object)")
        return SweepConfig.model_validate({**data, "workdir": str(workdir)})
    except (ValueError, ValidationError) as e:
        msg = format_validation_error(e, str(saved)) if isinstance(e, ValidationError) else str(e)
        raise ConfigError(f"{saved}: {msg}") from None


def rewrite_report(
    config: Union[SweepConfig, Path, str], *, tracking: Union[TrackingConfig, dict, None] = None
) -> RewrittenReport:
    """Rewrite the report of ``config``'s workdir from the units that are done (``config``: a SweepConfig, a
    sweep workdir, whose saved config is read, or a config YAML). ``tracking``: a TrackingConfig, or settings
    applied over the config's own; the page links the sweep's MLflow runs only when a tracking URI is given
    somewhere (none is created for asking)."""
    if not isinstance(config, SweepConfig):
        config = saved_sweep_config(Path(config)) if Path(config).is_dir() else load_sweep_config(Path(config))
    if not isinstance(tracking, TrackingConfig):
        tracking = config.tracking.model_copy(update=tracking or {})
    plan = plan_sweep(config)
    damaged = [why for u in plan.units if (why := Records(plan.workdir).damaged(u))]
    if damaged:
        raise GrrrError(
            f"the report is left as it is: {damaged[0]}"
            + (f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else "")
            + "; rerun the sweep to redo that unit, which rewrites its record"
        )
    states = {r["unit"]: r["state"] for r in sweep_status(plan)}
    _refuse_vanished_sources(plan, states)
    records = {u.id: Records(plan.workdir).read(u) for u in plan.units}
    known = bool(tracking.uri or os.environ.get("MLFLOW_TRACKING_URI"))
    tracking = tracking.model_copy(
        update={"enabled": tracking.enabled and known, "sweep": tracking.sweep or config.name}
    )
    res = SweepResult(plan, states, records, [], write_report(plan, states, records))
    return RewrittenReport(config, states, write_pages(res, tracking))


def _refuse_vanished_sources(plan, states: dict[str, str]) -> None:
    """A unit done under its recorded key reads as pending once a checkpoint its key rests on cannot be read (the key
    holds the checkpoint's fingerprint): the page would call finished work pending. Refused, naming the checkpoints,
    and the report left as it is."""
    if not plan.source_problems:
        return
    records = Records(plan.workdir)
    hidden = [
        uid for uid, state in states.items() if state == "pending" and any(records.done_under_any_key(plan.unit(uid)))
    ]
    if hidden:
        said = "; ".join(f"{m}: {p}" for m, p in sorted(plan.source_problems.items()))[:1500]
        raise GrrrError(
            f"the report is left as it is: {len(hidden)} unit(s) done before (e.g. {hidden[0]}) rest on checkpoints "
            f"that cannot be read now ({said}); restore them, then rerun `grrr-stream report`"
        )
