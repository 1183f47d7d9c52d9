"""The statistics across units are units (issue 32): ``claims/<suite>`` over a suite's evaluations and
``channel-groups/sft-rl`` over the training steps' channel-stats units.

From the demo's plan with every unit of the kinds that existed before them finished (written as those kinds
write their markers, with planted per-problem answers and channel rows), the sweep has exactly these two units
to run; run, their numbers are the planted ones (an independent numpy computation); and assembling the report
(the tables and the HTML page) draws no bootstrap: with every bootstrap function of the package made to raise,
the report is built all the same and holds the same rows. Changing a claims setting changes those units' keys
and no other.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from grrr_stream.channels.groups import Member
from grrr_stream.config import TrackingConfig
from grrr_stream.evaluation.answers import summary_text
from grrr_stream.files import to_csv
from grrr_stream.sweep import plan_sweep
from grrr_stream.sweep.config import SweepClaims, load_sweep_config
from grrr_stream.sweep.context import RunContext
from grrr_stream.sweep.display import Display
from grrr_stream.sweep.execute import LocalExecutor, execute_units
from grrr_stream.sweep.kinds import claims as claims_kind
from grrr_stream.sweep.records import Records, unit_state
from grrr_stream.sweep.tables import write_report

ROOT = Path(__file__).resolve().parents[2]
NEW = ("claims", "channel-groups")
PROBLEMS = 40
H, CHANNELS = 16, [3, 11]  # planted channel sets: 2 of 16 channels
# planted accuracy per variant; others 0.5
ACCURACY = {"base": 0.2, "full": 0.8, "proj": 0.75, "diag": 0.3, "offnull": 0.78}


def _demo(workdir: Path):
    """The demo's config with its first chain only (seed 0's: base → sft → rl and the sibling)."""
    cfg = load_sweep_config(ROOT / "configs" / "demo.yaml", workdir=workdir)
    return cfg.model_copy(update={"chains": cfg.chains[:1]})


def _plan(workdir: Path, **claims):
    cfg = _demo(workdir)
    cfg = cfg.model_copy(update={"claims": SweepClaims(**{**cfg.claims.model_dump(), "resamples": 200, **claims})})
    return plan_sweep(cfg)


def _finish_old_units(plan, rng) -> dict:
    """Every unit of the kinds before claims and channel-groups, done as those kinds write their results; the
    evaluations' per-problem answers and the channel-stats rows planted. Returns what was planted."""
    planted = {"bits": {}, "energy_share": {}}
    for u in plan.units:
        if u.kind in NEW:
            continue
        out = Path(u.out)
        out.mkdir(parents=True, exist_ok=True)
        if u.kind == "decompose":
            (out / "zarr.json").write_text(
                json.dumps({"attributes": {"grrr_stream": {"complete": True, "matrices": ["m0"]}}})
            )
            (out / "matrices" / "m0").mkdir(parents=True)
            (out / "metrics.csv").write_text("name\n")  # no matrix rows: no heatmap to draw
            (out / "summary.json").write_text(json.dumps({"scopes": {"all": {"n": 1}}}))
        elif u.kind == "evaluate":
            p = u.params
            (out / "evaluation.json").write_text(
                json.dumps(
                    {
                        "metric": p.options.metric,
                        "sampling": {"pass_k": p.options.sampling.pass_k, "maj_k": p.options.sampling.maj_k},
                        "info": {"rest_from": "base"},
                    }
                )
            )
            for v in p.variants:
                name = v.partition("=")[0].strip()
                for b in p.benchmarks:
                    bits = rng.random(PROBLEMS) < ACCURACY.get(name, 0.5)
                    planted["bits"][(p.transition, name, b)] = bits
                    (out / name).mkdir(exist_ok=True)
                    (out / name / f"{b}.json").write_text(
                        summary_text({"scores": {p.options.metric: bits.astype(float).tolist()}})
                    )
        elif u.kind == "channels":
            (out / "channels.json").write_text(
                json.dumps({"base": {"channels": CHANNELS, "hidden_size": H, "fraction": len(CHANNELS) / H}})
            )
        elif u.kind == "channel-stats":
            tid = u.params.transition
            energies = rng.random((3, H, 3))
            records = [{"layer": i, "module": "q_proj", "expert": None} for i in range(3)]
            Member.of(tid, energies, records, CHANNELS).save(out / "channel_member.npz")
            rows = []
            for comp in ("diag", "off", "null", "total"):
                share = float(rng.uniform(0.05, 0.5))
                planted["energy_share"][(tid, comp)] = share
                for group in ("all", "reader"):
                    rows.append(
                        {
                            "transition": tid,
                            "group": group,
                            "component": comp,
                            "channels": len(CHANNELS),
                            "channel_share": len(CHANNELS) / H,
                            "energy_share": share if group == "all" else 0.9,
                            "ratio": share * H / len(CHANNELS),
                            "ci_lo": 0.5,
                            "ci_hi": 2.0,
                            "p_value": 0.5,
                        }
                    )
            (out / "channel_stats.csv").write_text(to_csv(rows))
        else:  # the other kinds' markers, as test_kinds' old workdir writes them
            marker = {
                "generate": "chain.json",
                "stats": "table_overall.csv",
                "compare": "comparisons.csv",
                "variant": "grrr_variant.json",
            }[u.kind]
            (out / marker).write_text("{}")
            if u.kind == "generate":  # a chain is done with its file list (size, SHA-256 of each file)
                digest = hashlib.sha256(b"{}").hexdigest()
                (out / "files.json").write_text(json.dumps({"key": u.key, "files": {marker: [2, digest]}}))
        Records(plan.workdir).write(u, {"id": u.id, "key": u.key, "status": "done", "seconds": 1.0})
    return planted


