"""The one dtype table agrees with torch and with the safetensors library's own header codes."""

from __future__ import annotations

import json
import struct

import torch
from safetensors.torch import save

from grrr_stream.dtypes import BY_CODE, BY_NAME, BY_TORCH, FLOAT_NAMES, ITEMSIZE, SIXTEEN_BIT, TABLE, name_of


def test_every_row_matches_torch_and_the_safetensors_header_code():
    for d in TABLE:
        t = torch.zeros(2, dtype=d.torch)
        assert d.name == name_of(d.torch) == str(d.torch).removeprefix("torch.")
        assert d.itemsize == t.element_size() == ITEMSIZE[d.name]
        assert d.floating == d.torch.is_floating_point
        blob = save({"t": t})
        (n,) = struct.unpack("<Q", blob[:8])
        assert json.loads(blob[8 : 8 + n])["t"]["dtype"] == d.code
    assert len(BY_CODE) == len(BY_NAME) == len(BY_TORCH) == len(TABLE)


def test_setting_names_and_sixteen_bit():
    assert FLOAT_NAMES == ("float32", "float64", "bfloat16", "float16")  # the order error messages list
    assert sorted(SIXTEEN_BIT) == ["bfloat16", "float16"]
