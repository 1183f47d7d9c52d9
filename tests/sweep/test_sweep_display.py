"""The sweep's progress lines (issue 35 §2): units done / total and an ETA that starts from the forecast and is
corrected by measured / forecast as units end (per kind; over all ended units while none of a kind has ended).
Units are stand-ins with an id, a kind and a label; the clock is the reporter's, faked."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import pytest

from grrr_stream import progress as progress_module
from grrr_stream.sweep.display import Display


def _unit(uid: str) -> SimpleNamespace:
    return SimpleNamespace(id=uid, kind=uid.split("/")[0], label=f"the {uid}")


def _done(seconds: float) -> dict:
    return {"status": "done", "seconds": seconds}


def test_eta_starts_from_the_forecast_and_is_corrected_per_kind_as_units_end(monkeypatch):
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: 100.0)
    d1, d2, d3, v1, v2, e1 = units = [
        _unit(u) for u in ("decompose/a", "decompose/b", "decompose/c", "variant/x", "variant/y", "evaluate/z")
    ]
    forecast = {
        "decompose/a": 10.0,
        "decompose/b": 10.0,
        "decompose/c": 20.0,
        "variant/x": 2.0,
        "variant/y": 4.0,
        "evaluate/z": None,
    }  # an evaluation whose prompts could not be counted
    s = io.StringIO()
    display = Display(len(units), 0, True, s, forecast=forecast)
    display.start(d1)
    assert "start decompose/a: the decompose/a (expected ~10s)" in s.getvalue()  # the forecast as it is
    display.end(d1, _done(30.0), units[1:])  # 3× its forecast
    # decompose: 3 × (10 + 20) = 90; variants: no variant ended, all ended units say 3× → 3 × 6 = 18;
    # the evaluation has no forecast and no evaluation ended: counted, not guessed
    assert (
        s.getvalue()
        .splitlines()[-1]
        .endswith("[1/6] done decompose/a in 30.0 s | elapsed 0s, ETA ≥ 1m48s + 1 unit(s) not forecast or timed yet")
    )
    display.end(v1, _done(1.0), [d2, d3, v2, e1])  # variants: 0.5× their forecast
    # decompose 90 + variant 0.5 × 4 = 2; the evaluation still untimed
    assert s.getvalue().splitlines()[-1].endswith("ETA ≥ 1m32s + 1 unit(s) not forecast or timed yet")
    display.end(e1, _done(50.0), [d2, d3, v2])
    display.start(d2)
    assert "start decompose/b: the decompose/b (expected ~30s)" in s.getvalue()
    display.end(d2, _done(10.0), [d3, v2])  # decompose: (30 + 10) / (10 + 10) = 2×
    assert s.getvalue().splitlines()[-1].endswith("[4/6] done decompose/b in 10.0 s | elapsed 0s, ETA ~42s")
    assert display.expected(_unit("evaluate/other")) == 50.0  # no forecast: the mean of its kind


def test_a_failed_unit_does_not_correct_the_forecast(monkeypatch):
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: 0.0)
    a, b = _unit("decompose/a"), _unit("decompose/b")
    s = io.StringIO()
    display = Display(2, 0, True, s, forecast={"decompose/a": 10.0, "decompose/b": 10.0})
    display.end(a, {"status": "failed", "seconds": 0.5, "error": "boom"}, [b])
    last = s.getvalue().splitlines()[-1]
    assert "FAILED decompose/a in 0.5 s — boom" in last and last.endswith("ETA ~10s")


def test_without_a_forecast_the_eta_is_the_mean_of_each_kind(monkeypatch):
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: 0.0)
    a, b, c = _unit("decompose/a"), _unit("decompose/b"), _unit("stats/s")
    s = io.StringIO()
    display = Display(3, 0, True, s)
    display.start(a)
    assert "(expected" not in s.getvalue()
    display.end(a, _done(12.0), [b, c])
    assert s.getvalue().splitlines()[-1].endswith("ETA ≥ 12s + 1 unit(s) not forecast or timed yet")


@pytest.mark.slow  # a forecast's calibration and a decomposition: ~10 s on a loaded 2-core machine
def test_a_sweep_prints_its_units_with_eta_and_the_decomposition_its_matrices(tmp_path, monkeypatch, capsys):
    """One transition, statistics and everything else off: the sweep's lines start from the forecast and the
    decomposition's matrices show on the console (the clock ticks 11 s a call: every matrix prints)."""
    import itertools

    from grrr_stream.fixtures.synthetic import TINY, Update, write_model
    from grrr_stream.sweep import plan_sweep, run_sweep
    from grrr_stream.sweep.config import SweepConfig

    for name, updates in {"base": (), "sft": (Update(r_delta=2e-2),)}.items():
        write_model(tmp_path / name, TINY, family="qwen2", dtype="float32", seed=0, updates=updates)
    cfg = SweepConfig.model_validate(
        {
            "name": "p",
            "workdir": str(tmp_path / "w"),
            "chains": [
                {
                    "name": "c",
                    "base": {"id": "base", "source": str(tmp_path / "base")},
                    "models": [{"id": "sft", "source": str(tmp_path / "sft"), "parent": "base", "method": "SFT"}],
                }
            ],
            "decomposition": {"device": "cpu"},
            "statistics": {"enabled": False},
            "variants": {"names": []},
            "evaluation": {"enabled": False},
            "channels": {"enabled": False},
            "tracking": {"enabled": False},
        }
    )
    ticks = itertools.count(0.0, 11.0)
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: next(ticks))
    s = io.StringIO()
    res = run_sweep(plan_sweep(cfg), progress=True, stream=s)
    out = s.getvalue()
    assert res.ok and res.ran == ["decompose/base-to-sft"], out
    assert re.search(r"\[sweep\] \[0/1 done\] start decompose/base-to-sft: .* \(expected ~\d+s\)", out), out
    assert re.search(r"\[sweep\] \[1/1\] done decompose/base-to-sft in \d+\.\d s \| elapsed \S+, ETA ~0s$", out, re.M)
    err = capsys.readouterr().err  # the console: the decomposition's own lines
    matrices = re.findall(r"^\[ *(\d+)/(\d+)\] +\d+\.\d% \| .+ \| \d+\.\d\d s/it \| ETA \S+$", err, re.M)
    assert matrices and matrices[-1][0] == matrices[-1][1] == str(len(matrices)), err
