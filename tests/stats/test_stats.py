"""Statistics over stores: null calibration and power, bootstrap coverage, stepwise
increments, summary tables, scheduler invariance, comparison tracking."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch
from helpers.common import no_track_config

from grrr_stream.checkpoints.reader import Checkpoint
from grrr_stream.config import TrackingConfig
from grrr_stream.decompose.run import run_transition
from grrr_stream.errors import StoreMismatchError
from grrr_stream.fixtures.synthetic import ModelShape, Update, write_model
from grrr_stream.runtime.cluster import compute_scheduler
from grrr_stream.stats import summaries as stats
from grrr_stream.stats.comparisons import compare
from grrr_stream.stats.run import run_comparisons, run_stats
from grrr_stream.store.frame_cache import FrameCache
from grrr_stream.store.transition_store import StoredTransition

SHAPE = ModelShape(hidden=64, intermediate=160, layers=3, heads=4, kv_heads=2)
SFT = Update(r_delta=2e-2, plant=(0.2, 0.5, 0.3))
RL = Update(r_delta=5e-3, plant=(0.1, 0.7, 0.2))
SIB = Update(r_delta=1e-2, plant=(0.3, 0.4, 0.3), seed=1)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    root = tmp_path_factory.mktemp("chain")
    models = {}
    for name, ups in (("base", ()), ("sft", (SFT,)), ("rl", (SFT, RL)), ("sib", (SIB,))):
        models[name] = write_model(root / name, SHAPE, family="qwen2", dtype="float32", updates=ups)
    other = write_model(root / "other_base", SHAPE, family="qwen2", dtype="float32", seed=7)
    stores = {}
    for dtype in ("float32", "float64"):
        for post in ("sft", "rl", "sib"):
            s = root / f"{dtype}-{post}"
            run_transition(
                no_track_config(
                    base=str(models["base"]),
                    post=str(models[post]),
                    store=s,
                    frame_cache=root / "frames",
                    compute_dtype=dtype,
                    store_dtype=dtype,
                )
            )
            stores[(dtype, post)] = s
    s = root / "other"
    run_transition(no_track_config(base=str(other), post=str(models["sft"]), store=s, frame_cache=root / "frames"))
    stores["other"] = s
    return root, models, stores


# -- the isotropic null --------------------------------------------------------------------


def _planted_pair(rng, r, c):
    """Two r×r matrices whose off-diagonal parts have cosine exactly c."""
    a = rng.standard_normal((r, r))
    mask = ~np.eye(r, dtype=bool)
    ua = a[mask] / np.linalg.norm(a[mask])
    n = rng.standard_normal(ua.shape)
    n -= (n @ ua) * ua
    n /= np.linalg.norm(n)
    b = np.array(a)
    b[mask] = c * ua + math.sqrt(1 - c * c) * n
    return a, b


def _offdiag_cos(a, b):
    m = ~np.eye(a.shape[0], dtype=bool)
    return float(a[m] @ b[m] / np.linalg.norm(a[m]) / np.linalg.norm(b[m]))


def test_null_false_positive_rate_is_calibrated():
    """Independent random P pairs of a model-like mix of sizes: FPR at alpha = 0.05 over 300 trials."""
    rng = np.random.default_rng(123)
    sizes = [64, 64, 32, 64, 128, 128, 160] * 4  # 4 layers × 7 modules
    dofs = [r * r - r for r in sizes]
    trials, rejections = 300, 0
    for t in range(trials):
        cos = [_offdiag_cos(rng.standard_normal((r, r)), rng.standard_normal((r, r))) for r in sizes]
        res = stats.median_cosine_null(float(np.median(cos)), dofs, draws=2000, seed=t, scheduler="sync")
        rejections += res.p_value < 0.05
    fpr = rejections / trials
    print(f"false-positive rate at alpha=0.05 over {trials} trials: {fpr:.3f}")
    assert 0.02 <= fpr <= 0.08


@pytest.mark.parametrize("c,verdict", [(0.05, "aligned"), (-0.05, "anti-aligned")])
def test_null_detects_planted_cosine(c, verdict):
    rng = np.random.default_rng(5)
    pairs = [_planted_pair(rng, 256, c) for _ in range(50)]
    cos = [_offdiag_cos(a, b) for a, b in pairs]
    assert np.allclose(cos, c)
    res = stats.median_cosine_null(float(np.median(cos)), [256 * 255] * 50, draws=10_000, seed=0)
    assert res.verdict == verdict and res.p_value < 1e-3
    assert res.envelope[0] < 0 < res.envelope[1] and res.envelope[1] < abs(c)


def test_null_matches_exact_beta_for_one_matrix():
    d = 40 * 39
    res = stats.median_cosine_null(0.0, [d], draws=20_000, seed=1)
    lo, hi = stats.beta_null_quantiles(d, [0.02275, 0.97725])  # ±2σ of a normal
    assert res.envelope[0] == pytest.approx(lo, rel=0.05) and res.envelope[1] == pytest.approx(hi, rel=0.05)
    # the exact std of the cosine of two independent isotropic vectors in R^d: E[cos²] = 1/d
    assert res.null_std == pytest.approx(1 / math.sqrt(d), rel=0.03)


def test_bootstrap_ci_coverage_is_near_nominal():
    """Percentile bootstrap of the median of 60 draws from a skewed law with known median."""
    rng = np.random.default_rng(11)
    true_median = 1.0  # lognormal(0, 0.5) has median e^0 = 1
    reps, covered = 400, 0
    for i in range(reps):
        x = rng.lognormal(0.0, 0.5, size=60)
        lo, hi = stats.bootstrap_ci(x, resamples=2000, seed=i, scheduler="sync")["median"]
        covered += lo <= true_median <= hi
    coverage = covered / reps
    print(f"measured coverage of the 95 % median CI: {coverage:.3f} over {reps} data sets")
    assert 0.90 <= coverage <= 0.99


def test_bootstrap_is_identical_across_schedulers():
    x = np.random.default_rng(0).standard_normal((40, 3))
    a = stats.bootstrap_ci(x, resamples=3000, seed=3, scheduler="threads")
    b = stats.bootstrap_ci(x, resamples=3000, seed=3, scheduler="sync")
    c = stats.bootstrap_ci(x, resamples=3000, seed=3, scheduler="processes")
    for k in ("mean", "median"):
        for other in (b, c):
            assert np.array_equal(a[k][0], other[k][0]) and np.array_equal(a[k][1], other[k][1])


def test_distributed_local_cluster_gives_identical_results(chain):
    from distributed import Client, LocalCluster

    _, _, stores = chain
    a, b = StoredTransition(stores[("float32", "sft")]), StoredTransition(stores[("float32", "rl")])
    local = compare(a, b, "stepwise", resamples=2000, null_draws=2000, seed=4)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        client = compute_scheduler(cluster.scheduler_address)  # as `--scheduler ADDRESS` does
        try:
            assert isinstance(client, Client)
            remote = compare(a, b, "stepwise", resamples=2000, null_draws=2000, seed=4, scheduler=client)
        finally:
            client.close()
    assert local.summary() == remote.summary()
    assert [r["cos_off"] for r in local.rows] == [r["cos_off"] for r in remote.rows]


# -- stores ------------------------------------------------------------------------------


def test_incremental_P_from_store_equals_direct_projection(chain):
    root, models, stores = chain
    ckpt = {k: Checkpoint.open(models[k]) for k in ("base", "sft", "rl")}
    for dtype, tol in (("float64", 1e-6), ("float32", 1e-4)):
        a, b = StoredTransition(stores[(dtype, "sft")]), StoredTransition(stores[(dtype, "rl")])
        cache = FrameCache(root / "frames")
        worst = 0.0
        for name, attrs in a.matrices.items():
            frame = cache.get(attrs["frame_key"], torch.float64)
            d_incr = ckpt["rl"].read(name).double() - ckpt["sft"].read(name).double()
            direct = (frame.U.T @ d_incr @ frame.V).numpy()
            from_store = (b.dask_array(name, "P").astype(np.float64) - a.dask_array(name, "P")).compute()
            worst = max(worst, np.linalg.norm(from_store - direct) / np.linalg.norm(direct))
        print(f"{dtype}: max relative error of P_incr from stored P vs direct projection: {worst:.2e}")
        assert worst < tol


def test_stepwise_and_independent_comparisons(chain):
    _, models, stores = chain
    a, b = StoredTransition(stores[("float64", "sft")]), StoredTransition(stores[("float64", "rl")])
    comp = compare(a, b, "stepwise", resamples=2000, null_draws=2000, seed=0)
    # norms: independent computation from the checkpoints
    ck = {k: Checkpoint.open(models[k]) for k in ("base", "sft", "rl")}
    n2 = {"sft": 0.0, "incr": 0.0, "cum": 0.0}
    for name in a.matrices:
        w = {k: ck[k].read(name).double() for k in ck}
        n2["sft"] += float(((w["sft"] - w["base"]) ** 2).sum())
        n2["incr"] += float(((w["rl"] - w["sft"]) ** 2).sum())
        n2["cum"] += float(((w["rl"] - w["base"]) ** 2).sum())
    assert comp.norms["norm_sft"] == pytest.approx(math.sqrt(n2["sft"] / n2["cum"]), rel=1e-9)
    assert comp.norms["norm_incr"] == pytest.approx(math.sqrt(n2["incr"] / n2["cum"]), rel=1e-9)
    # per-matrix cosine: independent numpy computation from the stored arrays
    for r in comp.rows:
        pa = a.dask_array(r["name"], "P").compute()
        pb = b.dask_array(r["name"], "P").compute() - pa
        assert r["cos_off"] == pytest.approx(_offdiag_cos(pa, pb), abs=1e-12)
        assert r["d"] == pa.shape[0] * (pa.shape[0] - 1)
    assert comp.median == pytest.approx(np.median([r["cos_off"] for r in comp.rows]))
    assert comp.ci[0] <= comp.median <= comp.ci[1]
    # independent siblings: the norm ratio
    s = StoredTransition(stores[("float64", "sib")])
    ind = compare(a, s, "independent", resamples=2000, null_draws=2000, seed=0)
    na = math.sqrt(sum(r["delta_fro"] ** 2 for r in a.rows()))
    ns = math.sqrt(sum(r["delta_fro"] ** 2 for r in s.rows()))
    assert ind.norms["norm_ratio"] == pytest.approx(min(na, ns) / max(na, ns))


def test_compare_refuses_different_frames(chain):
    _, _, stores = chain
    with pytest.raises(StoreMismatchError, match="base checkpoints differ"):
        compare(StoredTransition(stores[("float32", "sft")]), StoredTransition(stores["other"]), "independent")
    with pytest.raises(StoreMismatchError, match="different frames"):
        compare(StoredTransition(stores[("float32", "sft")]), StoredTransition(stores[("float64", "rl")]), "stepwise")


def test_summary_tables_match_numpy(chain, tmp_path):
    _, _, stores = chain
    paths = [stores[("float32", "sft")], stores[("float32", "rl")]]
    res = run_stats(paths, tmp_path / "stats", resamples=4000, seed=0)
    for path in paths:
        with open(path / "metrics.csv") as f:
            rows = list(csv.DictReader(f))
        mine = {(r["scope"], r["metric"]): r for r in res.long_rows if r["store"] == str(path)}
        for scope, sel in (
            ("all", rows),
            ("module:up_proj", [r for r in rows if r["module"] == "up_proj"]),
            ("layer:1", [r for r in rows if r["layer"] == "1"]),
        ):
            for metric in ("f_diag", "f_off", "f_null", "r_delta", "sv_cos", "delta_max", "sr_w0", "sr_w1", "alpha"):
                v = np.array([float(r[metric]) for r in sel])
                got = mine[(scope, metric)]
                assert got["n"] == len(v)
                assert got["mean"] == pytest.approx(v.mean(), rel=1e-12, abs=1e-15)
                assert got["std"] == pytest.approx(v.std(ddof=1), rel=1e-9, abs=1e-15)
                assert got["median"] == pytest.approx(np.median(v), rel=1e-12, abs=1e-15)
                assert got["mean_ci_lo"] <= got["mean"] + 1e-15 and got["mean"] <= got["mean_ci_hi"] + 1e-15
                if scope == "all" and v.std() > 0:  # CI width ≈ normal theory for n = 21
                    width = got["mean_ci_hi"] - got["mean_ci_lo"]
                    assert width == pytest.approx(2 * 1.96 * v.std(ddof=0) / math.sqrt(len(v)), rel=0.3)
    with open(tmp_path / "stats" / "table_overall.csv") as f:
        overall = list(csv.DictReader(f))
    assert len(overall) == 2 and {"f_diag", "f_diag_ci_lo", "alpha_ci_hi"} <= set(overall[0])
    with open(tmp_path / "stats" / "table_by_layer.csv") as f:
        assert len(list(csv.DictReader(f))) == 2 * SHAPE.layers


def test_compare_run_outputs_and_tracking_without_duplicates(chain, tmp_path):
    from mlflow.tracking import MlflowClient

    _, _, stores = chain
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    pairs = [
        ("stepwise", stores[("float32", "sft")], stores[("float32", "rl")]),
        ("independent", stores[("float32", "sft")], stores[("float32", "sib")]),
    ]
    kw = dict(resamples=1000, null_draws=1000, seed=0, tracking=TrackingConfig(uri=uri))
    res = run_comparisons(pairs, tmp_path / "cmp", **kw)
    assert (tmp_path / "cmp" / "offdiag_cosine_medians.png").stat().st_size > 1000
    assert (tmp_path / "cmp" / "update_norms.png").stat().st_size > 1000
    # the stepwise comparison as results spell it (stats/comparisons.py, STEPWISE): in the CSV, the files, MLflow
    assert [s["kind"] for s in res.summaries] == ["sequential", "independent"]
    assert len(list((tmp_path / "cmp").glob("sequential_*.csv"))) == 1
    again = run_comparisons([("sequential", *pairs[0][1:]), pairs[1]], tmp_path / "cmp", **kw)  # the old spelling
    assert again.run_ids == res.run_ids and len(set(res.run_ids)) == 2
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("grrr_stream")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 2
    for run in runs:
        assert run.data.params["statistic"] == "median cos_off" and run.data.params["resamples"] == "1000"
        assert "p_value" in run.data.metrics and "median_cos_off" in run.data.metrics
        assert run.data.tags["grrr.verdict"] in ("aligned", "anti-aligned", "indistinguishable")
        arts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert "offdiag_cosine_medians.png" in arts


def test_the_old_flag_compare_sequential_still_works_and_warns_once():
    """``compare --sequential``, the old name of ``--stepwise``: the same pairs, one warning per use (the command
    line shows it as one line); the stepwise flag alone says nothing."""
    import warnings

    from grrr_stream.cli.entry import build_parser
    from grrr_stream.errors import RenamedSettingWarning

    def parsed(*words):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            args = build_parser().parse_args(["compare", *words, "--out", "o"])
        return args.stepwise, [str(w.message) for w in caught if w.category is RenamedSettingWarning]

    assert parsed("--stepwise", "a", "b") == ([["a", "b"]], [])
    old, said = parsed("--sequential", "a", "b")
    assert old == [["a", "b"]] and said == [
        "the flag --sequential is deprecated (renamed in issue 49): write --stepwise"
    ]
    both, said = parsed("--stepwise", "a", "b", "--sequential", "c", "d")
    assert both == [["a", "b"], ["c", "d"]] and len(said) == 1


def test_csv_writes_numpy_scalars_as_plain_numbers():
    import numpy as np

    from grrr_stream.files import to_csv

    text = to_csv([{"a": np.float64(0.1), "b": np.float32(0.5), "c": np.int64(3), "d": 0.25}])
    assert text == "a,b,c,d\n0.1,0.5,3,0.25\n"


# -- independent pairs from their nearest common ancestor; reduced-precision stores ----------

SHARED = Update(r_delta=5e-2, seed=0)  # a large update both models inherit (an SFT parent)
STEP_A = Update(r_delta=5e-3, seed=11)  # then two independent small steps (two RL runs from it)
STEP_B = Update(r_delta=5e-3, seed=12)


@pytest.fixture(scope="module")
def siblings(tmp_path_factory):
    root = tmp_path_factory.mktemp("siblings")
    models = {
        name: write_model(root / name, SHAPE, family="qwen2", dtype="float32", updates=ups)
        for name, ups in (("base", ()), ("parent", (SHARED,)), ("a", (SHARED, STEP_A)), ("b", (SHARED, STEP_B)))
    }
    stores = {}
    for post in ("parent", "a", "b"):
        stores[post] = root / f"s-{post}"
        run_transition(
            no_track_config(
                base=str(models["base"]), post=str(models[post]), store=stores[post], frame_cache=root / "frames"
            )
        )
    return root, models, stores


def test_independent_pair_is_compared_from_its_nearest_common_ancestor(siblings):
    """A large shared parent update and two independent steps from it: the steps are as orthogonal as the
    null says, while the cumulative updates look aligned because they share the parent's update."""
    root, models, stores = siblings
    a, b, c = (StoredTransition(stores[k]) for k in ("a", "b", "parent"))
    steps = compare(a, b, "independent", ancestor=c, resamples=2000, null_draws=4000, seed=0)
    cum = compare(a, b, "cumulative", resamples=2000, null_draws=4000, seed=0)
    print(
        f"median cos_off: steps from the parent {steps.median:+.4f} (null ±2σ {steps.null.envelope}), "
        f"cumulative {cum.median:+.4f}"
    )
    assert steps.null.envelope[0] <= steps.median <= steps.null.envelope[1]
    assert steps.null.verdict == "indistinguishable"
    assert cum.median > 0.9 and cum.null.verdict == "aligned"
    assert steps.summary()["ancestor"] == "parent" and steps.summary()["ancestor_store"] == str(stores["parent"])
    # independent computation: project each model's step from the parent into the base frame, in float64
    ck = {k: Checkpoint.open(models[k]) for k in ("parent", "a", "b")}
    cache = FrameCache(root / "frames")
    n2 = {"a": 0.0, "b": 0.0}
    rows = {r["name"]: r for r in steps.rows}
    for name, attrs in a.matrices.items():
        frame = cache.get(attrs["frame_key"], torch.float64)
        w = {k: ck[k].read(name).double() for k in ck}
        pa = (frame.U.T @ (w["a"] - w["parent"]) @ frame.V).numpy()
        pb = (frame.U.T @ (w["b"] - w["parent"]) @ frame.V).numpy()
        assert rows[name]["cos_off"] == pytest.approx(_offdiag_cos(pa, pb), abs=2e-4)
        n2["a"] += float(((w["a"] - w["parent"]) ** 2).sum())
        n2["b"] += float(((w["b"] - w["parent"]) ** 2).sum())
    assert steps.norms["norm_a"] == pytest.approx(math.sqrt(n2["a"]), rel=1e-4)
    assert steps.norms["norm_b"] == pytest.approx(math.sqrt(n2["b"]), rel=1e-4)
    with pytest.raises(ValueError, match="independent comparisons only"):
        compare(a, b, "stepwise", ancestor=c)


