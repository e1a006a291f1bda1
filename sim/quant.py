"""Quantization: integer and low-precision float formats, scales per tensor, channel or group.

Integer formats map each value to round(x / scale) (+ a zero point when asymmetric) on
a b-bit grid; float formats (fp8 e4m3 / e5m2, fp4 e2m1) round x / scale to the nearest
value the format can represent, ties to even, saturating at the largest finite value.
NVFP4 (R20) stores e2m1 values with one e4m3 scale per 16 values and one fp32 scale per
tensor: 4 + 8/16 = 4.5 bits per weight.

Weights are 2-D (output channels, input features); "channel" scales are per output row,
"group" scales cover `group_size` consecutive input features of one row.

>>> round_to_format([0.3, 2.5, 7.0, -100.0], "fp4_e2m1").tolist()
[0.5, 2.0, 6.0, -6.0]
>>> round_to_format([449.0, 1e6], "fp8_e4m3").tolist()
[448.0, 448.0]
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from sim.checks import check_choice, check_int, check_non_negative, check_positive, check_range, checked_params


@dataclass(frozen=True)
class FloatFormat:
    """A small IEEE-like binary float: sign, `exponent_bits`, `mantissa_bits`, `bias`."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max_value: float           # largest finite value (saturation point)
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
    "fp8_e4m3": FloatFormat("fp8_e4m3", 4, 3, 7, 448.0, "OCP OFP8 specification: E4M3, max 448"),
    "fp8_e5m2": FloatFormat("fp8_e5m2", 5, 2, 15, 57344.0, "OCP OFP8 specification: E5M2, max 57,344"),
    # OCP Microscaling (MX) specification: FP4 E2M1, values 0, 0.5, 1, 1.5, 2, 3, 4, 6
    "fp4_e2m1": FloatFormat("fp4_e2m1", 2, 1, 1, 6.0, "OCP MX specification: E2M1, max 6; R20"),
}
INT_FORMATS = tuple(f"int{b}" for b in range(2, 9))
NVFP4_BLOCK = 16                  # R20: one e4m3 scale per 16 values
FORMATS = INT_FORMATS + tuple(FLOAT_FORMATS) + ("nvfp4",)
GRANULARITIES = ("tensor", "channel", "group")


def round_to_format(x, fmt: str) -> np.ndarray:
    """Nearest value of float format `fmt` for each element of `x` (ties to even, saturating).

    Formats: "fp8_e4m3", "fp8_e5m2", "fp4_e2m1". Values beyond the largest finite value
    clamp to it (with their sign); NaN stays NaN. The exponent is floor(log2 |x|) clamped
    below at the smallest normal exponent, which makes the subnormals come out right;
    the spacing in that binade is 2^(exponent - mantissa_bits) and x / spacing is exact,
    so numpy's round-half-to-even gives the format's rounding.

    >>> round_to_format([0.25, 0.75, 1.25], "fp4_e2m1").tolist()    # ties go to the even mantissa
    [0.0, 1.0, 1.0]
    """
    f = FLOAT_FORMATS.get(fmt)
    if f is None:
        raise ValueError(f"unknown float format {fmt!r}; valid formats: {', '.join(FLOAT_FORMATS)}")
    v = np.asarray(x, dtype=np.float64)
    a = np.abs(v)
    with np.errstate(invalid="ignore", over="ignore"):
        _, e = np.frexp(a)                              # a = frac * 2**e, frac in [0.5, 1)
        exp = np.maximum(e - 1, f.min_normal_exponent)  # floor(log2 a), clamped to the subnormal range
        spacing = np.ldexp(1.0, exp - f.mantissa_bits)
        q = np.rint(a / spacing) * spacing
        q = np.minimum(q, f.max_value)
    return np.copysign(q, v)


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


