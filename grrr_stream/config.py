"""Validated configuration for a decomposition run.

Imports neither torch, zarr nor mlflow, so that validating a config is instant.
Settings split into two kinds: those that change results (they enter
:func:`result_settings` and the store's settings hash) and those that do not
(device, progress display, tracking). Changing the first kind makes a resumed run
refuse to mix old and new results; changing the second reuses them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ConfigError
from .files import COMPONENT_RE

DEFAULT_MODULES: tuple[str, ...] = (
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
)

FloatDtype = Literal["float32", "float64"]
StoreDtype = Literal["float16", "bfloat16", "float32", "float64"]

_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def _sorted_positive(v: tuple[int, ...], message: str) -> tuple[int, ...]:
    if any(k < 1 for k in v):
        raise ValueError(message)
    return tuple(sorted(set(v)))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TrackingConfig(_Strict):
    """Where and whether results are logged to MLflow."""

    enabled: bool = True
    # None: $MLFLOW_TRACKING_URI if set, else sqlite:///mlflow.db in the working directory.
    uri: Optional[str] = None
    experiment: str = "grrr_stream"
    # The sweep a run belongs to (tag grrr.sweep); a sweep sets it to its name for its units.
    # A label only: it never enters a result key.
    sweep: Optional[str] = None


def tracking_config(value: "TrackingConfig | dict | None") -> Optional[TrackingConfig]:
    """The TrackingConfig a library caller passes, as one (None or an empty dict: not tracked; a dict
    holds its fields, as from a YAML file)."""
    if isinstance(value, TrackingConfig):
        return value
    return TrackingConfig.model_validate(value) if value else None


class DecompositionSettings(_Strict):
    """How matrices are decomposed: one transition's, or every transition's of a sweep."""

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
    # for comparison with unfused models (README, "Architectures")
    split_fused: bool = False
    # On resume, re-read and digest the tensors of completed matrices to prove the inputs
    # are unchanged (the checkpoint fingerprint only samples the files). Costs one read.
    verify_resume: bool = True
    # Beyond the paper, in the same pass: energy of P by principal band (top-k of σ(W0)) for these
    # edges, principal angles between the top-k singular subspaces of W0 and W1 for the angle edges,
    # and how much of each component survives W0 + component stored in survival_dtype (None: skip).
    # An empty tuple skips bands or angles.
    band_edges: tuple[int, ...] = (16, 64, 256)
    # k of the subspace angles (the cost grows with the largest k: (16, 64) measured 8.6 % of a
    # decomposition on Qwen2.5-1.5B shapes; README, "Beyond the paper")
    angle_edges: tuple[int, ...] = (16, 64)
    survival_dtype: Optional[Literal["bfloat16", "float16"]] = "bfloat16"
    # 'array' keeps the null residual ΔW − U0 P V0ᵀ as an m×n array (the default: it is part of what
    # the store is for); 'norms' keeps only its row and column norms, for users short of disk (about
    # half of a store). Variants then recompute it from the checkpoints and the frame; statistics that
    # need the array (increments between transitions) refuse such stores.
    null_storage: Literal["array", "norms"] = "array"
    # cuSOLVER routine for the SVDs on a GPU (None: torch's choice); ignored on CPU. tools/gpu_check.sh
    # times them on the largest shapes and names the fastest one that meets the accuracy bar.
    svd_driver: Optional[Literal["gesvd", "gesvdj", "gesvda"]] = None
    # torch's intra-op threads for the math on a CPU (None: automatic, see decompose.compute_threads).
    # Not a result setting: LAPACK's results do not depend on it beyond rounding.
    cpu_threads: Optional[int] = Field(None, ge=1)

    @field_validator("band_edges", "angle_edges")
    @classmethod
    def _edges(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        return _sorted_positive(v, "band and angle edges must be positive integers (numbers of principal directions)")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not _DEVICE_RE.match(v):
            raise ValueError("must be 'auto', 'cpu', 'cuda' or 'cuda:N'")
        return v

    @field_validator("core_rel_threshold")
    @classmethod
    def _threshold(cls, v: Optional[float]) -> Optional[float]:
        if v is not None and not (0.0 < v < 1.0):
            raise ValueError("must lie strictly between 0 and 1 (a fraction of sigma_1)")
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

    overwrite: bool = False
    progress: bool = True
    # Where the matrices are computed (grrr_stream.cluster): threads (this process, default), local:N (a
    # LocalCluster of N worker processes) or the address of a running Dask scheduler. Not a result setting:
    # a spread run writes what a one-process run with the same compute threads writes.
    scheduler: Optional[str] = None
    # Close every timed phase with a device synchronisation (benchmarks on a GPU: without it the
    # asynchronous kernels are charged to whichever phase waits for them). Slows a GPU run slightly.
    sync_timing: bool = False
    tracking: TrackingConfig = TrackingConfig()

    def frame_cache_path(self) -> Path:
        return self.frame_cache if self.frame_cache is not None else self.store / "frames"


_ANALYSES_DEFAULT = {"band_edges": [16, 64, 256], "angle_edges": [16, 64], "survival_dtype": "bfloat16"}


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
    analyses = {"band_edges": list(cfg.band_edges), "angle_edges": list(cfg.angle_edges),
                "survival_dtype": cfg.survival_dtype}
    if cfg.split_fused:  # only when set: the stores and keys of earlier runs keep their identity
        out["split_fused"] = True
    if analyses != _ANALYSES_DEFAULT:  # defaults stay out: stores and keys of earlier runs keep their identity
        out["analyses"] = analyses
    if cfg.null_storage != "array":
        out["null_storage"] = cfg.null_storage
    if cfg.svd_driver is not None:
        out["svd_driver"] = cfg.svd_driver
    return out


def stable_hash(obj: Any, length: int = 16) -> str:
    """Hex digest of a JSON-serialisable object, independent of key order."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def settings_hash(cfg: DecomposeConfig) -> str:
    return stable_hash(result_settings(cfg))


