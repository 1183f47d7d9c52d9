"""``channels/<model>``: one model's outlier residual channels (``grrr-stream channels`` on it alone: the
calibration pass, the rule, the weight proxy, the ablation if asked), for every W0 of a transition the
``channels`` section selects (and its W1 with ``post_models``). Its folder holds ``channels.json`` in the
format of ``grrr-stream channels`` (the model under ``"base"``): :func:`channels_file` says where, so that
other units (channel-stats, channel variants) read it. Its section: ``channels`` (read by the channel-stats and
channel-groups kinds too). Its report rows: ``channel_models.csv``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

from pydantic import Field, field_validator

from ...channels.activations import parse_bytes
from ...channels.analysis import CHANNELS_FILE, run_channels
from ...channels.calibration import TEXT_SHA256
from ...channels.rule import OutlierRule
from ...checkpoints.reader import resolve_source
from ...config import MAX_DRAWS, Seed, StrictModel
from ...forecast import work
from ..context import PlanContext, Problems, RunContext
from ..estimate import UnitForecast
from ..rows import Report, TableRows, rectangular
from ..sections import Section, TransitionSelector, selector
from ..units import Unit, UnitParams
from .base import Kind, Planned
from .decompose import keys as decompose_keys

NAME = "channels"  # the kind's name: its units' ``kind``, the registry's key; spelled only here

FOLDER = "channels"
TABLE = "channel_models.csv"
# beyond its flops: loading the model, tokenising the whole calibration text, the weight proxy, the files
# (measured on the demo's tiny models in one process: START_S); per forward call (a batch): the hooks, the
# log-softmax and Python's per-module overhead (the demo's 2-layer model, 128 tokens: ~5 ms at 1 thread, of which
# ~0.5 ms are its flops); once per sweep process, importing transformers and accelerate
START_S = 2.0
FORWARD_CALL_S = 5e-3
IMPORT_S = 5.0


class SweepChannels(StrictModel):
    """The ``channels`` section: outlier residual channels of each transition's W0 (the calibration pass, the
    rule, the weight proxy and, if asked, the ablation: ``grrr-stream channels``), and per transition the share
    of each component's energy on them (``grrr-stream channel-stats``). Off by default: it loads every W0
    for a forward pass."""

    enabled: bool = False
    transitions: TransitionSelector = "all"  # whose channel statistics are computed (W0s analysed as needed)
    post_models: bool = False  # also analyse each selected transition's W1, for comparison (Jaccard with W0's set)
    threshold: float = Field(2.5, gt=0.0)  # the rule (channels/rule.py): robust z of log-RMS, aggregated over layers
    aggregate: Literal["median", "max", "mean"] = "median"
    sequences: int = Field(256, ge=1, le=2**20)  # calibration text: sequences of seq_len tokens
    seq_len: int = Field(256, ge=2, le=2**20)
    batch_size: int = Field(1, ge=1, le=2**16)  # sequences per forward (not in keys)
    max_memory: str = "1GiB"  # resident weights; the rest offloaded layer by layer (not in keys)
    ablation: bool = False  # perplexity with the outliers zeroed against random sets
    ablation_seeds: list[Seed] = Field(default_factory=lambda: [0, 1, 2])
    resamples: int = Field(2000, ge=100, le=MAX_DRAWS)  # random channel sets (null) and bootstrap resamples (interval)
    seed: Seed = 0

    _transitions = field_validator("transitions", mode="before")(selector)


class ChannelsParams(UnitParams):
    """One model's outlier residual channels (``grrr-stream channels`` on it alone): keyed by the model's
    identity, the rule, the calibration text and its cut, and the ablation's seeds (when it is run); where
    the model is read, the batch size and the memory budget change no result."""

    kind: ClassVar[str] = NAME
    model: str  # model id
    source: str  # path or Hub id of the checkpoint
    revision: Optional[str]
    model_id: dict[str, Any]  # what identifies it in keys (see sources.Sources)
    threshold: Any
    aggregate: str
    sequences: int
    seq_len: int
    text_sha256: str  # the calibration text's checksum: another text, other channels
    ablation_seeds: Optional[tuple[int, ...]]  # None: no ablation
    batch_size: int
    max_memory: str

    def key_content(self) -> dict:
        return {
            "channels": self.model_id,
            "rule": {"threshold": self.threshold, "aggregate": self.aggregate},
            "calibration": {"sequences": self.sequences, "seq_len": self.seq_len, "text": self.text_sha256},
            **({"ablation": list(self.ablation_seeds)} if self.ablation_seeds is not None else {}),
        }


def unit_id(model: str) -> str:
    return f"channels/{model}"


def channels_file(unit_out: str | Path) -> Path:
    """Where a channels unit (folder ``unit_out``) keeps its channels.json; the outlier set is
    ``json["base"]["channels"]``, as ``grrr-stream channels`` writes it."""
    return Path(unit_out) / CHANNELS_FILE


def read_channel_set(unit_out: str | Path) -> dict:
    """The model record of a channels unit's channels.json (``channels``, ``hidden_size``, ...)."""
    return json.loads(channels_file(unit_out).read_text())["base"]


