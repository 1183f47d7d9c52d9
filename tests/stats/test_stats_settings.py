"""The statistics' settings are refused alike by the API and by the command line, before any store is read:
the paths given here do not exist, so a refusal that came later would name a missing store instead."""

from __future__ import annotations

import pytest

from grrr_stream import run_comparisons, run_stats
from grrr_stream.errors import ConfigError


def _api_message(call) -> str:
    with pytest.raises(ConfigError) as e:
        call()
    return str(e.value)


def test_run_stats_refuses_too_few_resamples_as_the_cli_does(tmp_path, capsys):
    from grrr_stream.cli.entry import main

    msg = _api_message(lambda: run_stats([tmp_path / "nowhere"], tmp_path / "out", resamples=3))
    assert "resamples" in msg and "greater than or equal to 100" in msg
    assert (
        main(["stats", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"), "--resamples", "3", "--no-track"])
        == 2
    )
    assert msg in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything is written


@pytest.mark.parametrize(
    "bad,field",
    [
        ({"alpha": 1.0}, "alpha"),
        ({"alpha": 0.0}, "alpha"),
        ({"null_draws": 99}, "null_draws"),
        ({"resamples": 10}, "resamples"),
    ],
)
def test_run_comparisons_refuses_bad_settings_as_the_cli_does(tmp_path, capsys, bad, field):
    from grrr_stream.cli.entry import main

    pairs = [("cumulative", tmp_path / "a", tmp_path / "b")]
    msg = _api_message(lambda: run_comparisons(pairs, tmp_path / "out", **bad))
    assert f"- {field}:" in msg and msg.count("\n  - ") == 1, msg
    flag = "--" + field.replace("_", "-")
    assert (
        main(
            [
                "compare",
                "--cumulative",
                str(tmp_path / "a"),
                str(tmp_path / "b"),
                "--out",
                str(tmp_path / "out"),
                flag,
                str(bad[field]),
                "--no-track",
            ]
        )
        == 2
    )
    assert msg in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_every_problem_of_a_comparison_is_named_at_once(tmp_path):
    msg = _api_message(lambda: run_comparisons([], tmp_path / "out", resamples=1, null_draws=1, alpha=2.0))
    assert all(f"- {f}:" in msg for f in ("resamples", "null_draws", "alpha")), msg


def test_good_settings_pass_the_check():
    from grrr_stream.stats.settings import ComparisonSettings, checked

    s = checked(ComparisonSettings, "here", resamples=100, null_draws=100, alpha=0.5, seed=3)
    assert (s.resamples, s.null_draws, s.alpha, s.seed) == (100, 100, 0.5, 3)
