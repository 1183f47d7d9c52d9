"""The commands over a whole sweep: run it (or print its plan), and print what it has done."""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from .options import tracking_from_args
from .parsers import DEMO_CONFIG
from .printing import print_plan, print_sweep_summary, print_units, totals


def load_sweep(args: argparse.Namespace):
    from ..evaluation.benchmarks import FIVE
    from ..sweep.config import SweepEvaluation, load_sweep_config

    if args.config == DEMO_CONFIG and not DEMO_CONFIG.is_file():
        raise ConfigError(
            f"the demo config {DEMO_CONFIG} is not there (an install without the repository?); "
            "run `grrr-stream sweep PATH/TO/configs/demo.yaml` from a checkout"
        )
    cfg = load_sweep_config(args.config, workdir=args.workdir)
    if getattr(args, "math_subset", None) is not None:
        if args.math_subset < 1:
            raise ConfigError("--math-subset must be at least 1")
        bench_dir = str(args.bench_dir)
        extra = SweepEvaluation.model_validate(
            {
                **cfg.evaluation.model_dump(),
                "suite": "math",
                "benchmarks": list(FIVE),
                "bench_dir": bench_dir,
                "limit": args.math_subset,
            }
        )
        cfg = cfg.model_copy(update={"extra_evaluations": [*cfg.extra_evaluations, extra]})
    return cfg


def cmd_sweep(args: argparse.Namespace) -> int:
    from ..sweep import plan_sweep, run_sweep, sweep_status, unit_disk_needs
    from ..tracking.mlflow_client import resolve_uri

    cfg = load_sweep(args)
    plan = plan_sweep(cfg)
    target = _forecast_device(args)
    if args.dry_run:
        from ..sweep.forecast import forecast_plan, print_forecast

        rows = {r["unit"]: r for r in sweep_status(plan)}
        to_run = [u for u in plan.units if rows[u.id]["state"] != "done"]
        disk = unit_disk_needs(plan)
        needs = [n for u in to_run for n in (disk.get(u.id) or [])]
        print_plan(plan, rows, disk, to_run, needs)
        print_forecast(forecast_plan(plan, disk=disk, target=target), {u.id for u in to_run})
        if target is not None and target.strip().lower() != "cpu":  # the other GPUs of the table
            from ..sweep.forecast import print_other_devices

            print_other_devices(plan, {u.id for u in to_run}, target.strip().lower())
        return 0
    tracking = tracking_from_args(args, cfg.tracking)
    res = run_sweep(
        plan,
        scheduler=args.scheduler or cfg.scheduler,
        tracking=tracking,
        progress=cfg.progress and not args.no_progress,
        device=args.device,
        verbose=getattr(args, "verbose", False),
        forecast_for=target,
    )
    print_sweep_summary(res)
    if res.tracking_missed:
        print(
            f"\ntracking: {len(res.tracking_missed)} run(s) not logged to MLflow (units, and 'sweep' for its own; recorded in "
            f"{plan.layout.tracking}); rerun the sweep or `grrr-stream track {plan.workdir}`"
        )
    if tracking.enabled and not res.tracking_missed:
        from ..tracking.mlflow_client import limits, prepare, runs_page

        uri = resolve_uri(tracking.uri)
        experiment = tracking.experiment
        with limits(tracking.timeout_s, 0):
            exp_id = prepare(uri, experiment)
        print(
            f"\nLogged to MLflow ({uri}, experiment {experiment}). Open the UI with:\n"
            f"  mlflow ui --backend-store-uri {uri}\nand its runs at {runs_page('http://127.0.0.1:5000', exp_id)}"
            if not uri.startswith("http")
            else f"\nLogged to MLflow at {uri} (experiment {experiment}); its runs: {runs_page(uri, exp_id)}"
        )
    print(f"\nreport: {res.html} (one self-contained page: open it in a browser)")
    return 1 if not res.ok else (3 if res.tracking_missed else 0)


def _forecast_device(args: argparse.Namespace):
    """--forecast-for, checked before anything runs (grrr_stream/forecast/devices.py)."""
    name = getattr(args, "forecast_for", None)
    if name is None:
        return None
    from ..forecast.devices import names

    if name.strip().lower() not in names():
        raise ConfigError(
            f"--forecast-for {name}: not a device of the forecast's table; choose one of "
            f"{', '.join(names())} (cpu: this machine, measured)"
        )
    return name


