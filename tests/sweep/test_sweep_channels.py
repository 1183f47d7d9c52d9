"""Residual channels in sweeps: the channels and channel-stats units, their tables, MLflow, resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_sweep import RL, SFT, SIB, config

from grrr_stream.config import TrackingConfig
from grrr_stream.errors import ConfigError
from grrr_stream.fixtures.synthetic import TINY, write_model
from grrr_stream.sweep import plan_sweep, run_sweep
from grrr_stream.sweep.config import SweepConfig
from grrr_stream.sweep.kinds.channels import channels_file

# a low threshold: the synthetic models have no massive channels, so the rule picks the top few by RMS
CHANNELS = {"enabled": True, "threshold": 0.7, "sequences": 4, "seq_len": 32, "resamples": 200}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """test_sweep's synthetic base → sft → rl chain plus an sft sibling (float32, Qwen2 layout)."""
    root = tmp_path_factory.mktemp("channel_models")
    for name, updates in {"base": (), "sft": (SFT,), "rl": (SFT, RL), "sibling": (SIB,)}.items():
        write_model(
            root / name, TINY, family="qwen2", dtype="float32", seed=0, updates=updates, max_shard_bytes=200_000
        )
    return root


def channel_config(models: Path, workdir: Path, **channels) -> SweepConfig:
    return SweepConfig.model_validate(
        config(
            models,
            workdir,
            statistics={"enabled": False},
            variants={"enabled": False},
            channels={**CHANNELS, **channels},
        )
    )


def _zarr_energies(store: Path) -> tuple[np.ndarray, np.ndarray, list[str], dict]:
    """The store's channels/energy grid read with zarr directly: (layer, module, H, 3) float64 with the
    modules' names and sides; layers along the first axis."""
    import zarr

    grp = zarr.open_group(str(store / "channels"), mode="r")
    return (
        np.asarray(grp["energy"][...], dtype=np.float64),
        np.asarray(grp["layer"][...]),
        list(grp.attrs["modules"]),
        dict(grp.attrs["sides"]),
    )


def _shares(grid: np.ndarray, chans: list[int]) -> dict[str, float]:
    """float64: Σ energy over the channels / Σ energy, per component and for the whole update."""
    per_channel = np.nansum(grid.reshape(-1, grid.shape[-2], grid.shape[-1]), axis=0)  # (H, 3)
    out = {c: per_channel[chans, i].sum() / per_channel[:, i].sum() for i, c in enumerate(("diag", "off", "null"))}
    out["total"] = per_channel[chans].sum() / per_channel.sum()
    return out


def test_plan_channel_units_keys_and_refusals(models, tmp_path):
    off = plan_sweep(SweepConfig.model_validate(config(models, tmp_path / "w")))
    assert not [u for u in off.units if u.kind.startswith("channel")]  # off by default: sweeps unchanged
    plan = plan_sweep(channel_config(models, tmp_path / "w", transitions=["base-to-sft", "sft-to-rl"]))
    ids = {u.id for u in plan.units}
    assert {"channels/base", "channels/sft", "channel-stats/base-to-sft", "channel-stats/sft-to-rl"} <= ids
    assert "channels/rl" not in ids and "channel-stats/base-to-rl" not in ids
    assert plan.unit("channel-stats/sft-to-rl").deps == ("decompose/sft-to-rl", "channels/sft")
    keys = {u.id: u.key for u in plan.units}
    # run-only settings change no key; the rule changes the channels and channel-stats keys only
    same = plan_sweep(
        channel_config(
            models, tmp_path / "w", transitions=["base-to-sft", "sft-to-rl"], batch_size=2, max_memory="2GiB"
        )
    )
    assert {u.id: u.key for u in same.units} == keys
    other = {
        u.id: u.key
        for u in plan_sweep(
            channel_config(models, tmp_path / "w", threshold=3.0, transitions=["base-to-sft", "sft-to-rl"])
        ).units
    }
    changed = {u for u in keys if keys[u] != other[u]}
    assert changed == {u for u in keys if u.startswith("channel")}
    with pytest.raises(ConfigError, match="channel_energy"):
        plan_sweep(
            SweepConfig.model_validate(
                config(
                    models, tmp_path / "w", channels=CHANNELS, decomposition={"device": "cpu", "channel_energy": False}
                )
            )
        )


