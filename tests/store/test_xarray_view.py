"""A store opened with xarray: named dimensions, values as stored, the metrics table."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from helpers.common import no_track_config

from grrr_stream import metrics_dataset, name_dimensions, open_store, read_metrics
from grrr_stream.decompose.run import run_transition
from grrr_stream.errors import MissingDependencyError, StoreError
from grrr_stream.fixtures.synthetic import TINY, Update, make_transition
from grrr_stream.store.transition_store import node_key

xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A tiny float32 pair (TINY: 2 layers; q_proj square, so without a stored null; GQA k_proj and down_proj
    rectangular), decomposed with P and null stored as float32, and its down_proj matrices again with
    P and null stored as bfloat16 and a truncated core (r < min(m, n))."""
    from grrr_stream import plots

    root = tmp_path_factory.mktemp("xview")
    base, post = make_transition(root / "pair", TINY, dtype="float32", update=Update(r_delta=1e-2))
    out = {dtype: root / f"store-{dtype}" for dtype in ("float32", "bfloat16")}
    with pytest.MonkeyPatch.context() as mp:
        for fig in ("energy_fractions_by_layer", "band_energy_by_module", "normalized_spectra"):
            mp.setattr(plots, fig, lambda *a, **k: None)  # the figures are most of the time and not tested here
        run_transition(
            no_track_config(
                base=str(base), post=str(post), store=out["float32"], modules=["q_proj", "k_proj", "down_proj"]
            )
        )
        run_transition(
            no_track_config(
                base=str(base),
                post=str(post),
                store=out["bfloat16"],
                store_dtype="bfloat16",
                modules=["down_proj"],
                core_rel_threshold=0.5,
            )
        )
    return out


def zarr_array(store: Path, *keys: str) -> np.ndarray:
    return np.asarray(zarr.open_array(str(store.joinpath(*keys)), mode="r")[...])


@pytest.mark.filterwarnings("ignore:Object at .* is not recognized")  # metrics.csv etc. beside the Zarr nodes
def test_plain_xarray_opens_a_store_with_named_dimensions(stores):
    store = stores["float32"]
    tree = xr.open_datatree(store, engine="zarr", consolidated=False)  # no grrr_stream involved
    manifest = json.loads((store / "zarr.json").read_text())["attributes"]["grrr_stream"]
    assert sorted(tree["matrices"].children) == sorted(node_key(n) for n in manifest["matrices"])
    seen_null = 0
    for name in manifest["matrices"]:
        node = tree["matrices"][node_key(name)]
        m, n = node.attrs["shape"]
        r = node.attrs["rank"]
        assert node["P"].dims == ("r_out", "r_in") and node["P"].shape == (r, r)
        assert node["sigma0"].dims == node["sigma1"].dims == ("sv",) and node["sigma0"].shape == (min(m, n),)
        if node.attrs["null_stored"]:
            seen_null += 1
            assert node["null"].dims == ("out", "in") and node["null"].shape == (m, n)
        for key in node.data_vars:  # values exactly as zarr reads them (zero fill values are not masked)
            np.testing.assert_array_equal(node[key].values, zarr_array(store, "matrices", node_key(name), key))
    assert seen_null == 4 and len(manifest["matrices"]) == 6  # k_proj and down_proj of both layers
    frame = next(iter(tree["frames"].children.values()))
    assert frame["U"].dims == ("out", "r") and frame["V"].dims == ("in", "r") and frame["S"].dims == ("sv",)
    assert tree["metrics"]["f_off"].dims == ("matrix",)


def test_open_store_is_lazy_and_decodes_bfloat16(stores):
    import dask.array as da
    import torch

    from grrr_stream.store.transition_store import StoredTransition

    tree = open_store(stores["bfloat16"])
    name = "model.layers.1.mlp.down_proj.weight"
    node = tree["matrices"][node_key(name)]
    assert isinstance(node["P"].data, da.Array)
    # a truncated core: P is r×r with r below the min(m, n) singular values, which a group holds side by side
    assert node.sizes["r_out"] == node.sizes["r_in"] == node.attrs["rank"] < node.sizes["sv"] == 64
    stored = StoredTransition(stores["bfloat16"])
    for key in ("P", "null"):
        assert node[key].dtype == np.float32 and node[key].attrs["decoded_from"] == "bfloat16"
        want = stored.read_tensor(name, key).to(torch.float32).numpy()
        np.testing.assert_array_equal(node[key].values, want)
    raw = open_store(stores["bfloat16"], decode_bfloat16=False)["matrices"][node_key(name)]["P"]
    assert raw.dtype == np.uint16 and raw.attrs["grrr_dtype"] == "bfloat16"


def test_metrics_table_equals_metrics_csv(stores):
    store = stores["float32"]
    df = read_metrics(store)
    csv = pd.read_csv(store / "metrics.csv")
    assert list(df["name"]) == list(csv["name"]) and len(df) == 6
    assert list(df["module"]) == list(csv["module"]) and list(df["layer"]) == list(csv["layer"])
    numeric = [c for c in csv.columns if c not in ("name", "module", "sparsity_compare")]
    assert sorted(df.columns) == sorted(csv.columns)
    assert list(df["sparsity_compare"]) == list(csv["sparsity_compare"])  # the one text metric
    for c in numeric:  # metrics.csv keeps every bit (repr): equal, not close
        np.testing.assert_array_equal(df[c].to_numpy(dtype=float), csv[c].to_numpy(dtype=float), err_msg=c)

    ds = metrics_dataset(store)
    assert ds["f_off"].dims == ("layer", "module")
    assert list(ds["module"].values) == list(dict.fromkeys(csv["module"]))  # plan order
    for _, row in csv.iterrows():
        cell = ds.sel(layer=row["layer"], module=row["module"])
        assert cell["name"].item() == row["name"] and cell["f_null"].item() == row["f_null"]


def test_a_store_without_dimension_names_says_what_to_do_and_is_upgraded(stores, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(stores["bfloat16"], old)  # the smaller store: 2 matrices and their frames
    stripped = 0
    for meta in old.rglob("zarr.json"):  # as grrr_stream wrote arrays before dimension names
        doc = json.loads(meta.read_text())
        if doc["node_type"] == "array":
            doc.pop("dimension_names", None)
            meta.write_text(json.dumps(doc))
            stripped += 1
    with pytest.raises(StoreError, match=r"grrr_stream.name_dimensions\("):
        open_store(old)
    assert name_dimensions(old) == stripped and name_dimensions(old) == 0
    a, b = open_store(old), open_store(stores["bfloat16"])
    name = node_key("model.layers.0.mlp.down_proj.weight")
    assert a["matrices"][name]["null"].dims == ("out", "in")
    xr.testing.assert_identical(a["matrices"][name].to_dataset(), b["matrices"][name].to_dataset())
    xr.testing.assert_identical(a["metrics"].to_dataset(), b["metrics"].to_dataset())


def test_clear_errors_without_xarray_or_without_a_store(stores, tmp_path, monkeypatch):
    with pytest.raises(StoreError, match="not a Zarr store"):
        open_store(tmp_path)
    monkeypatch.setitem(sys.modules, "xarray", None)  # as if not installed
    with pytest.raises(MissingDependencyError, match=r"grrr-stream\[xarray\]"):
        open_store(stores["float32"])
