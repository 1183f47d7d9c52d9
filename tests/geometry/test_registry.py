"""The registry of analyses beyond the paper (grrr_stream.geometry.analyses.ANALYSES): the settings, profiles,
result settings and columns each analysis declares are what the rest of the package uses."""

from __future__ import annotations

import subprocess
import sys

from grrr_stream.columns import REPORT, SUMMARY
from grrr_stream.config import PROFILES, DecompositionSettings, result_settings
from grrr_stream.geometry.analyses import ANALYSES, MATRIX_COLUMNS


def test_validating_a_config_loads_no_torch():
    """The settings import the registry: its modules must import torch inside their functions only."""
    code = (
        "import sys; from grrr_stream.config import DecompositionSettings; DecompositionSettings(profile='paper'); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_every_analysis_setting_is_a_decomposition_setting_with_its_profiles():
    fields = DecompositionSettings.model_fields
    for a in ANALYSES:
        for name in a.settings.model_fields if a.settings else {}:
            assert name in fields, (a.name, name)
        for profile, values in a.profiles.items():
            got = DecompositionSettings(profile=profile)
            for name, value in values.items():
                assert PROFILES[profile][name] == value and getattr(got, name) == value, (a.name, profile, name)


def test_result_defaults_are_the_fields_defaults():
    """A setting at the value its analysis keeps out of the result settings leaves the key alone; a changed field
    default would silently change every new store's key (or reuse old ones), so the two must agree."""
    full = DecompositionSettings(profile="full")
    assert set(result_settings(full)) == {
        "compute_dtype",
        "store_dtype",
        "core_rel_threshold",
        "rank_thresholds",
        "modules",
        "module_pattern",
    }
    for a in ANALYSES:
        for name, default in a.result_defaults.items():
            value = getattr(full, name)
            assert (list(value) if isinstance(value, tuple) else value) == default, (a.name, name)
            changed = result_settings(DecompositionSettings(profile="full", **{name: _other(value)}))
            assert changed != result_settings(full), (a.name, name)


def _other(value):
    """Another valid value of a setting: flipped, another edge, one more (a count), off (a dtype), on (an optional
    count, off by default)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, tuple):
        return (3,) if value != (3,) else (5,)
    return 1 if value is None else None


def test_each_column_belongs_to_one_analysis():
    cols = [
        "band16_diag_principal",
        "angle16_left_max_deg",
        "bfloat16_kept_off",
        "float16_kept_null",
        "f_degenerate",
        "frac_unchanged",
        "sparsity_compare",
        "f_diag",
        "nrank_w0_0.001",
    ]
    owners = {c: [a.name for a in ANALYSES if any(col.member(c) for col in a.columns)] for c in cols}
    assert all(len(v) == 1 for c, v in owners.items() if c not in ("f_diag", "nrank_w0_0.001")), owners
    assert owners["f_diag"] == [] and owners["nrank_w0_0.001"] == []
    assert [c.name for c in MATRIX_COLUMNS.present(cols, REPORT)] == cols[:4] + ["frac_unchanged", "sparsity_compare"]
    assert [c.name for c in MATRIX_COLUMNS.present(cols, SUMMARY)] == [c for c in cols if c != "sparsity_compare"]