# --------------------------------------------------------------------------------------------
# Quantizing tensors
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class QuantScheme:
    """How a tensor is quantized."""

    fmt: str = "int4"               # "int2".."int8", "fp8_e4m3", "fp8_e5m2", "fp4_e2m1", "nvfp4"
    granularity: str = "group"      # "tensor" | "channel" | "group" (nvfp4: always groups of 16)
    group_size: int = 128           # input features per scale when granularity == "group"
    symmetric: bool = True          # integer formats: no zero point (grid symmetric around 0)
    scale_bits: int = 16            # storage of each scale (fp16); nvfp4 uses e4m3 + one fp32

    def __post_init__(self) -> None:
        check_choice("format", self.fmt, FORMATS)
        check_choice("granularity", self.granularity, GRANULARITIES, "granularities")
        check_int("group_size", self.group_size, minimum=1)
        check_int("scale_bits", self.scale_bits, minimum=1, maximum=64)

    @property
    def bits(self) -> int:
        """Bits of one stored value (before scales)."""
        if self.fmt.startswith("int"):
            return int(self.fmt[3:])
        if self.fmt == "nvfp4":
            return 4
        return FLOAT_FORMATS[self.fmt].bits


def bits_per_weight(scheme: QuantScheme, rows: Optional[int] = None, cols: Optional[int] = None) -> float:
    """Storage bits per weight including scales (and zero points) for a rows x cols tensor.

    Per-group overhead = (scale bits + zero-point bits) / elements per scale. Without a
    shape, per-tensor scales are treated as amortised (zero) and per-channel ones need
    `cols`. NVFP4: 4 + 8 / 16 + 32 / (rows x cols) -> 4.5 (R20).

    >>> bits_per_weight(QuantScheme("nvfp4"))
    4.5
    >>> bits_per_weight(QuantScheme("int4", "group", 128))
    4.125
    """
    b = scheme.bits
    if scheme.fmt == "nvfp4":
        tensor = 32.0 / (rows * cols) if rows and cols else 0.0
        return b + 8.0 / NVFP4_BLOCK + tensor
    per_scale = scheme.scale_bits + (b if scheme.fmt.startswith("int") and not scheme.symmetric else 0)
    if scheme.granularity == "group":
        return b + per_scale / scheme.group_size
    if scheme.granularity == "channel":
        if cols is None:
            raise ValueError("per-channel overhead needs cols (input features per channel)")
        return b + per_scale / cols
    return b + (per_scale / (rows * cols) if rows and cols else 0.0)


@dataclass(frozen=True)
class QuantizedTensor:
    """A tensor after quantization, with what was stored to rebuild it."""

    values: np.ndarray              # dequantized, same shape as the input
    codes: np.ndarray               # stored values: integer codes, or format values before scaling
    scales: np.ndarray              # (rows, groups) scale of each group
    zero_points: Optional[np.ndarray]  # (rows, groups) for asymmetric integer formats
    tensor_scale: float             # nvfp4's fp32 second-level scale (1.0 otherwise)
    bits_per_weight: float
    scheme: QuantScheme


