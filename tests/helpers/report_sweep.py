"""A small finished sweep for the HTML report's tests: synthetic base → sft → rl (SFT, then GRPO), both
transitions from the base and the incremental one, their stepwise comparison, variants of base → rl and
base → sft, and their evaluation with tests/evaluation/test_evaluate.py's stand-in engine (no vLLM) on 'a+b'
problems with four sampled answers each (so pass@k, maj@k and avg@4 exist)."""

from __future__ import annotations

import json
from pathlib import Path

from grrr_stream.config import TrackingConfig
from grrr_stream.fixtures.synthetic import TINY, Update, write_model

SFT = Update(r_delta=2e-2, plant=(0.25, 0.45, 0.30))
RL = Update(r_delta=5e-3, plant=(0.10, 0.70, 0.20), seed=1)
EXPERIMENT = "report_test"


def sweep_config(root: Path) -> dict:
    models = root / "models"
    for name, updates in {"base": (), "sft": (SFT,), "rl": (SFT, RL)}.items():
        if not (models / name / "config.json").is_file():
            write_model(models / name, TINY, family="qwen2", dtype="float32", seed=0, updates=updates, overwrite=True)
    bench = root / "bench" / "sums" / "test.jsonl"
    bench.parent.mkdir(parents=True, exist_ok=True)
    bench.write_text(
        "".join(json.dumps({"problem": f"{a}+{b}", "answer": str(a + b)}) + "\n" for a in range(6) for b in range(5))
    )
    return {
        "name": "report-test",
        "workdir": str(root / "sweep"),
        "chains": [
            {
                "name": "syn",
                "base": {"id": "base", "source": str(models / "base")},
                "models": [
                    {"id": "sft", "source": str(models / "sft"), "method": "SFT"},
                    {"id": "rl", "source": str(models / "rl"), "parent": "sft", "method": "GRPO"},
                ],
            }
        ],
        "decomposition": {"device": "cpu"},
        "statistics": {"resamples": 200, "null_draws": 200, "independent": False},
        "variants": {
            "names": ["base", "full", "proj", "diag", "offnull", "randrm-0"],
            "transitions": "cumulative",
            "write_folders": False,
        },
        "evaluation": {
            "benchmarks": ["sums"],
            "bench_dir": str(root / "bench"),
            "transitions": "cumulative",
            "engine": {"max_new_tokens": 32},
            "sampling": {"n": 4, "temperature": 0.7, "pass_k": [2], "maj_k": [4]},
        },
        "claims": {"resamples": 200},
        "tracking": {"experiment": EXPERIMENT},
        "progress": False,
    }


def run_small_sweep(root: Path, tracking_uri: str | None = None):
    """Run it in this process with the stand-in engine; returns the SweepResult."""
    import pytest

    from grrr_stream.evaluation import engine as ev
    from grrr_stream.evaluation import pipeline
    from grrr_stream.sweep import plan_sweep, run_sweep
    from grrr_stream.sweep.config import SweepConfig
    from helpers.stand_in import StandInEngine

    cfg = SweepConfig.model_validate(sweep_config(Path(root)))
    tracking = (
        TrackingConfig(uri=tracking_uri, experiment=EXPERIMENT) if tracking_uri else TrackingConfig(enabled=False)
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline, "Engine", StandInEngine)
        mp.setattr(ev, "engine_versions", lambda: {"engine": "stand-in"})
        return run_sweep(plan_sweep(cfg), tracking=tracking, progress=False)
