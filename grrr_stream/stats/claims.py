"""Accuracy claims with their uncertainty: paired bootstrap over problems within a transition, the
informative set. The paper's headline statistics over sets of evaluated transitions, and
:func:`~grrr_stream.stats.claims_sets.summarise` (all tables at once), are in :mod:`grrr_stream.stats.claims_sets`.

A transition's *score* of a variant is the paper's: the unweighted mean over benchmarks of
the per-benchmark accuracy, in percent. Every variant of a transition answers the same
problems, so differences between variants are *paired*: one bootstrap replicate draws the
problems of each benchmark with replacement (n_b draws from the n_b problems) and scores
every variant on that same draw. A variant that gives the same answers as another has a
zero-width interval at 0 against it. These per-transition replicates (``TransitionScores.reps``,
stream ``paired:{transition}``) serve the intervals within one transition only; a statistic
across transitions resamples the problems jointly (:func:`grrr_stream.stats.claims_sets.joint_replicates`),
from the per-problem values kept in ``TransitionScores.per_problem``.

The informative set (full − base ≥ ``informative_points``) is fixed at the point estimates:
it says which transitions a claim is about; how many of them are informative by less
than their own interval is reported beside it.

Random streams follow :mod:`grrr_stream.stats.summaries`: block ``k`` of a stream draws from
``SeedSequence([seed, crc32(stream), k])``, so results do not depend on how they are run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import numpy as np

from .bootstrap import block_rng, blocks, interval, ratio

# each variant's paired difference to these (points); diag: the paper's "null above diag" is a paired question
REFERENCES = ("full", "base", "proj", "diag")
# scores are means of finitely many problems: a tie with a threshold (C2's offnull is exactly 4.3 points
# below full in the paper) must not hang on the rounding of 60.4 − 4.3; comparisons allow this much (points
# or percent), far below the resolution of any benchmark
TIE = 1e-9


@dataclass
class TransitionScores:
    """Point scores and bootstrap replicates of every variant of one evaluated transition."""

    transition: str
    kind: str  # 'cumulative' or 'incremental' (or '' when unknown)
    variants: list[str]
    benchmarks: list[str]
    n_problems: dict[str, int]
    point: np.ndarray  # (V,) scores in percent
    reps: np.ndarray  # (R, V) the same scores on resampled problems (this transition's own draws)
    # benchmark → (n_b, V) per-problem values, for resampling problems jointly across transitions
    per_problem: dict[str, np.ndarray] = field(default_factory=dict)
    method: str = ""  # the child model's post-training method (SFT, DPO, ...; '' when unknown)
    # one training step (W0 is the model the child was trained from); False for a cumulative base → RL of an RL
    # model that follows an SFT, which the paper decomposes but does not evaluate: claims leave it out of their sets
    step: bool = True

    def has(self, variant: str) -> bool:
        return variant in self.variants

    def score(self, variant: str) -> float:
        return float(self.point[self.variants.index(variant)])

    def replicates(self, variant: str) -> np.ndarray:
        """The bootstrap replicates of one variant's score."""
        return self.reps[:, self.variants.index(variant)]


def _values(v: object) -> np.ndarray:
    """Per-problem values in [0, 1]: a '0110…' string, booleans, or fractions (avg@n, pass@k of sampled
    answers: each problem is resampled with all its samples)."""
    if isinstance(v, str):  # the '0110…' string kept in a benchmark's summary
        return (np.frombuffer(v.encode(), dtype=np.uint8) == ord("1")).astype(np.float64)
    return np.asarray(v, dtype=np.float64)


def transition_scores(
    correct: Mapping[str, Mapping[str, object]],
    *,
    transition: str = "",
    kind: str = "",
    resamples: int = 10_000,
    seed: int = 0,
    method: Optional[str] = None,
    step: bool = True,
) -> TransitionScores:
    """Scores and paired bootstrap replicates from per-problem correctness.

    ``correct``: variant → benchmark → per-problem values in problem order (a bool sequence, a
    '0'/'1' string, or fractions such as avg@n). Only the benchmarks every variant answered count,
    and a benchmark must have the same number of problems for every variant.
    """
    variants = list(correct)
    if not variants:
        raise ValueError("no variants to score")
    benchmarks = sorted(set.intersection(*(set(correct[v]) for v in variants)))
    if not benchmarks:
        raise ValueError(f"the variants of {transition or 'this transition'} share no benchmark")
    mats, n_problems = [], {}
    for b in benchmarks:
        cols = [_values(correct[v][b]) for v in variants]
        n = {len(c) for c in cols}
        if len(n) != 1 or 0 in n:
            raise ValueError(
                f"{transition}: benchmark {b} has different or zero problem counts across variants: "
                f"{dict(zip(variants, (len(c) for c in cols)))}"
            )
        n_problems[b] = n.pop()
        mats.append(np.stack(cols, axis=1).astype(np.float64))  # n_b × V
    point = 100.0 * np.mean([m.mean(axis=0) for m in mats], axis=0)
    parts = []
    for k, size in enumerate(blocks(resamples)):
        rng = block_rng(seed, f"paired:{transition}", k)
        acc = np.zeros((size, len(variants)))
        for m in mats:  # benchmarks in sorted order: the same draws whatever the caller's order
            n = m.shape[0]
            counts = rng.multinomial(n, np.full(n, 1.0 / n), size=size)  # one resample of the problems per row
            acc += counts @ m / n
        parts.append(100.0 * acc / len(mats))
    reps = np.concatenate(parts) if parts else np.zeros((0, len(variants)))
    return TransitionScores(
        transition, kind, variants, benchmarks, n_problems, point, reps, dict(zip(benchmarks, mats)), method or "", step
    )