def _grouped(x: np.ndarray, scheme: QuantScheme, group: int) -> np.ndarray:
    rows, cols = x.shape
    if scheme.granularity == "tensor" and scheme.fmt != "nvfp4":
        return x.reshape(1, 1, rows * cols)
    if cols % group:
        raise ValueError(f"input features ({cols}) must be a multiple of the group size ({group})")
    return x.reshape(rows, cols // group, group)


def quantize(x, scheme: QuantScheme = QuantScheme()) -> QuantizedTensor:
    """Quantize a 1-D or 2-D array and dequantize it back, with scales per tensor, channel or group.

    - symmetric int b: scale = amax / (2^(b-1) - 1), code = clip(round(x / scale), -qmax, qmax);
    - asymmetric int b: range [min(x, 0), max(x, 0)] mapped to codes 0 .. 2^b - 1 with a zero point;
    - float formats: scale = amax / format max, code = round_to_format(x / scale);
    - nvfp4: tensor scale = amax / (448 x 6); per 16 values an e4m3-rounded block scale
      amax_block / 6 / tensor scale; codes are e2m1 (R20).

    >>> q = quantize(np.linspace(-1, 1, 256).reshape(2, 128), QuantScheme("int8", "channel"))
    >>> float(np.abs(q.values - np.linspace(-1, 1, 256).reshape(2, 128)).max()) <= 0.5 / 127
    True
    """
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError("quantize expects a non-empty 1-D or 2-D array")
    if not np.all(np.isfinite(arr)):
        raise ValueError("quantize expects finite values")
    rows, cols = arr.shape
    s = scheme
    group = NVFP4_BLOCK if s.fmt == "nvfp4" else (cols if s.granularity == "channel" else s.group_size)
    g = _grouped(arr, s, group)
    amax = np.abs(g).max(axis=2, keepdims=True)
    zero = None
    tensor_scale = 1.0
    if s.fmt.startswith("int"):
        b = s.bits
        if s.symmetric:
            qmax = 2 ** (b - 1) - 1
            scale = np.where(amax > 0, amax / qmax, 1.0)
            codes = np.clip(np.rint(g / scale), -qmax, qmax)
            deq = codes * scale
        else:
            lo = np.minimum(g.min(axis=2, keepdims=True), 0.0)
            hi = np.maximum(g.max(axis=2, keepdims=True), 0.0)
            levels = 2 ** b - 1
            scale = np.where(hi > lo, (hi - lo) / levels, 1.0)
            zero = np.clip(np.rint(-lo / scale), 0, levels)
            codes = np.clip(np.rint(g / scale) + zero, 0, levels)
            deq = (codes - zero) * scale
    elif s.fmt == "nvfp4":
        t_amax = float(np.abs(arr).max())
        tensor_scale = t_amax / (FLOAT_FORMATS["fp8_e4m3"].max_value * FLOAT_FORMATS["fp4_e2m1"].max_value) \
            if t_amax > 0 else 1.0
        block = round_to_format(amax / FLOAT_FORMATS["fp4_e2m1"].max_value / tensor_scale, "fp8_e4m3")
        eff = block * tensor_scale
        safe = np.where(eff > 0, eff, 1.0)
        codes = np.where(eff > 0, round_to_format(g / safe, "fp4_e2m1"), 0.0)
        deq = codes * eff
        scale = block
    else:
        fmax = FLOAT_FORMATS[s.fmt].max_value
        scale = np.where(amax > 0, amax / fmax, 1.0)
        codes = round_to_format(g / scale, s.fmt)
        deq = codes * scale
    return QuantizedTensor(values=deq.reshape(rows, cols), codes=codes.reshape(rows, cols),
                           scales=scale.reshape(scale.shape[0], scale.shape[1]),
                           zero_points=None if zero is None else zero.reshape(zero.shape[0], zero.shape[1]),
                           tensor_scale=tensor_scale, bits_per_weight=bits_per_weight(s, rows, cols), scheme=s)


@dataclass(frozen=True)
class QuantError:
    """How far a quantized tensor is from the original."""

    mse: float                      # mean squared error
    sqnr_db: float                  # 10 log10(sum x^2 / sum (x - xq)^2); inf when exact
    zero_share: float               # share of non-zero values that became exactly 0
    max_abs_error: float


def quant_error(x, xq) -> QuantError:
    """MSE, signal-to-quantization-noise ratio (dB), share rounded to zero, max error.

    >>> quant_error([1.0, 2.0], [1.0, 2.0]).sqnr_db
    inf
    """
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(xq, dtype=np.float64)
    if a.shape != b.shape or a.size == 0:
        raise ValueError("x and xq must be non-empty arrays of the same shape")
    err = a - b
    noise = float(np.sum(err * err))
    signal = float(np.sum(a * a))
    nz = a != 0
    return QuantError(mse=noise / a.size,
                      sqnr_db=math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal else -math.inf),
                      zero_share=float(np.sum(nz & (b == 0)) / max(int(nz.sum()), 1)),
                      max_abs_error=float(np.abs(err).max()))


