"""What the tools' arguments may be, as argparse types: a value outside its domain is refused by argparse in one line
naming the option (exit status 2) before any work starts, as the command line refuses its own
(grrr_stream/cli/domains.py). A bad input file found later ends the same way: :class:`InputError`, :func:`fail`.

Not a tool: the tools beside it import it (``tools/`` is first on ``sys.path`` when one of them runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

# the command line's number types and bounds (one definition of what a seed or a count may be)
from grrr_stream.cli.domains import COUNT, SEED  # noqa: F401 - re-exported for the tools
from grrr_stream.cli.domains import Domain as Number
from grrr_stream.config import COUNT_MAX, SEED_MAX  # noqa: F401

PROBABILITY = Number(float, 0.0, 1.0)


def numbers(item: Number):
    """A comma-separated list of ``item`` (at least one)."""

    def parse(text: str) -> list:
        parts = [p.strip() for p in text.split(",")]
        if not text.strip() or not all(parts):
            raise argparse.ArgumentTypeError(f"must be {item.describe()}, or several comma-separated (got {text!r})")
        return [item(p) for p in parts]

    parse.__name__ = "list"
    return parse


def folder(text: str) -> Path:
    """An existing folder (to read)."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no folder {text}")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder")
    return path


def out_folder(text: str) -> Path:
    """A folder to write into: an existing one, or one that can be made (no file where it or a parent belongs)."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder")
    parent = next(p for p in path.absolute().parents if p.exists()) if not path.exists() else None
    if parent is not None and not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot make the folder {text}: {parent} is a file")
    return path


def out_file(text: str) -> Path:
    """A file to write: not a folder, in a folder that exists."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"no folder {parent} to write {path.name} in")
    return path


class InputError(SystemExit):
    """A bad input file, said in one line naming it: :func:`fail` ends the tool with it (exit status 2); a caller
    that does not catch it still ends without a traceback (a SystemExit)."""


def fail(parser: argparse.ArgumentParser, message: str) -> None:
    """End the tool as argparse ends it on a bad argument, in one line: ``prog: error: message``, exit status 2."""
    parser.exit(2, f"{parser.prog}: error: {message}\n")


def os_error(e: OSError, path=None) -> str:
    """An OSError in one line, the path it concerns first."""
    where = e.filename if e.filename is not None else path
    what = " ".join((e.strerror or str(e)).split())
    return f"{where}: {what}" if where is not None else what
