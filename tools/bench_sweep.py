#!/usr/bin/env python3
"""Benchmark of sweeps (issue: resumable sweeps, demo, Dask-cluster execution).

1. ``demo``: wall time of `grrr-stream sweep configs/demo.yaml` from scratch in a fresh
   workdir (tiny chain training included; target under 10 min on 2 cores), then the
   time of a no-op rerun of the finished sweep (resume overhead; target under 5 %).
2. ``cluster``: the decomposition units of a synthetic chain (base → sft → rl plus a
   sibling: 4 transitions, frames shared) run in one process and on a 2-worker
   LocalCluster (each worker's torch gets half the cores); prints both and the ratio.

    python tools/bench_sweep.py [demo] [cluster] [--out bench_out/sweep]

Figures are printed as JSON; speed only as ratios within one run (shared machines).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bench_demo(out: Path) -> dict:
    work = out / "demo"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cmd = [
        sys.executable,
        "-m",
        "grrr_stream.cli",
        "sweep",
        str(ROOT / "configs" / "demo.yaml"),
        "--workdir",
        str(work / "grrr_demo"),
        "--tracking-uri",
        f"sqlite:///{work / 'mlflow.db'}",
    ]
    t = time.perf_counter()
    subprocess.run(cmd, cwd=work, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = time.perf_counter() - t
    t = time.perf_counter()
    subprocess.run(cmd, cwd=work, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    noop = time.perf_counter() - t
    units = json.loads((work / "grrr_demo" / "tinychain" / "seed0" / "chain.json").read_text())
    return {
        "demo_wall_s": round(first, 1),
        "noop_rerun_s": round(noop, 2),
        "resume_overhead_pct": round(100 * noop / first, 2),
        "tiny_chain_training_s": units["seconds"]["total"],
    }


def bench_cluster(out: Path) -> dict:
    import yaml

    from grrr_stream.fixtures.synthetic import ModelShape, Update, write_model
    from grrr_stream.sweep import plan_sweep, run_sweep
    from grrr_stream.sweep.config import SweepConfig

    shape = ModelShape(hidden=768, intermediate=2048, layers=4, heads=12, kv_heads=4)
    models = out / "cluster_models"
    sft = Update(r_delta=2e-2)
    rl = Update(r_delta=5e-3, seed=1)
    for name, ups in {"base": (), "sft": (sft,), "rl": (sft, rl), "sibling": (Update(r_delta=2e-2, seed=2),)}.items():
        if not (models / name / "config.json").is_file():
            write_model(models / name, shape, family="qwen2", dtype="bfloat16", seed=0, updates=ups, overwrite=True)

    def cfg(workdir: Path) -> SweepConfig:
        return SweepConfig.model_validate(
            yaml.safe_load(
                yaml.safe_dump(
                    {
                        "name": "bench",
                        "workdir": str(workdir),
                        "chains": [
                            {
                                "name": "c",
                                "base": {"id": "base", "source": str(models / "base")},
                                "models": [
                                    {"id": "sft", "source": str(models / "sft")},
                                    {"id": "rl", "source": str(models / "rl"), "parent": "sft"},
                                    {"id": "sibling", "source": str(models / "sibling")},
                                ],
                            }
                        ],
                        "decomposition": {"device": "cpu"},
                        "statistics": {"enabled": False},
                        "variants": {"enabled": False},
                        "evaluation": {"enabled": False},
                        "progress": False,
                    }
                )
            )
        )

    times = {}
    for label, scheduler in (("one_process", None), ("local_cluster_2", "local:2")):
        work = out / f"cluster_{label}"
        shutil.rmtree(work, ignore_errors=True)
        t = time.perf_counter()
        res = run_sweep(plan_sweep(cfg(work)), scheduler=scheduler, progress=False)
        times[label] = time.perf_counter() - t
        assert res.ok, res.failed
    return {
        "decompose_units": 4,
        "shape": f"hidden {shape.hidden}, inter {shape.intermediate}, {shape.layers} layers",
        "one_process_s": round(times["one_process"], 1),
        "local_cluster_2_s": round(times["local_cluster_2"], 1),
        "cluster_over_one_process": round(times["local_cluster_2"] / times["one_process"], 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="*", default=["demo", "cluster"], choices=["demo", "cluster"])
    ap.add_argument("--out", type=Path, default=ROOT / "bench_out" / "sweep")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    figures = {}
    if "cluster" in args.what:
        figures["cluster"] = bench_cluster(args.out)
        print(json.dumps(figures["cluster"]), flush=True)
    if "demo" in args.what:
        figures["demo"] = bench_demo(args.out)
        print(json.dumps(figures["demo"]), flush=True)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
