"""Grading answers: last-\\boxed extraction and math-verify equivalence (the only module that imports math-verify)."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Optional

from ..errors import MissingDependencyError


@dataclass(frozen=True)
class Grade:
    extracted: Optional[str]
    correct: bool
    status: str  # ok | no_answer | parse_failed | timeout | error | prompt_too_long


_SCI = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*[eE]\s*([+-]?\d+)(?![\w.])")


def _normalise(ans: str) -> str:
    # 4.5e33 → 4.5\times10^{33}: math-verify reads the LaTeX form, Minerva answers use both
    return _SCI.sub(r"\1\\times10^{\2}", ans)


def last_boxed(text: str) -> Optional[str]:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, else None."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    for start in reversed(starts):
        depth, i = 1, start
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start : i - 1].strip()
    m = re.search(r"\\boxed ([^\s$]+)", text)  # \boxed 5
    return m.group(1) if m else None


def grade(generation: str, gold: str, *, timeout: int = 5) -> Grade:
    """Last-\\boxed extraction, then math-verify (string, numeric and symbolic equality)."""
    try:
        from math_verify import parse, verify
    except ImportError:
        raise MissingDependencyError("grading needs math-verify: pip install 'grrr-stream[eval]'") from None
    extracted = last_boxed(generation)
    if extracted is None:
        return Grade(None, False, "no_answer")
    # math-verify's timeouts use SIGALRM, which only works in the main thread
    t = timeout if threading.current_thread() is threading.main_thread() else None
    try:
        g = parse(f"${_normalise(gold)}$", parsing_timeout=t, raise_on_error=True)
        p = parse(f"\\boxed{{{_normalise(extracted)}}}", parsing_timeout=t, raise_on_error=True)
    except TimeoutError:
        return Grade(extracted, False, "timeout")
    except Exception:
        return Grade(extracted, extracted.strip() == gold.strip(), "parse_failed")
    if not p:
        return Grade(extracted, extracted.strip() == gold.strip(), "parse_failed")
    try:
        ok = bool(verify(g, p, timeout_seconds=t, raise_on_error=True))
    except TimeoutError:
        return Grade(extracted, False, "timeout")
    except Exception:
        return Grade(extracted, extracted.strip() == gold.strip(), "error")
    return Grade(extracted, ok or extracted.strip() == gold.strip(), "ok")


def count_wait(text: str) -> int:
    """Occurrences of the self-reflection token 'Wait' (the paper's signal)."""
    return len(re.findall(r"\bWait\b", text))


def answers_equivalent(a: str, b: str, *, timeout: int = 5) -> bool:
    """Whether two extracted answers say the same thing (string equal, else math-verify equal: 0.5 and
    \\frac{1}{2} agree)."""
    if a.strip() == b.strip():
        return True
    try:
        from math_verify import parse, verify
    except ImportError:
        raise MissingDependencyError("grading needs math-verify: pip install 'grrr-stream[eval]'") from None
    t = timeout if threading.current_thread() is threading.main_thread() else None
    try:
        pa = parse(f"\\boxed{{{_normalise(a)}}}", parsing_timeout=t, raise_on_error=True)
        pb = parse(f"\\boxed{{{_normalise(b)}}}", parsing_timeout=t, raise_on_error=True)
        return bool(pa and pb and verify(pa, pb, timeout_seconds=t, raise_on_error=True))
    except Exception:  # noqa: BLE001 - unparsable or timed out: not shown to agree
        return False
