"""A model of a sweep's work: floating-point operations per step, and peak memory, from matrix shapes.

Per matrix, oriented tall (m ≥ n, r = n = min(m, n)), with the textbook costs of Golub & Van Loan
(Matrix Computations, 4th ed., Fig. 8.6.1, R-SVD):
- ``svd_w0``: thin SVD of W0, Σ, U and V: 6mn² + 20n³ (skipped when W0's frame is cached);
- ``svdvals_w1``: singular values of W1 only: 2mn² + 2n³;
- ``projection``: P = Uᵀ ΔW V (2mn² + 2n³), then the null residual ΔW − U P Vᵀ (U P: 2mn², (U P) Vᵀ: 2mn²).
A variant build forms, per matrix, one rank-r product U X Vᵀ (4mn²). Generation: 2 × parameters per token.
A channels unit (:mod:`grrr_stream.channels.analysis`): forward passes over the calibration text, 2 × parameters
per token each (the input embedding is a lookup and attention's T² term is left out: an upper bound on the
first, a few % on the second at 256 tokens), one pass plus, with the ablation, one with the outliers zeroed and
one per random seed (:func:`grrr_stream.channels.ablation.ablate`).
The seconds come from these counts at rates measured on this machine (:mod:`.calibrate`).
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

GIB = 2**30
BASELINE_RAM = int(0.8 * GIB)  # Python, torch and the package imported: measured ~0.6-0.8 GiB RSS


def _tall(shape: Sequence[int]) -> tuple[int, int]:
    m, n = int(shape[0]), int(shape[1])
    return (m, n) if m >= n else (n, m)


def svd_flops(shape: Sequence[int]) -> float:
    m, n = _tall(shape)
    return 6.0 * m * n * n + 20.0 * n**3


def svdvals_flops(shape: Sequence[int]) -> float:
    m, n = _tall(shape)
    return 2.0 * m * n * n + 2.0 * n**3


def projection_flops(shape: Sequence[int]) -> float:
    m, n = _tall(shape)
    return 2.0 * m * n * n + 2.0 * n**3 + 4.0 * m * n * n


def decompose_flops(shape: Sequence[int], *, frame_cached: bool = False) -> float:
    """One matrix pair's decomposition."""
    return (0.0 if frame_cached else svd_flops(shape)) + svdvals_flops(shape) + projection_flops(shape)


def decompose_split(shape: Sequence[int], *, frame_cached: bool = False) -> tuple[float, float]:
    """(SVD flops, product flops) of one pair's decomposition: the SVD of W0 and W1's singular values, then
    the projection and null residual (a GPU runs the two at very different rates)."""
    svd = (0.0 if frame_cached else svd_flops(shape)) + svdvals_flops(shape)
    return svd, projection_flops(shape)


def variant_flops(shape: Sequence[int]) -> float:
    """One matrix of a variant: a rank-r product U X Vᵀ."""
    m, n = _tall(shape)
    return 4.0 * m * n * n


def generation_flops(params: int, prompts: int, max_tokens: int, samples: int = 1) -> float:
    """Every answer ``max_tokens`` long (the limit: an upper bound; or the expected length, :mod:`.answers`)."""
    return 2.0 * params * prompts * samples * max_tokens


def calibration_passes(ablation_seeds: Optional[Sequence[int]]) -> int:
    """Forward passes of a channels unit: the intact pass (RMS, perplexity) and, with the ablation, the outliers
    zeroed and each seed's random set zeroed (an empty outlier set skips its pass: an upper bound)."""
    return 1 if ablation_seeds is None else 2 + len(ablation_seeds)


def calibration_flops(params: int, sequences: int, seq_len: int, ablation_seeds: Optional[Sequence[int]]) -> float:
    """Every forward pass of a channels unit: 2 × parameters per token of the sequences × seq_len tokens."""
    return calibration_passes(ablation_seeds) * 2.0 * params * sequences * seq_len