def format_validation_error(err: ValidationError, source: str) -> str:
    lines = [f"invalid configuration ({source}), {err.error_count()} problem(s):"]
    for e in err.errors()[:30]:
        loc = clip(".".join(str(p) for p in e["loc"]) or "(top level)", 120)
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check its spelling; see README for the options)"
        lines.append(f"  - {loc}: {clip(msg, 300)}")
    if err.error_count() > 30:
        lines.append(f"  ... and {err.error_count() - 30} more")
    return "\n".join(lines)


def build_config(values: dict[str, Any], source: str = "arguments") -> DecomposeConfig:
    """Validate a dict into a config, reporting every problem at once as a ConfigError."""
    try:
        return DecomposeConfig.model_validate(values)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source)) from None


MAX_CONFIG_BYTES = 1 << 20   # a sweep over hundreds of models is a few kB
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
            raise ConfigError(f"config file {path} expands to more than {MAX_CONFIG_VALUES} values (YAML aliases "
                              "repeating large parts?); refusing it")
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


class EngineSettings(_Strict):
    """vLLM engine and decoding options; every field is recorded with each evaluation result."""

    # float32 by default: a bf16 engine rounds W0 + ΔW_component and can erase RL-sized updates.
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    max_new_tokens: int = Field(3000, ge=1)
    seed: int = 0
    tensor_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0.0, le=1.0)
    max_model_len: Optional[int] = Field(None, ge=16)
    enforce_eager: bool = False
    # CPU backend only: KV cache size in GiB (vLLM's default sizing fails on small machines)
    cpu_kv_cache_gib: float = Field(1.0, gt=0.0)

    def result_fields(self) -> dict:
        """Settings that can change generations (everything but memory knobs)."""
        return {"dtype": self.dtype, "max_new_tokens": self.max_new_tokens, "seed": self.seed,
                "tensor_parallel_size": self.tensor_parallel_size, "max_model_len": self.max_model_len,
                "enforce_eager": self.enforce_eager}