def inject_outliers(w, fraction: float = 0.01, scale: float = 20.0, seed: int = 0) -> tuple:
    """Scale a random `fraction` of input channels (columns) of `w` by `scale`.

    Mimics the few salient channels AWQ protects (~1%, R19): a per-tensor or per-channel
    scale then stretches to fit them and the ordinary weights lose resolution.
    Returns (new weights, indices of the scaled columns).

    >>> w, cols = inject_outliers(np.ones((2, 100)), fraction=0.02, scale=10.0)
    >>> len(cols), float(w[:, cols].max())
    (2, 10.0)
    """
    check_range("fraction", fraction, 0.0, 1.0)
    check_positive("scale", scale)
    a = np.array(w, dtype=np.float64, copy=True)
    if a.ndim != 2:
        raise ValueError("inject_outliers expects a 2-D weight matrix")
    n = int(round(fraction * a.shape[1]))
    cols = np.sort(np.random.default_rng(seed).choice(a.shape[1], size=n, replace=False)) if n else np.zeros(0, int)
    a[:, cols] *= scale
    return a, cols


# --------------------------------------------------------------------------------------------
# Figure ch10-quant
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class QuantDemoParams:
    """Controls of the quantization figure."""

    fmt: str = "int4"                # format (the bits slider picks "int8" .. "int2")
    granularity: str = "group"       # "tensor" | "channel" | "group"
    group_size: int = 128
    symmetric: bool = True
    outliers: bool = False           # scale ~1% of input channels by outlier_scale
    outlier_fraction: float = 0.01
    outlier_scale: float = 20.0
    rows: int = 64                   # output channels of the demo weight matrix
    cols: int = 1024                 # input features
    std: float = 0.02                # weights ~ N(0, std^2), a typical LLM initialisation scale
    bins: int = 121
    seed: int = 0

    def __post_init__(self) -> None:
        QuantScheme(self.fmt, self.granularity, self.group_size, self.symmetric)
        check_range("outlier_fraction", self.outlier_fraction, 0.0, 1.0)
        check_positive("outlier_scale", self.outlier_scale)
        check_int("rows", self.rows, minimum=1, maximum=8192)
        check_int("cols", self.cols, minimum=1, maximum=65536)
        check_positive("std", self.std)
        check_int("bins", self.bins, minimum=2, maximum=10_000)
        check_int("seed", self.seed, minimum=0)


@dataclass(frozen=True)
class QuantDemoResult:
    """A weight matrix before and after quantization."""

    hist_edges: np.ndarray          # (bins + 1,) over the original weights' range
    hist_counts: np.ndarray         # (bins,) original weights
    hist_counts_quantized: np.ndarray  # (bins,) dequantized weights
    levels_first_group: np.ndarray  # representable values of the first group (row 0, first scale)
    levels_widest_group: np.ndarray  # ... of the group with the largest scale
    mse: float
    sqnr_db: float
    zero_share: float
    bits_per_weight: float
    outlier_columns: np.ndarray     # indices of the scaled input channels (empty without outliers)


def _levels(scheme: QuantScheme, scale: float, zero: Optional[float], tensor_scale: float) -> np.ndarray:
    if scheme.fmt.startswith("int"):
        b = scheme.bits
        if scheme.symmetric:
            q = 2 ** (b - 1) - 1
            return np.arange(-q, q + 1) * scale
        return (np.arange(0, 2 ** b) - zero) * scale
    base = "fp4_e2m1" if scheme.fmt == "nvfp4" else scheme.fmt
    pos = representable_values(base)
    grid = np.concatenate([-pos[::-1], pos[1:]])
    return grid * scale * (tensor_scale if scheme.fmt == "nvfp4" else 1.0)


