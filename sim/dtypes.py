"""Number formats: storage width of each dtype and the arithmetic a tensor core runs for it.

Widths are in bytes per element and may be fractional (4-bit formats take half a byte).
NVFP4 stores e2m1 values with one e4m3 scale per 16 values, 4 + 8/16 = 4.5 bits per
weight (R20); its per-tensor fp32 scale is amortised over the whole tensor.

>>> bytes_per_elem("bf16"), bytes_per_elem("int4"), bytes_per_elem("nvfp4")
(2.0, 0.5, 0.5625)
>>> arithmetic_dtype("int4", "bf16")    # weight-only quantisation: the math stays in bf16
'bf16'
>>> arithmetic_dtype("fp8", "fp8")
'fp8'
"""
from __future__ import annotations

from sim.checks import check_choice

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,          # e4m3 or e5m2
    "int8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,          # bare e2m1, scales not counted
    "nvfp4": 4.5 / 8,    # R20: e2m1 + one e4m3 scale per 16 values
}

# dtype family -> the key of GPU.dense_flops whose tensor cores run that arithmetic
_MATH_FAMILY: dict[str, str] = {
    "bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "int8", "fp4": "fp4", "nvfp4": "fp4",
}


def dtype_names() -> list[str]:
    """Every dtype the simulations accept."""
    return list(DTYPE_BYTES)


def bytes_per_elem(dtype: str) -> float:
    """Storage width of one element of `dtype` in bytes; ValueError lists the valid dtypes."""
    check_choice("dtype", dtype, DTYPE_BYTES)
    return DTYPE_BYTES[dtype]


def arithmetic_dtype(weight_dtype: str, act_dtype: str) -> str:
    """The tensor-core arithmetic a GEMM runs for weights of `weight_dtype` times activations of `act_dtype`.

    When both operands share a low-precision format (fp8 x fp8, int8 x int8, fp4 x fp4)
    the GEMM runs in that format; otherwise the narrower operand is widened and the math
    runs in the activation's 16-bit format (weight-only quantisation: int4 weights are
    dequantised to bf16 on the fly). fp32 activations run on bf16 tensor cores here.
    """
    check_choice("dtype", weight_dtype, DTYPE_BYTES)
    check_choice("dtype", act_dtype, DTYPE_BYTES)
    w = _MATH_FAMILY.get(weight_dtype)
    a = _MATH_FAMILY.get(act_dtype)
    if w is not None and w == a:
        return w
    return a if a in ("bf16", "fp16") else "bf16"
