"""Next-token log-probabilities from the final hidden state, without the full logits ever existing.

The model's own forward returns logits for every position and the whole vocabulary (128 tokens ×
152064 × 4 B = 74 MiB per sequence, and a few arrays of that size while they are post-processed and
log-softmaxed): with a 152k vocabulary that was the calibration pass's peak. Here the LM head's
forward is replaced, for the pass, by one that keeps its input (the final normalised hidden state,
what the head would multiply) and returns a (batch, positions, 1) placeholder; then
log p(next token) = z_target − logsumexp_v z_v is computed over vocabulary slices of the head's rows
(each read once per batch: from the checkpoint by slices when offloaded, :mod:`.sliced`) and chunks
of positions, with the running maximum and sum of the log-sum-exp kept in float64 (the exponentials of
z − max in the compute dtype, as log_softmax takes them). Each logit is the
same dot product as in the head's own forward (only BLAS blocking may differ).

Only for a head whose output the model returns unchanged: :func:`head_mode` checks that once per
loaded model with a 1-token forward whose head returns a known probe (identity), or applies
``final_logit_softcapping`` when the model's output is exactly cap·tanh(probe/cap) (Gemma 2 and
Gemma 3 text); for anything else (another post-processing, a head that is not a plain linear map
with rows to read) the pass keeps the model's full logits (:func:`.activations.calibration_pass`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import torch

CHUNK_BYTES = 4 * 2**20  # float32 logits of one (positions × vocabulary slice) block
SLICE_BYTES = 8 * 2**20  # LM head rows read (and upcast to the compute dtype) at a time


@dataclass(frozen=True)
class HeadRows:
    """Rows [start, stop) of the LM head as (weight, bias or None) in the compute dtype."""

    rows: Callable[[int, int], tuple[torch.Tensor, Optional[torch.Tensor]]]
    vocab: int
    hidden: int
    slice_rows: int  # rows read at a time
    softcap: Optional[float] = None  # logits → cap · tanh(logits / cap) (Gemma 2's final soft-capping)


def _replace_forward(module: torch.nn.Module, forward: Callable) -> contextlib.AbstractContextManager:
    @contextlib.contextmanager
    def swap() -> Iterator[None]:
        had = "forward" in module.__dict__
        saved = module.__dict__.get("forward")
        module.forward = forward
        try:
            yield
        finally:
            if had:
                module.forward = saved
            else:
                del module.forward

    return swap()


@torch.no_grad()
def head_mode(model: torch.nn.Module, rows: Optional[HeadRows], config) -> Optional[HeadRows]:
    """``rows`` if the model returns its head's output unchanged (or soft-capped by its config's
    ``final_logit_softcapping``, then with ``softcap`` set); None otherwise (the full logits are kept).
    One forward of one token, whose head returns a seeded random probe instead of computing."""
    head = model.get_output_embeddings()
    if rows is None or head is None:
        return None
    probe = torch.randn(1, 1, rows.vocab, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 8
    seen: list[torch.Tensor] = []

    def fake(x: torch.Tensor) -> torch.Tensor:
        seen.append(x)
        return probe.to(x.dtype).expand(*x.shape[:-1], rows.vocab)

    with _replace_forward(head, fake):
        try:
            out = model(input_ids=torch.zeros(1, 1, dtype=torch.long), use_cache=False).logits
        except Exception:  # noqa: BLE001 - a head the model does not call as a module: keep the full logits
            return None
    if len(seen) != 1 or out is None or tuple(out.shape) != (1, 1, rows.vocab):
        return None
    p = probe.to(out.dtype)
    if torch.equal(out, p):
        return rows
    cap = getattr(config, "final_logit_softcapping", None)
    if cap and torch.allclose(out.double(), torch.tanh(p.double() / cap) * cap, rtol=1e-5, atol=1e-6):
        return HeadRows(rows.rows, rows.vocab, rows.hidden, rows.slice_rows, float(cap))
    return None


@contextlib.contextmanager
def captured_head_input(model: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """While inside, the LM head appends its input to the yielded list and returns zeros of shape
    (..., 1): the model's forward runs as usual up to the head, which computes nothing."""
    head = model.get_output_embeddings()
    seen: list[torch.Tensor] = []

    def keep(x: torch.Tensor) -> torch.Tensor:
        seen.append(x)
        return x.new_zeros(*x.shape[:-1], 1)

    with _replace_forward(head, keep):
        yield seen


def next_token_logp(h: torch.Tensor, batch: torch.Tensor, head: HeadRows, dtype: torch.dtype) -> torch.Tensor:
    """log p(batch[:, t+1] | ..t) for t < T−1, (batch, T−1) float64, from the head's input ``h`` (batch, T, hidden).

    Vocabulary slices outside (each read once), chunks of positions inside; per position the running
    maximum m and sum s of exp(z − m) over the slices seen (float64), and the target's logit."""
    x = h[:, :-1].reshape(-1, h.shape[-1]).to(dtype)
    target = batch[:, 1:].reshape(-1).to(x.device)
    n = x.shape[0]
    m = torch.full((n,), -torch.inf, dtype=torch.float64)
    s = torch.zeros(n, dtype=torch.float64)
    picked = torch.full((n,), torch.nan, dtype=torch.float64)
    for v0 in range(0, head.vocab, head.slice_rows):
        v1 = min(v0 + head.slice_rows, head.vocab)
        w, b = head.rows(v0, v1)
        step = max(1, CHUNK_BYTES // ((v1 - v0) * 4))
        for p0 in range(0, n, step):
            p1 = min(p0 + step, n)
            z = torch.nn.functional.linear(x[p0:p1], w, b)
            if head.softcap:
                z = torch.tanh(z / head.softcap) * head.softcap
            t = target[p0:p1]
            inside = (t >= v0) & (t < v1)
            if inside.any():
                rows = inside.nonzero().squeeze(1)
                picked[p0 + rows] = z[rows, t[rows] - v0].double()
            # m holds logits (values of z), so z − m is one subtraction in z's dtype; exp there, sums in float64
            new_m = torch.maximum(m[p0:p1], z.max(dim=1).values.double())
            s[p0:p1] = s[p0:p1] * torch.exp(m[p0:p1] - new_m) + (z.sub_(new_m[:, None].to(z.dtype)).exp_()).sum(
                dim=1, dtype=torch.float64
            )
            m[p0:p1] = new_m
            del z
    return (picked - (m + torch.log(s))).reshape(batch.shape[0], -1)