def test_sweep_channel_tables_match_the_stored_arrays_then_resume_computes_nothing(models, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking = TrackingConfig(uri=uri, experiment="channels_test")
    cfg = channel_config(models, tmp_path / "w")
    res = run_sweep(plan_sweep(cfg), tracking=tracking, progress=False)
    assert res.ok, res.failed
    plan, rep = res.plan, res.report
    independent = {}
    for tid, tr in plan.transitions.items():
        doc = json.loads(channels_file(plan.unit(f"channels/{tr.parent}").out).read_text())
        chans = doc["base"]["channels"]  # the format grrr-stream channels writes (channel variants read it)
        grid, layers, modules, sides = _zarr_energies(Path(plan.unit(f"decompose/{tid}").out))
        H = grid.shape[2]
        assert doc["base"]["hidden_size"] == H and 0 < len(chans) < H
        independent[tid] = _shares(grid, chans)
        rows = {(r["group"], r["component"]): r for r in rep.rows("channels.csv") if r["transition"] == tid}
        for comp, share in independent[tid].items():
            r = rows[("all", comp)]
            assert r["channels"] == len(chans) and r["channel_share"] == pytest.approx(len(chans) / H, rel=1e-12)
            assert r["energy_share"] == pytest.approx(share, rel=1e-9)
            assert r["ratio"] == pytest.approx(share / (len(chans) / H), rel=1e-9)
            assert r["ci_lo"] <= r["ratio"] <= r["ci_hi"] and 0 < r["p_value"] <= 1
        for side in ("reader", "writer"):
            cols = [i for i, m in enumerate(modules) if sides[m] == side]
            want = _shares(grid[:, cols], chans)["off"]
            assert rows[(side, "off")]["energy_share"] == pytest.approx(want, rel=1e-9)
        for li, layer in enumerate(layers.tolist()):
            got = next(
                r
                for r in rep.rows("channel_layers.csv")
                if r["transition"] == tid and r["layer"] == layer and r["component"] == "null"
            )
            assert got["energy_share"] == pytest.approx(_shares(grid[li : li + 1], chans)["null"], rel=1e-9)
    # SFT vs RL: the training steps only (base→sft, base→sibling are SFT; sft→rl GRPO is RL; the
    # cumulative base→rl is left out), means over each group's steps
    table = {(g["group"], g["component"]): g for g in rep.rows("channels_sft_rl.csv")}
    for comp in ("diag", "off", "null", "total"):
        sft = table[("SFT", comp)]
        assert sft["n"] == 2 and set(sft["transitions"].split()) == {"base-to-sft", "base-to-sibling"}
        assert sft["energy_share"] == pytest.approx(
            (independent["base-to-sft"][comp] + independent["base-to-sibling"][comp]) / 2, rel=1e-9
        )
        rl = table[("RL", comp)]
        assert rl["n"] == 1 and rl["transitions"] == "sft-to-rl"
        assert rl["energy_share"] == pytest.approx(independent["sft-to-rl"][comp], rel=1e-9)
        for g in (sft, rl):  # the group's own interval and pooled p (tests/channels/test_groups.py)
            assert g["ci_lo"] <= g["ratio"] <= g["ci_hi"] and 0 < g["p_value"] <= 1 and g["draws"] == 200
    report = plan.workdir / "report"
    assert {
        "channels.csv",
        "channels_sft_rl.csv",
        "channels_sft_rl.txt",
        "channel_layers.csv",
        "channel_models.csv",
        "channel_layers.png",
    } <= {p.name for p in report.iterdir()}
    html = (report / "index.html").read_text()
    assert 'id="channels-sft-rl"' in html and 'id="fig-channels"' in html
    # MLflow: the transition's run carries its numbers
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("channels_test")
    run = next(
        r
        for r in client.search_runs([exp.experiment_id], max_results=200)
        if r.data.tags.get("grrr.kind") == "transition" and r.info.run_name == "sft → rl"
    )
    row = next(
        r
        for r in rep.rows("channels.csv")
        if r["transition"] == "sft-to-rl" and r["group"] == "all" and r["component"] == "off"
    )
    assert run.data.metrics["channels/off/energy_share"] == pytest.approx(row["energy_share"], rel=1e-12)
    assert run.data.metrics["channels/off/ratio"] == pytest.approx(row["ratio"], rel=1e-12)

    # resume: nothing is recomputed; a removed table recomputes that unit only
    marker = channels_file(plan.unit("channels/base").out)
    stamp = marker.stat().st_mtime_ns
    again = run_sweep(plan_sweep(cfg), progress=False)
    assert again.ok and again.ran == [] and marker.stat().st_mtime_ns == stamp
    (Path(plan.unit("channel-stats/sft-to-rl").out) / "channel_stats.csv").unlink()
    third = run_sweep(plan_sweep(cfg), progress=False)
    assert third.ok and third.ran == ["channel-stats/sft-to-rl"] and marker.stat().st_mtime_ns == stamp
    assert third.report.rows("channels.csv") == rep.rows("channels.csv")


def test_no_outlier_channel_gives_zero_shares_and_no_ratio():
    from grrr_stream.channels.transition_stats import stats_rows

    rng = np.random.default_rng(0)
    e = rng.random((4, 16, 3))
    records = [
        {"layer": i // 2, "module": m, "expert": None, "side": s}
        for i, (m, s) in enumerate([("q_proj", "reader"), ("o_proj", "writer")] * 2)
    ]
    rows = stats_rows(e, records, np.array([], dtype=np.int64), resamples=100, seed=0)
    assert {(r["group"], r["component"]) for r in rows} == {
        (g, c)
        for g in ("all", "reader", "writer", "module=q_proj", "module=o_proj")
        for c in ("diag", "off", "null", "total")
    }
    for r in rows:
        assert r["energy_share"] == 0.0 and r["channels"] == 0 and np.isnan(r["ratio"])
    total = next(r for r in rows if r["group"] == "writer" and r["component"] == "total")
    assert total["energy"] == pytest.approx(e[[1, 3]].sum(), rel=1e-12)


def test_channel_variants_take_the_sweeps_own_channels_unit(models, tmp_path):
    """Without variants.channels, channel variants (and their evaluation) wait for the channels unit of their
    transition's W0 and read its channels.json; a transition outside channels.transitions is a plan problem."""
    cfg = config(
        models,
        tmp_path / "w",
        statistics={"enabled": False},
        channels={**CHANNELS},
        variants={"names": ["proj", "channels-outlier", "channels-rest-offnull"], "transitions": ["sft-to-rl"]},
        evaluation={"enabled": False},
    )
    plan = plan_sweep(SweepConfig.model_validate(cfg))
    unit = plan.unit("variant/sft-to-rl/channels-outlier")
    assert unit.deps == ("decompose/sft-to-rl", "channels/sft")
    assert Path(unit.params.channels) == channels_file(plan.unit("channels/sft").out)
    assert unit.params.channels_key == plan.unit("channels/sft").key
    assert plan.unit("variant/sft-to-rl/proj").deps == ("decompose/sft-to-rl",)  # no channel: no wait
    order = [u.id for u in plan.units]
    assert order.index("channels/sft") < order.index("variant/sft-to-rl/channels-outlier")
    cfg["channels"] = {**CHANNELS, "transitions": ["base-to-sft"]}
    with pytest.raises(ConfigError, match="add sft-to-rl to channels.transitions"):
        plan_sweep(SweepConfig.model_validate(cfg))


def test_a_group_with_an_unreadable_step_keeps_its_means_but_has_no_interval():
    from grrr_stream.sweep.kinds.channel_groups import COMPONENTS, sft_rl_rows

    rows = [
        {
            "group": "all",
            "step": True,
            "group_sft_rl": "SFT",
            "component": c,
            "transition": t,
            "channel_share": 0.1,
            "energy_share": 0.2 + 0.1 * i,
            "ratio": 2.0 + i,
        }
        for i, t in enumerate(("a", "b"))
        for c in COMPONENTS
    ]
    table = sft_rl_rows(rows, {}, draws=10, seed=0)  # no step's energies could be read
    assert [(g["group"], g["component"]) for g in table] == [("SFT", c) for c in COMPONENTS]
    for g in table:
        assert g["n"] == 2 and g["ratio"] == pytest.approx(2.5) and g["energy_share"] == pytest.approx(0.25)
        assert np.isnan(g["ci_lo"]) and np.isnan(g["ci_hi"]) and np.isnan(g["p_value"])
