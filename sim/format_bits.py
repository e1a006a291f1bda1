"""One value in every number format of chapter 22: the bits each format stores, the value they
mean, the rounding error, and each format's range.

Float formats: fp32, bf16, fp16 (IEEE 754 binary32 and binary16, and bfloat16: infinities and
NaN, round to nearest with ties to even, overflow to infinity); fp8 e4m3 and e5m2 (OCP OFP8);
fp6 e2m3 and e3m2 and fp4 e2m1 (OCP MX: no infinity or NaN codes, a value past the largest
saturates). The rounding is `sim.number_formats.round_to_float`, bit-exact with ml_dtypes'
casts (tests/test_sim_format_bits.py checks every format over its representable values, their
midpoints and random values). Integers int8 and int4 store the nearest integer (ties to even)
clipped to their range: with a scale of 1, as a reader sees a raw code (chapter 10 adds the
scales). The block formats NVFP4 (e2m1 values, an e4m3 scale per 16, under a per-tensor fp32
scale) and MXFP4 (e2m1 values, an e8m0 power-of-two scale per 32) are shown for a block whose
largest magnitude is `block_amax` (by default the value itself), in a tensor whose largest
magnitude is `tensor_amax` (by default the block's), quantized by `sim.quant.quantize`.

>>> r = format_bits(FormatBitsParams(value=0.1))
>>> r.rows["bf16"].bits, r.rows["bf16"].stored
('0 01111011 1001101', 0.10009765625)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from sim.checks import check_range, checked_params
from sim.number_formats import FLOAT_FORMATS, FloatFormat, round_to_float
from sim.quant import QuantScheme, quantize

# the explorer's formats beyond chapter 10's, each with its source
MORE_FLOATS = {
    "fp32": FloatFormat("fp32", 8, 23, 127, float(np.finfo(np.float32).max), "inf", "IEEE 754 binary32"),
    "bf16": FloatFormat("bf16", 8, 7, 127, float.fromhex("0x1.fep127"), "inf", "bfloat16: binary32's exponent, 7 "
                        "mantissa bits"),
    "fp16": FloatFormat("fp16", 5, 10, 15, 65504.0, "inf", "IEEE 754 binary16"),
    "fp6_e2m3": FloatFormat("fp6_e2m3", 2, 3, 1, 7.5, "max", "OCP MX specification: FP6 E2M3, max 7.5"),
    "fp6_e3m2": FloatFormat("fp6_e3m2", 3, 2, 3, 28.0, "max", "OCP MX specification: FP6 E3M2, max 28"),
}
FLOATS = {**{k: MORE_FLOATS[k] for k in ("fp32", "bf16", "fp16")}, "fp8_e4m3": FLOAT_FORMATS["fp8_e4m3"],
          "fp8_e5m2": FLOAT_FORMATS["fp8_e5m2"], "fp6_e2m3": MORE_FLOATS["fp6_e2m3"],
          "fp6_e3m2": MORE_FLOATS["fp6_e3m2"], "fp4_e2m1": FLOAT_FORMATS["fp4_e2m1"]}
INTS = {"int8": 8, "int4": 4}
NAMES = tuple(FLOATS) + tuple(INTS)


@checked_params
@dataclass(frozen=True)
class FormatBitsParams:
    """The value to store, and the largest magnitude of the block around it (None: the value's own)."""

    value: float = 0.1
    block_amax: Optional[float] = None  # the largest magnitude in the value's block (None: the value's own)
    tensor_amax: Optional[float] = None  # NVFP4's per-tensor scale comes from this (None: the block's)

    def __post_init__(self) -> None:
        check_range("value", self.value, -1e38, 1e38)
        if self.block_amax is not None:
            check_range("block_amax", self.block_amax, abs(self.value), 1e38)
        if self.tensor_amax is not None:
            check_range("tensor_amax", self.tensor_amax, self.block_amax or abs(self.value), 1e38)


@dataclass(frozen=True)
class FormatRow:
    """What one format does with the value."""

    name: str
    sign_bits: int
    exponent_bits: int                  # for an integer: 0
    mantissa_bits: int                  # for an integer: the magnitude bits
    bits: str                           # "s eeee mmm" (an integer: its two's complement)
    code: int                           # the bit pattern as an unsigned integer
    stored: float                       # the value the bits mean (inf or nan past the range where the format says so)
    error: float                        # stored - value
    relative_error: float               # |error| / |value| (0 for value 0)
    max_value: float                    # largest finite value
    min_normal: float                   # smallest normal value (an integer: 1)
    min_subnormal: float                # smallest positive value
    saturated: bool                     # the value was past the largest finite one
    source: str


@dataclass(frozen=True)
class BlockRow:
    """A block format's scale and the value it stores for this value."""

    name: str
    block: int                          # values per scale
    scale: float                        # the block's scale (for NVFP4: the e4m3 block scale x the tensor scale)
    scale_bits: str                     # the block scale's own bits (e4m3 or e8m0)
    element: float                      # the e2m1 code the value is stored as
    stored: float                       # element x scale
    error: float


@dataclass(frozen=True)
class FormatBitsResult:
    params: FormatBitsParams
    rows: dict                          # format name -> FormatRow
    blocks: dict                        # "nvfp4" / "mxfp4" -> BlockRow


def float_code(stored: float, f: FloatFormat) -> int:
    """The bit pattern of a value already on format `f`'s grid (or its inf / nan)."""
    sign = 1 if math.copysign(1.0, stored) < 0 else 0
    top = 2 ** f.exponent_bits - 1
    a = abs(stored)
    if math.isnan(a):
        e, m = (top, 2 ** f.mantissa_bits - 1) if f.overflow == "nan" else (top, 2 ** (f.mantissa_bits - 1))
    elif math.isinf(a):
        e, m = top, 0
    elif a == 0.0:
        e, m = 0, 0
    else:
        exp = math.frexp(a)[1] - 1
        if exp < 1 - f.bias:                             # subnormal
            e, m = 0, int(round(a / 2.0 ** (1 - f.bias - f.mantissa_bits)))
        else:
            e, m = exp + f.bias, int(round((a / 2.0 ** exp - 1.0) * 2 ** f.mantissa_bits))
    return (sign << (f.exponent_bits + f.mantissa_bits)) | (e << f.mantissa_bits) | m


def _split(code: int, widths: tuple) -> str:
    out, shift = [], sum(widths)
    for w in widths:
        shift -= w
        out.append(format((code >> shift) & (2 ** w - 1), f"0{w}b") if w else "")
    return " ".join(p for p in out if p)


def _float_row(x: float, name: str, f: FloatFormat) -> FormatRow:
    stored = float(round_to_float(np.array([x]), f, saturate=f.overflow == "max")[0])
    code = float_code(stored, f)
    err = stored - x
    return FormatRow(name, 1, f.exponent_bits, f.mantissa_bits, _split(code, (1, f.exponent_bits, f.mantissa_bits)),
                     code, stored, err, abs(err) / abs(x) if x else 0.0, f.max_value, 2.0 ** (1 - f.bias),
                     2.0 ** (1 - f.bias - f.mantissa_bits), abs(x) > f.max_value, f.source)


def _int_row(x: float, name: str, bits: int) -> FormatRow:
    lo, hi = -2 ** (bits - 1), 2 ** (bits - 1) - 1
    q = int(np.clip(np.rint(x), lo, hi))
    code = q & (2 ** bits - 1)
    return FormatRow(name, 1, 0, bits - 1, format(code, f"0{bits}b"), code, float(q), q - x,
                     abs(q - x) / abs(x) if x else 0.0, float(hi), 1.0, 1.0, not lo <= np.rint(x) <= hi,
                     f"two's complement, {lo} to {hi}")


def _block_row(x: float, amax: float, tensor_amax: float, name: str) -> BlockRow:
    size = 16 if name == "nvfp4" else 32
    tensor = np.zeros((2, size))                       # two blocks: the value's, and one holding the tensor's amax
    tensor[0, 0], tensor[0, 1], tensor[1, 0] = x, amax, tensor_amax
    q = quantize(tensor, QuantScheme(name))
    own = float(q.scales.ravel()[0])
    scale = own * q.tensor_scale
    if name == "nvfp4":
        own_bits = _split(float_code(own, FLOAT_FORMATS["fp8_e4m3"]), (1, 4, 3))
    else:
        own_bits = format(int(math.log2(own)) + 127, "08b")       # e8m0: the biased exponent alone
    stored = float(q.values.ravel()[0])
    return BlockRow(name, size, scale, own_bits, float(q.codes.ravel()[0]), stored, stored - x)


def format_bits(params: FormatBitsParams = FormatBitsParams()) -> FormatBitsResult:
    """The value in every format of NAMES, and in NVFP4 and MXFP4 blocks."""
    x = float(params.value)
    rows = {n: _float_row(x, n, f) for n, f in FLOATS.items()}
    rows.update({n: _int_row(x, n, b) for n, b in INTS.items()})
    amax = abs(x) if params.block_amax is None else params.block_amax
    tensor_amax = amax if params.tensor_amax is None else params.tensor_amax
    blocks = {n: _block_row(x, amax, tensor_amax, n) for n in ("nvfp4", "mxfp4")} if amax > 0 else {}
    return FormatBitsResult(params, rows, blocks)
