"""Hostile inputs end in one clear line naming the file or key, through the command line where the user meets
them: exit status 2, no traceback, no hang (issue 47). Config composition (includes), absurd sizes and counts,
names that would smuggle a newline into a folder. Everything in-process and bounded; the scheduler's silent
peers are in ``tests/runtime/test_scheduler_address.py``, the stopped sweep in ``tests/sweep/test_sweep_stop.py``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from grrr_stream.cli.entry import main

CHAIN = {"name": "a", "base": {"id": "a0", "source": "tinychain:base"}}


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing a run writes by default lands in the repository


def _write(path: Path, values: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def refused(capsys, *argv: str) -> str:
    """The one message of a command that must refuse its input (exit 2, no traceback, a short text)."""
    rc = main([*argv])
    err = capsys.readouterr().err
    assert rc == 2, err[:3000]
    assert err.startswith("grrr-stream: error: ") and "Traceback" not in err, err[:3000]
    assert len(err) < 9000
    return err


# -- 1. config composition -------------------------------------------------------------------------------


def test_include_through_a_symlink_loop_names_the_including_file_and_key(tmp_path, capsys):
    (tmp_path / "loop1.yaml").symlink_to("loop2.yaml")
    (tmp_path / "loop2.yaml").symlink_to("loop1.yaml")
    top = _write(tmp_path / "top.yaml", {"include": "loop1.yaml", "name": "x"})
    err = refused(capsys, "sweep", str(top), "--dry-run")
    assert f"{top}: include: loop1.yaml" in err and "cannot be followed" in err
    # the looping file given directly
    assert "cannot be read" in refused(capsys, "sweep", str(tmp_path / "loop1.yaml"), "--dry-run")


def test_a_list_where_a_chain_name_belongs_is_a_validation_error_of_its_file(tmp_path, capsys):
    base = _write(tmp_path / "base.yaml", {"name": "s", "workdir": "w", "chains": [{**CHAIN, "name": ["a", "b"]}]})
    top = _write(tmp_path / "top.yaml", {"include": "base.yaml", "chains": [{"name": ["x"], "models": []}]})
    err = refused(capsys, "sweep", str(top), "--dry-run")
    assert f"chains.0.name (set in {base}): Input should be a valid string" in err
    assert "chains.1.name: Input should be a valid string" in err  # the including file's own entry
    assert "unhashable" not in err


def test_a_bad_value_in_an_included_file_is_blamed_on_that_file(tmp_path, capsys):
    base = _write(
        tmp_path / "configs" / "base.yaml",
        {"name": "s", "workdir": "w", "chains": [CHAIN], "statistics": {"resamples": 5, "null_draws": 500}},
    )
    top = _write(
        tmp_path / "configs" / "more" / "top.yaml",
        {
            "include": "../base.yaml",
            "statistics": {"null_draws": 7},
            "chains": [{"name": "a", "models": [{"id": "bad id", "source": "tinychain:sft"}]}],
        },
    )
    err = refused(capsys, "sweep", str(top), "--dry-run")
    assert f"invalid configuration ({top})" in err
    assert f"statistics.resamples (set in {base}): Input should be greater than or equal to 100" in err
    assert "statistics.null_draws: Input should be greater than or equal to 100" in err  # the including file's
    assert "chains.0.models.0.id: Value error" in err  # appended by the including file: blamed on it
    # a replaced value is the including file's, whatever the included one held
    _write(top, {"include": "../base.yaml", "statistics": {"resamples": 200}, "workdir": 3.5})
    err = refused(capsys, "sweep", str(top), "--dry-run")
    assert "statistics.resamples" not in err and "workdir: Input" in err and str(base) not in err


def test_an_include_problem_deep_in_the_chain_names_every_including_file(tmp_path, capsys):
    _write(tmp_path / "mid.yaml", {"include": "missing.yaml"})
    top = _write(tmp_path / "top.yaml", {"include": "mid.yaml"})
    err = refused(capsys, "sweep", str(top), "--dry-run")
    assert "missing.yaml does not exist" in err
    assert f"included by {tmp_path / 'mid.yaml'}: include: missing.yaml" in err
    assert f"included by {top}: include: mid.yaml" in err
    bad = _write(tmp_path / "bad.yaml", {"include": {"path": "x.yaml"}})
    assert f"{bad}: include must be the path of one sweep YAML" in refused(capsys, "sweep", str(bad), "--dry-run")


# -- 4. absurd sizes and counts ---------------------------------------------------------------------------


def _siblings(path: Path, n: int, independent: bool = True) -> Path:
    """A sweep of ``n`` SFT siblings of one base (written as text: dumping 10 000 models takes seconds)."""
    models = "".join(f"      - {{id: m{i}, source: 'tinychain:sft', method: SFT}}\n" for i in range(n))
    path.write_text(
        "name: many\nworkdir: w\nchains:\n  - name: c\n    base: {id: b0, source: 'tinychain:base'}\n"
        f"    models:\n{models}statistics: {{independent: {str(independent).lower()}}}\n"
    )
    return path


def test_many_siblings_are_refused_before_their_pairs_are_planned(tmp_path, capsys):
    began = time.monotonic()
    err = refused(capsys, "sweep", str(_siblings(tmp_path / "s.yaml", 800)), "--dry-run")
    assert time.monotonic() - began < 40  # 77 s and 320 401 units before the cap
    assert "statistics.independent: 319600 independent comparisons" in err and "chain 'c' has 800 models" in err
    assert "set statistics.independent: false" in err


def test_a_sweep_of_absurdly_many_models_is_refused_before_they_are_validated(tmp_path, capsys):
    began = time.monotonic()
    err = refused(capsys, "sweep", str(_siblings(tmp_path / "s.yaml", 10_000, independent=False)), "--dry-run")
    assert time.monotonic() - began < 40  # no output in 60 s before the cap
    assert "chains: Value error, 10001 models; a sweep takes at most 2000" in err


def test_the_count_of_independent_pairs_is_the_number_planned():
    """The cap's count, linear in the models, equals the pairs made (siblings, cousins, a grandchild's lineage)."""
    from grrr_stream.sweep.kinds import compare
    from grrr_stream.sweep.plan import _lineages
    from grrr_stream.sweep.units import PlannedModel

    parents = {"b": None, "s1": "b", "s2": "b", "s3": "b", "g1": "s1", "g2": "s1", "gg": "g1", "x0": None, "x1": "x0"}
    models = {
        m: PlannedModel(
            "tinychain:sft", None, "x" if m.startswith("x") else "c", p, "x0" if m[0] == "x" else "b", None, None, True
        )
        for m, p in parents.items()
    }
    lineage = _lineages(models)[0]
    from_base = {m: f"base-to-{m}" for m, p in parents.items() if p is not None}
    pairs = compare._independent_pairs(models, lineage, from_base)
    assert len(pairs) == 11  # 6 models of chain c with a transition: 15 pairs, 4 of them in one lineage
    assert compare._too_many_independent(models, lineage, from_base) is None
    cap = compare.MAX_COMPARISONS
    try:
        compare.MAX_COMPARISONS = len(pairs) - 1
        assert "11 independent comparisons" in compare._too_many_independent(models, lineage, from_base)
        compare.MAX_COMPARISONS = len(pairs)
        assert compare._too_many_independent(models, lineage, from_base) is None
    finally:
        compare.MAX_COMPARISONS = cap


BIG = str(10**12)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (
            ["stats", "{tmp}/nowhere", "--out", "{tmp}/out", "--resamples", BIG, "--no-track"],
            "- resamples: Input should be less than or equal to 1000000",
        ),
        (
            ["compare", "--cumulative", "{tmp}/a", "{tmp}/b", "--out", "{tmp}/out", "--null-draws", BIG, "--no-track"],
            "- null_draws: Input should be less than or equal to 1000000",
        ),
        (
            ["channel-stats", "{tmp}/nowhere", "--channels", "1,2", "--draws", BIG],
            f"--draws {BIG}: give between 100 and",
        ),
        (
            ["evaluate", "--store", "{tmp}/nowhere", "--out", "{tmp}/out", "--resamples", BIG, "--no-track"],
            f"--resamples {BIG}:",
        ),
    ],
)
def test_absurd_draw_counts_on_the_command_line_are_refused_before_any_work(tmp_path, capsys, argv, needle):
    err = refused(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert needle in err and "is not a grrr_stream store" not in err  # refused before a store is read
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "section, key",
    [("statistics", "resamples"), ("statistics", "null_draws"), ("claims", "resamples"), ("channels", "resamples")],
)
def test_absurd_draw_counts_in_a_sweep_config_are_refused(tmp_path, capsys, section, key):
    cfg = _write(tmp_path / "s.yaml", {"name": "s", "workdir": "w", "chains": [CHAIN], section: {key: 10**12}})
    assert f"{section}.{key}: Input should be less than or equal to 1000000" in refused(
        capsys, "sweep", str(cfg), "--dry-run"
    )


# -- 5. names --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "where, needle",
    [
        ({"chains": [{"name": "a", "base": {"id": "a0\n", "source": "tinychain:base"}}]}, "chains.0.base.id"),
        ({"chains": [{"name": "a\n", "base": {"id": "a0", "source": "tinychain:base"}}]}, "chains.0.name"),
        ({"name": "s\n"}, "  - name: Value error"),
        ({"variants": {"names": ["my\nmix=diag:1"]}}, "variant name 'my\\nmix'"),
        ({"evaluation": {"benchmarks": ["arith\n"]}}, "evaluation.benchmarks"),
        ({"decomposition": {"device": "cpu\n"}}, "decomposition.device"),
    ],
)
def test_a_name_ending_in_a_newline_never_becomes_a_folder(tmp_path, capsys, where, needle):
    cfg = _write(tmp_path / "s.yaml", {"name": "s", "workdir": "w", "chains": [CHAIN], **where})
    err = refused(capsys, "sweep", str(cfg), "--dry-run")
    assert needle in err
    assert not (tmp_path / "w").exists()


def test_the_one_name_rule_takes_the_whole_string():
    from grrr_stream.checkpoints.reader import resolve_source
    from grrr_stream.errors import CheckpointNotFoundError, ConfigError
    from grrr_stream.files import check_component, is_component

    assert is_component("qwen2.5-math_7B") and is_component("a" * 64)
    for bad in ("a\n", "a\r", "\na", "a b", "a/b", "..", ".a", "a" * 65, "é", "a$", ["a"], None):
        assert not is_component(bad), bad
        with pytest.raises(ConfigError, match="must start with a letter or digit"):
            check_component(bad, "name")
    with pytest.raises(CheckpointNotFoundError, match="does not exist"):  # never sent to the Hub as an id
        resolve_source("org/model\n")


def test_paths_with_spaces_unicode_and_shell_characters_work_as_plain_ones(tmp_path, capsys):
    import shutil

    from grrr_stream.fixtures.synthetic import TINY, make_transition

    base, post = make_transition(tmp_path / "plain", TINY, dtype="float32")
    odd = tmp_path / "we ird $(touch x); 'q' \"dq\" `b` é ü ∆ *"
    shutil.copytree(base, odd / "base")
    shutil.copytree(post, odd / "post")
    rows = {}
    for name, folder in (("plain", base.parent), ("odd", odd)):
        store = folder / "store dir"
        args = ["decompose", "--base", str(folder / "base"), "--post", str(folder / "post"), "--store", str(store)]
        assert main([*args, "--device", "cpu", "--no-track", "--no-progress"]) == 0, capsys.readouterr().err
        rows[name] = (store / "metrics.csv").read_text()
    capsys.readouterr()
    assert rows["odd"] == rows["plain"]
    assert not (tmp_path / "x").exists() and not Path("x").exists()  # nothing of the name was run by a shell
