"""Statistics over decomposed transitions: bootstrap CIs, off-diagonal cosines and
their matched isotropic null. Dask does the heavy parts; scipy gives the exact null.

Reproducibility: every random block (bootstrap resamples, Monte Carlo null draws)
gets its own seed from ``numpy.random.SeedSequence([seed, stream, block])``, and
blocks are concatenated in order, so results are identical whichever Dask scheduler
(threads, processes, a distributed cluster) runs the blocks.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .errors import StoreMismatchError
from .store import StoredTransition

SUMMARY_METRICS = ("f_diag", "f_off", "f_null", "r_delta", "sv_cos", "delta_max",
                   "sr_w0", "sr_delta", "sr_w1", "alpha")
BLOCK = 1000  # resamples / null draws per Dask task


def _compute(tasks: Sequence[Any], scheduler: Any) -> list:
    import dask

    return list(dask.compute(*tasks, scheduler=scheduler or "threads"))


def _rng(seed: int, stream: str, block: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(stream.encode()), block]))


def _blocks(total: int) -> list[int]:
    return [min(BLOCK, total - i) for i in range(0, total, BLOCK)]


# ---------------------------------------------------------------------------
# bootstrap


def _boot_block(values: np.ndarray, size: int, seed: int, stream: str, block: int) -> tuple[np.ndarray, np.ndarray]:
    rng = _rng(seed, stream, block)
    idx = rng.integers(0, values.shape[0], size=(size, values.shape[0]))
    sample = values[idx]  # size × n × k
    return sample.mean(axis=1), np.median(sample, axis=1)


def bootstrap_ci(values: np.ndarray, *, resamples: int = 10_000, seed: int = 0, stream: str = "",
                 level: float = 0.95, scheduler: Any = None, delayed: bool = False):
    """Percentile bootstrap CIs of the mean and the median, column-wise.

    ``values``: n × k (n matrices, k metrics) or a 1-D vector. Returns
    ``{"mean": (lo, hi), "median": (lo, hi)}`` with arrays of length k (scalars for 1-D).
    With ``delayed=True`` returns a Dask delayed object instead (to batch many calls).
    """
    import dask

    v = np.asarray(values, dtype=np.float64)
    one_d = v.ndim == 1
    v2 = v[:, None] if one_d else v
    tasks = [dask.delayed(_boot_block)(v2, size, seed, stream, b) for b, size in enumerate(_blocks(resamples))]

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


def summary_tables(transitions: Sequence[StoredTransition], *, resamples: int = 10_000, seed: int = 0,
                   scheduler: Any = None, metrics: Sequence[str] = SUMMARY_METRICS) -> list[dict]:
    """Long table: one row per (transition, scope, metric) with n, mean, std, median and
    bootstrap 95 % CIs of the mean and the median. Scopes: 'all', 'module:<m>', 'layer:<i>'."""
    import dask

    jobs, keys = [], []
    for t in transitions:
        rows = t.rows()
        scopes: dict[str, list[dict]] = {"all": rows}
        for r in rows:
            scopes.setdefault(f"module:{r['module']}", []).append(r)
        for r in sorted(rows, key=lambda r: r["layer"]):
            scopes.setdefault(f"layer:{r['layer']}", []).append(r)
        for scope, rs in scopes.items():
            values = np.array([[float(r[m]) for m in metrics] for r in rs])
            stream = f"{t.manifest['identity']['post_fingerprint']}:{scope}"
            jobs.append(bootstrap_ci(values, resamples=resamples, seed=seed, stream=stream, delayed=True))
            keys.append((t, scope, values))
    results = _compute([dask.delayed(list)(jobs)], scheduler)[0]
    out = []
    for (t, scope, values), ci in zip(keys, results):
        for j, m in enumerate(metrics):
            col = values[:, j]
            out.append({
                "transition": t.label, "store": str(t.path), "scope": scope, "metric": m, "n": len(col),
                "mean": float(col.mean()), "std": float(col.std(ddof=1)) if len(col) > 1 else 0.0,
                "median": float(np.median(col)),
                "mean_ci_lo": float(ci["mean"][0][j]), "mean_ci_hi": float(ci["mean"][1][j]),
                "median_ci_lo": float(ci["median"][0][j]), "median_ci_hi": float(ci["median"][1][j]),
            })
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
    return list(rows.values())


# ---------------------------------------------------------------------------
# isotropic null for the median off-diagonal cosine


def _null_block(half_dofs: np.ndarray, size: int, seed: int, stream: str, block: int) -> np.ndarray:
    rng = _rng(seed, stream, block)
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


def median_cosine_null(observed: float, dofs: Sequence[int], *, draws: int = 10_000, seed: int = 0,
                       stream: str = "null", alpha: float = 0.05, scheduler: Any = None,
                       delayed: bool = False):
    """Matched isotropic null of the median over matrices of off-diagonal cosines.

    ``dofs``: d_k = r_k² − r_k per matrix (the dimension of its off-diagonal space).
    Two-sided Monte Carlo p-value p = (1 + #{|null| ≥ |obs|}) / (draws + 1); the null is
    symmetric about 0.
    """
    import dask

    half = (np.asarray(dofs, dtype=np.float64) - 1.0) / 2.0
    if np.any(half <= 0):
        raise ValueError("every matrix needs at least 2 off-diagonal entries for a cosine null")
    tasks = [dask.delayed(_null_block)(half, size, seed, stream, b) for b, size in enumerate(_blocks(draws))]

    def finish(parts: list) -> NullTest:
        null = np.concatenate(parts)
        p = (1 + int(np.sum(np.abs(null) >= abs(observed)))) / (len(null) + 1)
        mu, sd = float(null.mean()), float(null.std(ddof=1))
        verdict = "indistinguishable"
        if p < alpha:
            verdict = "aligned" if observed > 0 else "anti-aligned"
        return NullTest(observed=float(observed), p_value=p, null_mean=mu, null_std=sd,
                        envelope=(mu - 2 * sd, mu + 2 * sd), draws=len(null), verdict=verdict)

    job = dask.delayed(finish)(tasks)
    return job if delayed else _compute([job], scheduler)[0]


def beta_null_quantiles(d: int, q: Sequence[float]) -> np.ndarray:
    """Exact quantiles of one matrix's isotropic cosine (scipy), e.g. for per-matrix envelopes."""
    from scipy import stats

    a = (d - 1) / 2.0
    return 2.0 * stats.beta.ppf(np.asarray(q), a, a) - 1.0


# ---------------------------------------------------------------------------
# off-diagonal cosines between two transitions that share a frame


def _offdiag_sums(a, b):
    """Dask scalars Σ_off a·b, Σ_off a², Σ_off b² (float64), without materialising masks."""
    import dask.array as da

    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    da_, db_ = da.diagonal(a64), da.diagonal(b64)
    return ((a64 * b64).sum() - (da_ * db_).sum(),
            (a64 * a64).sum() - (da_ * da_).sum(),
            (b64 * b64).sum() - (db_ * db_).sum())


def check_shared_frame(a: StoredTransition, b: StoredTransition) -> None:
    """Refuse to compare transitions whose P matrices live in different frames."""
    problems = []
    if a.manifest["identity"]["base_fingerprint"] != b.manifest["identity"]["base_fingerprint"]:
        problems.append("their base checkpoints differ")
    if list(a.matrices) != list(b.matrices):
        problems.append("they decompose different sets of matrices")
    else:
        bad = [n for n in a.matrices if a.matrices[n]["frame_key"] != b.matrices[n]["frame_key"]]
        if bad:
            problems.append(f"{len(bad)} matrices use different frames (compute dtype or core threshold), "
                            f"e.g. {bad[0]}")
    if problems:
        raise StoreMismatchError(
            f"cannot compare {a.path} with {b.path}: " + "; ".join(problems)
            + ". Both transitions must start from the same base with the same frame settings."
        )


@dataclass
class Comparison:
    kind: str  # 'sequential' (a = base→SFT, b = base→RL; compares ΔW_SFT with ΔW_incr) or 'independent'
    a: str
    b: str
    rows: list[dict]  # per matrix: name, layer, module, d, cos_off, off_norm_a, off_norm_b
    median: float
    ci: tuple[float, float]
    null: NullTest
    norms: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict:
        return {
            "kind": self.kind, "a": self.a, "b": self.b, "n_matrices": len(self.rows),
            "median_cos_off": self.median, "ci_lo": self.ci[0], "ci_hi": self.ci[1],
            "p_value": self.null.p_value, "null_mean": self.null.null_mean, "null_std": self.null.null_std,
            "null_lo": self.null.envelope[0], "null_hi": self.null.envelope[1], "null_draws": self.null.draws,
            "verdict": self.null.verdict, **self.norms,
        }


def compare(a: StoredTransition, b: StoredTransition, kind: str, *, resamples: int = 10_000,
            null_draws: int = 10_000, seed: int = 0, alpha: float = 0.05, scheduler: Any = None) -> Comparison:
    """Off-diagonal cosine geometry of two transitions in the shared base frame.

    ``sequential``: ``a`` is base→SFT and ``b`` is base→RL (cumulative); the increment
    P_incr = P_cum − P_SFT (and null_incr likewise) is formed lazily from the stored
    arrays, so no SVD is needed. ``independent``: two children of the same base.
    """
    import dask

    if kind not in ("sequential", "independent"):
        raise ValueError("kind must be 'sequential' or 'independent'")
    check_shared_frame(a, b)
    sums, norm_terms, meta = [], [], []
    for name, attrs in a.matrices.items():
        Pa, Pb = a.dask_array(name, "P"), b.dask_array(name, "P")
        if kind == "sequential":
            Pb = Pb - Pa
            sq = (Pb.astype(np.float64) ** 2).sum()
            if a.has_array(name, "null") and b.has_array(name, "null"):
                Nd = b.dask_array(name, "null").astype(np.float64) - a.dask_array(name, "null").astype(np.float64)
                sq = sq + (Nd**2).sum()
            norm_terms.append(sq)
        sums.append(_offdiag_sums(Pa, Pb))
        r = Pa.shape[0]
        meta.append((name, attrs["layer"], attrs["module"], r * r - r))
    computed_sums, computed_norms = dask.compute(sums, norm_terms, scheduler=scheduler or "threads")
    rows = []
    for (name, layer, module, d), (ab, aa, bb) in zip(meta, computed_sums):
        cos = ab / math.sqrt(aa * bb) if aa > 0 and bb > 0 else 0.0
        rows.append({"name": name, "layer": layer, "module": module, "d": d, "cos_off": cos,
                     "off_norm_a": math.sqrt(max(aa, 0.0)), "off_norm_b": math.sqrt(max(bb, 0.0))})
    cos = np.array([r["cos_off"] for r in rows])
    stream = f"{kind}:{a.manifest['identity']['post_fingerprint']}:{b.manifest['identity']['post_fingerprint']}"
    median = float(np.median(cos))
    ci_job = bootstrap_ci(cos, resamples=resamples, seed=seed, stream=stream + ":boot", delayed=True)
    null_job = median_cosine_null(median, [r["d"] for r in rows], draws=null_draws, seed=seed,
                                  stream=stream + ":null", alpha=alpha, delayed=True)
    ci, null = dask.compute(ci_job, null_job, scheduler=scheduler or "threads")
    na = math.sqrt(sum(r["delta_fro"] ** 2 for r in a.rows()))
    nb = math.sqrt(sum(r["delta_fro"] ** 2 for r in b.rows()))
    if kind == "sequential":
        n_incr = math.sqrt(sum(computed_norms))
        norms = {"norm_sft": na / nb, "norm_incr": n_incr / nb, "norm_cum": 1.0,
                 "norm_cum_abs": nb}
    else:
        norms = {"norm_a": na, "norm_b": nb, "norm_ratio": min(na, nb) / max(na, nb) if max(na, nb) > 0 else 0.0}
    return Comparison(kind=kind, a=str(a.path), b=str(b.path), rows=rows, median=median,
                      ci=(float(ci["median"][0]), float(ci["median"][1])), null=null, norms=norms)
