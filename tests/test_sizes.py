"""Every module of grrr_stream is at most 400 lines and every function at most 60 (from its first decorator to its
last line, docstring included): a module or function past them is split along a seam, not let grow."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "grrr_stream"
MODULE_LINES, FUNCTION_LINES = 400, 60


def oversized(root: Path) -> list[str]:
    """'path: N lines' for each module over MODULE_LINES, 'path:line name: N lines' for each function over
    FUNCTION_LINES."""
    found = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        if (lines := len(source.splitlines())) > MODULE_LINES:
            found.append(f"{path.relative_to(root)}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if (length := node.end_lineno - start + 1) > FUNCTION_LINES:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {length} lines")
    return found


def test_no_module_or_function_is_oversized():
    assert oversized(PKG) == []


def test_the_size_check_bites(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    (tmp_path / "long.py").write_text(f"@staticmethod\ndef f():\n{body}\n" + "\n" * 340)
    (tmp_path / "short.py").write_text("def g():\n    return 1\n")
    assert oversized(tmp_path) == ["long.py: 402 lines", "long.py:2 f: 62 lines"]
