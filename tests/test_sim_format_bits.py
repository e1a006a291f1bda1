"""Chapter 22's format explorer: every float format's rounding and bits against ml_dtypes, bit for bit."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from sim import format_bits as fb
from sim.number_formats import round_to_float

REFERENCE = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16,
             "fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2,
             "fp6_e2m3": ml_dtypes.float6_e2m3fn, "fp6_e3m2": ml_dtypes.float6_e3m2fn,
             "fp4_e2m1": ml_dtypes.float4_e2m1fn}
pytestmark = pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")   # the casts past a format's range
CODE_TYPE = {8: np.uint8, 6: np.uint8, 4: np.uint8, 16: np.uint16, 32: np.uint32}


def _reference_values(name: str) -> np.ndarray:
    """Every finite value of the format (every code, for formats up to 16 bits; a sample for fp32),
    the midpoints between neighbours, and random values over and past the range."""
    f, t = fb.FLOATS[name], REFERENCE[name]
    if f.bits <= 16:
        codes = np.arange(2 ** f.bits, dtype=CODE_TYPE[f.bits])
        values = codes.view(t).astype(np.float64) if f.bits in (8, 16) else \
            np.array([float(np.array(c, dtype=np.uint8).view(t)) for c in codes])
    else:
        rng = np.random.default_rng(0)
        values = rng.integers(0, 2 ** 32, 20_000, dtype=np.uint64).astype(np.uint32).view(np.float32).astype(np.float64)
    values = np.unique(values[np.isfinite(values)])
    mids = (values[:-1] + values[1:]) / 2
    rng = np.random.default_rng(1)
    wild = np.concatenate([rng.uniform(-2, 2, 2000) * f.max_value, np.exp(rng.uniform(-200, 200, 2000))])
    return np.concatenate([values, mids, wild])


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_rounding_is_ml_dtypes_cast(name):
    f, t = fb.FLOATS[name], REFERENCE[name]
    x = _reference_values(name)
    if f.overflow == "max":          # the MX formats have no code past their max: a cast saturates
        x = x[np.abs(x) <= 4 * f.max_value]
    ours = round_to_float(x, f, saturate=f.overflow == "max")
    theirs = x.astype(t).astype(np.float64)
    same = (ours == theirs) | (np.isnan(ours) & np.isnan(theirs))
    assert same.all(), (name, x[~same][:5], ours[~same][:5], theirs[~same][:5])


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_bits_are_ml_dtypes_bits(name):
    f, t = fb.FLOATS[name], REFERENCE[name]
    x = _reference_values(name)[::7]
    if f.overflow == "max":
        x = x[np.abs(x) <= 4 * f.max_value]
    for v in x:
        stored = float(round_to_float(np.array([v]), f, saturate=f.overflow == "max")[0])
        theirs = int(np.array([v]).astype(t).view(CODE_TYPE[f.bits])[0])
        if f.bits < 8:
            theirs &= 2 ** f.bits - 1
        if math.isnan(stored):       # one NaN code per sign; ml_dtypes keeps the sign of what overflowed
            assert (fb.float_code(stored, f) & ~(1 << (f.bits - 1))) == (theirs & ~(1 << (f.bits - 1))), (name, v)
        else:
            assert fb.float_code(stored, f) == theirs, (name, v, stored)


def test_a_value_in_every_format():
    r = fb.format_bits(fb.FormatBitsParams(value=0.1))
    assert r.rows["fp32"].stored == float(np.float32(0.1))
    assert r.rows["bf16"].bits == "0 01111011 1001101" and r.rows["bf16"].stored == 0.10009765625
    assert r.rows["fp16"].stored == float(np.float16(0.1))
    assert r.rows["fp8_e4m3"].stored == 0.1015625 and r.rows["fp8_e4m3"].bits == "0 0011 101"
    assert r.rows["fp4_e2m1"].stored == 0.0              # below half the smallest subnormal, 0.25
    assert r.rows["int8"].stored == 0.0 and r.rows["int8"].bits == "00000000"
    assert r.rows["fp32"].relative_error == pytest.approx(abs(float(np.float32(0.1)) - 0.1) / 0.1)


def test_ranges_are_the_specifications():
    rows = fb.format_bits(fb.FormatBitsParams(value=1.0)).rows
    assert rows["fp16"].max_value == 65504 and rows["fp16"].min_subnormal == 2.0 ** -24
    assert rows["bf16"].max_value == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert rows["fp8_e4m3"].max_value == 448 and rows["fp8_e5m2"].max_value == 57344
    assert rows["fp6_e2m3"].max_value == 7.5 and rows["fp6_e3m2"].max_value == 28
    assert rows["fp4_e2m1"].max_value == 6 and rows["fp4_e2m1"].min_subnormal == 0.5
    for name, t in REFERENCE.items():
        info = ml_dtypes.finfo(t) if name not in ("fp32", "fp16") else np.finfo(t)
        assert rows[name].max_value == float(info.max), name
        assert rows[name].min_normal == float(info.smallest_normal), name
        assert rows[name].min_subnormal == float(info.smallest_subnormal), name


def test_overflow_follows_each_format():
    rows = fb.format_bits(fb.FormatBitsParams(value=70_000.0)).rows
    assert rows["fp16"].stored == math.inf and rows["fp16"].bits == "0 11111 0000000000"
    assert math.isnan(rows["fp8_e4m3"].stored) and rows["fp8_e4m3"].bits == "0 1111 111"
    assert rows["fp6_e3m2"].stored == 28.0 and rows["fp6_e3m2"].saturated
    assert rows["int8"].stored == 127 and rows["int4"].stored == 7
    neg = fb.format_bits(fb.FormatBitsParams(value=-3.5)).rows
    assert neg["int4"].bits == "1100" and neg["int4"].stored == -4.0      # ties to even, two's complement


def test_block_scales():
    one = fb.format_bits(fb.FormatBitsParams(value=1000.0)).blocks
    assert one["mxfp4"].scale == 128.0 and one["mxfp4"].stored == 768.0     # MX clips the block's largest value
    assert one["mxfp4"].scale_bits == format(127 + 7, "08b")
    assert one["nvfp4"].stored == pytest.approx(1000.0)                     # a one-block tensor: exact at its amax
    mixed = fb.format_bits(fb.FormatBitsParams(value=0.3, block_amax=1.0, tensor_amax=50.0)).blocks
    tensor_scale = 50.0 / (448 * 6)
    own = float(np.float64(1.0 / 6 / tensor_scale).astype(ml_dtypes.float8_e4m3fn))
    assert mixed["nvfp4"].scale == pytest.approx(own * tensor_scale, rel=1e-12)
    assert mixed["nvfp4"].element == float(np.float64(0.3 / (own * tensor_scale)).astype(ml_dtypes.float4_e2m1fn))
    assert mixed["mxfp4"].scale == 0.25 and mixed["mxfp4"].element == 1.0


@pytest.mark.parametrize("kw,words", [(dict(value=1e39), "value"), (dict(value=2.0, block_amax=1.0), "block_amax"),
                                      (dict(value=1.0, block_amax=2.0, tensor_amax=1.5), "tensor_amax")])
def test_bad_input_is_named(kw, words):
    with pytest.raises(ValueError, match=words):
        fb.FormatBitsParams(**kw)
