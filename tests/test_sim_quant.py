"""Quantization: float rounding, integer schemes, NVFP4, error metrics."""
from __future__ import annotations

import dataclasses

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


def test_quant_demo_speed_rows_are_each_formats_own_decode_step():
    """The comparison rows (kept between calls) are the decode step of each format's own
    deployment, the same whichever format was asked for before."""
    from sim import hardware, models
    from sim.forward import decode_step

    p = quant.QuantDemoParams(fmt="int3", gpu="A100-80GB", batch=16, kv_dtype="fp8")
    quant._speed_row.cache_clear()
    first = quant.quantize_demo(p)
    quant.quantize_demo(quant.QuantDemoParams(fmt="int8", gpu="A100-80GB", batch=16, kv_dtype="fp8"))
    again = quant.quantize_demo(p)
    assert quant._speed_row.cache_info().hits >= len(quant.SPEED_SCHEMES)
    np.testing.assert_array_equal(first.speed_step_time_s, again.speed_step_time_s)
    m, g = models.get("llama-3.1-8b"), hardware.get("A100-80GB")
    for (name, scheme), t in zip([*quant.SPEED_SCHEMES, ("this", QuantScheme("int3", "group", 128))],
                                 first.speed_step_time_s):
        prec, _, _ = quant.deployment_precision(scheme, g, "weights", "fp8", m.hidden_size)
        assert t == decode_step(m, g, 16, 4096, prec).time_s, name


def test_formats_table():
    rows = quant.formats_table(n_params=7e9)
    names = [r.name for r in rows]
    assert names == ["int8, per channel", "int4, group 128", "fp8 e4m3, per tensor", "MXFP4", "NVFP4"]
    by = {r.name: r for r in rows}
    assert by["NVFP4"].bits_per_weight == 4.5 and by["MXFP4"].bits_per_weight == 4.25
    assert by["int4, group 128"].model_bytes == pytest.approx(7e9 * 4.125 / 8)
    assert by["int8, per channel"].sqnr_db > by["fp8 e4m3, per tensor"].sqnr_db > by["NVFP4"].sqnr_db
    assert by["NVFP4"].sqnr_db > by["MXFP4"].sqnr_db        # finer, finer-grained scales


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


# --------------------------------------------------------------------------- bit-exact against ml_dtypes

ml_dtypes = pytest.importorskip("ml_dtypes")
REFERENCE_DTYPES = {"fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2,
                    "fp4_e2m1": ml_dtypes.float4_e2m1fn}


def _codes(values: np.ndarray, dtype) -> np.ndarray:
    """The bit patterns of `values` (float64, each exactly representable) in `dtype`."""
    return values.astype(dtype).view(np.uint8)


def _grid_and_midpoints(fmt: str) -> np.ndarray:
    """Every finite value of the format (both signs), every midpoint between neighbours, and
    the midpoints' float32 neighbours on either side (just below / above a tie), as float32.

    float32, because ml_dtypes converts a float64 through float32: a float64 a hair off a
    tie would round to the tie first. Every float32 is exact in float64, so both sides
    round the same numbers.
    """
    pos = quant.representable_values(fmt)
    step = pos[-1] - pos[-2]
    pos = np.append(pos, pos[-1] + step).astype(np.float32)   # one value past the top: its midpoint is the overflow tie
    mids = (pos[1:] + pos[:-1]) / np.float32(2)               # exact: a midpoint needs one more mantissa bit
    near = np.concatenate([np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf))])
    x = np.concatenate([pos[:-1], mids, near])
    return np.concatenate([x, -x])