def calibration_ram(
    params: int,
    largest_bytes: Optional[int],
    vocab: Optional[int],
    *,
    batch_size: int,
    seq_len: int,
    budget: Optional[int],
    hidden: Optional[int] = None,
) -> int:
    """Peak bytes of a channels unit (docs/channels.md, Peak RSS): in memory when the float32 weights fit
    ``budget`` (None: always), else the resident blocks + the largest block as stored + one 64 MiB float32
    slice; plus one batch's logits about three times and the process. Blocks stay resident in order while
    they fit, so none does when the first, the embedding (vocab × hidden in float32), is over the budget;
    otherwise up to the budget (an upper bound)."""
    logits = 3 * batch_size * seq_len * (vocab or 0) * 4
    if budget is None or params * 4 <= budget:
        return BASELINE_RAM + params * 4 + logits
    resident = 0 if vocab and hidden and vocab * hidden * 4 > budget else budget
    return BASELINE_RAM + resident + (largest_bytes or 0) + 64 * 2**20 + logits


def channel_stats_work(matrices: int, hidden: int, draws: int, groups: int = 10) -> float:
    """Channel × draw × group cells a channel-stats unit fills: the null's random sets (drawn, then summed over
    each group's per-channel energies) for the three components and again for the total; groups: all,
    reader, writer and one per module (7 in a Llama-style layer). The bootstrap (draws × matrices) is small
    beside it."""
    return 2.0 * draws * hidden * groups + draws * matrices


def channel_stats_ram(matrices: int, hidden: int) -> int:
    """The (matrices, hidden, 3) float64 energies and the total's copy, plus a block of 256 null draws."""
    return BASELINE_RAM + 2 * matrices * hidden * 3 * 8 + 2 * 256 * hidden * 8


def decompose_ram(shapes: Iterable[Sequence[int]], itemsize: int, cores: int = 1) -> int:
    """Peak bytes of a decomposition on ``cores`` CPU cores, and the process itself. One lane: the largest
    pair upcast (W0, W1), U, V, P and ΔW / null, plus the reader's next pair in flight, about 6 m×n buffers
    of the compute dtype. Several lanes (:func:`grrr_stream.decompose.streaming.lanes_for`, matrices small
    enough for LANES_RAM): LANE_BUFFERS of them per lane."""
    from ..decompose.streaming import LANE_BUFFERS, lanes_for

    worst = max((_tall(s)[0] * _tall(s)[1] for s in shapes), default=0)
    lanes = lanes_for(worst, itemsize, cores).lanes if worst else 1
    return BASELINE_RAM + (6 if lanes == 1 else LANE_BUFFERS * lanes) * worst * itemsize


def variant_ram(shapes: Iterable[Sequence[int]], itemsize: int) -> int:
    """A variant build: U, V, P and the output matrix of the largest matrix, plus one output shard (2 GiB max)."""
    worst = max((_tall(s)[0] * _tall(s)[1] for s in shapes), default=0)
    return BASELINE_RAM + 4 * worst * itemsize


def variant_stream_ram(shapes: Iterable[Sequence[int]], largest_tensor: Optional[int]) -> int:
    """What an evaluation holds beside the engine's own weights while a variant streams into it, tensor by tensor
    (:meth:`grrr_stream.variants.builder.VariantBuilder.tensors`): the largest matrix's U, V, P and output in
    float32, or the largest tensor as stored (an embedding copied as it is) with its converted copy."""
    worst = max((_tall(s)[0] * _tall(s)[1] for s in shapes), default=0)
    return max(4 * worst * 4, 2 * (largest_tensor or 0))


def evaluate_ram(params: int, itemsize: int, kv_cache_bytes: int, stream_bytes: int, *, engine_on_host: bool) -> int:
    """Host RAM of an evaluation: the process and vLLM, the variant streamed in (``stream_bytes``,
    :func:`variant_stream_ram`) and, when the engine runs on the CPU, its weights and KV cache too. On a GPU
    those are GPU memory (:func:`grrr_stream.forecast.generation.generation`'s weights and cache), not host RAM."""
    engine = params * itemsize + kv_cache_bytes if engine_on_host else 0
    return 2 * BASELINE_RAM + stream_bytes + engine
