"""The channels command's preflight and forecast are public API (``channels_preflight``, ``forecast_channels``):
every problem of both folders at once, before any work; the forecast's figures from the parameters counted
here in the safetensors files, at a stubbed forward rate (nothing depends on this machine's speed)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from grrr_stream import channels_preflight, forecast_channels  # noqa: E402
from grrr_stream.errors import CheckpointNotFoundError, ConfigError, GrrrError  # noqa: E402
from grrr_stream.forecast.calibrate import Rates  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from grrr_stream.fixtures.synthetic_hf import make_hf_model

    folder = tmp_path_factory.mktemp("channels_api") / "m"
    make_hf_model(folder, "llama", num_hidden_layers=2)
    return folder


def _parameters(folder) -> int:
    from safetensors import safe_open

    n = 0
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            n += sum(math.prod(st.get_slice(k).get_shape()) for k in st.keys())
    return n


def test_preflight_names_every_problem_of_both_folders_at_once(model, tmp_path):
    assert channels_preflight(model, model, sequences=2, seq_len=16) == [model, model]
    with pytest.raises(ConfigError) as e:
        channels_preflight(tmp_path / "a", tmp_path / "b", sequences=2, seq_len=16)
    assert str(tmp_path / "a") in str(e.value) and str(tmp_path / "b") in str(e.value)
    with pytest.raises(GrrrError) as one:  # a single problem keeps its own class
        channels_preflight(model, tmp_path / "b", sequences=2, seq_len=16)
    assert isinstance(one.value, CheckpointNotFoundError) and str(tmp_path / "b") in str(one.value)
    with pytest.raises(ConfigError, match="--batch-size must be at least 1"):
        channels_preflight(tmp_path / "a", sequences=2, seq_len=16, batch_size=0)  # before the folders are read


@pytest.mark.parametrize("ablate", [False, True])
def test_forecast_from_the_parameters_at_the_stubbed_rate(model, ablate):
    from grrr_stream.sweep.kinds.channels import FORWARD_CALL_S, START_S

    rates = Rates("cpu (stub)", (64, 64), 1e9, 1e9, 0.0, 1e6, 1e8, cached=True)
    fc = forecast_channels([model, model], sequences=3, seq_len=16, batch_size=2, ablate=ablate, rates=rates)
    passes = 5 if ablate else 1  # the intact pass; with the ablation the outliers and three random sets zeroed
    flops = passes * 2.0 * _parameters(model) * 3 * 16
    assert (fc.passes, fc.tokens, fc.models, fc.device) == (passes, 48, 2, "cpu (stub)")
    assert fc.flops == pytest.approx(2 * flops)
    assert fc.seconds == pytest.approx(2 * (START_S + flops / 1e6 + passes * 2 * FORWARD_CALL_S))
    assert fc.long == (fc.seconds > 180) and (fc.fit_sequences is not None) == fc.long


def test_a_long_forecast_names_the_sequences_that_fit(model):
    slow = Rates("cpu (stub)", (64, 64), 1e9, 1e9, 0.0, 10.0, 1e8, cached=True)
    fc = forecast_channels([model], sequences=40, seq_len=16, rates=slow)
    assert fc.long and fc.fit_sequences == max(1, int(40 * 180 / fc.seconds))
