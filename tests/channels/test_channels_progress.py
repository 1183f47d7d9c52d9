"""``grrr-stream channels`` tells how long it will take and shows its progress (issue 35 §2).

Before any work: a forecast "P passes × N tokens ≈ T here" from the sweep's model of a channels unit (forward
flops at this CPU's measured rate; the rate is stubbed here, so the text does not depend on the machine), and
beyond a few minutes which flags shorten it. During the passes: progress lines of the project's reporter with
an ETA, one item per decoder layer of each batch (the clock is faked so that every item prints a line off a
terminal; what is checked is the lines' format and count, never a timing)."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from helpers.common import SteppingClock  # noqa: E402

from grrr_stream import progress as progress_module  # noqa: E402
from grrr_stream.cli.entry import main  # noqa: E402
from grrr_stream.forecast import calibrate as calibrate_module  # noqa: E402
from grrr_stream.forecast.calibrate import Rates  # noqa: E402

LINE = re.compile(
    r"^\[channels base\] \[ *(\d+)/(\d+)\] +\d+\.\d% \| pass (\d)/(\d) \((.+?)\) · batch (\d+)/(\d+) · "
    r"layer (\d+)/(\d+) \| \d+\.\d\d s/it \| ETA (\S+)$"
)


def _stub_rates(monkeypatch, forward_flops_s: float) -> None:
    rates = Rates("cpu (stub)", (64, 64), 1e9, 1e9, 0.0, forward_flops_s, 1e8, cached=True)
    monkeypatch.setattr(calibrate_module, "calibrate", lambda largest, **kw: rates)


def _progress_lines(err: str) -> list[re.Match]:
    lines = [ln for ln in err.splitlines() if ln.startswith("[channels base] [")]
    matches = [LINE.match(ln) for ln in lines]
    assert all(matches), [ln for ln, m in zip(lines, matches) if not m]
    return matches


def _check_run(err: str, *, layers: int, batches: int) -> None:
    matches = _progress_lines(err)
    total, passes = int(matches[-1].group(2)), int(matches[-1].group(4))  # the last line's: the final count
    # 4 passes: no outlier channel, so that pass is skipped and the totals shrink after the calibration pass
    assert passes in (4, 5) and total == passes * batches * layers
    assert {int(m.group(2)) for m in matches} <= {5 * batches * layers, total}
    assert [int(m.group(1)) for m in matches] == list(range(1, total + 1))  # every item, in order
    assert matches[0].group(10) != "?" and matches[-1].group(10) == "0s"  # an ETA from the first item on
    assert [m.group(5) for m in matches][:: batches * layers] == (
        ["calibration", "outliers zeroed"][: passes - 3] + [f"random set, seed {s}" for s in (0, 1, 2)]
    )
    assert {(int(m.group(8)), int(m.group(9))) for m in matches} == {(layer, layers) for layer in range(1, layers + 1)}


def test_forecast_and_progress_lines_with_eta(tmp_path, capsys, monkeypatch):
    """A tiny Llama (3 layers): the forecast with the warning and its flags (the stubbed rate makes 5 passes
    of 2 × 16 tokens take longer than 3 minutes), then one progress line per layer of every batch and pass."""
    from grrr_stream.fixtures.synthetic_hf import make_hf_model

    make_hf_model(tmp_path / "m", "llama", num_hidden_layers=3)
    _stub_rates(monkeypatch, forward_flops_s=10.0)
    monkeypatch.setattr(progress_module.time, "monotonic", SteppingClock())
    rc = main(
        [
            "channels",
            str(tmp_path / "m"),
            "--out",
            str(tmp_path / "out"),
            "--ablate",
            "--sequences",
            "2",
            "--seq-len",
            "16",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 0, err
    forecast = [ln for ln in err.splitlines() if ln.startswith("forecast:")]
    assert re.match(r"forecast: 5 passes × 32 tokens ≈ \S+ here \(.+ TFLOP at .+ GFLOP/s", forecast[0]), forecast
    assert "--sequences 1 " in forecast[1] and "--seq-len 8 " in forecast[1] and "without --ablate" in forecast[1]
    assert "[channels base] loading" in err and "[channels base] loaded in" in err
    _check_run(err, layers=3, batches=2)


def test_no_progress_and_a_short_forecast_say_nothing_more(tmp_path, capsys, monkeypatch):
    from grrr_stream.fixtures.synthetic_hf import make_hf_model

    make_hf_model(tmp_path / "m", "llama")
    _stub_rates(monkeypatch, forward_flops_s=1e12)
    rc = main(["channels", str(tmp_path / "m"), "--dry-run", "--sequences", "2", "--seq-len", "16"])
    err = capsys.readouterr().err
    assert rc == 0 and "forecast: 1 pass × 32 tokens ≈ " in err and "to shorten it" not in err
    assert not (tmp_path / "channels").exists()  # a dry run writes nothing
    rc = main(
        [
            "channels",
            str(tmp_path / "m"),
            "--out",
            str(tmp_path / "o"),
            "--no-progress",
            "--sequences",
            "2",
            "--seq-len",
            "16",
        ]
    )
    assert rc == 0 and capsys.readouterr().err == ""


@pytest.mark.slow  # writing a 311 MB checkpoint and loading it: ~20 s on 2 idle cores, minutes on a loaded one
def test_135m_shaped_model_with_the_defaults_forecasts_and_shows_progress(tmp_path, capsys, monkeypatch):
    """Issue 35's done-when: SmolLM2-135M's shapes (hidden 576, 30 layers, MLP 1536, 9/3 heads, vocabulary
    49152; untied here, 162 M parameters, bf16). With the defaults and --ablate: the forecast of 5 passes ×
    65,536 tokens and, at 50 GFLOP/s, the warning naming the flags (≈ 35 min: 107 TFLOP); then the same
    command with 2 × 8 tokens prints a progress line with an ETA for every layer of every batch and pass."""
    from grrr_stream.fixtures.synthetic import ModelShape, write_model

    model = write_model(tmp_path / "m", ModelShape(576, 1536, 30, 9, 3, vocab=49152), family="llama")
    _stub_rates(monkeypatch, forward_flops_s=50e9)
    assert main(["channels", str(model), "--ablate", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"forecast: 5 passes × 65,536 tokens ≈ 3\dm\d\ds here \(10\d TFLOP at 50\.0 GFLOP/s", err), err
    assert "to shorten it: --sequences " in err and "--seq-len 128" in err and "without --ablate" in err
    monkeypatch.setattr(progress_module.time, "monotonic", SteppingClock())
    rc = main(["channels", str(model), "--ablate", "--sequences", "2", "--seq-len", "8", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 0, err
    _check_run(err, layers=30, batches=2)