@pytest.mark.parametrize("fmt", sorted(REFERENCE_DTYPES))
def test_rounding_is_bit_exact_with_ml_dtypes(fmt):
    """Non-saturating conversion matches ml_dtypes' cast bit for bit (NaN where it gives NaN), over
    every representable value, every midpoint and both sides of each midpoint."""
    dt = REFERENCE_DTYPES[fmt]
    x = _grid_and_midpoints(fmt)
    assert x.dtype == np.float32 and len(x) == 8 * len(quant.representable_values(fmt))
    want = x.astype(dt)
    got = quant.round_to_format(x.astype(np.float64), fmt, saturate=False)
    nan = np.isnan(want.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(_codes(got[~nan], dt), want[~nan].view(np.uint8))     # signs of zero included


@pytest.mark.parametrize("fmt, big, overflow", [
    ("fp8_e4m3", [464.0, 465.0, 480.0, 1e6, np.inf], [448.0, np.nan, np.nan, np.nan, np.nan]),   # no inf in e4m3fn
    ("fp8_e5m2", [61439.0, 61440.0, 1e6, np.inf], [57344.0, np.inf, np.inf, np.inf]),            # ties to even: inf
    ("fp4_e2m1", [6.9, 7.0, 100.0, np.inf], [6.0, 6.0, 6.0, 6.0]),                                # e2m1 always saturates
])
def test_out_of_range(fmt, big, overflow):
    dt = REFERENCE_DTYPES[fmt]
    x = np.array(big + [-v for v in big])
    want = np.array(overflow + [-v for v in overflow])
    np.testing.assert_array_equal(quant.round_to_format(x, fmt, saturate=False), want)
    np.testing.assert_array_equal(x.astype(dt).astype(np.float64), want)          # ml_dtypes agrees
    top = quant.FLOAT_FORMATS[fmt].max_value
    np.testing.assert_array_equal(quant.round_to_format(x, fmt), np.sign(x) * top)  # saturating: +-max


def test_e8m0_rounding_matches_ml_dtypes():
    """Every e8m0 value (2^-127 .. 2^127), the ties 1.5 x 2^k and their float32 neighbours, and what
    has no encoding (zero, negatives, inf, NaN, past 2^127); float32 inputs as in the test above."""
    k = np.arange(quant.E8M0_MIN_EXPONENT, quant.E8M0_MAX_EXPONENT + 1)
    vals = np.ldexp(np.float32(1), k).astype(np.float32)
    ties = (vals * np.float32(1.5)).astype(np.float32)
    normal = ties[1:]       # 1.5 x 2^-127 is a float32 subnormal: ml_dtypes rounds its lower neighbour up, skip it
    x = np.concatenate([vals, ties, np.nextafter(normal, np.float32(0)), np.nextafter(normal, np.float32(np.inf)),
                        np.array([0.0, -1.0, -np.inf, np.inf, np.nan, 2.0 ** -149, 2.0 ** -128], np.float32)])
    assert np.all(np.isfinite(ties))
    dt = ml_dtypes.float8_e8m0fnu
    want = x.astype(dt)
    got = quant.round_to_e8m0(x.astype(np.float64))
    nan = np.isnan(want.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].astype(dt).view(np.uint8), want[~nan].view(np.uint8))
    # NaN: 2^127 x 1.5 and just above (round past 2^127), 0, -1, -inf, inf, NaN
    assert nan.sum() == 7 and quant.round_to_e8m0(3.0) == 4.0 and quant.round_to_e8m0(2.0 ** -149) == 2.0 ** -127


def test_mx_block_scale_R_ocp():
    """X = 2^(floor(log2 amax) - 2): the block maximum lands in [4, 8) x X; every scale is an e8m0 value."""
    amax = np.array([1e-3, 0.02, 0.75, 1.0, 5.9, 6.0, 7.99, 8.0, 1e30])
    x = quant.mx_block_scale(amax)
    np.testing.assert_array_equal(x, 2.0 ** (np.floor(np.log2(amax)) - 2))
    assert np.all((amax / x >= 4) & (amax / x < 8))
    np.testing.assert_array_equal(x.astype(ml_dtypes.float8_e8m0fnu).astype(np.float64), x)
    assert quant.mx_block_scale(0.0) == 2.0 ** -127 and quant.mx_block_scale(1e-60) == 2.0 ** -127


def test_mxfp4_blocks_of_32_clip_above_6x():
    rng = np.random.default_rng(4)
    w = rng.normal(size=(8, 128))
    q = quant.quantize(w, QuantScheme("mxfp4"))
    assert q.scales.shape == (8, 4) and q.bits_per_weight == 4.25
    np.testing.assert_array_equal(q.scales, quant.mx_block_scale(np.abs(w).reshape(8, 4, 32).max(axis=2)))
    assert np.all(np.isin(np.abs(q.codes), quant.representable_values("fp4_e2m1")))
    # a block whose maximum is 7 x 2^k keeps 6 x 2^k: MXFP4's scale is a floor, so the top of a block can clip
    block = np.full((1, 32), 0.5)
    block[0, 0] = 7.0
    assert quant.quantize(block, QuantScheme("mxfp4")).values[0, 0] == 6.0


def test_nvfp4_block_scale_rounds_in_e4m3_with_the_tensor_scale():
    """One block: tensor scale amax / (448 x 6); block scale = e4m3(amax_block / 6 / tensor scale) = 448."""
    x = np.linspace(-3.0, 3.0, 16)[None, :]
    q = quant.quantize(x, QuantScheme("nvfp4"))
    assert q.tensor_scale == 3.0 / (448 * 6) and q.scales[0, 0] == 448.0
    np.testing.assert_array_equal(q.codes, quant.round_to_format(x / (448 * q.tensor_scale), "fp4_e2m1"))


def test_demo_weights_are_heavy_tailed_with_the_stated_std():
    w, _ = quant.demo_weights(quant.QuantDemoParams(rows=512, cols=4096))
    g, _ = quant.demo_weights(quant.QuantDemoParams(rows=512, cols=4096, distribution="gaussian"))
    for a in (w, g):
        assert a.std() == pytest.approx(0.02, rel=0.01)
    kurt = lambda a: float(np.mean(a ** 4) / np.mean(a ** 2) ** 2)
    assert kurt(g) == pytest.approx(3.0, abs=0.05)
    assert kurt(w) == pytest.approx(9.0, rel=0.25)          # Student-t(5): 3 + 6 / (5 - 4) = 9


