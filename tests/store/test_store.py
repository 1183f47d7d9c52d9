"""Store array writing: chunk shapes that tile without padding, and the direct chunk writer
byte-identical to zarr's own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from grrr_stream.store import zarr_arrays


def test_chunk_shapes_tile_with_little_padding():
    assert zarr_arrays.chunk_shape((1536, 576)) == (768, 576)  # was (1024, 576): 2048 rows on disk
    assert zarr_arrays.chunk_shape((17408, 5120)) == (1024, 1024)  # already a multiple
    assert zarr_arrays.chunk_shape((8960,)) == (996,)  # 9 chunks, 4 entries of padding
    for s in (1, 7, 1023, 1024, 1025, 2049, 8960, 18944, 151936):
        (c,) = zarr_arrays.chunk_shape((s,))
        k = -(-s // c)
        assert c <= zarr_arrays.CHUNK and k == -(-s // zarr_arrays.CHUNK) and k * c - s < k


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "shape,dtype", [((250, 130), np.float32), ((97,), np.float64), ((3, 1), np.float32), ((250, 130), np.uint16)]
)
def test_direct_chunks_equal_zarrs_own(tmp_path, monkeypatch, shape, dtype):
    monkeypatch.setattr(zarr_arrays, "CHUNK", 100)  # several chunks, edge chunks padded (250 → 3 × 84)
    rng = np.random.default_rng(0)
    data = (rng.standard_normal(shape) * 1000).astype(dtype)
    ours = zarr.open_group(str(tmp_path / "ours"), mode="w")
    zarr_arrays.write_array(ours, "null", data, dims=("out", "in")[: len(shape)])
    theirs = zarr.open_group(str(tmp_path / "theirs"), mode="w")
    arr = theirs.create_array(
        "null",
        shape=shape,
        chunks=zarr_arrays.chunk_shape(shape),
        dtype=data.dtype,
        compressors=zarr_arrays._compressors(data.dtype),
        fill_value=0,
        dimension_names=("out", "in")[: len(shape)],
    )
    arr[...] = data  # zarr's own chunk writing
    assert files(tmp_path / "ours" / "null") == files(tmp_path / "theirs" / "null")
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "ours" / "null"), mode="r")[...], data)


ATTRS = {
    "name": "model.layers.0.mlp.down_proj.weight",
    "metrics": {"r_delta": 3.1e-4, "angle16_left_max_deg": float("nan"), "f_diag": 0.25},
    "note": "σ₁ → ΔW",
    "layer": 0,
    "flags": [True, None],
}


@pytest.mark.parametrize("shape,dtype", [((250, 130), np.float32), ((97,), np.float64), ((0, 4), np.float32)])
def test_arrays_written_into_a_folder_equal_zarrs_own_files(tmp_path, monkeypatch, shape, dtype):
    """An array written without zarr (group given as a folder) is byte for byte what zarr writes, metadata
    (attributes with NaN and non-ASCII text) and chunks, and a group's zarr.json is zarr's too."""
    monkeypatch.setattr(zarr_arrays, "CHUNK", 100)
    data = (np.random.default_rng(1).standard_normal(shape) * 1000).astype(dtype)
    dims = ("out", "in")[: len(shape)]
    zarr_arrays.write_group(tmp_path / "ours", ATTRS)
    zarr_arrays.write_array(tmp_path / "ours", "null", data, {"tag": "é", "x": float("nan")}, dims=dims)
    theirs = zarr.open_group(str(tmp_path / "theirs"), mode="w", zarr_format=3, attributes=ATTRS)
    arr = theirs.create_array(
        "null",
        shape=shape,
        chunks=zarr_arrays.chunk_shape(shape),
        dtype=data.dtype,
        compressors=None,
        fill_value=0,
        dimension_names=dims,
        attributes={"tag": "é", "x": float("nan")},
    )
    arr[...] = data
    assert files(tmp_path / "ours") == files(tmp_path / "theirs")
    back = zarr.open_group(str(tmp_path / "ours"), mode="r")
    np.testing.assert_array_equal(back["null"][...], data)
    assert back.attrs["note"] == ATTRS["note"] and back["null"].metadata.dimension_names == dims


def test_compressed_arrays_into_a_folder_go_through_zarr(tmp_path):
    """16-bit arrays carry a codec, which only zarr writes: into a folder they are written through zarr and
    read back equal."""
    data = np.arange(600, dtype=np.uint16).reshape(20, 30)
    zarr_arrays.write_group(tmp_path / "g", {})
    zarr_arrays.write_array(tmp_path / "g", "null", data)
    a = zarr.open_array(str(tmp_path / "g" / "null"), mode="r")
    np.testing.assert_array_equal(a[...], data)
    assert a.metadata.codecs[-1].to_dict()["name"] == "blosc"