def test_compare_cli_takes_an_ancestor_store(siblings, tmp_path, capsys):
    from grrr_stream.cli.entry import main

    _, _, stores = siblings
    rc = main(
        [
            "compare",
            "--independent",
            str(stores["a"]),
            str(stores["b"]),
            str(stores["parent"]),
            "--cumulative",
            str(stores["a"]),
            str(stores["b"]),
            "--out",
            str(tmp_path / "c"),
            "--no-track",
            "--resamples",
            "200",
            "--null-draws",
            "200",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "(from parent)" in out and "(cumulative)" in out, out
    with open(tmp_path / "c" / "comparisons.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["kind"], r["ancestor"]) for r in rows] == [("independent", "parent"), ("cumulative", "")]
    rc = main(["compare", "--independent", str(stores["a"]), "--out", str(tmp_path / "d"), "--no-track"])
    assert rc == 2 and "A_STORE B_STORE [ANCESTOR_STORE]" in capsys.readouterr().err


def test_bfloat16_stores_are_decoded_and_refused_for_differences(chain, tmp_path):
    root, models, stores = chain
    bf = {}
    for post in ("sft", "sib", "rl"):
        bf[post] = tmp_path / f"bf-{post}"
        run_transition(
            no_track_config(
                base=str(models["base"]),
                post=str(models[post]),
                store=bf[post],
                frame_cache=root / "frames",
                store_dtype="bfloat16",
            )
        )
    t = StoredTransition(bf["sft"])
    name = next(iter(t.matrices))
    decoded = t.dask_array(name, "P").compute()
    assert decoded.dtype == np.float32
    assert np.array_equal(decoded, t.read_tensor(name, "P").float().numpy())  # the same values as torch decodes
    twin = StoredTransition(stores[("float32", "sft")]).dask_array(name, "P").compute()
    assert np.abs(decoded - twin).max() <= 2**-8 * np.abs(twin).max()  # bf16 rounding of the float32 twin
    low = compare(t, StoredTransition(bf["sib"]), "independent", resamples=500, null_draws=500)
    ref = compare(
        StoredTransition(stores[("float32", "sft")]),
        StoredTransition(stores[("float32", "sib")]),
        "independent",
        resamples=500,
        null_draws=500,
    )
    print(f"independent median cos_off: bfloat16 stores {low.median:+.5f}, float32 twins {ref.median:+.5f}")
    assert low.median == pytest.approx(ref.median, abs=5e-3)
    for x, y in zip(low.rows, ref.rows):
        assert x["cos_off"] == pytest.approx(y["cos_off"], abs=1e-2)
    with pytest.raises(StoreMismatchError, match="store_dtype float32"):
        compare(t, StoredTransition(bf["rl"]), "stepwise")
