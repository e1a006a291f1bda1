"""Quantization: float rounding, integer schemes, NVFP4, error metrics."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import quant
from sim.quant import QuantScheme


@pytest.mark.parametrize("fmt, count, largest, smallest_subnormal", [
    ("fp8_e4m3", 127, 448.0, 2.0 ** -9),        # 128 codes minus NaN, non-negative, with 0
    ("fp8_e5m2", 124, 57344.0, 2.0 ** -16),     # exponent 31 is inf/NaN
    ("fp4_e2m1", 8, 6.0, 0.5),
])
def test_representable_values(fmt, count, largest, smallest_subnormal):
    v = quant.representable_values(fmt)
    assert len(v) == count and v[0] == 0 and v[1] == smallest_subnormal and v[-1] == largest


def _nearest_even(x: float, grid: np.ndarray, fmt: str) -> float:
    """Brute force: nearest grid value, ties to the one with an even mantissa (even index in the grid)."""
    a = abs(x)
    if a >= grid[-1]:
        return float(np.copysign(grid[-1], x))
    i = np.searchsorted(grid, a)
    if grid[i] == a:
        return float(np.copysign(a, x))
    lo, hi = grid[i - 1], grid[i]
    if a - lo < hi - a:
        r = lo
    elif hi - a < a - lo:
        r = hi
    else:
        r = lo if (i - 1) % 2 == 0 else hi       # consecutive codes alternate even/odd mantissas
    return float(np.copysign(r, x))


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2", "fp4_e2m1"])
def test_round_to_format_is_round_to_nearest_even_saturating(fmt):
    grid = quant.representable_values(fmt)
    # every representable value, every midpoint (a tie), and random values across the range
    mids = (grid[1:] + grid[:-1]) / 2
    rng = np.random.default_rng(0)
    rand = rng.uniform(-1.2 * grid[-1], 1.2 * grid[-1], 2000)
    tiny = rng.uniform(-4 * grid[1], 4 * grid[1], 500)
    x = np.concatenate([grid, -grid, mids, -mids, rand, tiny, [grid[-1] * 10, -1e30]])
    got = quant.round_to_format(x, fmt)
    want = np.array([_nearest_even(v, grid, fmt) for v in x])
    np.testing.assert_array_equal(np.abs(got), np.abs(want))
    assert np.all(np.sign(got[got != 0]) == np.sign(x[got != 0]))


def test_round_to_format_edge_cases():
    assert quant.round_to_format([464.0], "fp8_e4m3")[0] == 448.0    # halfway to the (absent) 480: saturate
    assert quant.round_to_format([np.inf, -np.inf], "fp8_e4m3").tolist() == [448.0, -448.0]
    assert np.isnan(quant.round_to_format([np.nan], "fp4_e2m1")[0])
    assert quant.round_to_format(5.0, "fp4_e2m1") == 4.0                 # tie between 4 and 6: even mantissa
    with pytest.raises(ValueError, match="valid formats: fp8_e4m3, fp8_e5m2, fp4_e2m1"):
        quant.round_to_format([1.0], "fp6")


def test_symmetric_int_error_bound_and_codes():
    rng = np.random.default_rng(1)
    w = rng.normal(size=(16, 256))
    for bits in (2, 4, 8):
        q = quant.quantize(w, QuantScheme(f"int{bits}", "group", 64))
        qmax = 2 ** (bits - 1) - 1
        assert np.all(np.abs(q.codes) <= qmax) and np.all(q.codes == np.round(q.codes))
        step = np.repeat(q.scales, 64, axis=1)
        assert np.all(np.abs(q.values - w) <= step / 2 + 1e-12)


def test_asymmetric_int_uses_the_full_range():
    x = np.linspace(0.0, 1.0, 16)[None, :]          # all non-negative: the asymmetric grid fits it exactly
    q = quant.quantize(x, QuantScheme("int4", "tensor", symmetric=False))
    np.testing.assert_allclose(q.values, x, atol=1e-12)
    assert q.codes.min() == 0 and q.codes.max() == 15
    s = quant.quantize(x, QuantScheme("int4", "tensor"))
    assert quant.quant_error(x, q.values).mse < quant.quant_error(x, s.values).mse


def test_fp8_per_tensor_scale_maps_amax_to_448():
    w = np.random.default_rng(2).normal(size=(8, 64))
    q = quant.quantize(w, QuantScheme("fp8_e4m3", "tensor"))
    assert q.scales.shape == (1, 1) and q.scales[0, 0] == pytest.approx(np.abs(w).max() / 448)
    assert np.abs(q.codes).max() == 448.0
    assert quant.quant_error(w, q.values).sqnr_db > 25


def test_nvfp4_two_level_scales_R20():
    w = np.random.default_rng(3).normal(size=(32, 128))
    q = quant.quantize(w, QuantScheme("nvfp4"))
    assert q.scales.shape == (32, 8)                               # one scale per 16 values
    e4m3 = quant.representable_values("fp8_e4m3")
    assert np.all(np.isin(q.scales, e4m3))                         # block scales are e4m3 numbers
    assert q.tensor_scale == pytest.approx(np.abs(w).max() / (448 * 6))
    assert np.all(np.isin(np.abs(q.codes), quant.representable_values("fp4_e2m1")))
    assert q.bits_per_weight == pytest.approx(4.5 + 32 / w.size)
    err_nv = quant.quant_error(w, q.values).sqnr_db
    err_int4_tensor = quant.quant_error(w, quant.quantize(w, QuantScheme("int4", "tensor")).values).sqnr_db
    assert err_nv > err_int4_tensor


def test_bits_per_weight_formulas():
    assert quant.bits_per_weight(QuantScheme("int4", "group", 128)) == 4.125
    assert quant.bits_per_weight(QuantScheme("int4", "group", 128, symmetric=False)) == 4 + 20 / 128
    assert quant.bits_per_weight(QuantScheme("int8", "channel"), cols=4096) == 8 + 16 / 4096
    assert quant.bits_per_weight(QuantScheme("fp8_e4m3", "tensor")) == 8
    with pytest.raises(ValueError, match="needs cols"):
        quant.bits_per_weight(QuantScheme("int8", "channel"))


seeds = st.integers(0, 10_000)


@settings(max_examples=25, deadline=None)
@given(seeds, st.sampled_from(["tensor", "channel", "group"]), st.booleans())
def test_error_falls_as_bits_rise(seed, granularity, outliers):
    w = np.random.default_rng(seed).normal(size=(32, 256))
    if outliers:
        w, _ = quant.inject_outliers(w, 0.02, 10.0, seed)
    mse = [quant.quant_error(w, quant.quantize(w, QuantScheme(f"int{b}", granularity, 64)).values).mse
           for b in range(2, 9)]
    assert all(a > b for a, b in zip(mse, mse[1:]))


@settings(max_examples=25, deadline=None)
@given(seeds, st.sampled_from([2, 3, 4, 8]))
def test_error_falls_with_smaller_groups(seed, bits):
    w = np.random.default_rng(seed).normal(size=(32, 512))
    mse = [quant.quant_error(w, quant.quantize(w, QuantScheme(f"int{bits}", "group", g)).values).mse
           for g in (512, 128, 32)]
    per_tensor = quant.quant_error(w, quant.quantize(w, QuantScheme(f"int{bits}", "tensor")).values).mse
    assert per_tensor > mse[0] > mse[1] > mse[2]


def test_error_metrics():
    e = quant.quant_error([1.0, -2.0, 0.5, 0.0], [1.0, -2.0, 0.0, 0.0])
    assert e.mse == pytest.approx(0.25 / 4)
    assert e.sqnr_db == pytest.approx(10 * np.log10(5.25 / 0.25))
    assert e.zero_share == pytest.approx(1 / 3)                  # of the 3 non-zero values, one became 0
    assert e.max_abs_error == 0.5


def test_outlier_injection():
    w = np.ones((4, 200))
    out, cols = quant.inject_outliers(w, 0.01, 20.0, seed=1)
    assert len(cols) == 2 and np.all(out[:, cols] == 20.0) and (out == 1.0).sum() == 4 * 198
    assert np.all(w == 1.0)                                      # the input is not modified


def test_quant_demo_outliers_hurt_per_tensor_more_than_groups():
    t = quant.quantize_demo(quant.QuantDemoParams(fmt="int4", granularity="tensor", outliers=True))
    g = quant.quantize_demo(quant.QuantDemoParams(fmt="int4", granularity="group", outliers=True))
    clean = quant.quantize_demo(quant.QuantDemoParams(fmt="int4", granularity="tensor"))
    g32 = quant.quantize_demo(quant.QuantDemoParams(fmt="int4", granularity="group", group_size=32, outliers=True))
    assert t.zero_share > 0.9                                    # one scale for all: nearly every weight rounds to 0
    assert t.zero_share > g.zero_share > g32.zero_share          # smaller groups confine the damage
    assert t.sqnr_db < clean.sqnr_db
    assert len(t.outlier_columns) == round(0.01 * 1024)
    assert t.hist_counts.sum() == t.hist_counts_quantized.sum() == 64 * 1024
    assert len(g.levels_first_group) == 15                       # int4 symmetric: -7..7
    assert g.levels_widest_group.max() > g.levels_first_group.max()
    nv = quant.quantize_demo(quant.QuantDemoParams(fmt="nvfp4"))
    assert len(nv.levels_first_group) == 15 and nv.bits_per_weight == pytest.approx(4.5, abs=1e-3)


def test_formats_table():
    rows = quant.formats_table(n_params=7e9)
    names = [r.name for r in rows]
    assert names == ["int8, per channel", "int4, group 128", "fp8 e4m3, per tensor", "NVFP4"]
    by = {r.name: r for r in rows}
    assert by["NVFP4"].bits_per_weight == 4.5
    assert by["int4, group 128"].model_bytes == pytest.approx(7e9 * 4.125 / 8)
    assert by["int8, per channel"].sqnr_db > by["fp8 e4m3, per tensor"].sqnr_db > by["NVFP4"].sqnr_db


@pytest.mark.parametrize("call, match", [
    (lambda: QuantScheme("int9"), "valid formats: int2"),
    (lambda: QuantScheme("int4", "row"), "valid granularities: tensor, channel, group"),
    (lambda: QuantScheme("int4", group_size=0), "group_size must be >= 1"),
    (lambda: quant.quantize(np.ones((2, 100)), QuantScheme("int4", "group", 64)), "multiple of the group size"),
    (lambda: quant.quantize(np.array([np.nan, 1.0]), QuantScheme("int8", "tensor")), "finite"),
    (lambda: quant.inject_outliers(np.ones((2, 4)), fraction=1.5), r"fraction must be in \[0.0, 1.0\]"),
    (lambda: quant.QuantDemoParams(rows=-1), "rows must be >= 1"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