class SamplingSettings(_Strict):
    """How many answers per problem and how they are drawn; greedy (one answer at temperature 0) by
    default, as the paper evaluates. ``pass_k`` and ``maj_k`` choose the pass@k and maj@k reported
    besides avg@n (mean accuracy over the n samples)."""

    n: int = Field(1, ge=1, le=1024)
    temperature: float = Field(0.0, ge=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int = 0
    pass_k: tuple[int, ...] = ()
    maj_k: tuple[int, ...] = ()

    @field_validator("pass_k", "maj_k")
    @classmethod
    def _ks(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        return _sorted_positive(v, "every k must be at least 1")

    def model_post_init(self, _ctx: Any) -> None:
        too_big = [k for k in (*self.pass_k, *self.maj_k) if k > self.n]
        if too_big:
            raise ValueError(f"k must not exceed n = {self.n}: got {too_big}")
        if self.n > 1 and self.temperature == 0.0:
            raise ValueError("n > 1 samples need temperature > 0 (greedy samples are all the same answer)")

    @property
    def greedy(self) -> bool:
        return self.n == 1 and self.temperature == 0.0

    def metrics(self) -> list[str]:
        """Names of every metric computed: 'avg' (avg@n), 'pass@k', 'maj@k'."""
        return ["avg"] + [f"pass@{k}" for k in self.pass_k] + [f"maj@{k}" for k in self.maj_k]

    def folder_name(self) -> str:
        """A folder name that tells sampled results of these settings apart."""
        return f"sampled-n{self.n}-T{self.temperature:g}-p{self.top_p:g}-s{self.seed}"

    def key_fields(self) -> Optional[dict]:
        """What enters result keys: nothing for greedy decoding (keys of greedy results stay as they were)."""
        if self.greedy:
            return None
        return {"n": self.n, "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}


def check_metric(metric: str, sampling: "SamplingSettings") -> str:
    """``metric`` if the sampling settings compute it ('avg', 'pass@k', 'maj@k'), else a ConfigError."""
    if metric not in sampling.metrics():
        raise ConfigError(f"metric {metric!r} is not computed with these sampling settings; choose one of "
                          f"{', '.join(sampling.metrics())} (pass@k and maj@k need sampling.pass_k / maj_k)")
    return metric


def build_sampling_settings(values: dict[str, Any]) -> SamplingSettings:
    try:
        return SamplingSettings.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, "sampling settings")) from None


def build_engine_settings(values: dict[str, Any]) -> EngineSettings:
    try:
        return EngineSettings.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, "engine settings")) from None


# ---------------------------------------------------------------------------
# sweeps: chains of models → transitions, comparisons, variants, evaluations

_ID_RE = COMPONENT_RE  # ids, suite and benchmark names become folder names
# "cumulative" | "incremental" | "all" | "none" (or null / false) | a list of transition ids
TransitionSelector = Optional[Union[Literal["cumulative", "incremental", "all", "none"], list[str]]]


def _selector(v: Any) -> Any:
    return "none" if v is False or v is None else v


def _component(v: str) -> str:
    if not _ID_RE.match(v):
        raise ValueError("must start with a letter or digit and use only letters, digits, '_', '.', '-' "
                         "(at most 64 characters): it names folders and runs")
    return v


class ModelSpec(_Strict):
    """One checkpoint of a chain. ``source``: local folder, Hub repo id, or ``tinychain:NAME``
    (a model of the built-in tiny trained chain, generated by the sweep)."""

    id: str
    source: str
    revision: Optional[str] = None
    parent: Optional[str] = Field(None, description="id of the model this one was trained from (None: the base)")
    method: Optional[str] = Field(None, description="post-training method label: SFT, DPO, GRPO, distillation, ...")
    domain: Optional[str] = Field(None, description="training domain label: math, chat, code, ...")
    confirmed: bool = Field(True, description="False marks a Hub id that could not be verified")
    note: Optional[str] = None

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        return _component(v)


class ChainSpec(_Strict):
    """A base model and its post-trained descendants, each with its parent (lineage)."""

    name: str
    base: ModelSpec
    models: list[ModelSpec] = Field(default_factory=list)


class SweepDecomposition(DecompositionSettings):
    incremental: bool = True   # parent → child for every child
    cumulative: bool = True    # base → child where the parent is not the base


class SweepStatistics(_Strict):
    enabled: bool = True
    resamples: int = Field(10_000, ge=100)
    null_draws: int = Field(10_000, ge=100)
    seed: int = 0
    alpha: float = Field(0.05, gt=0.0, lt=1.0)
    sequential: bool = True    # base→parent vs parent→child in the base frame, for every grandchild
    independent: bool = True   # every pair of same-base models neither of which descends from the other


def _yaml_variant_names(v: Any) -> Any:
    # YAML 1.1 reads the bare words `off` as false and `null` as None; in a list of
    # variant names they can only mean the variants of those names.
    if isinstance(v, list):
        return ["off" if x is False else "null" if x is None else x for x in v]
    return v


class SweepVariants(_Strict):
    enabled: bool = True
    transitions: TransitionSelector = "cumulative"
    names: list[str] = Field(default_factory=lambda: ["base", "full", "proj", "diag", "off", "null", "offnull",
                                                      "randrm-0", "randrm-1", "randrm-2"])
    dtype: Literal["float32", "float64", "bfloat16", "float16"] = "float32"
    # where composed variants take the tensors that are not decomposed (embeddings, norms,
    # lm_head, biases): the base (the paper's "added to the pretrained checkpoint"), the post
    # model, or auto (base when it can supply them, else post, recorded). base and full are
    # always the two checkpoints themselves.
    rest_from: Literal["base", "post", "auto"] = "base"
    # Write each variant as a Hugging Face folder (a 7B float32 variant is ~28 GB: off by
    # default in large sweeps; evaluation streams variants into the engine either way).
    write_folders: bool = True
    shard_gb: float = Field(2.0, gt=0.0)

    _names = field_validator("names", mode="before")(_yaml_variant_names)
    _transitions = field_validator("transitions", mode="before")(_selector)