def test_demo_weights_are_kept_for_the_controls_that_do_not_shape_them():
    """The figure's format, bits, GPU and batch controls quantize the same matrix: it is kept
    (read-only), and made again, equal to a fresh draw, when a parameter that shapes it changes."""
    base = quant.QuantDemoParams()
    w, cols = quant.demo_weights(base)
    assert not w.flags.writeable and not cols.flags.writeable
    for other in (dataclasses.replace(base, fmt="fp8_e4m3", granularity="tensor"),
                  dataclasses.replace(base, gpu="H200", batch=64, mode="weights+activations")):
        assert quant.demo_weights(other)[0] is w
    for shaped in (dataclasses.replace(base, seed=1), dataclasses.replace(base, outliers=True),
                   dataclasses.replace(base, distribution="gaussian"), dataclasses.replace(base, tail_dof=4.0)):
        again, _ = quant.demo_weights(shaped)
        assert again is not w and not np.array_equal(again, w)
        rng = np.random.default_rng(shaped.seed)
        if shaped.distribution == "gaussian":
            fresh = rng.normal(0.0, shaped.std, (shaped.rows, shaped.cols))
        else:
            fresh = rng.standard_t(shaped.tail_dof, (shaped.rows, shaped.cols)) * (
                shaped.std * np.sqrt((shaped.tail_dof - 2) / shaped.tail_dof))
        if shaped.outliers:
            fresh, _ = quant.inject_outliers(fresh, shaped.outlier_fraction, shaped.outlier_scale, shaped.seed + 1)
        np.testing.assert_array_equal(again, fresh)
    w = quant.demo_weights(base)[0]
    drawn = w.copy()
    assert w.flags.owndata
    # dropped for the memory snapshot (widgets.runtime.prebuild): zeroed, then drawn again alike
    quant.forget_demo_weights()
    assert not w.any()
    again = quant.demo_weights(base)[0]
    assert again is not w
    np.testing.assert_array_equal(again, drawn)


def test_deployment_precision_and_speed():
    from sim import hardware, models
    h100, a100, b200 = (hardware.get(n) for n in ("H100-SXM", "A100-80GB", "B200"))
    prec, math_dtype, bpw = quant.deployment_precision(QuantScheme("int4", "group", 128), h100)
    assert (math_dtype, bpw, prec.weight_bytes, prec.head_bytes) == ("bf16", 4.125, 4.125 / 8, 2.0)
    assert quant.deployment_precision(QuantScheme("nvfp4"), b200, "weights+activations")[1] == "fp4"
    assert quant.deployment_precision(QuantScheme("nvfp4"), h100, "weights+activations")[1] == "fp8"
    assert quant.deployment_precision(QuantScheme("fp8_e4m3"), a100, "weights+activations")[1] == "bf16"
    assert quant.deployment_precision(QuantScheme("int4"), a100, "weights+activations")[1] == "int8"
    r = quant.quantize_demo()
    assert r.speed_names[0] == "bf16" and r.speed_names[-1] == "this format"
    assert r.speed_step_time_s[-1] == r.speed_step_time_s[r.speed_names.index("int4, group 128")]
    # the weight bytes a step reads: only the blocks' linear weights shrink, from 16 to 4.125 bits (closed form)
    m = models.get("llama-3.1-8b")
    linear = m.num_layers * sum(i * o for i, o in m.linear_shapes().values())
    assert r.speed_weight_bytes[0] - r.speed_weight_bytes[-1] == pytest.approx(linear * (2 - 4.125 / 8), rel=1e-12)
    dense = r.speed_weight_bytes[0]
    assert 1 < r.speedup_vs_bf16 < dense / r.speed_weight_bytes[-1]     # less than the bytes alone predict
    np.testing.assert_allclose(r.speed_tokens_per_s_per_user, 1 / r.speed_step_time_s)
    kv8 = quant.quantize_demo(quant.QuantDemoParams(kv_dtype="fp8", context_tokens=65536))
    kv16 = quant.quantize_demo(quant.QuantDemoParams(context_tokens=65536))
    np.testing.assert_allclose(kv8.speed_kv_bytes, kv16.speed_kv_bytes / 2)
    assert kv8.speed_step_time_s[-1] < kv16.speed_step_time_s[-1]
    # weight-only vs weights+activations: the same at one user (bytes-bound), apart once the batch is compute-bound
    one = [quant.quantize_demo(quant.QuantDemoParams(fmt="fp8_e4m3", granularity="tensor", mode=m_))
           for m_ in quant.MODES]
    big = [quant.quantize_demo(quant.QuantDemoParams(fmt="fp8_e4m3", granularity="tensor", mode=m_, batch=512,
                                                     context_tokens=256))
           for m_ in quant.MODES]
    assert one[1].speed_step_time_s[-1] == pytest.approx(one[0].speed_step_time_s[-1], rel=0.05)
    assert big[1].speed_step_time_s[-1] < 0.8 * big[0].speed_step_time_s[-1]
    h = quant.quantize_demo(quant.QuantDemoParams(fmt="nvfp4", mode="weights+activations"))
    assert "has no fp4 tensor cores" in h.speed_note
