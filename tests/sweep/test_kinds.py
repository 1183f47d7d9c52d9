"""The sweep's seam: one module per kind of unit, one registry (KINDS), the workdir's names in one place.

The registry is checked against the recipe of docs/ARCHITECTURE.md (so "add a kind = one module + one
registry line" stays true), every workdir and marker name is spelled only by its owner, and a workdir
written in the layout every earlier version wrote (records under .sweep/units, the kinds' markers) still
reads as done.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from grrr_stream.sweep import plan_sweep, sweep_status
from grrr_stream.sweep.config import load_sweep_config
from grrr_stream.sweep.kinds import KINDS, TABLES
from grrr_stream.sweep.kinds.base import Kind
from grrr_stream.sweep.records import Records, unit_state

ROOT = Path(__file__).resolve().parents[2]
KINDS_DIR = ROOT / "grrr_stream" / "sweep" / "kinds"
HELPERS = {"__init__", "base"}  # modules of kinds/ that are no kind


def _kind_modules() -> dict[str, Path]:
    """kinds/<module>.py (or the package kinds/<module>/) that end with a ``KIND = Kind(...)`` record → their
    path."""
    out = {}
    for p in sorted([*KINDS_DIR.glob("*.py"), *KINDS_DIR.glob("*/__init__.py")]):
        tree = ast.parse(p.read_text())
        if any(
            isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "KIND" for t in n.targets) for n in tree.body
        ):
            out[p.parent.name if p.stem == "__init__" else p.stem] = p
    return out


def test_every_kind_module_is_registered_once_and_every_registered_kind_is_a_module():
    mods = _kind_modules()
    packages = {p.parent.name for p in KINDS_DIR.glob("*/__init__.py")}
    assert set(mods) == ({p.stem for p in KINDS_DIR.glob("*.py")} - HELPERS) | packages
    # the module of each registered kind is kinds/<name>.py ('-' written '_')
    assert {k.run.__module__.rsplit(".", 1)[1] for k in KINDS.values()} == set(mods)
    assert all(k.run.__module__.endswith("." + name.replace("-", "_")) for name, k in KINDS.items())
    # one registry line per kind: `<module>.KIND,` in kinds/__init__.py
    init = (KINDS_DIR / "__init__.py").read_text()
    assert sorted(re.findall(r"^\s+(\w+)\.KIND,$", init, re.M)) == sorted(mods)
    for name, k in KINDS.items():
        assert isinstance(k, Kind) and k.params.kind == name and callable(k.plan) and callable(k.estimate)


def test_the_architecture_recipe_names_what_the_registry_holds():
    """docs/ARCHITECTURE.md's recipe for a new kind names the module, the registry line and every part of a
    Kind the sweep reads (a part added to Kind and left out of the recipe fails here)."""
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    recipe = doc[doc.index("**A new unit kind in sweeps**") :]
    recipe = recipe[: recipe.index("\n- **", 5)]
    assert "`sweep/kinds/<kind>.py`" in recipe and "`KINDS`" in recipe and "its line" in recipe
    for field in Kind.__dataclass_fields__:
        assert re.search(rf"`{field}[`(]", recipe), f"the recipe does not name Kind.{field}"


def _constants(path: Path) -> set[str]:
    return {
        n.value
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def test_workdir_and_marker_names_are_spelled_by_their_owners_only():
    """The workdir's names (sweep/workdir.py), the kinds' markers and report tables (their kind's module or the
    library that writes them): no other module of the sweep, the CLI's sweep commands or the tracking layer
    spells one."""
    names = {".sweep", "forecast.json"} | {k.marker for k in KINDS.values() if k.marker} | set(TABLES)
    pkg = ROOT / "grrr_stream"
    others = [p for p in (pkg / "sweep").glob("*.py") if p.name not in ("workdir.py", "rows.py")]
    others += [pkg / "cli" / "sweep.py", pkg / "cli" / "channel_stats.py", *(pkg / "tracking").glob("*.py")]
    found = {f"{p.relative_to(ROOT)}: {n}" for p in others for n in _constants(p) & names}
    assert not found, sorted(found)


def test_an_old_workdir_reads_as_done(tmp_path):
    """Records and markers written as every earlier version wrote them (spelled out here, not taken from the
    code under test): each unit whose outputs are all there is done, and status says so."""
    plan = plan_sweep(load_sweep_config(ROOT / "configs" / "demo.yaml", workdir=tmp_path / "w"))
    old_markers = {
        "generate": "chain.json",
        "stats": "table_overall.csv",
        "compare": "comparisons.csv",
        "variant": "grrr_variant.json",
        "channels": "channels.json",
        "channel-stats": "channel_stats.csv",
    }
    picked = {}
    for u in plan.units:
        if u.kind in old_markers and u.kind not in picked:
            picked[u.kind] = u
        if u.kind == "evaluate" and "evaluate" not in picked:
            picked["evaluate"] = u
        if u.kind == "decompose" and "decompose" not in picked:
            picked["decompose"] = u
    assert set(picked) == {*old_markers, "evaluate", "decompose"}  # every kind an earlier version wrote
    for kind, u in picked.items():
        out = Path(u.out)
        out.mkdir(parents=True, exist_ok=True)
        if kind == "evaluate":
            (out / "evaluation.json").write_text(
                json.dumps(
                    {
                        "metric": u.params.options.metric,
                        "sampling": {
                            "pass_k": u.params.options.sampling.pass_k,
                            "maj_k": u.params.options.sampling.maj_k,
                        },
                    }
                )
            )
        elif kind == "decompose":
            (out / "zarr.json").write_text(
                json.dumps({"attributes": {"grrr_stream": {"complete": True, "matrices": ["m0", "m1"]}}})
            )
            (out / "metrics.csv").write_text("name\nm0\nm1\n")
            for m in ("m0", "m1"):
                (out / "matrices" / m).mkdir(parents=True)
        else:
            (out / old_markers[kind]).write_text("{}")
        record = tmp_path / "w" / ".sweep" / "units" / f"{u.id.replace('/', '__')}@{u.key[:12]}.json"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"id": u.id, "key": u.key, "status": "done", "seconds": 1.0}))
    records = Records(plan.workdir)
    # what a unit's "done" rests on and is missing here is redone, never passed for done: the evaluation's
    # summaries (summarised again from its answers) and the chain's file list (the chain written again and
    # checked against its files as they are)
    redone = {"evaluate": "stale", "generate": "damaged"}
    assert {kind: unit_state(u, records)[0] for kind, u in picked.items()} == {k: redone.get(k, "done") for k in picked}
    rows = {r["unit"]: r["state"] for r in sweep_status(plan)}
    assert all(rows[u.id] == redone.get(k, "done") for k, u in picked.items())
    # the kinds added since (the statistics across units, issue 32) are new units: pending, to be run, over the
    # old units they read (what needs only those finished units then runs: tests/sweep/test_cross_unit_stats.py)
    new = {u.id: u for u in plan.units if u.kind in ("claims", "channel-groups")}
    assert set(new) == {"claims/main", "channel-groups/sft-rl"}
    assert all(unit_state(u, records)[0] == "pending" and rows[uid] == "pending" for uid, u in new.items())
    assert picked["evaluate"].id in new["claims/main"].deps
    assert all(d.startswith("channel-stats/") for d in new["channel-groups/sft-rl"].deps)
    # and a marker removed since is redone, not passed for done
    (Path(picked["stats"].out) / "table_overall.csv").unlink()
    assert unit_state(picked["stats"], records)[0] == "damaged"


def test_the_sweep_config_is_assembled_from_the_kinds_sections():
    """SweepConfig's keys are its own fields around the registry's sections, in the registry's order; a section of
    a kind not in the registry is an unknown key there, and the kind's own model checks its section's keys."""
    import pytest
    from pydantic import ValidationError

    from grrr_stream.config import StrictModel
    from grrr_stream.sweep.config import SweepConfig, assemble
    from grrr_stream.sweep.sections import Section

    keys = list(SweepConfig.model_fields)
    assert keys[3:-3] == [s.key for k in KINDS.values() for s in k.config]
    assert keys[:3] == ["name", "workdir", "chains"] and keys[-3:] == ["tracking", "scheduler", "progress"]

    class Toy(StrictModel):
        rounds: int = 2

    toy = Kind(
        name="generate",
        params=KINDS["generate"].params,
        plan=KINDS["generate"].plan,
        run=KINDS["generate"].run,
        marker=None,
        config=(Section("toy", Toy),),
    )
    values = {"name": "t", "workdir": "w", "chains": [{"name": "c", "base": {"id": "b", "source": "b"}}]}
    assert assemble({"toy": toy}).model_validate({**values, "toy": {"rounds": 5}}).toy.rounds == 5
    assert assemble({"toy": toy}).model_validate(values).toy == Toy()
    with pytest.raises(ValidationError, match="extra"):
        assemble({"toy": toy}).model_validate({**values, "toy": {"round": 5}})
    with pytest.raises(ValidationError, match="extra"):
        SweepConfig.model_validate({**values, "toy": {"rounds": 5}})
    with pytest.raises(TypeError, match="claimed twice"):
        assemble({"toy": toy, "again": toy})
