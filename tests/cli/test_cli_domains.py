"""Every number the command line takes has a domain (grrr_stream/cli/domains.py): walking the whole parser finds no
option typed as a bare int or float, and the installed console script refuses values outside it in one line naming
the option, exit status 2, before any work."""

from __future__ import annotations

import argparse
import subprocess

import pytest

from grrr_stream.cli.domains import Domain
from grrr_stream.cli.entry import build_parser

pytestmark = pytest.mark.timeout(300)


def _actions(parser: argparse.ArgumentParser, path=()):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _actions(sub, (*path, name))
        else:
            yield path, a


def test_no_option_takes_a_bare_number():
    found = [(" ".join(p), a.option_strings) for p, a in _actions(build_parser())]
    typed = [(p, a.option_strings, a.type) for p, a in _actions(build_parser()) if a.type in (int, float)]
    assert len(found) > 100 and not typed, typed
    domains = [a for _, a in _actions(build_parser()) if isinstance(a.type, Domain)]
    assert len(domains) >= 25


@pytest.mark.parametrize(
    "domain,bad,good",
    [
        (Domain(int, 0, 2**32 - 1), ["-1", str(10**20), "1.5", "x"], ["0", str(2**32 - 1)]),
        (Domain(float, 0.0, open_lo=True), ["0", "-1", "nan", "inf", "-inf"], ["1e-9", "3"]),
        (Domain(float, 0.0, 1.0, open_lo=True, open_hi=True), ["0", "1", "nan"], ["0.5"]),
    ],
)
def test_a_domain_refuses_what_is_outside_it(domain, bad, good):
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError, match="must be"):
            domain(text)
    assert [domain(t) for t in good] == [domain.kind(t) for t in good]


@pytest.mark.parametrize(
    "argv,option",
    [
        (["evaluate", "--store", "s", "--out", "o", "--order-seed", "-1"], "--order-seed"),
        (["evaluate", "--store", "s", "--out", "o", "--temperature", "nan"], "--temperature"),
        (["channels", "m", "--threshold", "inf"], "--threshold"),
        (["compare", "--cumulative", "a", "b", "--out", "o", "--alpha", "nan"], "--alpha"),
    ],
)
def test_the_console_script_refuses_a_number_outside_its_domain(tmp_path, argv, option):
    from helpers.processes import console_script

    r = subprocess.run(
        [console_script("grrr-stream"), *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2, r.stderr
    assert f"argument {option}" in r.stderr and "must be" in r.stderr and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written
