"""``variant/<transition>/<name>``: one variant folder of a transition (W0 + chosen parts of the update, a
Hugging Face folder: :mod:`grrr_stream.variants`); its section: ``variants``. Also the planning both variant
and evaluation units need: whether ``rest_from: base`` can be served, and the channels.json a channel variant
reads."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional, Union

from pydantic import Field, field_validator

from ...config import StrictModel
from ...dtypes import FLOAT_NAMES, ITEMSIZE
from ...errors import ConfigError
from ...forecast import work
from ...runtime.device import resolve_device
from ...runtime.diskplan import DiskNeed
from ...tracking.model_runs import log_variant
from ...variants.builder import META_FILE, VariantBuilder, write_variant
from ...variants.channels import load_channels
from ...variants.rest import rest_refusal
from ...variants.spec import parse_variant
from ..context import PlanContext, Problems, RunContext
from ..estimate import DiskFacts, UnitForecast
from ..resources import Needs, cpu_needs, gpu_needs, uses_gpu
from ..sections import Section, TransitionSelector, selector, yaml_variant_names
from ..units import Unit, UnitParams
from .base import Kind
from .channels import channels_file, channels_unit
from .decompose import keys as decompose_keys
from .decompose import store_of
from .decompose import unit_id as decompose_id

NAME = "variant"  # the kind's name: its units' ``kind``, the registry's key; spelled only here

FOLDER = "variants"
OVERHEAD_S = 0.25  # per variant: reading the store, fidelity report (0.19 s a unit on the demo, quiet)


class SweepVariants(StrictModel):
    """The ``variants`` section: which variant folders are built, and how (the evaluate kind reads it too)."""

    enabled: bool = True
    transitions: TransitionSelector = "cumulative"
    names: list[str] = Field(
        default_factory=lambda: [
            "base",
            "full",
            "proj",
            "diag",
            "off",
            "null",
            "offnull",
            "randrm-0",
            "randrm-1",
            "randrm-2",
        ]
    )
    dtype: Literal[FLOAT_NAMES] = "float32"
    # where composed variants take the tensors that are not decomposed (embeddings, norms,
    # lm_head, biases): the base (the paper's "added to the pretrained checkpoint"), the post
    # model, or auto (base when it can supply them, else post, recorded). base and full are
    # always the two checkpoints themselves.
    rest_from: Literal["base", "post", "auto"] = "base"
    # Write each variant as a Hugging Face folder (a 7B float32 variant is ~28 GB: off by
    # default in large sweeps; evaluation streams variants into the engine either way).
    write_folders: bool = True
    shard_gb: float = Field(2.0, gt=0.0)
    # The outlier residual channels the channel variants (channels-outlier, channels-rest, channels-rest-offnull,
    # ...) keep or drop: a channels.json written by `grrr-stream channels` (its base.channels) for every
    # transition, or a mapping model id → channels.json; a transition takes its parent's (W0's) entry, else its
    # chain base's. Only units of channel variants read it (other units' keys do not change).
    channels: Optional[Union[str, dict[str, str]]] = None

    _names = field_validator("names", mode="before")(yaml_variant_names)
    _transitions = field_validator("transitions", mode="before")(selector)


class VariantParams(UnitParams):
    """One variant folder of a transition. Keyed by its components, not its name; the shard size and
    device change neither the tensors nor the files' content."""

    kind: ClassVar[str] = NAME
    transition: str
    variant: str  # as written in the config (NAME=diag:...,): parsed again to run
    store_key: str
    components: dict[str, Any]
    dtype: str
    rest_from: str
    shard_gb: float
    device: str
    # a channel variant only: the channels.json it reads and what identifies its channel set (the set's digest,
    # or the key of the unit that writes the file); None for every other variant, whose key stays as it was
    channels: Optional[str] = None
    channels_key: Optional[str] = None

    def key_content(self) -> dict:
        return {
            "store": self.store_key,
            "components": self.components,
            "dtype": self.dtype,
            "rest_from": self.rest_from,
            **({"channels": self.channels_key} if self.channels_key else {}),
        }


def rest_problems(ctx: PlanContext, tid: str, names: list[str], where: str) -> Problems:
    """A plan problem when rest_from: base meets a base that cannot supply the rest."""
    composed = [n for n in names if n in ctx.specs and ctx.specs[n].composed]
    if not composed or ctx.cfg.variants.rest_from != "base":
        return []
    bad = ctx.sources.rest_problems(ctx.transitions[tid])
    return [rest_refusal(bad, f"{where}: {tid}: ").replace("Set rest_from", "Set variants.rest_from")] if bad else []


def channel_fields(
    ctx: PlanContext, tid: str, names: list[str], where: str
) -> tuple[dict[str, Any], tuple[str, ...], Problems]:
    """The channels.json fields of units with channel variants among ``names`` on transition ``tid``: its
    path and the key of its channel set (empty when no name is a channel variant), the sweep unit that
    writes it (none for a user's channels.json), or the problem."""
    wanting = [n for n in names if n in ctx.specs and ctx.specs[n].channels]
    if not wanting:
        return {}, (), []
    given, tr = ctx.cfg.variants.channels, ctx.transitions[tid]
    if isinstance(given, dict):
        chain_base = ctx.sources.models[tr.parent].base
        given = given.get(tr.parent, given.get(chain_base))
        if given is None:
            return (
                {},
                (),
                [
                    f"{where}: {tid}: variants.channels has no channels.json for {tr.parent} (or its "
                    f"chain's base {chain_base}), needed by {', '.join(wanting)}"
                ],
            )
    if given is None and ctx.cfg.channels.enabled:
        return _channels_from_unit(ctx, tid, wanting, where)
    if given is None:
        return (
            {},
            (),
            [
                f"{where}: {tid}: variant(s) {', '.join(wanting)} need the outlier channels: set "
                "variants.channels to a channels.json written by `grrr-stream channels`, or enable the "
                "sweep's channels: section"
            ],
        )
    path = Path(given).expanduser().absolute()
    try:
        found = load_channels(path)
    except ConfigError as e:
        return {}, (), [f"{where}: {tid}: {e}"]
    # keyed by the set it holds, not by where the file lies
    return {"channels": str(path), "channels_key": found.digest}, (), []