def quantize_demo(params: QuantDemoParams = QuantDemoParams()) -> QuantDemoResult:
    """Quantize a seeded Gaussian weight matrix (optionally with outlier channels) and report the damage.

    >>> a = quantize_demo(QuantDemoParams(fmt="int4", granularity="tensor", outliers=True))
    >>> b = quantize_demo(QuantDemoParams(fmt="int4", granularity="group", outliers=True))
    >>> a.zero_share > b.zero_share and a.sqnr_db < b.sqnr_db
    True
    """
    p = params
    rng = np.random.default_rng(p.seed)
    w = rng.normal(0.0, p.std, (p.rows, p.cols))
    cols = np.zeros(0, dtype=np.int64)
    if p.outliers:
        w, cols = inject_outliers(w, p.outlier_fraction, p.outlier_scale, p.seed + 1)
    scheme = QuantScheme(p.fmt, p.granularity, p.group_size, p.symmetric)
    q = quantize(w, scheme)
    err = quant_error(w, q.values)
    lo, hi = float(w.min()), float(w.max())
    counts, edges = np.histogram(w, bins=p.bins, range=(lo, hi))       # uniform bins: the fast path
    counts_q, _ = np.histogram(np.clip(q.values, lo, hi), bins=p.bins, range=(lo, hi))
    zp = q.zero_points
    widest = np.unravel_index(int(np.argmax(q.scales)), q.scales.shape)
    return QuantDemoResult(
        hist_edges=edges, hist_counts=counts, hist_counts_quantized=counts_q,
        levels_first_group=_levels(scheme, float(q.scales[0, 0]), None if zp is None else float(zp[0, 0]),
                                   q.tensor_scale),
        levels_widest_group=_levels(scheme, float(q.scales[widest]), None if zp is None else float(zp[widest]),
                                    q.tensor_scale),
        mse=err.mse, sqnr_db=err.sqnr_db, zero_share=err.zero_share, bits_per_weight=q.bits_per_weight,
        outlier_columns=cols)


@dataclass(frozen=True)
class FormatRow:
    """One line of the formats table."""

    name: str
    scheme: QuantScheme
    bits_per_weight: float
    model_bytes: float              # n_params x bits / 8
    sqnr_db: float                  # on the demo matrix (seeded Gaussian)


FORMAT_TABLE_SCHEMES = (
    ("int8, per channel", QuantScheme("int8", "channel")),
    ("int4, group 128", QuantScheme("int4", "group", 128)),
    ("fp8 e4m3, per tensor", QuantScheme("fp8_e4m3", "tensor", scale_bits=32)),
    ("NVFP4", QuantScheme("nvfp4")),
)


def formats_table(n_params: float = 7e9, demo: QuantDemoParams = QuantDemoParams()) -> list:
    """Bits per weight, model size and demo SQNR of int8, int4 g128, fp8 e4m3 and NVFP4.

    >>> rows = formats_table()
    >>> [round(r.bits_per_weight, 3) for r in rows]
    [8.016, 4.125, 8.0, 4.5]
    """
    check_non_negative("n_params", n_params)
    rng = np.random.default_rng(demo.seed)
    w = rng.normal(0.0, demo.std, (demo.rows, demo.cols))
    out = []
    for name, scheme in FORMAT_TABLE_SCHEMES:
        q = quantize(w, scheme)
        bpw = bits_per_weight(scheme, None, demo.cols) if scheme.granularity == "channel" else bits_per_weight(scheme)
        out.append(FormatRow(name, scheme, bpw, n_params * bpw / 8, quant_error(w, q.values).sqnr_db))
    return out


def weight_bytes_at(n_params: float, bits: float) -> float:
    """Bytes of `n_params` weights at `bits` bits each: INT4 makes a 7B model 3.5 GB (7e9 x 4 / 8).

    >>> weight_bytes_at(7e9, 4) / 1e9
    3.5
    """
    check_non_negative("n_params", n_params)
    check_positive("bits", bits)
    return n_params * bits / 8
