"""The streaming pipeline of one transition: matrix pairs through the frame kernel into the store.

Data flow per matrix (three stages overlap, each bounded to one item)::

    reader thread:  mmap-read W0, W1 (each in its checkpoint's dtype: they may differ) → digests,
                    finiteness, update sparsity, cached base frame if any
    main thread:    upcast on the compute device → svdvals(W1), ΔW, SVD(W0) unless
                    cached, ‖ΔW‖₂, P and null residual, metrics
    writer thread:  new frame → frame cache; P, null, σ → store; completion record

Each stage's work on one matrix is :class:`~grrr_stream.decompose.stages.Pipeline`'s; this module schedules
them. So at most three matrices' worth of data are alive at once, whatever the model size. On a CPU, matrices
small enough run in lanes (several main-thread stages side by side, :func:`compute_layout`), each lane
holding about LANE_BUFFERS m×n buffers, all lanes together within LANES_RAM. One process
runs it over a whole transition (grrr_stream.decompose.run), a Dask worker over a batch (grrr_stream.decompose.spread).
"""

from __future__ import annotations

import math
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Optional

import torch

from ..checkpoints.arch import MatrixName
from ..config import DecomposeConfig
from ..dtypes import ITEMSIZE
from ..geometry.kernel import MatrixResult
from ..geometry.lapack import blas_threads
from ..progress import Progress
from .plan import TransitionPlan
from .stages import LoadedPair, Pipeline

# The next pair of checkpoint tensors above this size (both tensors, checkpoint dtype) is read once the
# current matrix's math is done, overlapping its write instead (14B MLP pair in bf16: 356 MiB); smaller
# pairs are read during the math. Cached frames have their own bound (stages.PREFETCH_FRAME_BYTES).
PREFETCH_PAIR_BYTES = 256 << 20


def pair_bytes(plan: TransitionPlan, m: MatrixName) -> int:
    """Bytes of the W0 and W1 matrices of ``m`` as stored (a slice of a 3-D expert tensor: its share)."""
    total = 0
    for ckpt in (plan.base, plan.post):
        info = ckpt.tensors[m.source]
        total += info.nbytes * math.prod(ckpt.matrix_shape(m)) // max(1, math.prod(info.shape))
    return total


# The math runs in lanes: several matrices at once, each on its own thread with one torch thread (or more when
# cores are left over), instead of one matrix on a team of threads. On 2 cores LAPACK gains little from a
# second thread, and its
# OpenMP team spins at barriers while the reader and writer take a core; two matrices side by side use both
# cores fully (tools/bench_decompose.py; docs/benchmarks.md, "Lanes"). Each lane costs memory: its
# matrix in the math (~5 m×n buffers: W0, W1, U, the null residual, P), a pair read ahead (2, in the
# checkpoint's dtype at most) and a result queued for the writer (~3), so LANE_BUFFERS of the largest
# matrix per lane, and the lanes stop where that passes LANES_RAM: Qwen2.5-1.5B (8960×1536) and 3B run
# 2 lanes, 7B and 14B shapes one (their peak RSS that of one matrix at a time).
LANE_BUFFERS = 10
LANES_RAM = 2 << 30
# More lanes than this would need a second reader to keep them fed; the cores left over go to each lane.
MAX_LANES = 4


@dataclass(frozen=True)
class ComputeLayout:
    """How the run's math uses the cores: ``lanes`` matrices at once, each on ``threads`` torch threads."""

    lanes: int
    threads: int


