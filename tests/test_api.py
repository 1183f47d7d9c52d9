"""The public API (docs/api.md): every documented name imports from `grrr_stream`, the list and
`grrr_stream.__all__` agree, and `import grrr_stream` alone imports no heavy dependency."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import grrr_stream

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTED = re.findall(r"^### `(\w+)`", (ROOT / "docs" / "api.md").read_text(), flags=re.M)


def test_documented_names_are_the_exported_ones():
    assert len(DOCUMENTED) == len(set(DOCUMENTED)), "a name documented twice"
    assert sorted(DOCUMENTED) == sorted(grrr_stream.__all__)


@pytest.mark.parametrize("name", DOCUMENTED)
def test_name_imports(name):
    if name in ("open_store", "read_metrics", "metrics_dataset"):
        pytest.importorskip("xarray")
    value = getattr(grrr_stream, name)
    assert callable(value), name
    exec(f"from grrr_stream import {name}", {})


def test_unknown_name_refused():
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        grrr_stream.no_such_name  # noqa: B018


def test_import_is_light():
    code = (
        "import sys, grrr_stream; "
        "print(sorted(m for m in ('torch', 'zarr', 'dask', 'xarray', 'mlflow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
