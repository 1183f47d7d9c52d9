"""The domain of every number the command line takes, as argparse types: a value outside it is refused by argparse
in one line naming the option (exit status 2) before any work starts, as the config models refuse theirs. No option
of the CLI takes a bare ``int`` or ``float`` (``tests/cli/test_cli_domains.py`` walks the parser)."""

from __future__ import annotations

import argparse
import math
from typing import Optional

from ..config import COUNT_MAX, SEED_MAX


class Domain:
    """A number type with its range: ``int`` or finite ``float``, ``lo``/``hi`` inclusive unless open."""

    def __init__(
        self, kind: type, lo: Optional[float] = None, hi: Optional[float] = None, *, open_lo=False, open_hi=False
    ):
        self.kind, self.lo, self.hi, self.open_lo, self.open_hi = kind, lo, hi, open_lo, open_hi
        self.__name__ = kind.__name__  # argparse names the type in its message: "invalid int value: 'x'"

    def _num(self, x: float) -> str:
        return str(int(x)) if self.kind is int else f"{x:g}"

    def describe(self) -> str:
        what, lo, hi = "an integer" if self.kind is int else "a finite number", self.lo, self.hi
        if lo is not None and hi is not None and not (self.open_lo or self.open_hi):
            return f"{what} in {self._num(lo)}..{self._num(hi)}"
        parts = [f"{'>' if self.open_lo else '≥'} {self._num(lo)}" if lo is not None else "",
                 f"{'<' if self.open_hi else '≤'} {self._num(hi)}" if hi is not None else ""]  # fmt: skip
        return " ".join([what, " and ".join(p for p in parts if p)]).strip()

    def __call__(self, text: str):
        try:
            value = self.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {self.describe()} (got {text!r})") from None
        low = self.lo is not None and (value <= self.lo if self.open_lo else value < self.lo)
        high = self.hi is not None and (value >= self.hi if self.open_hi else value > self.hi)
        if (self.kind is float and not math.isfinite(value)) or low or high:
            raise argparse.ArgumentTypeError(f"must be {self.describe()} (got {text})")
        return value


SEED = Domain(int, 0, SEED_MAX)
COUNT = Domain(int, 1, COUNT_MAX)  # problems, tokens, sequences
# bootstrap resamples, null draws, random sets, a significance level: parsed here, their ranges checked by the settings
# models (stats/settings.py, cli/options.check_draws), which the API calls too: one message for both
DRAWS = Domain(int)
LEVEL = Domain(float)
POSITIVE = Domain(float, 0.0, open_lo=True)
NON_NEGATIVE = Domain(float, 0.0)
SHARE = Domain(float, 0.0, 1.0, open_lo=True)  # a fraction in (0, 1]
FRACTION = Domain(float, 0.0, 1.0, open_lo=True, open_hi=True)  # strictly between 0 and 1 (a level, σ's share)
