"""What the sweep commands do is public API, and the commands print what it returns: the dry run as one result
(plan, states, disk, forecast), a config with a math subset, and the report rewritten from what is done. Each is
checked against the command's own output on the same config, so the two cannot drift apart."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.common import seeded_sweep_yaml

from grrr_stream import dry_run_sweep, load_sweep_config, plan_sweep, rewrite_report, with_math_subset
from grrr_stream.cli import entry as cli
from grrr_stream.errors import ConfigError
from grrr_stream.fixtures.synthetic import TINY, write_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("api_pair")
    for name, seed in (("base", 0), ("post", 1)):
        write_model(root / name, TINY, family="qwen2", dtype="float32", seed=seed)
    return root


@pytest.fixture
def sweep_yaml(pair, tmp_path, monkeypatch) -> Path:
    return seeded_sweep_yaml(pair, tmp_path, monkeypatch)


def test_dry_run_result_is_what_the_command_prints(sweep_yaml, tmp_path, capsys):
    dry = dry_run_sweep(load_sweep_config(sweep_yaml))
    assert [u.id for u in dry.plan.units] == list(dry.status) and dry.to_run == dry.plan.units  # nothing done
    assert dry.todo == {u.id for u in dry.plan.units} and dry.target is None and dry.others == {}
    decompose = next(u for u in dry.plan.units if u.kind == "decompose")
    assert dry.disk[decompose.id] and dry.needs == [n for u in dry.to_run for n in (dry.disk.get(u.id) or [])]
    assert {f.unit for f in dry.forecast.units} == dry.todo and dry.forecast.rates.device == "seeded"
    assert cli.main(["sweep", str(sweep_yaml), "--dry-run"]) == 0
    out = capsys.readouterr().out
    for u in dry.plan.units:
        assert f"  {dry.status[u.id]['state']:<11} {u.id}: {u.label}" in out
    assert f"forecast ({len(dry.to_run)} unit(s) to run):" in out
    for f in dry.forecast.units:  # each unit's forecast line, with its own basis
        assert next(x for x in out.splitlines() if x.strip().startswith(f.unit + " ")).endswith(f"({f.basis})")
    assert not (tmp_path / "w").exists()  # neither wrote anything


def test_dry_run_for_a_gpu_of_the_table_gives_the_others_too(sweep_yaml):
    from grrr_stream.forecast.devices import DEVICES

    dry = dry_run_sweep(load_sweep_config(sweep_yaml), forecast_for="H100-80G")
    assert dry.target == "H100-80G" and set(dry.others) == set(DEVICES) - {"h100-80g"}
    with pytest.raises(ConfigError, match="choose one of"):
        dry_run_sweep(load_sweep_config(sweep_yaml), forecast_for="tpu")


def test_math_subset_config_plans_what_the_flag_plans(tmp_path):
    demo = load_sweep_config(ROOT / "configs" / "demo.yaml", workdir=tmp_path / "w")
    cfg = with_math_subset(demo, 3, str(tmp_path / "bench"))
    extra = cfg.extra_evaluations[-1]
    assert len(cfg.extra_evaluations) == len(demo.extra_evaluations) + 1 and demo.extra_evaluations == []
    assert (extra.suite, extra.limit, extra.bench_dir) == ("math", 3, str(tmp_path / "bench"))
    assert extra.benchmarks == ["math500", "aime24", "amc23", "minerva_math", "olympiadbench"]
    math_units = {u.id for u in plan_sweep(cfg).units if u.id.endswith("/math")}
    steps = (("base", "sft"), ("sft", "rl"), ("base", "rl"), ("base", "sibling"))
    assert math_units == {f"evaluate/{a}{s}-to-{b}{s}/math" for s in ("", "1", "2") for a, b in steps} | {
        "claims/math"
    }  # the four evaluated transitions of each of the demo's three chains, and their claims
    for bad in (0, -2, True, 2.5):
        with pytest.raises(ConfigError, match="--math-subset must be at least 1"):
            with_math_subset(demo, bad)


def test_rewrite_report_from_a_config_and_from_its_workdir(sweep_yaml, tmp_path, capsys):
    res = rewrite_report(sweep_yaml)
    assert res.page == tmp_path / "w" / "report" / "index.html" and res.page.is_file()
    assert set(res.states.values()) == {"pending"} and res.config.name == "t"
    again = rewrite_report(tmp_path / "w", tracking={"enabled": False})  # its saved config.json
    assert again.states == res.states and again.config.workdir == res.config.workdir
    assert cli.main(["report", str(tmp_path / "w")]) == 0
    assert f"sweep t: {len(res.states)} pending; report: {res.page}" in capsys.readouterr().out
    assert cli.main(["report", str(sweep_yaml)]) == 0  # the config itself, read as `sweep` reads it
    assert f"sweep t: {len(res.states)} pending; report: {res.page}" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="not the workdir of a sweep"):
        rewrite_report(tmp_path)
