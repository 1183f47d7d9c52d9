"""The answers files of an evaluation (``<out>/<variant>/<benchmark>.jsonl``, one record per problem), read back
only as far as they can be verified.

Every record carries ``chain``: the digest of the previous line's ``chain`` and of its own content. A line whose
content changed (a correctness bit flipped), or that follows a deleted, duplicated or moved line, does not match
its link; such lines are dropped (their problems are answered again) and the file is rewritten with the records
that verify, re-chained, before anything is appended. A torn last line is what a kill leaves and is dropped the
same way. A file in which no line carries a chain was written before records were chained: its records are taken
as they are (nothing to verify them against) and the file is sealed when it is next rewritten.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..files import atomic_write_text

CHAIN = "chain"
MOVED = "changed, or a line before it deleted, duplicated or moved"


def link(prev: str, body: dict) -> str:
    """The chain value of a record whose predecessor's chain is ``prev`` (``""`` for the first line)."""
    blob = prev + "\n" + json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def sealed_lines(records: Sequence[dict], prev: str = "") -> tuple[str, str]:
    """The JSONL text of ``records`` chained after ``prev``, and the last chain value."""
    out = []
    for r in records:
        body = {k: v for k, v in r.items() if k != CHAIN}
        prev = link(prev, body)
        out.append(json.dumps({**body, CHAIN: prev}, ensure_ascii=False) + "\n")
    return "".join(out), prev


@dataclass
class Answers:
    """What an answers file holds under one key: idx → verified record; how many lines the file has, how many of
    them verified, the last verified chain value, and what was found damaged (empty when nothing was)."""

    done: dict[int, dict] = field(default_factory=dict)
    lines: int = 0
    kept: int = 0
    last: str = ""
    legacy: bool = False
    torn: bool = False  # the last line lacks its newline: appending after it would join two records
    damage: list[str] = field(default_factory=list)

    def clean(self) -> bool:
        """The file holds exactly the key's verified, chained records (nothing to rewrite)."""
        return not (self.legacy or self.torn) and self.lines == self.kept == len(self.done)


def _parse(line: str) -> Optional[dict]:
    try:
        r = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(r, dict) or type(r.get("idx")) is not int or not isinstance(r.get("key"), str):
        return None
    return r


def read_answers(path: Path, key: str) -> Answers:
    """The records of ``path`` under ``key`` that verify (see the module's docstring)."""
    a = Answers()
    if not Path(path).is_file():
        return a
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    a.lines, a.torn = len(lines), bool(lines) and not lines[-1].endswith("\n")
    parsed = [_parse(x) for x in lines]
    a.legacy = all(r is not None and CHAIN not in r for r in parsed) and bool(parsed)
    prev = ""
    for i, (raw, r) in enumerate(zip(lines, parsed)):
        if r is None:
            if not (i == len(lines) - 1 and not raw.endswith("\n")):  # a torn last line is a kill's, not damage
                a.damage.append(f"line {i + 1} is not a whole answer record")
            continue
        if not a.legacy:
            stored = r.pop(CHAIN, None)
            if stored != link(prev, r):
                a.damage.append(f"line {i + 1} does not match its digest ({MOVED})")
                prev = stored if isinstance(stored, str) else prev
                continue
            prev = stored
        a.kept += 1
        if r["key"] == key:
            a.done[r["idx"]] = r
    a.last = prev
    return a


def describe(path: Path, a: Answers) -> str:
    """One line naming the file and its damaged lines (at most three)."""
    more = f" and {len(a.damage) - 3} more" if len(a.damage) > 3 else ""
    return f"answers file {path}: {'; '.join(a.damage[:3])}{more}: those problems are answered again"


def answered(path: Path, key: str, log: Optional[Callable[[str], None]] = None) -> dict[int, dict]:
    """The verified records under ``key`` (read only); damage said through ``log``."""
    a = read_answers(path, key)
    if a.damage and log is not None:
        log(f"WARNING: {describe(path, a)}")
    return a.done


class AnswersFile:
    """An answers file being appended to: opened, its verified records under ``key`` kept and the file rewritten to
    hold only them, chained, when it held anything else (stale records of other settings, a torn or damaged line,
    unchained records), so that appends always follow a verified line."""

    def __init__(self, path: Path, key: str, log: Callable[[str], None] = print):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        a = read_answers(self.path, key)
        if a.damage:
            log(f"WARNING: {describe(self.path, a)}")
        self.done, self.last = a.done, a.last
        if not a.clean() and self.path.exists():
            text, self.last = sealed_lines([self.done[i] for i in sorted(self.done)])
            atomic_write_text(self.path, text)

    def append(self, records: Sequence[dict]) -> None:
        """Chain ``records`` after the file's last line, append them and fsync."""
        text, last = sealed_lines(records, self.last)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        self.last = last
        self.done.update({r["idx"]: {k: v for k, v in r.items() if k != CHAIN} for r in records})


def summary_text(fields: dict) -> str:
    """A benchmark summary's JSON with ``digest`` over its other fields (what :func:`verified_summary` checks)."""
    body = {k: v for k, v in fields.items() if k != "digest"}
    return json.dumps({**body, "digest": link("summary", body)}, indent=2)


def verified_summary(path: Path) -> Optional[dict]:
    """The summary at ``path`` when it is a JSON object whose digest matches its fields, else None (missing,
    unreadable, changed, or written before summaries carried a digest: summarised again from the records)."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or d.get("digest") != link("summary", {k: v for k, v in d.items() if k != "digest"}):
        return None
    return d
