"""Planning the residual-channel units (the sweep's ``channels`` section).

* ``channels/<model>``: the outlier channels of one model (calibration pass, rule, weight proxy,
  ablation if asked), for every W0 of a selected transition (and its W1 with ``post_models``);
  its folder holds ``channels.json`` in the format of ``grrr-stream channels`` (the model under
  ``"base"``): :func:`channels_file` says where, so that other units (channel variants) can read it.
* ``channel-stats/<transition>``: the share of each component's energy on W0's outlier channels,
  from the transition's store alone; it needs the decomposition and W0's channels unit.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from .units import ChannelsParams, ChannelStatsParams, Unit

if TYPE_CHECKING:
    from .plan import Problems
    from .plan_variants import PlanContext

CHANNELS_FILE = "channels.json"   # the file a channels unit writes last (its completion marker)


def channels_unit_id(model: str) -> str:
    return f"channels/{model}"


def channels_file(unit_out: str | Path) -> Path:
    """Where a channels unit (folder ``unit_out``) keeps its channels.json; the outlier set is
    ``json["base"]["channels"]``, as ``grrr-stream channels`` writes it."""
    return Path(unit_out) / CHANNELS_FILE


def channels_unit(ctx: "PlanContext", model: str) -> Unit:
    """The channels unit of one model of the sweep, with the ``channels`` section's settings."""
    from ..channels.calibration import TEXT_SHA256
    from .plan import _keyed

    c = ctx.cfg.channels
    src, ident = ctx.sources.resolve(model)
    params = ChannelsParams(model=model, source=src, revision=ctx.sources.models[model].revision, model_id=ident,
                            threshold=c.threshold, aggregate=c.aggregate, sequences=c.sequences,
                            seq_len=c.seq_len, text_sha256=TEXT_SHA256,
                            ablation_seeds=tuple(c.ablation_seeds) if c.ablation else None,
                            batch_size=c.batch_size, max_memory=c.max_memory)
    deps = ("generate/tinychain",) if ctx.gen is not None and model in ctx.sources.generated else ()
    label = f"outlier channels of {model} ({c.sequences}×{c.seq_len} tokens{', ablation' if c.ablation else ''})"
    return Unit.of(channels_unit_id(model), label, params, _keyed(ctx.workdir / "channels", model), deps)


def channel_units(ctx: "PlanContext") -> tuple[list[Unit], "Problems"]:
    """The channels units of the selected transitions' W0s (and W1s) and one channel-stats unit each."""
    from .plan import _keyed, _select

    c = ctx.cfg.channels
    if not c.enabled:
        return [], []
    selected, problems = _select(c.transitions, ctx.transitions, ctx.sources.models, "channels.transitions")
    if not ctx.cfg.decomposition.channel_energy:
        return [], problems + ["channels: the per-channel statistics read the stores' channel energies: set "
                               "decomposition.channel_energy: true, or channels.enabled: false"]
    if c.ablation and not c.ablation_seeds:
        problems.append("channels.ablation_seeds: needs at least one seed when channels.ablation is true")
    selected = [t for t in selected if t in ctx.dec_key]
    models = dict.fromkeys(m for t in selected for m in (ctx.transitions[t].parent,)
                           + ((ctx.transitions[t].child,) if c.post_models else ()))
    by_model = {m: channels_unit(ctx, m) for m in models}
    units = list(by_model.values())
    for tid in selected:
        tr = ctx.transitions[tid]
        base = by_model[tr.parent]
        post: Optional[Unit] = by_model.get(tr.child) if c.post_models else None
        params = ChannelStatsParams(transition=tid, store_key=ctx.dec_key[tid], channels_key=base.key,
                                    channels_out=base.out, post_channels_out=post.out if post else None,
                                    resamples=c.resamples, seed=c.seed)
        deps = (f"decompose/{tid}", base.id) + ((post.id,) if post else ())
        units.append(Unit.of(f"channel-stats/{tid}", f"update energy of {tid} on {tr.parent}'s outlier channels",
                             params, _keyed(ctx.workdir / "channel_stats", tid), deps))
    return units, problems