_BOOTSTRAP = (
    "interval",
    "joint_replicates",
    "block_rng",
    "blocks",
    "summarise",
    "transition_scores",
    "group_enrichment",
    "bootstrap_means",
    "null_means",
)


def _forbid_bootstrap(monkeypatch) -> int:
    """Every bootstrap function of the package, wherever a module holds it, raises; returns how many."""
    from grrr_stream.channels import groups
    from grrr_stream.stats import bootstrap, claims, claims_sets

    originals = {getattr(m, n) for m in (bootstrap, claims, claims_sets, groups) for n in _BOOTSTRAP if hasattr(m, n)}

    def refuse(*a, **k):
        raise AssertionError("a bootstrap was drawn while assembling the report")

    patched = 0
    for name, mod in list(sys.modules.items()):
        if name.startswith("grrr_stream") and mod is not None:
            for attr, value in list(vars(mod).items()):
                if callable(value) and value in originals:
                    monkeypatch.setattr(mod, attr, refuse)
                    patched += 1
    return patched


def test_only_the_new_units_run_their_numbers_are_the_planted_ones_and_the_report_draws_no_bootstrap(
    tmp_path, monkeypatch
):
    plan = _plan(tmp_path / "w")
    planted = _finish_old_units(plan, np.random.default_rng(0))
    records = Records(plan.workdir)
    states = {u.id: unit_state(u, records)[0] for u in plan.units}
    todo = [u for u in plan.units if states[u.id] != "done"]  # what run_sweep runs
    assert sorted(u.id for u in todo) == ["channel-groups/sft-rl", "claims/main"]
    by_id = {u.id: u for u in plan.units}
    assert {d.split("/")[0] for d in by_id["claims/main"].deps} == {"evaluate"}
    assert set(by_id["channel-groups/sft-rl"].deps) == {
        "channel-stats/base-to-sft",
        "channel-stats/sft-to-rl",
        "channel-stats/base-to-sibling",
    }  # the steps only
    ctx = RunContext(
        str(plan.workdir), TrackingConfig(enabled=False), False, None, None, outs={u.id: u.out for u in plan.units}
    )
    ran = execute_units(todo, states, LocalExecutor(ctx), Display(len(plan.units), 0, False, io.StringIO()))
    assert sorted(ran) == ["channel-groups/sft-rl", "claims/main"] and all(s == "done" for s in states.values())
    recs = {u.id: records.read(u) for u in plan.units}

    report = write_report(plan, states, recs)
    # the claims: each variant's score is its planted accuracy (percent), the differences to full follow
    diffs = {(r["transition"], r["variant"]): r for r in report.rows("differences.csv")}
    assert len(diffs) == len(planted["bits"]) and claims_kind.summaries(report)[""]["counts"]["transitions"] == 4
    for (tid, v, b), bits in planted["bits"].items():
        full = planted["bits"][(tid, "full", b)]
        assert diffs[(tid, v)]["score"] == pytest.approx(100.0 * np.mean(bits), abs=1e-9)
        assert diffs[(tid, v)]["minus_full"] == pytest.approx(100.0 * (np.mean(bits) - np.mean(full)), abs=1e-9)
    assert all(r["rest_from"] == "base" and r["suite"] == "main" for r in report.rows("informative.csv"))
    assert {r["statistic"] for r in report.rows("claims.csv")} >= {"within_k", "retention_median_pct"}
    # the SFT vs RL table: the steps' planted shares, averaged per group (base → rl is no step)
    table = {(g["group"], g["component"]): g for g in report.rows("channels_sft_rl.csv")}
    for comp in ("diag", "off", "null", "total"):
        sft = [planted["energy_share"][(t, comp)] for t in ("base-to-sft", "base-to-sibling")]
        assert table[("SFT", comp)]["n"] == 2 and table[("SFT", comp)]["energy_share"] == pytest.approx(np.mean(sft))
        rl = table[("RL", comp)]
        assert rl["n"] == 1 and rl["energy_share"] == pytest.approx(planted["energy_share"][("sft-to-rl", comp)])
        assert rl["ci_lo"] <= rl["ci_hi"] and 0 < rl["p_value"] <= 1 and rl["draws"] == 2000
    tables = {
        name: to_csv(report.rows(name))
        for name in ("differences.csv", "informative.csv", "claims.csv", "channels_sft_rl.csv", "channels.csv")
    }

    from grrr_stream.report import write_html
    from grrr_stream.sweep.kinds import KINDS

    assert _forbid_bootstrap(monkeypatch) >= 8
    with pytest.raises(AssertionError, match="bootstrap was drawn"):  # the guard holds: a unit's run trips it
        KINDS["claims"].run(by_id["claims/main"], ctx)
    again = write_report(plan, states, recs)  # the report's tables, then its page: nothing resampled
    page = write_html(plan, again, recs)
    assert {name: to_csv(again.rows(name)) for name in tables} == tables
    assert json.dumps(claims_kind.summaries(again)) == json.dumps(claims_kind.summaries(report))
    for name in ("claims.csv", "differences.csv", "informative.csv", "channels_sft_rl.csv", "channels_sft_rl.txt"):
        assert (plan.workdir / "report" / name).is_file()
    assert 'id="verdict"' in page.read_text()


