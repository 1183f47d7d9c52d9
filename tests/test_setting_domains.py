"""Every numeric setting has a domain, checked at the edge: each number a sweep's YAML takes, reached by walking the
config models (not listed by hand, so a new setting is covered), refuses NaN and infinities (floats), 10^20 and −1
(integers: seeds fit numpy's and vLLM's 0..2^32−1, counts int32), with its key path, when the config is validated and
before any unit is planned. Values inside containers (thresholds per variant, ablation seeds) are tried by name."""

from __future__ import annotations

import copy
import math
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from grrr_stream.sweep.config import SweepConfig

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[1]
DEMO = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
# the only settings a negative value is meaningful for (a difference to full in points is below it)
NEGATIVE_OK: set[str] = set()


def _leaves(t) -> list:
    args = typing.get_args(t)
    if typing.get_origin(t) is typing.Annotated:
        return _leaves(args[0])
    return [t] if not args else [x for a in args for x in _leaves(a)]


def _numeric_fields(model: type[BaseModel], path: tuple = (), seen=None):
    """(key path, 'int' | 'float') of every scalar number a config takes, nested models followed."""
    seen = seen if seen is not None else set()
    for name, f in model.model_fields.items():
        origin = typing.get_origin(f.annotation)
        container = origin in (list, tuple, dict, set, frozenset)
        for t in _leaves(f.annotation):
            if isinstance(t, type) and issubclass(t, BaseModel) and not container and (t, path) not in seen:
                seen.add((t, path))
                yield from _numeric_fields(t, (*path, name), seen)
            elif t in (int, float) and not container:
                yield (*path, name), t.__name__


FIELDS = sorted(set(_numeric_fields(SweepConfig)))


def _with(path: tuple, value) -> dict:
    cfg = copy.deepcopy(DEMO)
    node = cfg
    for k in path[:-1]:
        node = node.setdefault(k, {}) if isinstance(node.get(k, {}), dict) else node[k]
    node[path[-1]] = value
    return cfg


def _refused(path: tuple, value) -> str:
    with pytest.raises(ValidationError) as e:
        SweepConfig.model_validate(_with(path, value))
    return str(e.value)


def test_the_walk_finds_the_settings_it_should():
    names = {".".join(p) for p, _ in FIELDS}
    assert {"evaluation.adaptive.seed", "evaluation.adaptive.growth", "tinychain.seed", "statistics.alpha",
            "channels.threshold", "decomposition.cpu_threads", "evaluation.engine.max_new_tokens"} <= names  # fmt: skip
    assert len(FIELDS) >= 40


@pytest.mark.parametrize("path,kind", FIELDS, ids=[".".join(p) for p, _ in FIELDS])
def test_every_number_has_a_domain(path, kind):
    key = ".".join(path)
    bad = [math.nan, math.inf, -math.inf] if kind == "float" else [10**20, -(10**20)]
    if key not in NEGATIVE_OK:
        bad.append(-1 if kind == "int" else -1.0)
    for value in bad:
        assert key in _refused(path, value), (key, value)


@pytest.mark.parametrize(
    "path,value",
    [
        (("evaluation", "adaptive", "retention_pct"), {"diag": [-5.0]}),
        (("evaluation", "adaptive", "retention_pct"), {"diag": [math.nan]}),
        (("evaluation", "adaptive", "difference_points"), {"diag": [math.inf]}),
        (("evaluation", "adaptive", "difference_points"), {"diag": [-400.0]}),
        (("evaluation", "adaptive", "retention_precision_pct"), {"diag": -1.0}),
        (("evaluation", "adaptive", "variant_precision_points"), {"diag": math.nan}),
        (("evaluation", "sampling", "pass_k"), [0]),
        (("decomposition", "rank_thresholds"), [math.nan]),
        (("decomposition", "band_edges"), [-3]),
        (("channels", "ablation_seeds"), [-1]),
        (("channels", "ablation_seeds"), [10**20]),
    ],
)
def test_numbers_inside_containers_have_a_domain(path, value):
    assert ".".join(path) in _refused(path, value)


def test_a_per_variant_pattern_that_matches_no_variant_is_refused_with_the_names(tmp_path):
    """``adaptive.retention_pct: {dig: …}`` (diag misspelt) would silently compare no variant with 25 %: the plan
    refuses it, naming the setting and the variants it could have matched; the defaults, which name variants a sweep
    may not evaluate, are not refused."""
    from grrr_stream.errors import ConfigError
    from grrr_stream.sweep import plan_sweep
    from grrr_stream.sweep.config import load_sweep_config

    cfg = load_sweep_config(ROOT / "configs" / "demo_adaptive.yaml", workdir=tmp_path / "w")
    assert plan_sweep(cfg).units  # the shipped settings plan
    data = cfg.model_dump(mode="json")
    # and so does the config as a sweep saves it (report/config.json), which spells every default out
    assert plan_sweep(SweepConfig.model_validate(data)).units
    data["extra_evaluations"][0]["adaptive"]["retention_pct"] = {"dig": [25.0]}
    data["extra_evaluations"][0]["adaptive"]["variant_precision_points"] = {
        "randrm-*": 4.0,
        "of*": 3.0,
        "no-off-*": 3.0,
    }
    with pytest.raises(ConfigError) as e:
        plan_sweep(SweepConfig.model_validate(data))
    text = str(e.value)
    assert "adaptive.retention_pct: 'dig' matches no evaluated variant (they are base, full, proj" in text
    assert "'no-off-*' matches no" in text and "'of*'" not in text and "'randrm-*'" not in text
