"""Command line: thin wrappers over library functions.

Errors a user can cause (bad paths, mismatched checkpoints, bad config) print one
paragraph and exit with status 2; ``--debug`` shows the traceback instead. Status 3: the work
is done, only its MLflow logging was missed (recorded; ``grrr-stream track`` logs it later).

This module is the entry point (``grrr-stream``, ``python -m grrr_stream.cli``): it assembles the
parser and maps errors to exit statuses; the subcommands live in :mod:`grrr_stream.cli`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from ..config import clip
from ..errors import GrrrError, RenamedSettingWarning
from ..files import describe_os_error
from ..tracking import run_log
from .channel_stats import channel_stats_parser, cmd_channel_stats
from .channels import channels_parser, cmd_channels
from .model_parsers import decompose_parser, evaluate_parser, variants_parser
from .parsers import (
    bands_parser,
    compare_parser,
    report_parser,
    stats_parser,
    status_parser,
    sweep_parser,
    track_parser,
)
from .sweep import cmd_report, cmd_status, cmd_sweep, cmd_track
from .transition import cmd_bands, cmd_compare, cmd_decompose, cmd_evaluate, cmd_stats, cmd_variants

EXIT_USAGE = 2
EXIT_TRACKING = 3  # everything succeeded except MLflow logging (recorded for `grrr-stream track`)
EXIT_INTERRUPTED = 130
EXIT_STOPPED = 143  # 128 + SIGTERM, as a shell reports a process the signal ended


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grrr-stream", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    decompose_parser(sub)
    stats_parser(sub)
    compare_parser(sub)
    bands_parser(sub)
    variants_parser(sub)
    evaluate_parser(sub)
    sweep_parser(sub)
    sweep_parser(sub, demo=True)
    status_parser(sub)
    report_parser(sub)
    track_parser(sub)
    channels_parser(sub)
    channel_stats_parser(sub)
    return parser


COMMANDS = {
    "decompose": cmd_decompose,
    "stats": cmd_stats,
    "compare": cmd_compare,
    "bands": cmd_bands,
    "variants": cmd_variants,
    "evaluate": cmd_evaluate,
    "demo": cmd_sweep,
    "sweep": cmd_sweep,
    "status": cmd_status,
    "report": cmd_report,
    "track": cmd_track,
    "channels": cmd_channels,
    "channel-stats": cmd_channel_stats,
}


class Stopped(KeyboardInterrupt):
    """The process was asked to stop (SIGTERM: ``kill``, a batch system's time limit). Unwound as Ctrl-C is, so
    locks are released, nothing partial is marked done, and the command says how to resume."""


def _stop(signum: int, frame: Any) -> None:
    signal.signal(signum, signal.SIG_DFL)  # a second SIGTERM, while this one unwinds, ends the process at once
    raise Stopped(signal.Signals(signum).name)


@contextlib.contextmanager
def stopped_by_sigterm() -> Iterator[None]:
    """SIGTERM raises :class:`Stopped` while the command runs (default: the process dies without a word, its
    locks and the unit it was running left for the next run to find)."""
    if threading.current_thread() is not threading.main_thread():  # a handler can only be set there
        yield
        return
    before = signal.signal(signal.SIGTERM, _stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def resume_command(words: Sequence[str]) -> str:
    """The command line that runs ``words`` again from this folder, quoted for a POSIX shell."""
    prog = "grrr-stream"
    if Path(sys.argv[0]).name != "grrr-stream":  # python -m grrr_stream.cli, or a test calling main()
        prog = f"{shlex.quote(sys.executable)} -m grrr_stream.cli"
    return f"cd {shlex.quote(os.getcwd())} && {prog} {shlex.join(words)}"


def _interrupted(e: KeyboardInterrupt, words: Sequence[str]) -> int:
    how = f"stopped by {e.args[0] if e.args else 'SIGTERM'}" if isinstance(e, Stopped) else "interrupted"
    print(
        f"grrr-stream: {how}; what finished is kept. Resume with: {resume_command(words)}",
        file=sys.stderr,
    )
    return EXIT_STOPPED if isinstance(e, Stopped) else EXIT_INTERRUPTED


@contextlib.contextmanager
def renamed_settings_shown() -> Iterator[None]:
    """A setting spelled by its old name (:class:`~grrr_stream.errors.RenamedSettingWarning`, a DeprecationWarning,
    which Python hides by default) shown once, as one line on stderr; other warnings as Python shows them."""
    with warnings.catch_warnings():
        warnings.simplefilter("once", RenamedSettingWarning)
        show = warnings.showwarning

        def one_line(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, RenamedSettingWarning):
                print(f"grrr-stream: warning: {message}", file=sys.stderr)
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = one_line
        yield


def main(argv: Optional[Sequence[str]] = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    with renamed_settings_shown():
        args = build_parser().parse_args(words)
        with stopped_by_sigterm():
            return _run(args, words)


def _run(args: argparse.Namespace, words: Sequence[str]) -> int:
    run_log.SHOW_TRACEBACKS = bool(args.debug)
    try:
        missed_before = len(run_log.missed())
        rc = COMMANDS[args.command](args)
        missed = run_log.missed()[missed_before:]
        if rc == 0 and missed:
            print(
                f"grrr-stream: the work is done, but {len(missed)} MLflow logging(s) were missed and recorded "
                "beside their results; rerun the same command or `grrr-stream track PATH` to log them "
                f"(exit status {EXIT_TRACKING})",
                file=sys.stderr,
            )
            return EXIT_TRACKING
        return rc
    except GrrrError as e:
        if args.debug:
            raise

        print(f"grrr-stream: error: {clip(str(e), 8000)}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except OSError as e:  # an environment fault (disk full, read-only, permissions): one sentence
        if args.debug:
            raise

        print(f"grrr-stream: error: {describe_os_error(e)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (Stopped)
        return _interrupted(e, words)


if __name__ == "__main__":
    sys.exit(main())
