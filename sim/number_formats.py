"""Number formats and their rounding, bit for bit: integer grids, the small floats (fp8
e4m3 / e5m2, fp4 e2m1), the e8m0 power-of-two scales of OCP MX, and the block formats
NVFP4 (e2m1 values, one e4m3 scale per 16) and MXFP4 (e2m1 values, one e8m0 scale per 32).

The roundings follow the format definitions bit for bit (tests/test_sim_quant.py checks
them against ml_dtypes over every representable value and every midpoint): round to
nearest, ties to even; e4m3fn has no infinity (max 448, overflow is NaN), e5m2 has
infinities (max 57,344), e2m1 has neither (max 6, overflow saturates), e8m0 is an
unsigned power of two from 2^-127 to 2^127 with no zero. Quantization saturates: a value
beyond the largest finite one becomes that value, as the conversion instructions with
saturation do.

>>> round_to_format([0.3, 2.5, 7.0, -100.0], "fp4_e2m1").tolist()
[0.5, 2.0, 6.0, -6.0]
>>> round_to_format([449.0, 1e6], "fp8_e4m3").tolist()
[448.0, 448.0]
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FloatFormat:
    """A small IEEE-like binary float: sign, `exponent_bits`, `mantissa_bits`, `bias`."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max_value: float           # largest finite value (saturation point)
    overflow: str              # what a non-saturating conversion gives past max + half a step: "inf" | "nan" | "max"
    source: str

    @property
    def min_normal_exponent(self) -> int:
        return 1 - self.bias

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits


FLOAT_FORMATS: dict = {
    # OCP 8-bit Floating Point Specification (OFP8) / NVIDIA Hopper fp8: E4M3 has no infinities,
    # max 448; E5M2 is IEEE-like with max finite 57,344.
    "fp8_e4m3": FloatFormat("fp8_e4m3", 4, 3, 7, 448.0, "nan", "OCP OFP8 specification: E4M3, max 448, no inf"),
    "fp8_e5m2": FloatFormat("fp8_e5m2", 5, 2, 15, 57344.0, "inf", "OCP OFP8 specification: E5M2, max 57,344"),
    # OCP Microscaling (MX) specification: FP4 E2M1, values 0, 0.5, 1, 1.5, 2, 3, 4, 6; no inf or NaN codes
    "fp4_e2m1": FloatFormat("fp4_e2m1", 2, 1, 1, 6.0, "max", "OCP MX specification: E2M1, max 6; R20"),
}
E8M0_MIN_EXPONENT, E8M0_MAX_EXPONENT = -127, 127   # OCP MX: e8m0 scales 2^-127 .. 2^127 (0xFF is NaN)
MX_BLOCK = 32                     # OCP MX: one e8m0 scale per 32 values
E2M1_EMAX = 2                     # exponent of e2m1's largest power of two (4 = 2^2)
INT_FORMATS = tuple(f"int{b}" for b in range(2, 9))
NVFP4_BLOCK = 16                  # R20: one e4m3 scale per 16 values
FORMATS = INT_FORMATS + tuple(FLOAT_FORMATS) + ("nvfp4", "mxfp4")
BLOCK_FORMATS = {"nvfp4": NVFP4_BLOCK, "mxfp4": MX_BLOCK}   # formats whose scale blocks are fixed
GRANULARITIES = ("tensor", "channel", "group")


def round_to_format(x, fmt: str, saturate: bool = True) -> np.ndarray:
    """Nearest value of float format `fmt` for each element of `x` (ties to even).

    Formats: "fp8_e4m3", "fp8_e5m2", "fp4_e2m1". With `saturate` (what quantization
    does) values beyond the largest finite value clamp to it, with their sign; without
    it they overflow as the format defines: e5m2 to +-inf, e4m3fn to NaN (it has no
    infinity), e2m1 still to +-6 (it has neither). A value overflows when it rounds past
    the largest finite value, i.e. from max + half a step on (a tie there goes to the even
    neighbour: 464 stays 448 in e4m3, 61,440 becomes inf in e5m2). NaN stays NaN.

    The exponent is floor(log2 |x|) clamped below at the smallest normal exponent, which
    makes the subnormals come out right; the spacing in that binade is
    2^(exponent - mantissa_bits) and x / spacing is exact, so numpy's round-half-to-even
    gives the format's rounding.

    >>> round_to_format([0.25, 0.75, 1.25], "fp4_e2m1").tolist()    # ties go to the even mantissa
    [0.0, 1.0, 1.0]
    >>> round_to_format([464.0, 465.0], "fp8_e4m3", saturate=False).tolist()
    [448.0, nan]
    """
    f = FLOAT_FORMATS.get(fmt)
    if f is None:
        raise ValueError(f"unknown float format {fmt!r}; valid formats: {', '.join(FLOAT_FORMATS)}")
    return round_to_float(x, f, saturate)


