"""The run behind ``grrr-stream variants``: build each variant of a stored transition as a
Hugging Face folder, after checking the disk, and log it to MLflow."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from ..config import TrackingConfig
from ..files import ensure_folder
from ..progress import Progress
from ..runtime.diskplan import DiskNeed, check_space, describe
from ..tracking import model_runs, runs
from .builder import VariantBuilder, variant_folder_done, write_variant
from .channels import load_channels
from .spec import parse_variants


@dataclass
class VariantsResult:
    out: Path
    summaries: list[dict]
    folders: list[Path]
    run_ids: list[str]


def run_variants(
    store: Path,
    out: Path,
    variants: Sequence[str],
    *,
    dtype: str = "float32",
    rest_from: str = "base",
    device: str = "auto",
    overwrite: bool = False,
    max_shard_bytes: int = 2 * 2**30,
    tracking: Optional[TrackingConfig] = None,
    stream=None,
    channels: Optional[Path] = None,
    progress: bool = False,
) -> VariantsResult:
    """Build each variant of the transition in ``store`` as ``out/<variant>/`` (HF folder) plus
    ``out/<variant>.fidelity.csv``; log fidelity to a nested MLflow run per variant. ``channels``: a
    channels.json, needed by the channel variants (read once for all of them). ``progress``: each variant's
    tensors done / total, and the variants done / total, with an ETA."""
    specs = parse_variants(variants)
    summaries, folders, run_ids = [], [], []
    # every refusal (rest source, dtype) before the first folder is written
    channel_set = load_channels(channels) if channels is not None and any(s.channels for s in specs) else None
    builders = [
        VariantBuilder(Path(store), spec, dtype=dtype, rest_from=rest_from, device=device, channels=channel_set)
        for spec in specs
    ]
    out = ensure_folder(Path(out), "--out")
    _check_variant_space(builders, out, overwrite, stream)
    shown = Progress(len(specs), label="[variants] ", enabled=progress)
    for spec, builder in zip(specs, builders):
        folder = out / spec.name
        started = time.time()
        built = not overwrite and variant_folder_done(folder, builder.metadata())  # kept: no work, no rate
        summary = write_variant(
            builder,
            folder,
            max_shard_bytes=max_shard_bytes,
            overwrite=overwrite,
            stream=stream,
            within=out,
            progress=progress,
        )
        shown.skip() if built else shown.advance(spec.name)
        summaries.append(summary)
        folders.append(folder)
        if runs.enabled(tracking):
            run_ids.append(
                model_runs.log_variant(
                    builder, folder, summary, tracking, started=started, seconds=time.time() - started
                )
            )
    return VariantsResult(out, summaries, folders, run_ids)


def _check_variant_space(builders, out: Path, overwrite: bool, stream=None) -> None:
    """Say what the variant folders still to build will take (from the layout: exact), and refuse
    before the first one when they cannot all fit."""
    needs = [
        DiskNeed(b.spec.name, out, sum(t.nbytes for t in b.layout()))
        for b in builders
        if overwrite or not variant_folder_done(out / b.spec.name, b.metadata())
    ]
    if not needs:
        return
    (stream or sys.stderr).write(f"disk: {len(needs)} variant folder(s) in {out}: {describe(needs)}\n")
    check_space(
        needs,
        f"{len(needs)} variant folder(s) in {out}",
        "Free space, build fewer variants at a time, or point --out at another disk.",
    )