def _channels_from_unit(
    ctx: PlanContext, tid: str, wanting: list[str], where: str
) -> tuple[dict[str, Any], tuple[str, ...], Problems]:
    """The outlier set of the sweep's own channels unit of ``tid``'s W0: not on disk at planning time, so it
    is keyed by that unit's key (which holds everything the set depends on); the unit is a dependency."""
    selected, _ = ctx.select(ctx.cfg.channels.transitions, "channels.transitions")
    if tid not in selected:
        return (
            {},
            (),
            [
                f"{where}: {tid}: variant(s) {', '.join(wanting)} need the outlier channels of "
                f"{ctx.transitions[tid].parent}: add {tid} to channels.transitions, or set variants.channels"
            ],
        )
    unit = channels_unit(ctx, ctx.transitions[tid].parent)
    return {"channels": str(channels_file(unit.out)), "channels_key": unit.key}, (unit.id,), []


def plan(ctx: PlanContext) -> tuple[list[Unit], Problems]:
    v, d, dec_key = ctx.cfg.variants, ctx.cfg.decomposition, decompose_keys(ctx)
    if not (v.enabled and v.write_folders):
        return [], []
    selected, problems = ctx.select(v.transitions, "variants.transitions")
    units: list[Unit] = []
    for tid in selected:
        refused = rest_problems(ctx, tid, v.names, "variants") if tid in dec_key else []
        problems += refused
        if tid not in dec_key or refused:
            continue
        channels, waits, found = channel_fields(ctx, tid, v.names, "variants")
        problems += found
        for name in (n for n in v.names if n in ctx.specs):
            spec = ctx.specs[name]
            if spec.channels and not channels:
                continue
            params = VariantParams(
                transition=tid,
                variant=name,
                store_key=dec_key[tid],
                components=spec.components(),
                dtype=v.dtype,
                rest_from=v.rest_from,
                shard_gb=v.shard_gb,
                device=d.device,
                **(channels if spec.channels else {}),
            )
            deps = (decompose_id(tid),) + (waits if spec.channels else ())
            units.append(
                Unit.of(
                    f"variant/{tid}/{spec.name}",
                    f"build {spec.name} of {tid}",
                    params,
                    ctx.keyed(f"{FOLDER}/{tid}", spec.name),
                    deps,
                )
            )
    return units, problems


def run(u: Unit, ctx: RunContext) -> dict:
    p: VariantParams = u.params
    builder = VariantBuilder(
        store_of(ctx, p.transition),
        parse_variant(p.variant),
        dtype=p.dtype,
        rest_from=p.rest_from,
        device=str(resolve_device(ctx.device or p.device)),
        channels=p.channels,
    )
    started = time.time()
    # a half-written folder of a killed build is replaced (its completion marker is written last)
    summary = write_variant(
        builder, Path(u.out), max_shard_bytes=int(p.shard_gb * 2**30), overwrite=True, progress=ctx.progress
    )
    if ctx.tracking.enabled:
        log_variant(builder, Path(u.out), summary, ctx.tracking, started=started, seconds=time.time() - started)
    return {k: summary[k] for k in ("fidelity", "fidelity_max", "energy_survived")}


def disk(u: Unit, facts: DiskFacts) -> Optional[list]:
    """A folder of W0's size in the variant's dtype (None: W0 not here yet)."""
    dec = facts.dec.get(u.params.transition)
    ck = facts.checkpoints.get(dec.params.base) if dec is not None else None
    if ck is None:
        return None
    item = ITEMSIZE[u.params.dtype]
    size = sum(math.prod(t.shape) * item if t.is_floating else t.nbytes for t in ck.tensors.values())
    return [DiskNeed("variant", Path(u.out), size)]


def estimate(u: Unit, facts) -> UnitForecast:
    """Rank-r products of W0's shapes at the device's GEMM rate."""
    p: VariantParams = u.params
    base, write, rates = facts.base_of(p.transition), facts.write(u), facts.rates
    if base.shapes is None or rates is None:
        return UnitForecast(u.id, u.kind, 0, write, None, None, f"shapes {base.where}")
    if write is None and base.params is not None:  # a safetensors folder of the variant's dtype
        write = base.params * ITEMSIZE[p.dtype]
    flops = sum(work.variant_flops(s) for s in base.shapes)
    return UnitForecast(
        u.id,
        u.kind,
        0,
        write,
        work.variant_ram(base.shapes, ITEMSIZE[p.dtype]),
        flops / rates.gemm_flops_s + OVERHEAD_S,
        f"{flops / 1e12:.3g} TFLOP",
        flops,
    )


def needs(u: Unit, forecast: Optional[UnitForecast], device: Optional[str]) -> Needs:
    """A GPU only on device 'cuda' (the run's --device, else the decomposition's; 'auto' runs on any worker)."""
    return gpu_needs(forecast) if uses_gpu(device or u.params.device) else cpu_needs(u, forecast)


KIND = Kind(
    name=NAME,
    params=VariantParams,
    plan=plan,
    run=run,
    marker=META_FILE,
    config=(Section("variants", SweepVariants),),
    on_worker=True,
    estimate=estimate,
    disk=disk,
    needs=needs,
)
