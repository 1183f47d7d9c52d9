"""Statistics over decomposed transitions: bootstrap CIs, summary tables, principal-band energies
and the matched isotropic null of the median off-diagonal cosine (the cosines themselves, between
two transitions: stats/comparisons.py). Dask does the heavy parts; scipy gives the exact null.

Reproducibility: every random block (bootstrap resamples, Monte Carlo null draws)
gets its own seed from ``numpy.random.SeedSequence([seed, stream, block])``, and
blocks are concatenated in order, so results are identical whichever Dask scheduler
(threads, processes, a distributed cluster) runs the blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from ..columns import POOLED, SUMMARY, scopes
from ..geometry.analyses import MATRIX_COLUMNS
from ..geometry.analyses.bands import band_column
from ..store.transition_store import StoredTransition
from .bootstrap import block_rng, blocks


def summary_metrics(rows: Sequence[dict]) -> list[str]:
    """The columns shown in the summaries (the paper's Tables 3/4/7, the numerical ranks per threshold, the
    analyses beyond the paper) that every one of these rows carries as a number, in the schema's order."""
    common = set.intersection(*(set(r) for r in rows)) if rows else set()
    numeric = [k for k, v in (rows[0] if rows else {}).items() if k in common and not isinstance(v, str)]
    return [c.name for c in MATRIX_COLUMNS.ordered(MATRIX_COLUMNS.present(numeric, SUMMARY))]


def band_rows(t: StoredTransition, edges: Sequence[int], *, scheduler: Any = None) -> list[dict]:
    """Energy of diag and off of the stored P by principal band, per matrix, as fractions of ‖ΔW‖²
    (the definitions of :func:`grrr_stream.geometry.frame.band_energies`), read chunk-wise from the store:
    no checkpoint and no SVD, for any finished store."""
    import dask
    import dask.array as da

    jobs, meta = [], []
    for name, attrs in t.matrices.items():
        P = t.dask_array(name, "P").astype(np.float64)
        r = P.shape[0]
        sq, d2 = P * P, da.diagonal(P) ** 2
        per_k = {}
        for edge in edges:
            k = min(int(edge), r)
            per_k[edge] = (sq[:k, :k].sum(), sq[:k, :].sum(), sq[:, :k].sum(), d2[:k].sum())
        jobs.append((sq.sum(), d2.sum(), per_k))
        meta.append(
            (
                name,
                attrs["layer"],
                attrs["module"],
                float(attrs["metrics"]["delta_fro"]) ** 2,
                float(attrs["metrics"]["f_null"]),
            )
        )
    computed = dask.compute(jobs, scheduler=scheduler or "threads")[0]
    rows = []
    for (name, layer, module, dd, f_null), (total, d_all, per_k) in zip(meta, computed):
        row = {"name": name, "layer": layer, "module": module, "f_null": f_null}
        for edge, (top, rows_k, cols_k, d_top) in per_k.items():
            parts = {
                "diag_principal": d_top,
                "diag_tail": d_all - d_top,
                "off_principal": top - d_top,
                "off_mixed": rows_k + cols_k - 2 * top,
                "off_tail": total - rows_k - cols_k + top - (d_all - d_top),
            }
            row.update({band_column(edge, p).name: (max(v, 0.0) / dd if dd > 0 else 0.0) for p, v in parts.items()})
        rows.append(row)
    return rows


def _compute(tasks: Sequence[Any], scheduler: Any) -> list:
    import dask

    return list(dask.compute(*tasks, scheduler=scheduler or "threads"))


# ---------------------------------------------------------------------------
# bootstrap


def _boot_block(values: np.ndarray, size: int, seed: int, stream: str, block: int) -> tuple[np.ndarray, np.ndarray]:
    rng = block_rng(seed, stream, block)
    idx = rng.integers(0, values.shape[0], size=(size, values.shape[0]))
    sample = values[idx]  # size × n × k
    return sample.mean(axis=1), np.median(sample, axis=1)


def bootstrap_ci(
    values: np.ndarray,
    *,
    resamples: int = 10_000,
    seed: int = 0,
    stream: str = "",
    level: float = 0.95,
    scheduler: Any = None,
    delayed: bool = False,
):
    """Percentile bootstrap CIs of the mean and the median, column-wise.

    ``values``: n × k (n matrices, k metrics) or a 1-D vector. Returns
    ``{"mean": (lo, hi), "median": (lo, hi)}`` with arrays of length k (scalars for 1-D).
    With ``delayed=True`` returns a Dask delayed object instead (to batch many calls).
    """
    import dask

    v = np.asarray(values, dtype=np.float64)
    one_d = v.ndim == 1
    v2 = v[:, None] if one_d else v
    tasks = [dask.delayed(_boot_block)(v2, size, seed, stream, b) for b, size in enumerate(blocks(resamples))]

    def finish(parts: list) -> dict:
        means = np.concatenate([p[0] for p in parts])
        meds = np.concatenate([p[1] for p in parts])
        q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
        out = {}
        for key, arr in (("mean", means), ("median", meds)):
            lo, hi = np.percentile(arr, q, axis=0)
            out[key] = (lo[0], hi[0]) if one_d else (lo, hi)
        return out

    job = dask.delayed(finish)(tasks)
    return job if delayed else _compute([job], scheduler)[0]


