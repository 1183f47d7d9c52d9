"""The commands over a whole sweep: run it (or print its plan), and print what it has done."""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from ..runtime.cluster import check_reachable, parse_scheduler
from ..tracking.mlflow_client import limits, prepare, resolve_uri
from ..tracking.mlflow_view import runs_page, shares_page, ui_of
from ..tracking.run_log import find_pending, flush, pending_files
from .options import tracking_flags, tracking_from_args
from .parsers import DEMO_CONFIG
from .printing import print_dry_run, print_sweep_summary, print_units, totals


def load_sweep(args: argparse.Namespace):
    from ..sweep.config import load_sweep_config
    from ..sweep.math_subset import with_math_subset

    if args.config == DEMO_CONFIG and not DEMO_CONFIG.is_file():
        raise ConfigError(
            f"the demo config {DEMO_CONFIG} is not there (an install without the repository?); "
            "run `grrr-stream sweep PATH/TO/configs/demo.yaml` from a checkout"
        )
    cfg = load_sweep_config(args.config, workdir=args.workdir)
    if getattr(args, "math_subset", None) is not None:
        cfg = with_math_subset(cfg, args.math_subset, str(args.bench_dir))
    return cfg


def cmd_sweep(args: argparse.Namespace) -> int:
    from ..sweep import plan_sweep, run_sweep
    from ..sweep.dry_run import dry_run_sweep, forecast_device

    cfg = load_sweep(args)
    scheduler = args.scheduler or cfg.scheduler
    parse_scheduler(scheduler)  # a malformed --scheduler is refused by a dry run too
    target = forecast_device(getattr(args, "forecast_for", None))
    if args.dry_run:
        print_dry_run(dry_run_sweep(cfg, forecast_for=target))
        return 0
    check_reachable(scheduler)
    plan = plan_sweep(cfg)
    tracking = tracking_from_args(args, cfg.tracking)
    res = run_sweep(
        plan,
        scheduler=scheduler,
        tracking=tracking,
        progress=cfg.progress and not args.no_progress,
        device=args.device,
        verbose=getattr(args, "verbose", False),
        forecast_for=target,
    )
    print_sweep_summary(res)
    if res.tracking_missed:
        print(
            f"\ntracking: {len(res.tracking_missed)} run(s) not logged to MLflow (units, and 'sweep' for its own; "
            f"recorded in "
            f"{plan.layout.tracking}); rerun the sweep or `grrr-stream track {plan.workdir}`"
            + "".join(f"\n  why: {why}" for why in res.tracking_why)
        )
    if tracking.enabled and not res.tracking_missed:
        uri = resolve_uri(tracking.uri)
        experiment = tracking.experiment
        with limits(tracking.timeout_s, 0):
            exp_id = prepare(uri, experiment)
        ui, served = ui_of(uri)
        where = (
            f"\nLogged to MLflow at {uri} (experiment {experiment})."
            if served
            else f"\nLogged to MLflow ({uri}, experiment {experiment}). Open the UI with:\n"
            f"  mlflow ui --backend-store-uri {uri}"
        )
        print(f"{where}\nIts runs: {runs_page(ui, exp_id)}\nThe transitions' energy shares: {shares_page(ui, exp_id)}")
    print(f"\nreport: {res.html} (one self-contained page: open it in a browser)")
    return 1 if not res.ok else (3 if res.tracking_missed else 0)


def cmd_track(args: argparse.Namespace) -> int:
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

    pending = pending_files(plan.layout.tracking)
    if pending:
        print(
            f"\ntracking: {len(pending)} recorded MLflow logging(s) not yet logged; rerun the sweep or "
            f"`grrr-stream track {plan.workdir}`"
        )
    return 1 if failed else 0


def cmd_report(args: argparse.Namespace) -> int:
    """Rewrite WORKDIR/report (tables, figures, index.html) from the units that are done; run nothing."""
    from ..sweep.rewrite import rewrite_report

    # a workdir is read by its saved config; a config YAML as `sweep` reads it (--workdir, --math-subset)
    target = (
        args.target if args.target.is_dir() else load_sweep(argparse.Namespace(**{**vars(args), "config": args.target}))
    )
    res = rewrite_report(target, tracking=tracking_flags(args))
    print(f"sweep {res.config.name}: {totals([{'state': s} for s in res.states.values()])}; report: {res.page}")
    return 0