def difference_rows(ts: TransitionScores, *, level: float = 0.95) -> list[dict]:
    """Per variant: its score, and its difference to full, base and proj (points) with the paired
    bootstrap interval; retention against full and against proj (percent)."""
    rows = []
    for v in ts.variants:
        row: dict = {"transition": ts.transition, "kind": ts.kind, "variant": v, "score": ts.score(v)}
        # the score's own interval: what a bar of the score is drawn with (a score of 0 on every resample has [0, 0])
        row["score_ci_lo"], row["score_ci_hi"] = interval(ts.replicates(v), level)
        for ref in REFERENCES:
            if not ts.has(ref):
                continue
            lo, hi = interval(ts.replicates(v) - ts.replicates(ref), level)
            row[f"minus_{ref}"] = ts.score(v) - ts.score(ref)
            row[f"minus_{ref}_ci_lo"], row[f"minus_{ref}_ci_hi"] = lo, hi
        for ref in ("full", "proj"):
            if ts.has(ref):
                row[f"retention_{ref}_pct"] = ratio(ts.score(v), ts.score(ref))
        if ts.has("full"):  # named as the adaptive design names it (stats/claims_adaptive.py)
            reps = ratio(ts.replicates(v), ts.replicates("full"))
            row["retention_full_ci_lo"], row["retention_full_ci_hi"] = interval(reps[np.isfinite(reps)], level)
        row.update(gain_retention(ts, v, level))
        rows.append(row)
    return rows


def gain_retention(ts: TransitionScores, v: str, level: float) -> dict:
    """100 · (v − base) / (full − base): the share of the gain a variant keeps, beside retention v / full, which
    a variant that keeps only the base's skill already scores base / full on. Undefined (absent) where full does
    not gain over base at the point estimate: there is no gain to share."""
    if not (ts.has("full") and ts.has("base")) or ts.score("full") - ts.score("base") <= TIE:
        return {}
    b = ts.replicates("base")
    reps = ratio(ts.replicates(v) - b, ts.replicates("full") - b)
    lo, hi = interval(reps[np.isfinite(reps)], level)
    point = ratio(ts.score(v) - ts.score("base"), ts.score("full") - ts.score("base"))
    return {"gain_retention_pct": point, "gain_retention_ci_lo": lo, "gain_retention_ci_hi": hi}


def is_informative(ts: TransitionScores, informative_points: float) -> bool:
    """full − base ≥ ``informative_points`` at the point estimates (a tie counts, within :data:`TIE`)."""
    return ts.has("full") and ts.has("base") and ts.score("full") - ts.score("base") >= informative_points - TIE


def informative_rows(
    scores: Sequence[TransitionScores], *, informative_points: float = 1.0, level: float = 0.95
) -> list[dict]:
    """Per transition: the gain full − base with its interval, whether it is informative, whether
    that call is within the interval's reach (informative, but the interval reaches below the
    threshold), and full − proj: what the tensors that are not decomposed carry."""
    rows = []
    for ts in scores:
        row: dict = {"transition": ts.transition, "kind": ts.kind}
        if ts.has("full") and ts.has("base"):
            gain = ts.score("full") - ts.score("base")
            lo, hi = interval(ts.replicates("full") - ts.replicates("base"), level)
            informative = is_informative(ts, informative_points)
            row.update(
                gain=gain,
                gain_ci_lo=lo,
                gain_ci_hi=hi,
                informative=informative,
                informative_within_ci=bool(informative and lo < informative_points),
            )
        if ts.has("full") and ts.has("proj"):
            d = ts.score("full") - ts.score("proj")
            lo, hi = interval(ts.replicates("full") - ts.replicates("proj"), level)
            row.update(full_minus_proj=d, full_minus_proj_ci_lo=lo, full_minus_proj_ci_hi=hi)
        row["problems"] = sum(ts.n_problems.values())
        rows.append(row)
    return rows


def correctness_of(
    results: Sequence, variants: Optional[Sequence[str]] = None, metric: str = "avg"
) -> dict[str, dict[str, object]]:
    """variant → benchmark → per-problem values of ``metric``, from evaluation results (objects or
    dicts with ``variant``, ``benchmark``, ``scores`` and/or ``correct_bits``)."""
    out: dict[str, dict[str, object]] = {}
    for r in results:
        get = r.get if isinstance(r, dict) else (lambda k, _r=r: getattr(_r, k, None))
        values = (get("scores") or {}).get(metric)
        if values is None and metric == "avg":
            values = get("correct_bits") or None
        if values is None or (variants is not None and get("variant") not in variants):
            continue
        out.setdefault(get("variant"), {})[get("benchmark")] = values
    return out
