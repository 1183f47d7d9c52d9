"""Hostile inputs end in one clear line naming the file or key, through the command line where the user meets
them: exit status 2, no traceback, no hang (issue 47). Config composition (includes), absurd sizes and counts,
names that would smuggle a newline into a folder. Everything in-process and bounded; the scheduler's silent
peers are in ``tests/runtime/test_scheduler_address.py``, the stopped sweep in ``tests/sweep/test_sweep_stop.py``."""

from __future__ import annotations

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