class SweepEvaluation(_Strict):
    enabled: bool = True
    # None for the main evaluation; extra evaluations need a name (their units are evaluate/<transition>/<suite>)
    suite: Optional[str] = None
    transitions: TransitionSelector = "cumulative"
    variants: Optional[list[str]] = None  # None: the variants section's names
    benchmarks: list[str] = Field(default_factory=lambda: ["math500", "aime24", "amc23", "minerva_math",
                                                           "olympiadbench"])
    # folder with <name>/test.jsonl, 'bundled' (the five math benchmarks shipped with the package),
    # 'tinychain' (the generated chain's own benchmark), or 'hub[:OWNER/REPO]'
    bench_dir: str = "bundled"
    limit: Optional[int] = Field(None, ge=1)
    lenient: bool = False  # skip (and count) malformed benchmark lines instead of failing the unit
    template: str = "chat"
    instruction: Optional[str] = None
    materialize: Literal["engine", "folder"] = "engine"
    engine: EngineSettings = EngineSettings()
    # answers per problem and how they are drawn (default greedy, as the paper)
    sampling: SamplingSettings = SamplingSettings()
    # the accuracy the tables (Tables 5/6/8, differences, claims) use: avg (avg@n; greedy accuracy when
    # n = 1), pass@k or maj@k
    metric: str = "avg"

    _names = field_validator("variants", mode="before")(_yaml_variant_names)
    _transitions = field_validator("transitions", mode="before")(_selector)

    @field_validator("suite")
    @classmethod
    def _suite(cls, v: Optional[str]) -> Optional[str]:
        return v if v is None else _component(v)

    def model_post_init(self, _ctx: Any) -> None:
        if self.metric not in self.sampling.metrics():
            raise ValueError(f"metric {self.metric!r} is not computed by the sampling settings; choose one of "
                             f"{', '.join(self.sampling.metrics())}")

    @field_validator("benchmarks")
    @classmethod
    def _benchmarks(cls, v: list[str]) -> list[str]:
        for b in v:
            _component(b)
        return v


class SweepClaims(_Strict):
    """The paper's headline sentences over the evaluated transitions, with bootstrap intervals
    (sweep report only: changing these recomputes the report, never a unit)."""

    within_points: float = Field(4.3, ge=0.0)        # "stays within k points of full"
    informative_points: float = Field(1.0, ge=0.0)   # informative: full − base ≥ this
    retention_floor_pct: float = Field(95.0, ge=0.0)  # "retention ≥ 95 % in n of m"
    resamples: int = Field(10_000, ge=100)
    seed: int = 0
    level: float = Field(0.95, gt=0.0, lt=1.0)


class TinyChainSpec(_Strict):
    seed: int = 0
    quick: bool = False


class SweepConfig(_Strict):
    """A whole study: chains of models, and what to compute over them."""

    name: str
    workdir: Path = Field(description="folder for every result of the sweep (stores, variants, evaluations)")
    chains: list[ChainSpec]
    tinychain: Optional[TinyChainSpec] = None
    decomposition: SweepDecomposition = SweepDecomposition()
    statistics: SweepStatistics = SweepStatistics()
    variants: SweepVariants = SweepVariants()
    evaluation: SweepEvaluation = SweepEvaluation()
    extra_evaluations: list[SweepEvaluation] = Field(default_factory=list)
    claims: SweepClaims = SweepClaims()
    tracking: TrackingConfig = TrackingConfig()
    # Dask: None/'threads' (this process), 'local:N' (a LocalCluster of N worker processes),
    # or the address of a running scheduler (tcp://host:8786)
    scheduler: Optional[str] = None
    progress: bool = True

    @field_validator("chains")
    @classmethod
    def _chains(cls, v: list[ChainSpec]) -> list[ChainSpec]:
        if not v:
            raise ValueError("needs at least one chain")
        return v


def load_sweep_config(path: Path, **overrides: Any) -> SweepConfig:
    """Validate a sweep YAML (non-None ``overrides`` replace top-level keys)."""
    values = load_yaml(path)
    for key, val in overrides.items():
        if val is not None:
            values[key] = val
    try:
        return SweepConfig.model_validate(values)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, str(path))) from None
