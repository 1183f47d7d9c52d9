"""The commands over a whole sweep: run it (or print its plan), and print what it has done."""

from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError
from .options import tracking_from_args
from .parsers import DEMO_CONFIG
from .printing import print_plan, print_sweep_summary, print_units, totals


def load_sweep(args: argparse.Namespace):
    from ..evaluation.benchmarks import FIVE
    from ..sweep.config import SweepEvaluation, load_sweep_config

    if args.config == DEMO_CONFIG and not DEMO_CONFIG.is_file():
        raise ConfigError(f"the demo config {DEMO_CONFIG} is not there (an install without the repository?); "
                          "run `grrr-stream sweep PATH/TO/configs/demo.yaml` from a checkout")
    cfg = load_sweep_config(args.config, workdir=args.workdir)
    if getattr(args, "math_subset", None) is not None:
        if args.math_subset < 1:
            raise ConfigError("--math-subset must be at least 1")
        bench_dir = str(args.bench_dir)
        extra = SweepEvaluation.model_validate({
            **cfg.evaluation.model_dump(), "suite": "math", "benchmarks": list(FIVE), "bench_dir": bench_dir,
            "limit": args.math_subset})
        cfg = cfg.model_copy(update={"extra_evaluations": [*cfg.extra_evaluations, extra]})
    return cfg


def cmd_sweep(args: argparse.Namespace) -> int:
    from ..diskplan import check_space
    from ..sweep import plan_sweep, run_sweep, sweep_status, unit_disk_needs
    from ..tracking import resolve_uri

    cfg = load_sweep(args)
    plan = plan_sweep(cfg)
    rows = {r["unit"]: r for r in sweep_status(plan)}
    to_run = [u for u in plan.units if rows[u.id]["state"] != "done"]
    disk = unit_disk_needs(plan)
    needs = [n for u in to_run for n in (disk.get(u.id) or [])]
    from ..sweep.forecast import forecast_plan, print_forecast

    if args.dry_run:
        print_plan(plan, rows, disk, to_run, needs)
        print_forecast(forecast_plan(plan), {u.id for u in to_run})
        return 0
    check_space(needs, f"the {len(to_run)} sweep unit(s) still to run",
                "Free space, point workdir at another disk, or run fewer transitions; finished units are kept.")
    tracking = tracking_from_args(args, cfg.tracking)
    try:  # units.csv puts each unit's estimate next to its measured time; a forecast never stops a sweep
        fc = forecast_plan(plan)
        fc.write_json(plan.workdir / ".sweep" / "forecast.json")
        print(f"[sweep] forecast: {fc.headline({u.id for u in to_run})} (per unit: --dry-run)", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - reported, and the sweep runs
        print(f"[sweep] no forecast ({type(e).__name__}: {e})", file=sys.stderr)
    res = run_sweep(plan, scheduler=args.scheduler or cfg.scheduler, tracking=tracking,
                    progress=cfg.progress and not args.no_progress, device=args.device,
                    verbose=getattr(args, "verbose", False))
    print_sweep_summary(res)
    if tracking.enabled:
        from ..tracking import prepare, runs_page

        uri = resolve_uri(tracking.uri)
        experiment = tracking.experiment
        exp_id = prepare(uri, experiment)
        print(f"\nLogged to MLflow ({uri}, experiment {experiment}). Open the UI with:\n"
              f"  mlflow ui --backend-store-uri {uri}\nand its runs at {runs_page('http://127.0.0.1:5000', exp_id)}"
              if not uri.startswith("http") else
              f"\nLogged to MLflow at {uri} (experiment {experiment}); its runs: {runs_page(uri, exp_id)}")
    return 0 if res.ok else 1


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
    return 1 if failed else 0