def channels_unit(ctx: PlanContext, model: str) -> Unit:
    """The channels unit of one model of the sweep, with the ``channels`` section's settings."""
    c, sources = ctx.cfg.channels, ctx.sources
    src, ident = sources.resolve(model)
    params = ChannelsParams(
        model=model,
        source=src,
        revision=sources.models[model].revision,
        model_id=ident,
        threshold=c.threshold,
        aggregate=c.aggregate,
        sequences=c.sequences,
        seq_len=c.seq_len,
        text_sha256=TEXT_SHA256,
        ablation_seeds=tuple(c.ablation_seeds) if c.ablation else None,
        batch_size=c.batch_size,
        max_memory=c.max_memory,
    )
    deps = (sources.made[model][0].id,) if model in sources.made else ()
    label = f"outlier channels of {model} ({c.sequences}×{c.seq_len} tokens{', ablation' if c.ablation else ''})"
    return Unit.of(unit_id(model), label, params, ctx.keyed(FOLDER, model), deps)


def selected(ctx: PlanContext) -> tuple[list[str], Problems]:
    """The decomposed transitions the ``channels`` section selects, and the section's problems."""
    c = ctx.cfg.channels
    if not c.enabled:
        return [], []
    chosen, problems = ctx.select(c.transitions, "channels.transitions")
    if not ctx.cfg.decomposition.channel_energy:
        return [], problems + [
            "channels: the per-channel statistics read the stores' channel energies: set "
            "decomposition.channel_energy: true, or channels.enabled: false"
        ]
    if c.ablation and not c.ablation_seeds:
        problems.append("channels.ablation_seeds: needs at least one seed when channels.ablation is true")
    return [t for t in chosen if t in decompose_keys(ctx)], problems


def plan(ctx: PlanContext) -> tuple[list[Unit], Problems]:
    """The channels units of the selected transitions' W0s (and W1s with ``post_models``)."""
    chosen, problems = selected(ctx)
    post = ctx.cfg.channels.post_models
    models = dict.fromkeys(
        m for t in chosen for m in (ctx.transitions[t].parent,) + ((ctx.transitions[t].child,) if post else ())
    )
    return [channels_unit(ctx, m) for m in models], problems


def run(u: Unit, ctx: RunContext) -> dict:
    """``grrr-stream channels`` on one model, into the unit's folder (channels.json written last)."""
    p: ChannelsParams = u.params
    try:  # transformers' "sequence longer than the model maximum": the text is cut into windows on purpose
        from transformers.utils import logging as tf_logging

        tf_logging.set_verbosity_error()
    except ImportError:
        pass
    folder = resolve_source(p.source, p.revision)
    result = run_channels(
        folder,
        Path(u.out),
        rule=OutlierRule(threshold=float(p.threshold), aggregate=p.aggregate),
        sequences=p.sequences,
        seq_len=p.seq_len,
        batch_size=p.batch_size,
        max_memory=p.max_memory,
        do_ablate=p.ablation_seeds is not None,
        ablation_seeds=p.ablation_seeds or (),
        progress=ctx.progress,
    )
    r = result["base"]
    out = {
        "channels": len(r["channels"]),
        "hidden": r["hidden_size"],
        "fraction": r["fraction"],
        "jaccard_proxy": r["jaccard"],
        "perplexity": r["perplexity"],
    }
    if "ablation" in r:
        out["perplexity_outliers_zeroed"] = r["ablation"]["perplexity_outliers_zeroed"]
        out["perplexity_random_median"] = r["ablation"]["perplexity_random_median"]
    return out


