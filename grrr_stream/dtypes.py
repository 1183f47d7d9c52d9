"""The one dtype table: safetensors codes, names, torch dtypes, item sizes, which are 16-bit floats; and the
lattice of float dtypes (:func:`common_dtype`: the narrowest that holds two others exactly).

Every safetensors code with a whole number of bytes per value is in the table (what variants copy
through byte for byte); only the decomposed matrices need a floating dtype.

A name is torch's own (``torch.bfloat16`` → ``'bfloat16'``), the spelling that settings, configs
and ``config.json`` use; numpy spells the types it has the same way. numpy has no bfloat16: the
store keeps its bit pattern as uint16 (``store.transition_store.to_store_array``), a store format, not a dtype here.

torch is imported on first use of a torch dtype only: the settings (``grrr_stream.config``) take
their dtype choices from this table and must validate a config without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch as torch_module


@dataclass(frozen=True)
class DType:
    name: str  # 'bfloat16'
    code: str  # the safetensors header's code: 'BF16'
    itemsize: int  # bytes per element
    floating: bool

    @property
    def torch(self) -> "torch_module.dtype":
        import torch

        return getattr(torch, self.name)  # a name is torch's own spelling (see above)


TABLE = (
    DType("float64", "F64", 8, True),
    DType("float32", "F32", 4, True),
    DType("float16", "F16", 2, True),
    DType("bfloat16", "BF16", 2, True),
    DType("float8_e4m3fn", "F8_E4M3", 1, True),
    DType("float8_e5m2", "F8_E5M2", 1, True),
    DType("float8_e4m3fnuz", "F8_E4M3FNUZ", 1, True),
    DType("float8_e5m2fnuz", "F8_E5M2FNUZ", 1, True),
    DType("float8_e8m0fnu", "F8_E8M0", 1, True),
    DType("int64", "I64", 8, False),
    DType("int32", "I32", 4, False),
    DType("int16", "I16", 2, False),
    DType("int8", "I8", 1, False),
    DType("uint64", "U64", 8, False),
    DType("uint32", "U32", 4, False),
    DType("uint16", "U16", 2, False),
    DType("uint8", "U8", 1, False),
    DType("bool", "BOOL", 1, False),
    DType("complex64", "C64", 8, False),
)
# Not in the table: the sub-byte codes F4, F6_E2M3 and F6_E3M2 (their header shape counts values, several to
# a byte, which no torch dtype matches one to one). A checkpoint holding one is readable where those
# tensors are not read; a variant refuses it when it plans its layout (variants.builder.VariantBuilder).
BY_CODE = {d.code: d for d in TABLE}
BY_NAME = {d.name: d for d in TABLE}
ITEMSIZE = {d.name: d.itemsize for d in TABLE}

# The float dtypes a variant may be written in, or a store keep P and the null residual in, in the
# order error messages and --help list them.
FLOAT_NAMES = ("float32", "float64", "bfloat16", "float16")
# The dtypes the decomposition's arithmetic runs in (compute_dtype): 16-bit floats are too coarse for it.
COMPUTE_NAMES = tuple(n for n in FLOAT_NAMES if ITEMSIZE[n] >= 4)
# 16-bit floats: a difference of two stored P matrices keeps few or none of its bits there.
SIXTEEN_BIT = tuple(n for n in FLOAT_NAMES if ITEMSIZE[n] == 2)


def __getattr__(name: str) -> Any:
    # BY_TORCH is keyed by torch dtypes, so it is built (once) when first imported, not with the module.
    if name == "BY_TORCH":
        globals()["BY_TORCH"] = {d.torch: d for d in TABLE}
        return globals()["BY_TORCH"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def torch_dtype(name: str) -> "torch_module.dtype":
    """The torch dtype of a name ('bfloat16' → torch.bfloat16); KeyError for an unknown name."""
    return BY_NAME[name].torch


def name_of(dtype: "torch_module.dtype") -> str:
    """The name of a torch dtype (torch.bfloat16 → 'bfloat16'), also for one outside the table."""
    return str(dtype).removeprefix("torch.")


def common_dtype(a: "torch_module.dtype", b: "torch_module.dtype") -> "torch_module.dtype":
    """The narrowest float dtype that holds every value of ``a`` and of ``b`` exactly: one of them when it
    holds the other (bfloat16 → float32: float32), else float32 (float16 and bfloat16: neither holds the
    other — float16 lacks bfloat16's range, bfloat16 float16's precision), float64 beyond that; for two
    8-bit floats the 16-bit one that holds both (float16 first).
    A dtype X holds Y when X's precision is at least Y's (eps), its largest value at least Y's and its
    smallest subnormal at most Y's: every IEEE-style value of Y is then a value of X."""
    import torch

    def holds(x: "torch_module.dtype", y: "torch_module.dtype") -> bool:
        fx, fy = torch.finfo(x), torch.finfo(y)
        return fx.eps <= fy.eps and fx.max >= fy.max and fx.smallest_normal * fx.eps <= fy.smallest_normal * fy.eps

    candidates = {a, b, torch.float16, torch.bfloat16, torch.float32, torch.float64}
    for cand in sorted(candidates, key=lambda d: (torch.finfo(d).bits, torch.finfo(d).eps)):  # ties: finer first
        if holds(cand, a) and holds(cand, b):
            return cand
    raise TypeError(f"no float dtype holds both {a} and {b} exactly")
