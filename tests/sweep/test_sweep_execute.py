"""The sweep's execution order, its unit keys and its report reader, checked without running any unit."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from grrr_stream.sweep import LocalExecutor, StatsParams, Unit, execute_units, plan_sweep
from grrr_stream.sweep.config import load_sweep_config
from grrr_stream.sweep.display import Display

ROOT = Path(__file__).resolve().parents[2]
PINNED_KEYS = Path(__file__).parents[1].joinpath("sweep_keys.json")


def unit(uid: str, deps=(), after=()) -> Unit:
    # the executors read ids, deps and after only; the parameters are a placeholder
    return Unit(
        uid,
        uid,
        "k",
        "/nowhere",
        StatsParams(transitions=(), store_keys=(), resamples=100, seed=0),
        tuple(deps),
        tuple(after),
    )


class Scripted:
    """An executor whose units all run in the background and end in a scripted order."""

    def __init__(self, ends: list[str], failing: set[str]):
        self.ends, self.failing, self.running = list(ends), failing, []

    def start(self, u: Unit):
        self.running.append(u)
        return None

    def next_ended(self):
        uid = self.ends.pop(0)
        u = next(r for r in self.running if r.id == uid)  # the script never ends a unit not started
        self.running.remove(u)
        return u, {"status": "failed" if uid in self.failing else "done", "seconds": 0.0, "error": "boom"}


def events(todo: list[Unit], executor) -> tuple[list[str], dict[str, str]]:
    stream = io.StringIO()
    states = {u.id: "pending" for u in todo}
    execute_units(todo, states, executor, Display(len(todo), 0, True, stream))
    found = re.findall(r"(start|done|FAILED|blocked) (\w+)", stream.getvalue())
    return [f"{what} {uid}" for what, uid in found], states


def test_one_process_runs_the_plan_in_its_order_and_a_failure_blocks_only_what_needs_it(monkeypatch):
    import grrr_stream.sweep.execute as ex

    todo = [
        unit("g"),
        unit("a", ["g"]),
        unit("b", ["g"], after=["a"]),
        unit("c", ["a"]),
        unit("d", ["c"]),
        unit("e", ["b"]),
    ]
    monkeypatch.setattr(
        ex, "run_unit", lambda u, ctx: {"status": "failed" if u.id == "a" else "done", "seconds": 0.0, "error": "boom"}
    )
    seen, states = events(todo, LocalExecutor(ctx=None))
    assert seen == [
        "start g",
        "done g",
        "start a",
        "FAILED a",
        "start b",
        "done b",
        "blocked c",
        "blocked d",
        "start e",
        "done e",
    ]
    assert states == {"g": "done", "a": "failed", "b": "done", "c": "blocked", "d": "blocked", "e": "done"}


def test_background_units_wait_for_what_they_start_after_and_are_blocked_as_soon_as_a_dependency_fails():
    # p computes the frames q reads (q starts after p, whatever p's outcome); z needs x and y
    todo = [unit("p"), unit("q", after=["p"]), unit("x"), unit("y"), unit("z", ["x", "y"]), unit("w", ["z"])]
    seen, states = events(todo, Scripted(ends=["p", "y", "q", "x"], failing={"p", "y"}))
    assert seen == [
        "start p",
        "start x",
        "start y",
        "FAILED p",
        "start q",
        "FAILED y",
        "blocked z",
        "blocked w",
        "done q",
        "done x",
    ]  # z and w are reported while x still runs
    assert states == {"p": "failed", "q": "done", "x": "done", "y": "failed", "z": "blocked", "w": "blocked"}


def test_report_reader_types_numbers_and_writes_the_same_text_back(tmp_path):
    from grrr_stream.files import to_csv
    from grrr_stream.sweep import read_rows

    text = "variant,average,n,p,cut,odd,flag,note\n100,61.5,200,1e-05,,007,True,nan\nfull,0.1,3,-0.0,2,1e3,False,x\n"
    (tmp_path / "t.csv").write_text(text)
    rows = read_rows(tmp_path / "t.csv")
    # a number when writing it back gives the same text; names stay text; an empty cell is None
    assert (
        rows[0]
        == {
            "variant": "100",
            "average": 61.5,
            "n": 200,
            "p": 1e-05,
            "cut": None,
            "odd": "007",
            "flag": "True",
            "note": rows[0]["note"],
        }
        and rows[0]["note"] != rows[0]["note"]
    )  # nan
    assert rows[1]["odd"] == "1e3" and rows[1]["cut"] == 2
    assert to_csv(rows) == text
    assert read_rows(tmp_path / "missing.csv") == []


def test_transitions_table_has_the_papers_table_3_4_columns_and_the_rank_change(tmp_path):
    """A store's tables as decompose writes them, from planted per-matrix values: SR_Δ, SV cos and δ_max are
    their means over matrices, and the rank change W0 → W1 at each threshold its mean and largest magnitude,
    computed here by hand (changes +3, −10, 0 at 1e-3; +1439, 0, +2 at 1e-7)."""
    from grrr_stream.decompose.run import summarize
    from grrr_stream.files import to_csv
    from grrr_stream.sweep.kinds.decompose import transition_row
    from grrr_stream.sweep.units import Transition

    planted = [
        (100, 103, 3000, 4439, 12.0, 0.9990, 0.011),
        (200, 190, 4000, 4000, 30.0, 0.9994, 0.020),
        (300, 300, 4096, 4098, 6.6, 0.9980, 0.004),
    ]
    rows = [
        {
            "name": f"m{i}",
            "layer": i,
            "module": "q_proj",
            "f_diag": 0.1,
            "f_off": 0.5,
            "f_null": 0.4,
            "r_delta": 1e-3,
            "sv_cos": cos,
            "delta_max": dmax,
            "sr_w0": 50.0,
            "sr_delta": sr,
            "sr_w1": 50.5,
            "dsr_pct": 1.0,
            "alpha": 0.0,
            "nrank_w0_1e-07": a7,
            "nrank_w0_0.001": a3,
            "nrank_w1_1e-07": b7,
            "nrank_w1_0.001": b3,
        }
        for i, (a3, b3, a7, b7, sr, cos, dmax) in enumerate(planted)
    ]
    _, summary = summarize(rows)
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "metrics.csv").write_text(to_csv(rows))
    row = transition_row(Transition("a-to-b", "c", "a", "b", "cumulative", "SFT", None), tmp_path)
    assert row["sr_delta_mean"] == pytest.approx((12.0 + 30.0 + 6.6) / 3)
    assert row["sv_cos_mean"] == pytest.approx((0.9990 + 0.9994 + 0.9980) / 3)
    assert row["delta_max_mean"] == pytest.approx((0.011 + 0.020 + 0.004) / 3)
    assert row["nrank_change_0.001_mean"] == pytest.approx(-7 / 3) and row["nrank_change_0.001_maxabs"] == 10
    assert row["nrank_change_1e-07_mean"] == pytest.approx(1441 / 3) and row["nrank_change_1e-07_maxabs"] == 1439
    assert row["method"] == "SFT" and row["n"] == 3


def _keys(name: str, tmp_path: Path) -> dict[str, str]:
    return {u.id: u.key for u in plan_sweep(load_sweep_config(ROOT / "configs" / name, workdir=tmp_path / "w")).units}


@pytest.mark.parametrize("name", ["demo.yaml", "paper.yaml"])
def test_unit_keys_of_the_shipped_configs_do_not_change(name, tmp_path):
    """Results on disk are found by their keys: a key that changes shape orphans every finished result.
    These configs' keys depend on no local path (generated models, Hub ids, the bundled benchmarks'
    content). After a deliberate change of what a key holds, regenerate the file with
    ``python tests/sweep/test_sweep_execute.py``."""
    assert _keys(name, tmp_path) == json.loads(PINNED_KEYS.read_text())[name]


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        PINNED_KEYS.write_text(
            json.dumps({n: _keys(n, Path(tmp)) for n in ("demo.yaml", "paper.yaml")}, indent=1) + "\n"
        )
