"""The only module that touches xarray: a store as a DataTree, its metrics as a table.

A store is plain Zarr v3 whose arrays carry dimension names (``store.zarr_arrays.DIMENSIONS``), so
``xarray.open_datatree(store, engine="zarr")`` opens it without grrr_stream; these helpers
add the conveniences: bfloat16 arrays decoded, the metrics table with names and modules,
and a clear way forward for stores written before the dimensions had names.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from ..errors import MissingDependencyError, StoreError


def _xarray():
    try:
        import xarray
    except ImportError:
        raise MissingDependencyError(
            "open_store and read_metrics need xarray: pip install 'grrr-stream[xarray]'"
        ) from None
    return xarray


_UNNAMED = (
    "{path} was written before grrr_stream recorded dimension names, which xarray needs; add them once "
    "with grrr_stream.name_dimensions({path!r}) (rewrites array metadata only, the data stays as it is) "
    "and open it again"
)


def open_store(path: Path | str, *, decode_bfloat16: bool = True):
    """A transition store (or a frame cache) as a lazy ``xarray.DataTree`` (dask arrays, Zarr chunks).

    Nodes: ``matrices/<tensor name>`` with P (r_out, r_in), null (out, in), sigma0 and sigma1 (sv)
    and the matrix's record as attrs; ``metrics`` with one (matrix,) variable per metric column;
    ``frames/<key>`` with U (out, r), S (sv), V (in, r) when the frame cache is inside the store;
    ``channels`` with the per-channel energies (layer, module, [expert,] channel, component) and
    ``matrices/<name>/channel_energy`` (channel, component): docs/channels.md.
    Tensor names containing '/' or odd characters appear %-escaped (``store.transition_store.node_key``).
    P and null stored as bfloat16 (uint16 bit patterns) are decoded to float32 unless
    ``decode_bfloat16`` is false."""
    xr = _xarray()
    path = Path(path)
    if not (path / "zarr.json").is_file():
        raise StoreError(
            f"{path} is not a Zarr store (no zarr.json); give a store folder written by `grrr-stream decompose`"
        )
    with warnings.catch_warnings():
        # metrics.csv, figures/ and the lock file sit beside the Zarr nodes on purpose
        warnings.filterwarnings("ignore", message=".*not recognized as a component of a Zarr hierarchy")
        try:
            # no consolidated metadata: matrices are written one by one while a run resumes
            tree = xr.open_datatree(path, engine="zarr", chunks={}, consolidated=False)
        except KeyError as e:
            if "dimension_names" not in str(e):
                raise
            raise StoreError(_UNNAMED.format(path=str(path))) from None
    if decode_bfloat16:
        tree = tree.map_over_datasets(_decode_bfloat16)
    return tree


def _decode_bfloat16(ds):
    """bfloat16 bit patterns (stored as uint16, tagged grrr_dtype) → float32 of the same values, lazily."""
    import numpy as np

    for name, var in ds.data_vars.items():
        if var.attrs.get("grrr_dtype") == "bfloat16":
            values = (var.data.astype(np.uint32) << 16).view(np.float32)  # the high half of a float32
            attrs = {k: v for k, v in var.attrs.items() if k not in ("grrr_dtype", "encoding")}
            ds = ds.assign({name: (var.dims, values, {**attrs, "decoded_from": "bfloat16"})})
    return ds


def read_metrics(path: Path | str):
    """The per-matrix metrics of a finished store as a ``pandas.DataFrame``: one row per matrix in
    plan order (as metrics.csv), columns name, layer, module and every numeric metric, read from
    the store's ``metrics`` arrays (one (matrix,) array per column, names in its attrs), then the
    text metrics (``sparsity_compare``) from the matrices' records."""
    import pandas as pd

    from .transition_store import StoredTransition

    records = StoredTransition(Path(path)).matrices  # refuses unfinished stores
    modules = {n: a["module"] for n, a in records.items()}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not recognized as a component of a Zarr hierarchy")
        try:
            ds = _xarray().open_dataset(path, group="metrics", engine="zarr", consolidated=False).load()
        except KeyError as e:
            if "dimension_names" not in str(e):
                raise
            raise StoreError(_UNNAMED.format(path=str(path))) from None
    names, columns = list(ds.attrs["names"]), list(ds.attrs["columns"])
    df = pd.DataFrame({"name": names, "module": [modules[n] for n in names], **{c: ds[c].values for c in columns}})
    df["layer"] = df["layer"].astype("int64")  # stored as a float64 column like every metric
    # the expert index (metrics.csv's `expert` column): a stored column when some matrix is an expert,
    # otherwise empty for every row (dense models), as in the csv
    df["expert"] = pd.array(
        [None if pd.isna(e) else int(e) for e in df["expert"]]
        if "expert" in columns
        else [records[n].get("expert") for n in names],
        dtype="Int64",
    )
    rest = [c for c in columns if c not in ("layer", "expert")]
    # text metrics (sparsity_compare) are not column arrays: from each matrix's record, as in the csv
    text = list(dict.fromkeys(k for n in names for k, v in records[n].get("metrics", {}).items() if isinstance(v, str)))
    for k in text:
        df[k] = [records[n].get("metrics", {}).get(k) for n in names]
    return df[["name", "layer", "module", "expert", *rest, *text]]


def metrics_dataset(path: Path | str):
    """The metrics as an ``xarray.Dataset`` on a layer × module grid (one variable per metric,
    plus the tensor ``name``); cells without a matrix are NaN."""
    df = read_metrics(path)
    dup = df[df.duplicated(["layer", "module"], keep=False)]
    if len(dup):
        raise StoreError(
            f"{path}: several matrices share a (layer, module) cell, e.g. {list(dup['name'][:2])}; "
            "use read_metrics, which has one row per matrix"
        )
    ds = _xarray().Dataset.from_dataframe(df.set_index(["layer", "module"]))
    return ds.reindex(module=list(dict.fromkeys(df["module"])))  # plan order (q, k, v, o, …), not alphabetical