def lanes_for(largest_entries: int, itemsize: int, cores: int) -> ComputeLayout:
    """The layout on ``cores`` CPU cores for a run whose largest matrix has ``largest_entries`` entries of
    ``itemsize`` bytes in the compute dtype: as many lanes as cores, MAX_LANES and LANES_RAM allow."""
    by_ram = LANES_RAM // max(1, LANE_BUFFERS * largest_entries * itemsize)
    lanes = max(1, min(cores, MAX_LANES, by_ram))
    return ComputeLayout(lanes, max(1, cores // lanes))


def compute_layout(
    cfg: DecomposeConfig, device: torch.device, plan: TransitionPlan, available: Optional[int] = None
) -> ComputeLayout:
    """The lanes and torch intra-op threads of this run's math (:func:`lanes_for`). On a GPU, or when the
    user set cpu_threads: one lane on the given threads. ``available``: the cores this process may use (a
    Dask worker's share of its host), default torch's current thread count."""
    current = available or torch.get_num_threads()
    if cfg.cpu_threads is not None:
        return ComputeLayout(1, cfg.cpu_threads)
    if device.type != "cpu" or current <= 1 or not plan.matrices:
        return ComputeLayout(1, current)
    largest = max(math.prod(plan.base.matrix_shape(m)) for m in plan.matrices)
    return lanes_for(largest, ITEMSIZE[cfg.compute_dtype], current)


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op thread count, and NumPy's and SciPy's BLAS threads (the singular values of W1 go through
    SciPy's LAPACK: grrr_stream.geometry.lapack), set to ``n`` for the block and restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with blas_threads(n):
            yield
    finally:
        torch.set_num_threads(before)


def _side_thread() -> None:
    """Initializer of the reader and writer threads: one torch thread for their own tensor work
    (finiteness, sparsity, upcasts to numpy). A new thread takes the process's intra-op count at its first
    torch call and starts an OpenMP team of its own, so with two compute threads on two cores the reader
    and writer each added a second spinning thread beside the math's team (three teams, six threads)."""
    torch.set_num_threads(1)  # per thread: the compute thread's count is unchanged


def stream_matrices(
    pipeline: Pipeline,
    pending: list[MatrixName],
    progress: Progress,
    layout: Optional[ComputeLayout] = None,
) -> tuple[int, int, list[str]]:
    """Decompose ``pending`` through ``pipeline`` into its store: (matrices computed, frames reused, why the
    others were refused). ``layout``: see :func:`compute_layout` (default one lane, on the caller's thread)."""
    tally = _Tally()
    if not pending:
        return tally.computed, tally.reused, tally.failures
    with (
        ThreadPoolExecutor(1, thread_name_prefix="grrr-read", initializer=_side_thread) as reader,
        ThreadPoolExecutor(1, thread_name_prefix="grrr-write", initializer=_side_thread) as writer,
    ):
        if layout is not None and layout.lanes > 1:
            _stream_lanes(pipeline, pending, reader, writer, layout, progress, tally)
        else:
            _stream_one_lane(pipeline, pending, reader, writer, progress, tally)
    return tally.computed, tally.reused, tally.failures


@dataclass
class _Tally:
    computed: int = 0
    reused: int = 0
    failures: list[str] = field(default_factory=list)
    in_flight: list[Future] = field(default_factory=list)  # writes not yet known to have succeeded

    def skipped(self, why: list[str], name: str, progress: Progress, what: str) -> None:
        self.failures.extend(why)
        progress.advance(f"{name} SKIPPED ({what})")

    def hand_to_writer(
        self,
        pipe: Pipeline,
        writer: ThreadPoolExecutor,
        item: LoadedPair,
        res: MatrixResult,
        frame_is_new: bool,
        progress: Progress,
        queued: int,
    ) -> None:
        """The result checked and queued for the writer, with at most ``queued`` writes already waiting
        (waiting on them surfaces the writer's errors)."""
        m, cfg = item.matrix, pipe.cfg
        self.reused += int(not frame_is_new)
        bad = res.nonfinite(m.name, cfg.compute_dtype)
        if bad:  # finite inputs can still overflow (|W1 − W0| beyond the compute dtype): never stored
            self.skipped([bad], m.name, progress, "non-finite result")
            return
        with pipe.timer.phase("wait_write"):
            while len(self.in_flight) >= queued:
                self.in_flight.pop(0).result()
        if not frame_is_new:
            res = res.sigma_only()
        self.in_flight.append(writer.submit(pipe.write, item, res, frame_is_new))
        self.computed += 1
        progress.advance(m.name)

    def drain(self) -> None:
        while self.in_flight:
            self.in_flight.pop(0).result()


def _stream_one_lane(
    pipe: Pipeline,
    pending: list[MatrixName],
    reader: ThreadPoolExecutor,
    writer: ThreadPoolExecutor,
    progress: Progress,
    tally: _Tally,
) -> None:
    """One matrix at a time on this thread, the next pair read and the last result written meanwhile."""
    next_load: Optional[Future] = reader.submit(pipe.read, pending[0])
    for i, m in enumerate(pending):
        with pipe.timer.phase("wait_read"):
            item = next_load.result()
        nxt = pending[i + 1] if i + 1 < len(pending) else None
        # a large pair is read while this matrix's result is written, not during its math (peak memory)
        late = nxt is not None and pair_bytes(pipe.plan, nxt) > PREFETCH_PAIR_BYTES
        next_load = reader.submit(pipe.read, nxt) if nxt is not None and (not late or item.problems) else None
        if item.problems:
            tally.skipped(item.problems, m.name, progress, "non-finite")
            continue
        res, frame_is_new = pipe.compute(item)
        if next_load is None and nxt is not None:
            next_load = reader.submit(pipe.read, nxt)
        tally.hand_to_writer(pipe, writer, item, res, frame_is_new, progress, queued=1)
        del res, item
    tally.drain()


def _lane_thread(threads: int) -> None:
    """Initializer of a compute lane: its own torch thread count (per thread, like the side threads')."""
    torch.set_num_threads(threads)


def _stream_lanes(
    pipe: Pipeline,
    pending: list[MatrixName],
    reader: ThreadPoolExecutor,
    writer: ThreadPoolExecutor,
    layout: ComputeLayout,
    progress: Progress,
    tally: _Tally,
) -> None:
    """Several small matrices at once, each lane on its own thread: the reader keeps one pair ready per
    lane, and results are written in the order they finish (the store and the frame cache are per matrix).
    At most 3 × lanes matrices are alive: per lane one computing, one read and one result queued for the
    writer (LANE_BUFFERS).

    The largest matrices go first (plan order among equal shapes): a lane that finishes early then waits
    for a small matrix, not for one of the model's largest. In plan order the last matrix of a Qwen2.5-1.5B
    layer is an 8960 × 1536 down_proj, about 3 s on one core, which the other lane spent idle."""
    lanes = layout.lanes
    pending = sorted(pending, key=lambda m: -math.prod(pipe.plan.base.matrix_shape(m)))  # stable
    with ThreadPoolExecutor(
        lanes, thread_name_prefix="grrr-lane", initializer=_lane_thread, initargs=(layout.threads,)
    ) as pool:
        loads = [reader.submit(pipe.read, m) for m in pending[:lanes]]
        nxt = len(loads)
        computing: dict[Future, LoadedPair] = {}
        try:
            while loads or computing:
                while loads and len(computing) < lanes:
                    with pipe.timer.phase("wait_read"):
                        item = loads.pop(0).result()
                    if nxt < len(pending):
                        loads.append(reader.submit(pipe.read, pending[nxt]))
                        nxt += 1
                    if item.problems:
                        tally.skipped(item.problems, item.matrix.name, progress, "non-finite")
                        continue
                    computing[pool.submit(pipe.compute, item)] = item
                if not computing:
                    continue
                done, _ = wait(list(computing), return_when=FIRST_COMPLETED)
                for fut in done:
                    item = computing.pop(fut)
                    res, frame_is_new = fut.result()
                    tally.hand_to_writer(pipe, writer, item, res, frame_is_new, progress, queued=lanes)
                    del res, item
        finally:
            for fut in computing:
                fut.cancel()
    tally.drain()
