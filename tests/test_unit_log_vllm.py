"""A real sweep evaluation unit with vLLM on CPU: the terminal shows the sweep's own lines and the generation
progress, and none of vLLM's / transformers' output (FutureWarning, NUMA, checkpoint-loading bars), which is in
the unit's log; a unit that fails names its log."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="needs vLLM (install with tools/install.sh)")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]

from grrr_stream.evaluation.settings import EngineSettings  # noqa: E402
from grrr_stream.sweep import plan_sweep, run_sweep  # noqa: E402
from grrr_stream.sweep.config import SweepConfig  # noqa: E402
from grrr_stream.sweep.workdir import Workdir  # noqa: E402

SETTINGS = EngineSettings(max_new_tokens=64, enforce_eager=True, max_model_len=512, cpu_kv_cache_gib=0.5)
# vLLM's log lines carry "(MainProcess pid=…) LEVEL date [file.py:line]"; the rest as printed by torch / vLLM
NOISE = ("FutureWarning", "NUMA", "Loading safetensors", "pid=", "Triton", "[arg_utils.py")


def _config(models, workdir, bench_dir) -> SweepConfig:
    return SweepConfig.model_validate(
        {
            "name": "eval-quiet",
            "workdir": str(workdir),
            "chains": [
                {
                    "name": "tiny",
                    "base": {"id": "base", "source": str(models["base"])},
                    "models": [{"id": "sft", "source": str(models["sft"]), "method": "SFT"}],
                }
            ],
            "decomposition": {"device": "cpu"},
            "statistics": {"enabled": False},
            "variants": {"enabled": False},
            "evaluation": {
                "variants": ["base", "full"],
                "benchmarks": ["arith"],
                "bench_dir": str(bench_dir),
                "limit": 8,
                "engine": SETTINGS.model_dump(),
            },
            "tracking": {"enabled": False},
        }
    )


def test_evaluation_unit_output_goes_to_its_log(tiny_chain, tmp_path, capfd):
    _, models = tiny_chain
    capfd.readouterr()
    res = run_sweep(plan_sweep(_config(models, tmp_path / "w", models["benchmark"])), progress=True)
    out, err = capfd.readouterr()
    assert res.ok, {u: (res.records.get(u) or {}).get("error") for u in res.failed}
    for said in NOISE:
        assert said not in out + err, (said, out + err)
    # the sweep's own lines (the generation's prompts-done line appears off a terminal only for a step
    # longer than 10 s, which a quick machine does not reach: tests/test_progress.py covers it by clock)
    assert "done evaluate/base-to-sft" in err
    log = Workdir(tmp_path / "w").log("evaluate/base-to-sft").read_text()
    assert "pid=" in log  # vLLM's own output is kept, in the log

    # a benchmark folder that is not there: the unit fails, and its error names the log
    res = run_sweep(plan_sweep(_config(models, tmp_path / "w2", tmp_path / "nowhere")), progress=True)
    out, err = capfd.readouterr()
    failed = Workdir(tmp_path / "w2").log("evaluate/base-to-sft")
    assert res.failed == ["evaluate/base-to-sft"] and "FAILED evaluate/base-to-sft" in err and str(failed) in err