def seconds(params: int, rates, *, sequences: int, seq_len: int, batch_size: int, ablation_seeds, first: bool) -> float:
    """A channels unit: its forward passes at the CPU's forward rate, a per-batch overhead, the start (and, for
    the first of a sweep, the imports)."""
    flops = work.calibration_flops(params, sequences, seq_len, ablation_seeds)
    calls = work.calibration_passes(ablation_seeds) * -(-sequences // batch_size)
    return START_S + (IMPORT_S if first else 0.0) + flops / rates.forward_flops_s + calls * FORWARD_CALL_S


def estimate(u: Unit, facts) -> UnitForecast:
    """Forward passes over the calibration text, 2 × parameters per token, at the CPU's forward rate."""
    p: ChannelsParams = u.params
    info = facts.get(p.source, p.revision)
    download, write, rates = facts.fetch(p.source, p.revision), facts.write(u), facts.rates
    first = facts.first_channels()
    if info.params is None or rates is None or not rates.forward_flops_s:
        return UnitForecast(u.id, u.kind, download, write, None, None, f"parameters {info.where}")
    flops = work.calibration_flops(info.params, p.sequences, p.seq_len, p.ablation_seeds)
    secs = seconds(
        info.params,
        rates,
        sequences=p.sequences,
        seq_len=p.seq_len,
        batch_size=p.batch_size,
        ablation_seeds=p.ablation_seeds,
        first=first,
    )
    budget = None if p.max_memory is None else parse_bytes(p.max_memory)
    ram = work.calibration_ram(
        info.params,
        info.largest,
        info.vocab,
        batch_size=p.batch_size,
        seq_len=p.seq_len,
        budget=budget,
        hidden=info.hidden,
    )
    return UnitForecast(
        u.id,
        u.kind,
        download,
        write,
        ram,
        secs,
        f"{work.calibration_passes(p.ablation_seeds)} pass(es) × {p.sequences}×{p.seq_len} tokens, "
        f"{flops / 1e12:.3g} TFLOP on the CPU",
        flops,
    )


TITLE = "Outlier channels per model"
NOTE = (
    "Channels the rule selects (fraction against the paper's ~5 %), the weight proxy's Jaccard overlap, "
    "calibration perplexity and, when run, the ablation (channel_models.csv)."
)


def report(plan: Planned, done: list[Unit], rep: Report) -> list[TableRows]:
    return [TableRows(TABLE, rectangular([_model_row(u) for u in done]), TITLE, NOTE, folded=True)]


def _model_row(u: Unit) -> dict:
    r = read_channel_set(u.out)
    a = r.get("ablation") or {}
    return {
        "model": u.params.model,
        "hidden": r["hidden_size"],
        "channels": len(r["channels"]),
        "fraction": r["fraction"],
        "paper_fraction": 0.05,
        "jaccard_proxy": r.get("jaccard"),
        "perplexity": r.get("perplexity"),
        "perplexity_outliers_zeroed": a.get("perplexity_outliers_zeroed"),
        "perplexity_random_median": a.get("perplexity_random_median"),
        "outlier_channels": " ".join(str(c) for c in r["channels"]),
    }


KIND = Kind(
    name=NAME,
    params=ChannelsParams,
    plan=plan,
    run=run,
    marker=CHANNELS_FILE,
    config=(Section("channels", SweepChannels),),
    tables=(TABLE,),
    on_worker=True,
    estimate=estimate,
    report=report,
)