def test_a_claims_setting_reruns_the_claims_units_only(tmp_path):
    base = {u.id: u.key for u in _plan(tmp_path / "w").units}
    for change, moved in (
        ({"within_points": 3.0}, {"claims/main"}),
        ({"seed": 1}, {"claims/main"}),
        ({"level": 0.9}, {"claims/main"}),
        # REINFORCE counted as SFT: the RL step changes group, so the channel groups' key too
        ({"sft_methods": ["SFT", "REINFORCE"]}, {"claims/main", "channel-groups/sft-rl"}),
    ):
        keys = {u.id: u.key for u in _plan(tmp_path / "w", **change).units}
        assert {u for u in keys if keys[u] != base[u]} == moved, change


def test_an_extra_suite_named_like_the_main_one_is_refused_and_another_gets_its_own_claims(tmp_path):
    from grrr_stream.errors import ConfigError
    from grrr_stream.sweep.config import SweepEvaluation

    cfg = _demo(tmp_path / "w")
    extra = cfg.evaluation.model_dump()
    for suite, ok in (("main", False), ("again", True)):
        other = cfg.model_copy(update={"extra_evaluations": [SweepEvaluation(**{**extra, "suite": suite})]})
        if not ok:
            with pytest.raises(ConfigError, match="suite name 'main'"):
                plan_sweep(other)
            continue
        units = {u.id: u for u in plan_sweep(other).units}
        assert units["claims/again"].deps == tuple(
            f"evaluate/{t}/again" for t in ("base-to-sft", "sft-to-rl", "base-to-rl", "base-to-sibling")
        )
        assert units["claims/again"].params.suite == "again" and units["claims/main"].out != units["claims/again"].out
