"""The README and docs/ point at what exists: every relative link reaches a file (and, with a
#fragment, a heading of it), and every ``grrr-stream …`` command written in them names a real
subcommand whose parser knows each flag written. Commands are checked against the parser that
``grrr_stream.cli`` builds, in this process (no subprocess per command)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

from grrr_stream.cli.entry import build_parser

ROOT = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^\s*(```|~~~)")
# an inline code span: a run of backticks, the shortest text, the same run (CommonMark)
INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
COMMAND = re.compile(r"(?<![\w-])grrr-stream\s+(.*)", re.DOTALL)
FLAG = re.compile(r"(?<![\w-])(--[A-Za-z][A-Za-z0-9-]*)")


def doc_files(root: Path = ROOT) -> List[Path]:
    """README.md, every Markdown page under docs/ (not docs/incoming/: drafts being folded in) and
    the tracking server's README."""
    pages = [p for p in sorted((root / "docs").rglob("*.md")) if "incoming" not in p.relative_to(root).parts]
    return [root / "README.md"] + pages + sorted((root / "tracking").glob("*.md"))


def split_code(text: str) -> Tuple[List[str], str]:
    """The lines of every fenced block (one string per block), and the prose with those blocks
    blanked (line numbers kept)."""
    blocks, prose, current, inside = [], [], [], False
    for line in text.splitlines():
        if FENCE.match(line):
            if inside:
                blocks.append("\n".join(current))
                current = []
            inside = not inside
            prose.append("")
        elif inside:
            current.append(line)
            prose.append("")
        else:
            prose.append(line)
    return blocks, "\n".join(prose)


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lowercased, punctuation other than '-' and
    '_' removed, each space a '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> Set[str]:
    """Every heading's anchor in a Markdown text, duplicates numbered -1, -2 … as GitHub does."""
    seen: Dict[str, int] = {}
    out = set()
    for line in split_code(text)[1].splitlines():
        m = HEADING.match(line)
        if not m:
            continue
        slug = github_anchor(m.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def prose_without_code(prose: str) -> str:
    return INLINE_CODE.sub(lambda m: " " * len(m.group(0)), prose)


def link_problems(path: Path, text: str) -> List[str]:
    """Relative links of one page whose file or heading does not exist."""
    problems = []
    for m in LINK.finditer(prose_without_code(split_code(text)[1])):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:, data: …
            continue
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{path.name}: link to {target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment.lower() not in anchors(dest.read_text()):
            problems.append(f"{path.name}: link to {target}: no heading #{fragment} in {dest.name}")
    return problems


def commands(text: str) -> Iterator[str]:
    """Every ``grrr-stream …`` command of a page: from fenced blocks (a line, joined with the lines
    its trailing backslashes continue, a shell comment cut off) and from inline code spans."""
    blocks, prose = split_code(text)
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line)
            for part in re.split(r"&&|\|\||;|\|(?!\w)", line):
                m = COMMAND.search(part)
                if m:
                    yield "grrr-stream " + m.group(1).strip()
    for m in INLINE_CODE.finditer(prose):
        span = COMMAND.search(m.group(2))
        if span:
            yield "grrr-stream " + " ".join(span.group(1).split())


def subcommands(parser: argparse.ArgumentParser) -> Dict[str, argparse.ArgumentParser]:
    return dict(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)


def subcommand_flags(parser: argparse.ArgumentParser) -> Dict[str, Dict[str, Optional[Set[str]]]]:
    """Subcommand name → every option string its parser accepts → its choices (None: any value)."""
    return {
        name: {
            opt: ({str(c) for c in act.choices} if act.choices else None)
            for act in sub._actions
            for opt in act.option_strings
        }
        for name, sub in subcommands(parser).items()
    }


def flag_values(cmd: str) -> Iterator[Tuple[str, str]]:
    """(flag, value written after it) pairs: `--x=v`, `--x v`, `[--x v]`; the value may list
    alternatives `a|b`."""
    words = [w.strip("[]") for w in cmd.split()]
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        flag, eq, value = word.partition("=")
        if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
            value = words[i + 1]
        if value:
            yield flag, value


def bad_choices(value: str, choices: Set[str]) -> List[str]:
    """Alternatives of a written value that are not among the flag's choices; placeholders
    (anything with a capital letter: N, DIR, pass@K) and ellipses pass."""
    return [alt for alt in value.split("|") if alt and not re.search(r"[A-Z.…]", alt) and alt not in choices]


def command_problems(where: str, text: str, known: Dict[str, Set[str]]) -> List[str]:
    problems = []
    for cmd in commands(text):
        words = cmd.split()
        name = words[1].strip("`'\"") if len(words) > 1 else ""
        if name not in known:
            problems.append(f"{where}: `{cmd}`: no subcommand {name!r}")
            continue
        for flag in FLAG.findall(cmd):
            if flag not in known[name]:
                problems.append(f"{where}: `{cmd}`: {name} has no flag {flag}")
        for flag, value in flag_values(cmd):
            choices = known[name].get(flag)
            for alt in bad_choices(value, choices) if choices else []:
                problems.append(f"{where}: `{cmd}`: {name} {flag} takes {sorted(choices)}, not {alt!r}")
    return problems


def check(root: Path = ROOT) -> List[str]:
    known = subcommand_flags(build_parser())
    problems = []
    for path in doc_files(root):
        text = path.read_text()
        problems += link_problems(path, text)
        problems += command_problems(str(path.relative_to(root)), text, known)
    return problems


def test_every_link_and_command_in_the_docs_exists():
    problems = check()
    assert not problems, "\n".join(problems)


def test_the_docs_hold_commands_and_links_to_check():
    """The checker sees what the pages hold: if it found nothing, the test above could not fail."""
    known = subcommand_flags(build_parser())
    seen = {cmd.split()[1] for p in doc_files() for cmd in commands(p.read_text())}
    assert (
        {
            "decompose",
            "sweep",
            "status",
            "report",
            "track",
            "variants",
            "evaluate",
            "stats",
            "compare",
            "bands",
            "channels",
            "channel-stats",
        }
        <= seen
        <= set(known)
    )
    readme = (ROOT / "README.md").read_text()
    assert sum(1 for _ in LINK.finditer(readme)) >= 15


def test_the_checker_reports_a_bad_flag_a_bad_subcommand_and_bad_links(tmp_path):
    """Negative check: a made-up page with one of each fault, and the forms that must pass."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other page\n\n## Some `code` heading: yes!\n")
    (tmp_path / "README.md").write_text(
        "# Title\n\n"
        "Good: [page](docs/other.md), [anchor](docs/other.md#some-code-heading-yes), [self](#title), "
        "[web](https://example.org/x), `grrr-stream decompose --store=DIR --compute-dtype=float64 ...`,\n"
        "`grrr-stream variants --rest-from base|post|auto --dtype DTYPE`.\n\n"
        "Bad: [gone](docs/missing.md), [no heading](docs/other.md#nowhere), `grrr-stream sweep CONFIG\n"
        "--dry-run --no-such-flag`, `grrr-stream frobnicate X`, ``tags.`grrr.sweep` = 'NAME'``.\n\n"
        "```bash\n"
        "grrr-stream decompose --base BASE --post POST \\\n"
        "    --store DIR --compute-dtpye float64   # --not-checked in a comment\n"
        "cd WORKDIR && grrr-stream status CONFIG --all\n"
        "grrr-stream variants --store S --out D [--rest-from base|pre]\n"
        "```\n"
    )
    problems = check(tmp_path)
    assert len(problems) == 6, problems
    text = "\n".join(problems)
    assert "docs/missing.md: no such file" in text
    assert "no heading #nowhere in other.md" in text
    assert "sweep has no flag --no-such-flag" in text
    assert "no subcommand 'frobnicate'" in text
    assert "decompose has no flag --compute-dtpye" in text
    assert "--rest-from takes ['auto', 'base', 'post'], not 'pre'" in text


def test_github_anchors():
    assert (
        github_anchor("Near-degenerate singular values (`f_degenerate`)")
        == "near-degenerate-singular-values-f_degenerate"
    )
    assert github_anchor("When MLflow is down: logged later") == "when-mlflow-is-down-logged-later"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}