def cmd_track(args: argparse.Namespace) -> int:
    from ..tracking.mlflow_client import limits
    from ..tracking.run_log import find_pending, flush, pending_files

    for p in args.paths:
        if not p.is_dir():
            raise ConfigError(f"{p} is not a folder (give a sweep workdir, a store or an output folder)")
    from ..sweep.workdir import Workdir

    # a sweep's workdir keeps its pending logging in a folder of its layout: the tracking layer is handed that path
    sweeps = [Workdir(p).tracking for p in args.paths if Workdir(p).is_sweep()]
    sweeps += [p for p in args.paths if p == Workdir(p.parent.parent).tracking]  # given directly
    folders = find_pending([p for p in args.paths if p not in sweeps], sweeps)
    logged = left = 0
    with limits(max(1, args.timeout), 1):
        for folder in folders:
            res = flush(folder, uri=args.tracking_uri)
            logged, left = logged + res.logged, left + res.left
            if res.error:
                print(f"{folder}: {res.left} not logged ({res.error})")
    if not folders or not (logged or left):
        print("nothing recorded to log in " + ", ".join(map(str, args.paths)))
        return 0
    print(f"logged {logged} recorded logging(s) to MLflow" + (f"; {left} still pending" if left else ""))
    return 3 if left or any(pending_files(f) for f in folders) else 0


def cmd_status(args: argparse.Namespace) -> int:
    from ..sweep import Records, plan_sweep, sweep_status

    plan = plan_sweep(load_sweep(args))
    rows = sweep_status(plan)
    print(f"sweep {plan.config.name} in {plan.workdir}: {len(rows)} units ({totals(rows)})")
    print_units(rows, args.all)
    failed = [r for r in rows if r["state"] == "failed"]
    for r in failed:
        rec = Records(plan.workdir).read(plan.unit(r["unit"])) or {}
        print(f"\n{r['unit']} failed on {rec.get('host')} (pid {rec.get('pid')}):\n  {rec.get('error')}")
        print(f"  full traceback in {Records(plan.workdir).path(plan.unit(r['unit']))}")
    from ..tracking.run_log import pending_files

    pending = pending_files(plan.layout.tracking)
    if pending:
        print(
            f"\ntracking: {len(pending)} recorded MLflow logging(s) not yet logged; rerun the sweep or "
            f"`grrr-stream track {plan.workdir}`"
        )
    return 1 if failed else 0


def cmd_report(args: argparse.Namespace) -> int:
    """Rewrite WORKDIR/report (tables, figures, index.html) from the units that are done; run nothing."""
    import os

    from ..sweep import Records, plan_sweep, sweep_status, write_report
    from ..sweep.run import SweepResult, write_pages

    cfg = _report_config(args)
    plan = plan_sweep(cfg)
    states = {r["unit"]: r["state"] for r in sweep_status(plan)}
    records = {u.id: Records(plan.workdir).read(u) for u in plan.units}
    tracking = tracking_from_args(args, cfg.tracking)
    # without a tracking URI given anywhere there is no store to ask (and none is created for asking)
    known = bool(tracking.uri or os.environ.get("MLFLOW_TRACKING_URI"))
    tracking = tracking.model_copy(update={"enabled": tracking.enabled and known, "sweep": tracking.sweep or cfg.name})
    res = SweepResult(plan, states, records, [], write_report(plan, states, records))
    page = write_pages(res, tracking)
    print(f"sweep {cfg.name}: {totals([{'state': s} for s in states.values()])}; report: {page}")
    return 0


def _report_config(args: argparse.Namespace):
    """The sweep config of ``report TARGET``: a WORKDIR's report/config.json (with that workdir) or a YAML."""
    import json

    from pydantic import ValidationError

    from ..config import format_validation_error
    from ..report import CONFIG_FILE
    from ..sweep.config import SweepConfig

    if not args.target.is_dir():
        return load_sweep(argparse.Namespace(**{**vars(args), "config": args.target}))
    from ..sweep.workdir import Workdir

    saved = Workdir(args.target).report / CONFIG_FILE
    if not saved.is_file():
        raise ConfigError(
            f"{args.target} holds no {saved.relative_to(args.target)}: not the workdir of a sweep run "
            "by this version; give the sweep's config YAML instead"
        )
    try:
        return SweepConfig.model_validate({**json.loads(saved.read_text()), "workdir": str(args.target)})
    except (ValueError, ValidationError) as e:
        msg = format_validation_error(e, str(saved)) if isinstance(e, ValidationError) else str(e)
        raise ConfigError(f"{saved}: {msg}") from None