def round_to_float(x, f: FloatFormat, saturate: bool = True) -> np.ndarray:
    """`round_to_format` for any `FloatFormat` (also IEEE binary32 and binary16, bfloat16 and the fp6 formats
    of `sim.format_bits`).

    >>> round_to_float([65520.0, 1e-8], FloatFormat("fp16", 5, 10, 15, 65504.0, "inf", ""), saturate=False).tolist()
    [inf, 0.0]
    """
    v = np.asarray(x, dtype=np.float64)
    a = np.abs(v)
    with np.errstate(invalid="ignore", over="ignore"):
        _, e = np.frexp(a)                              # a = frac * 2**e, frac in [0.5, 1)
        exp = np.maximum(e - 1, f.min_normal_exponent)  # floor(log2 a), clamped to the subnormal range
        spacing = np.ldexp(1.0, exp - f.mantissa_bits)
        q = np.rint(a / spacing) * spacing
        over = q > f.max_value
        q = np.minimum(q, f.max_value)
        if not saturate and f.overflow != "max":
            q = np.where(over, np.inf if f.overflow == "inf" else np.nan, q)
    return np.copysign(q, v)


def round_to_e8m0(x) -> np.ndarray:
    """Nearest power of two in e8m0's range 2^-127 .. 2^127 (the MX scale format), as float64.

    e8m0 is 8 exponent bits and nothing else: no sign, no zero, no mantissa. Rounding is
    to the nearest value with ties (1.5 x 2^k) upward, the rounding of ml_dtypes'
    float8_e8m0fnu; values below 2^-127 become 2^-127; values that round past 2^127,
    zero, negatives and NaN have no encoding but NaN. MX quantization itself does not
    round to e8m0: it floors (`mx_block_scale`).

    >>> round_to_e8m0([3.0, 2.9, 0.75, 0.0]).tolist()
    [4.0, 2.0, 1.0, nan]
    """
    v = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        frac, e = np.frexp(v)                           # v = frac * 2**e, frac in [0.5, 1)
        k = np.where(frac >= 0.75, e, e - 1)            # 1.5 x 2^(e-1) and above round up to 2^e
        k = np.maximum(k, E8M0_MIN_EXPONENT)
        out = np.ldexp(1.0, np.minimum(k, E8M0_MAX_EXPONENT + 1))
    return np.where((v > 0) & np.isfinite(v) & (k <= E8M0_MAX_EXPONENT), out, np.nan)


def mx_block_scale(amax) -> np.ndarray:
    """OCP MX shared scale of a block whose largest magnitude is `amax`, for e2m1 elements.

    X = 2^(floor(log2 amax) - 2), 2 being the exponent of e2m1's largest power of two
    (4), clamped to e8m0's range; an all-zero block gets 2^-127. The block's largest
    value then lands in [4, 8) before rounding, so values above 6 X saturate to 6 X:
    the known clipping of MXFP4.

    >>> mx_block_scale([6.0, 7.9, 8.0, 0.1]).tolist()
    [1.0, 1.0, 2.0, 0.015625]
    """
    a = np.asarray(amax, dtype=np.float64)
    with np.errstate(divide="ignore"):
        _, e = np.frexp(a)
    k = np.clip(e - 1 - E2M1_EMAX, E8M0_MIN_EXPONENT, E8M0_MAX_EXPONENT)
    return np.where(a > 0, np.ldexp(1.0, k), 2.0 ** E8M0_MIN_EXPONENT)


def representable_values(fmt: str) -> np.ndarray:
    """All non-negative finite values of float format `fmt`, ascending (enumerated from the bit fields).

    >>> representable_values("fp4_e2m1").tolist()
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    """
    f = FLOAT_FORMATS.get(fmt)
    if f is None:
        raise ValueError(f"unknown float format {fmt!r}; valid formats: {', '.join(FLOAT_FORMATS)}")
    vals = []
    for e in range(2 ** f.exponent_bits):
        for m in range(2 ** f.mantissa_bits):
            if e == 0:
                v = m / 2 ** f.mantissa_bits * 2.0 ** (1 - f.bias)
            else:
                v = (1 + m / 2 ** f.mantissa_bits) * 2.0 ** (e - f.bias)
            if v <= f.max_value:
                vals.append(v)
    return np.unique(np.array(vals))
