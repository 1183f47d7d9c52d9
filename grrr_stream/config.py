"""Validated configuration for a decomposition run.

Imports neither torch, zarr nor mlflow, so that validating a config is instant.
Settings split into two kinds: those that change results (they enter
:func:`result_settings` and the store's settings hash) and those that do not
(device, progress display, tracking). Changing the first kind makes a resumed run
refuse to mix old and new results; changing the second reuses them.

The settings of an evaluation's engine and sampling live in :mod:`.evaluation.settings`, a sweep's
in :mod:`.sweep.config`; both build on :class:`StrictModel` and the loaders here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .dtypes import COMPUTE_NAMES, FLOAT_NAMES
from .errors import ConfigError
from .geometry.analyses import AnalysisOptions, profile_values, result_parts
from .geometry.analyses.base import sorted_positive  # noqa: F401 (the settings models' shared check)

DEFAULT_MODULES: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# the dtype choices come from the one dtype table (Literal of a tuple: one choice per name)
FloatDtype = Literal[COMPUTE_NAMES]
StoreDtype = Literal[FLOAT_NAMES]

# Near-degenerate singular values (grrr_stream.geometry.frame.compute_frame): neighbours of W0's spectrum within this
# share of σ₁ make a float32 frame be computed in float64, and bound the clusters of the f_degenerate column
DEGENERATE_GAP = 1e-6

_DEVICE_RE = re.compile(r"auto|cpu|cuda(:\d+)?")  # fullmatch: a trailing newline is no device


class StrictModel(BaseModel):
    """Settings refuse unknown keys (a misspelt option is an error, not a silent default), infinities and NaN (every
    number a setting takes is finite: ``.inf`` or ``.nan`` in YAML fail at the edge, not in a unit) and are frozen (a
    result's key is taken from them)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# Seeds go to numpy, torch, Python's random and vLLM: numpy's legacy seeding and vLLM take 0..2^32−1, and a seed
# outside it (−1, 10^20) is refused with its key path instead of failing deep inside a unit
SEED_MAX = 2**32 - 1
Seed = Annotated[int, Field(ge=0, le=SEED_MAX)]
COUNT_MAX = 2**31 - 1  # the most of anything a setting counts (problems, tokens): int32, as the arrays holding them
# The most bootstrap resamples, null draws or random sets any setting takes: 100 times the default 10 000, whose
# intervals already move in the third digit. A count past it (10^12 typed for 10^4) would run for days in silence.
MAX_DRAWS = 1_000_000


DEFAULT_SFT_METHODS = ("SFT", "distillation", "distill")


class ClaimSettings(StrictModel):
    """The paper's headline statistics over evaluated transitions (:mod:`grrr_stream.stats.claims_sets`): their
    thresholds (the paper's values by default) and the joint bootstrap's settings; a sweep's ``claims``."""

    within_points: float = Field(4.3, ge=0.0)  # "stays within k points of full" (informative set)
    informative_points: float = Field(1.0, ge=0.0)  # informative: full − base ≥ this
    retention_floor_pct: float = Field(95.0, ge=0.0)  # "retention ≥ 95 % in 22 of 28" (all evaluated)
    retention_second_floor_pct: float = Field(92.0, ge=0.0)  # "≥ 92 % in 25 of 28"
    retention_ceiling_pct: float = Field(25.0, ge=0.0)  # "the diagonal alone retains at most 25 % in 6 of 11"
    # a child whose method is one of these (case-insensitive) is in group SFT; any other named method in
    # group RL (DPO, PPO, GRPO, GPPO, PRIME, ... as the paper counts them); no method: group 'all' only
    sft_methods: list[str] = Field(default_factory=lambda: list(DEFAULT_SFT_METHODS))
    resamples: int = Field(10_000, ge=100, le=MAX_DRAWS)
    seed: Seed = 0
    level: float = Field(0.95, gt=0.0, lt=1.0)


class TrackingConfig(StrictModel):
    """Where and whether results are logged to MLflow."""

    enabled: bool = True
    # None: $MLFLOW_TRACKING_URI if set, else sqlite:///mlflow.db in the working directory.
    uri: Optional[str] = None
    experiment: str = "grrr_stream"
    # The sweep a run belongs to (tag grrr.sweep); a sweep sets it to its name for its units.
    # A label only: it never enters a result key.
    sweep: Optional[str] = None
    # Refuse to start when the tracking target cannot be reached (default: say so, do the work, and
    # record what was not logged for a later `grrr-stream track`).
    required: bool = False
    # Seconds to connect to a tracking server and to wait for each answer, and further attempts after
    # a failed request (1 s, 2 s, ... apart): an unreachable server costs seconds, not MLflow's minutes.
    timeout_s: int = Field(10, ge=1, le=600)
    retries: int = Field(1, ge=0, le=10)
    # Contact no server: record what each run would log (beside its result) for `grrr-stream track`.
    # Commands switch to it when the target was unreachable at their start.
    record_only: bool = False
    # Where missed logging is recorded (None: a `.tracking` folder in the result's folder; a sweep
    # uses WORKDIR/.sweep/tracking).
    pending_dir: Optional[str] = None
    # Set by a sweep for its units: record what to log in pending_dir and go on; the sweep's process
    # logs it in the background, so a slow server never holds up the next unit's work.
    defer: bool = False


# What each analysis profile sets where the settings leave it unset (explicit settings win). The fields'
# own defaults are the full profile's: every analysis on. The default profile, standard, leaves out the
# exact subspace angles, the one analysis that costs a large share of a decomposition (docs/benchmarks.md).
# paper: only what the paper needs. The transition's own figures are drawn in the full profile only: they cost
# a noticeable share of a small model's run, and a sweep's report draws its figures from the stores anyway.
# What each profile sets of an analysis's settings is the analysis's own (grrr_stream.geometry.analyses).
PROFILES: dict[str, dict[str, Any]] = {
    "full": profile_values("full"),
    "standard": {**profile_values("standard"), "figures": False},
    "paper": {**profile_values("paper"), "figures": False},
}
DEFAULT_PROFILE = "standard"


class DecompositionSettings(StrictModel, AnalysisOptions):
    """How matrices are decomposed: one transition's, or every transition's of a sweep. The settings of the
    analyses beyond the paper (band_edges, angle_edges, survival_dtype, channel_energy, ...) are each
    analysis's own (:class:`grrr_stream.geometry.analyses.AnalysisOptions`)."""

    # Which analyses beyond the GRRR split run where their own settings are not given (PROFILES). Not a
    # result setting itself: what it resolves to (band_edges, angle_edges, ...) is.
    profile: Literal["standard", "full", "paper"] = DEFAULT_PROFILE
    device: str = "auto"
    compute_dtype: FloatDtype = "float32"
    store_dtype: StoreDtype = "float32"
    # Shrink the pretrained core to singular values > threshold * sigma_1 (None: r = min(m, n)).
    core_rel_threshold: Optional[float] = None
    rank_thresholds: tuple[float, ...] = (1e-7, 1e-3)
    modules: tuple[str, ...] = DEFAULT_MODULES
    # Regex with named groups 'layer' and 'module' matched against tensor names;
    # overrides the family's built-in pattern.
    module_pattern: Optional[str] = None
    # Phi-3-style fused qkv_proj / gate_up_proj: decomposed as stored (False), or split into their
    # logical q/k/v and gate/up row blocks (from config.json head counts and intermediate size)
    # for comparison with unfused models (docs/architectures.md)
    split_fused: bool = False
    # On resume, re-read and digest the tensors of completed matrices to prove the inputs
    # are unchanged (the checkpoint fingerprint only samples the files). Costs one read.
    verify_resume: bool = True
    # 'array' keeps the null residual ΔW − U0 P V0ᵀ as an m×n array (the default: it is part of what
    # the store is for); 'norms' keeps only its row and column norms, for users short of disk (about
    # half of a store). Variants then recompute it from the checkpoints and the frame; statistics that
    # need the array (increments between transitions) refuse such stores.
    null_storage: Literal["array", "norms"] = "array"
    # cuSOLVER routine for the SVDs on a GPU (None: torch's choice); ignored on CPU. tools/gpu_check.sh
    # times them on the largest shapes and names the fastest one that meets the accuracy bar.
    svd_driver: Optional[Literal["gesvd", "gesvdj", "gesvda"]] = None
    # Neighbouring singular values of W0 within degenerate_gap·σ₁ form a near-degenerate cluster: f_degenerate
    # reports P's energy inside such clusters, and a float32 run computes that matrix's frame in float64
    # (docs/statistics.md, "Near-degenerate singular values"). None: neither.
    degenerate_gap: Optional[float] = DEGENERATE_GAP
    # The transition's three PNG figures in <store>/figures (f_diag/f_off/f_null by layer, band energy by module,
    # the most changed spectra), which MLflow logs with its run: a noticeable share of a small model's decomposition
    # (docs/benchmarks.md). On in the full profile, off in the others (PROFILES). Not a
    # result setting.
    figures: bool = True
    # torch's intra-op threads for the math on a CPU (None: automatic, see decompose.streaming.compute_layout;
    # setting it runs one matrix at a time).
    # Not a result setting: LAPACK's results do not depend on it beyond rounding.
    cpu_threads: Optional[int] = Field(None, ge=1, le=4096)

    @model_validator(mode="before")
    @classmethod
    def _profile(cls, data: Any) -> Any:
        """The profile's settings for the analyses the values leave unset (an unknown profile is left to the
        field's own check)."""
        if not isinstance(data, dict):
            return data
        chosen = PROFILES.get(data.get("profile", DEFAULT_PROFILE), {})
        return {**{k: v for k, v in chosen.items() if k not in data}, **data}

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not _DEVICE_RE.fullmatch(v):
            raise ValueError("must be 'auto', 'cpu', 'cuda' or 'cuda:N'")
        return v

    @field_validator("core_rel_threshold")
    @classmethod
    def _threshold(cls, v: Optional[float]) -> Optional[float]:
        if v is not None and not (0.0 < v < 1.0):
            raise ValueError("must lie strictly between 0 and 1 (a fraction of sigma_1)")
        return v

    @field_validator("degenerate_gap")
    @classmethod
    def _degenerate_gap(cls, v: Optional[float]) -> Optional[float]:
        if v is not None and not (0.0 < v < 1.0):
            raise ValueError("must lie strictly between 0 and 1 (a fraction of sigma_1), or be null")
        return v

    @field_validator("rank_thresholds")
    @classmethod
    def _rank_thresholds(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not v:
            raise ValueError("needs at least one threshold")
        bad = [t for t in v if not (0.0 < t < 1.0)]
        if bad:
            raise ValueError(f"thresholds must lie strictly between 0 and 1, got {bad}")
        return tuple(sorted(set(v)))

    @field_validator("modules")
    @classmethod
    def _modules(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("needs at least one module name")
        if len(set(v)) != len(v):
            raise ValueError("module names must be unique")
        return v

    @field_validator("module_pattern")
    @classmethod
    def _pattern(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        try:
            rx = re.compile(v)
        except re.error as e:
            raise ValueError(f"not a valid regular expression: {e}") from None
        missing = {"layer", "module"} - set(rx.groupindex)
        if missing:
            raise ValueError(f"needs named groups (?P<layer>...) and (?P<module>...); missing {sorted(missing)}")
        return v


class DecomposeConfig(DecompositionSettings):
    """One transition: base checkpoint (W0) → post-trained checkpoint (W1)."""

    base: str = Field(description="local folder or Hub repo id of the reference model (W0)")
    post: str = Field(description="local folder or Hub repo id of the post-trained model (W1)")
    store: Path = Field(description="Zarr store directory for this transition")
    base_revision: Optional[str] = None
    post_revision: Optional[str] = None
    # Base-frame cache shared between transitions of the same base; default <store>/frames.
    frame_cache: Optional[Path] = None

    method: Optional[str] = Field(None, description="label of the post-training method (SFT, DPO, GRPO, ...)")
    chain: Optional[str] = Field(None, description="label of the chain this transition belongs to")
    label: Optional[str] = Field(
        None, description="the transition's name in MLflow and figures (default: 'BASE → POST', the folders' names)"
    )

    overwrite: bool = False
    progress: bool = True
    # Where the matrices are computed (grrr_stream.runtime.cluster): threads (this process, default), local:N (a
    # LocalCluster of N worker processes) or the address of a running Dask scheduler. Not a result setting:
    # a spread run writes what a one-process run with the same compute threads writes.
    scheduler: Optional[str] = None
    # Close every timed phase with a device synchronisation (benchmarks on a GPU: without it the
    # asynchronous kernels are charged to whichever phase waits for them). Slows a GPU run slightly.
    sync_timing: bool = False
    tracking: TrackingConfig = TrackingConfig()

    def frame_cache_path(self) -> Path:
        return self.frame_cache if self.frame_cache is not None else self.store / "frames"


def result_settings(cfg: DecompositionSettings) -> dict[str, Any]:
    """Settings that change stored numbers (inputs are fingerprinted separately)."""
    out: dict[str, Any] = {
        "compute_dtype": cfg.compute_dtype,
        "store_dtype": cfg.store_dtype,
        "core_rel_threshold": cfg.core_rel_threshold,
        "rank_thresholds": list(cfg.rank_thresholds),
        "modules": list(cfg.modules),
        "module_pattern": cfg.module_pattern,
    }
    # an analysis's settings at their defaults stay out (each analysis declares them): the stores and keys of
    # earlier runs keep their identity
    groups, alone = result_parts(cfg)
    if cfg.split_fused:  # only when set: the stores and keys of earlier runs keep their identity
        out["split_fused"] = True
    out.update(groups)
    if cfg.null_storage != "array":
        out["null_storage"] = cfg.null_storage
    if cfg.svd_driver is not None:
        out["svd_driver"] = cfg.svd_driver
    if cfg.degenerate_gap != DEGENERATE_GAP:  # the default stays out: earlier stores and sweep keys keep theirs
        out["degenerate_gap"] = cfg.degenerate_gap
    out.update(alone)
    return out


def stable_hash(obj: Any, length: int = 16) -> str:
    """Hex digest of a JSON-serialisable object, independent of key order."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def settings_hash(cfg: DecomposeConfig) -> str:
    return stable_hash(result_settings(cfg))


def format_validation_error(err: ValidationError, source: str, origin: Optional[Callable[[tuple], str]] = None) -> str:
    """Every problem on a line of its own: its key path, and the file that holds the value when ``origin``
    (key path → file) names another file than ``source`` (an included config)."""
    lines = [f"invalid configuration ({source}), {err.error_count()} problem(s):"]
    for e in err.errors()[:30]:
        loc = clip(".".join(str(p) for p in e["loc"]) or "(top level)", 120)
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check its spelling; see docs/decomposition.md and docs/sweeps.md for the options)"
        held = origin(tuple(e["loc"])) if origin is not None else source
        where = "" if held == source else f" (set in {clip(held, 300)})"
        lines.append(f"  - {loc}{where}: {clip(msg, 300)}")
    if err.error_count() > 30:
        lines.append(f"  ... and {err.error_count() - 30} more")
    return "\n".join(lines)


def build_config(values: dict[str, Any], source: str = "arguments") -> DecomposeConfig:
    """Validate a dict into a config, reporting every problem at once as a ConfigError."""
    try:
        return DecomposeConfig.model_validate(values)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source)) from None


MAX_CONFIG_BYTES = 1 << 20  # a sweep over hundreds of models is a few kB
MAX_CONFIG_VALUES = 100_000  # counted with YAML aliases expanded: an "alias bomb" stops here
MAX_CONFIG_DEPTH = 40


def load_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping from a file; every way the file can be wrong is one ConfigError."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"config file {path} is not a regular file")
    if st.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path} is {st.st_size} bytes; a config is at most {MAX_CONFIG_BYTES} bytes")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path} is not UTF-8 text (bad byte at offset {e.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {clip(str(e), 500)}") from None
    except RecursionError:
        raise ConfigError(f"config file {path} is nested too deeply") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of options at the top level")
    _check_extent(data, path)
    return data


def _check_extent(data: Any, path: Path) -> None:
    """Refuse documents that nest too deeply or expand (through aliases) past a sane size."""
    count = 0
    stack = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_CONFIG_VALUES:
            raise ConfigError(
                f"config file {path} expands to more than {MAX_CONFIG_VALUES} values (YAML aliases "
                "repeating large parts?); refusing it"
            )
        if depth > MAX_CONFIG_DEPTH:
            raise ConfigError(f"config file {path} nests deeper than {MAX_CONFIG_DEPTH} levels")
        if isinstance(node, dict):
            stack += [(v, depth + 1) for v in node.values()] + [(k, depth + 1) for k in node]
        elif isinstance(node, list):
            stack += [(v, depth + 1) for v in node]


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more characters)"


def load_config(path: Optional[Path] = None, **overrides: Any) -> DecomposeConfig:
    """Config from an optional YAML file, with non-None keyword overrides on top."""
    values: dict[str, Any] = load_yaml(path) if path is not None else {}
    for key, val in overrides.items():
        if val is not None:
            values[key] = val
    return build_config(values, source=str(path) if path else "arguments")
