"""The one dtype table: safetensors codes, names, torch dtypes, item sizes, which are 16-bit floats.

A name is torch's own (``torch.bfloat16`` → ``'bfloat16'``), the spelling that settings, configs
and ``config.json`` use; numpy spells the types it has the same way. numpy has no bfloat16: the
store keeps its bit pattern as uint16 (``store.to_store_array``), a store format, not a dtype here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DType:
    name: str            # 'bfloat16'
    code: str            # the safetensors header's code: 'BF16'
    torch: torch.dtype
    itemsize: int        # bytes per element
    floating: bool


TABLE = (
    DType("float64", "F64", torch.float64, 8, True),
    DType("float32", "F32", torch.float32, 4, True),
    DType("float16", "F16", torch.float16, 2, True),
    DType("bfloat16", "BF16", torch.bfloat16, 2, True),
    DType("float8_e4m3fn", "F8_E4M3", torch.float8_e4m3fn, 1, True),
    DType("float8_e5m2", "F8_E5M2", torch.float8_e5m2, 1, True),
    DType("int64", "I64", torch.int64, 8, False),
    DType("int32", "I32", torch.int32, 4, False),
    DType("int16", "I16", torch.int16, 2, False),
    DType("int8", "I8", torch.int8, 1, False),
    DType("uint8", "U8", torch.uint8, 1, False),
    DType("bool", "BOOL", torch.bool, 1, False),
)
BY_CODE = {d.code: d for d in TABLE}
BY_NAME = {d.name: d for d in TABLE}
BY_TORCH = {d.torch: d for d in TABLE}
ITEMSIZE = {d.name: d.itemsize for d in TABLE}

# The float dtypes a variant may be written in, in the order its error message lists them.
FLOAT_NAMES = ("float32", "float64", "bfloat16", "float16")
# 16-bit floats: a difference of two stored P matrices keeps few or none of its bits there.
SIXTEEN_BIT = tuple(d.name for d in TABLE if d.floating and d.itemsize == 2)


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a name ('bfloat16' → torch.bfloat16); KeyError for an unknown name."""
    return BY_NAME[name].torch


def name_of(dtype: torch.dtype) -> str:
    """The name of a torch dtype (torch.bfloat16 → 'bfloat16'), also for one outside the table."""
    return str(dtype).removeprefix("torch.")