def summary_tables(
    transitions: Sequence[StoredTransition],
    *,
    resamples: int = 10_000,
    seed: int = 0,
    scheduler: Any = None,
    metrics: Optional[Sequence[str]] = None,
) -> list[dict]:
    """Long table: one row per (transition, scope, metric) with n, mean, std, median and
    bootstrap 95 % CIs of the mean and the median (over matrices), and for the update-sparsity fractions
    ``pooled``, the scope's entry-pooled fraction (geometry.analyses.sparsity.pooled_sparsity; empty for other
    metrics). Scopes: 'all', 'module:<m>', 'layer:<i>', and for
    mixture-of-experts stores 'expert:<e>'."""
    import dask

    jobs, keys = [], []
    for t in transitions:
        rows = t.rows()
        cols = list(metrics) if metrics is not None else summary_metrics(rows)
        pooled_cols = [c for c in MATRIX_COLUMNS.present(cols) if c.aggregate is POOLED]
        for scope, rs in scopes(rows, by=("module", "layer", "expert")).items():
            values = np.array([[float(r[m]) for m in cols] for r in rs])
            stream = f"{t.manifest['identity']['post_fingerprint']}:{scope}"
            jobs.append(bootstrap_ci(values, resamples=resamples, seed=seed, stream=stream, delayed=True))
            pooled = {c.name: c.aggregate.reduce(c.name, rs).get(c.headline) for c in pooled_cols}
            keys.append((t, scope, values, cols, pooled))
    results = _compute([dask.delayed(list)(jobs)], scheduler)[0]
    out = []
    for (t, scope, values, cols, pooled), ci in zip(keys, results):
        for j, m in enumerate(cols):
            col = values[:, j]
            out.append(
                {
                    "transition": t.label,
                    "store": str(t.path),
                    "scope": scope,
                    "metric": m,
                    "n": len(col),
                    "mean": float(col.mean()),
                    "std": float(col.std(ddof=1)) if len(col) > 1 else 0.0,
                    "median": float(np.median(col)),
                    "mean_ci_lo": float(ci["mean"][0][j]),
                    "mean_ci_hi": float(ci["mean"][1][j]),
                    "median_ci_lo": float(ci["median"][0][j]),
                    "median_ci_hi": float(ci["median"][1][j]),
                    # a pooled column (update sparsity): the scope's figure pooled over its entries (mean and
                    # CIs: over matrices)
                    "pooled": pooled.get(m),
                }
            )
    return out


def wide_table(long_rows: Sequence[dict], scope_prefix: str) -> list[dict]:
    """Paper-style table: one row per transition (and scope), ``<metric>`` = mean plus CI columns."""
    rows: dict[tuple, dict] = {}
    for r in long_rows:
        if not (r["scope"] == scope_prefix or r["scope"].startswith(scope_prefix + ":")):
            continue
        key = (r["transition"], r["scope"])
        row = rows.setdefault(key, {"transition": r["transition"], "scope": r["scope"], "n": r["n"]})
        row[r["metric"]] = r["mean"]
        row[f"{r['metric']}_ci_lo"] = r["mean_ci_lo"]
        row[f"{r['metric']}_ci_hi"] = r["mean_ci_hi"]
        if r.get("pooled") is not None:  # update sparsity: the entry-pooled figure next to the mean over matrices
            row[f"{r['metric']}_pooled"] = r["pooled"]
    return list(rows.values())


# ---------------------------------------------------------------------------
# isotropic null for the median off-diagonal cosine


def _null_block(half_dofs: np.ndarray, size: int, seed: int, stream: str, block: int) -> np.ndarray:
    rng = block_rng(seed, stream, block)
    # (cos + 1)/2 ~ Beta((d−1)/2, (d−1)/2) for two independent isotropic vectors in R^d
    x = rng.beta(half_dofs, half_dofs, size=(size, half_dofs.shape[0]))
    return np.median(2.0 * x - 1.0, axis=1)


@dataclass(frozen=True)
class NullTest:
    observed: float
    p_value: float
    null_mean: float
    null_std: float
    envelope: tuple[float, float]  # null mean ± 2 std of the median statistic
    draws: int
    verdict: str  # 'aligned', 'anti-aligned' or 'indistinguishable'


def median_cosine_null(
    observed: float,
    dofs: Sequence[int],
    *,
    draws: int = 10_000,
    seed: int = 0,
    stream: str = "null",
    alpha: float = 0.05,
    scheduler: Any = None,
    delayed: bool = False,
):
    """Matched isotropic null of the median over matrices of off-diagonal cosines.

    ``dofs``: d_k = r_k² − r_k per matrix (the dimension of its off-diagonal space).
    Two-sided Monte Carlo p-value p = (1 + #{|null| ≥ |obs|}) / (draws + 1); the null is
    symmetric about 0.
    """
    import dask

    half = (np.asarray(dofs, dtype=np.float64) - 1.0) / 2.0
    if np.any(half <= 0):
        raise ValueError("every matrix needs at least 2 off-diagonal entries for a cosine null")
    tasks = [dask.delayed(_null_block)(half, size, seed, stream, b) for b, size in enumerate(blocks(draws))]

    def finish(parts: list) -> NullTest:
        null = np.concatenate(parts)
        p = (1 + int(np.sum(np.abs(null) >= abs(observed)))) / (len(null) + 1)
        mu, sd = float(null.mean()), float(null.std(ddof=1))
        verdict = "indistinguishable"
        if p < alpha:
            verdict = "aligned" if observed > 0 else "anti-aligned"
        return NullTest(
            observed=float(observed),
            p_value=p,
            null_mean=mu,
            null_std=sd,
            envelope=(mu - 2 * sd, mu + 2 * sd),
            draws=len(null),
            verdict=verdict,
        )

    job = dask.delayed(finish)(tasks)
    return job if delayed else _compute([job], scheduler)[0]


def beta_null_quantiles(d: int, q: Sequence[float]) -> np.ndarray:
    """Exact quantiles of one matrix's isotropic cosine (scipy), e.g. for per-matrix envelopes."""
    from scipy import stats

    a = (d - 1) / 2.0
    return 2.0 * stats.beta.ppf(np.asarray(q), a, a) - 1.0
