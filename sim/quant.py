"""Quantization: integer and low-precision float formats, scales per tensor, channel or group.

Integer formats map each value to round(x / scale) (+ a zero point when asymmetric) on
a b-bit grid; float formats (fp8 e4m3 / e5m2, fp4 e2m1) round x / scale to the nearest
value the format can represent, ties to even, saturating at the largest finite value.
NVFP4 (R20) stores e2m1 values with one e4m3 scale per 16 values and one fp32 scale per
tensor: 4 + 8/16 = 4.5 bits per weight. MXFP4 (OCP MX specification) stores e2m1 values
with one e8m0 scale (a bare power of two) per 32 values: 4 + 8/32 = 4.25 bits per weight.

The formats themselves and their bit-exact rounding are `sim.number_formats`.

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
from functools import lru_cache
from typing import Optional

import numpy as np

from sim.batch import Precision
from sim.checks import (check_choice, check_int, check_non_negative, check_number, check_positive, check_range,
                        checked_params)
from sim.forward import decode_step
from sim.hardware import resolve as resolve_gpu
from sim.models import resolve as resolve_model
from sim.number_formats import (BLOCK_FORMATS, E2M1_EMAX, E8M0_MAX_EXPONENT, E8M0_MIN_EXPONENT,  # noqa: F401
                                FLOAT_FORMATS, FORMATS, GRANULARITIES, INT_FORMATS, MX_BLOCK, NVFP4_BLOCK,
                                FloatFormat, mx_block_scale, representable_values, round_to_e8m0,
                                round_to_format)


# --------------------------------------------------------------------------------------------
# Quantizing tensors
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class QuantScheme:
    """How a tensor is quantized."""

    fmt: str = "int4"               # "int2".."int8", "fp8_e4m3", "fp8_e5m2", "fp4_e2m1", "nvfp4", "mxfp4"
    granularity: str = "group"      # "tensor" | "channel" | "group" (nvfp4: blocks of 16, mxfp4: of 32)
    group_size: int = 128           # input features per scale when granularity == "group"
    symmetric: bool = True          # integer formats: no zero point (grid symmetric around 0)
    scale_bits: int = 16            # storage of each scale (fp16); nvfp4 uses e4m3 + one fp32, mxfp4 e8m0

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
        if self.fmt in BLOCK_FORMATS:
            return 4
        return FLOAT_FORMATS[self.fmt].bits


def bits_per_weight(scheme: QuantScheme, rows: Optional[int] = None, cols: Optional[int] = None) -> float:
    """Storage bits per weight including scales (and zero points) for a rows x cols tensor.

    Per-group overhead = (scale bits + zero-point bits) / elements per scale. Without a
    shape, per-tensor scales are treated as amortised (zero) and per-channel ones need
    `cols`. NVFP4: 4 + 8 / 16 + 32 / (rows x cols) -> 4.5 (R20); MXFP4: 4 + 8 / 32.

    >>> bits_per_weight(QuantScheme("nvfp4")), bits_per_weight(QuantScheme("mxfp4"))
    (4.5, 4.25)
    >>> bits_per_weight(QuantScheme("int4", "group", 128))
    4.125
    """
    b = scheme.bits
    if scheme.fmt == "nvfp4":
        tensor = 32.0 / (rows * cols) if rows and cols else 0.0
        return b + 8.0 / NVFP4_BLOCK + tensor
    if scheme.fmt == "mxfp4":
        return b + 8.0 / MX_BLOCK
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
    if scheme.granularity == "tensor" and scheme.fmt not in BLOCK_FORMATS:
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
      amax_block / 6 / tensor scale; codes are e2m1 (R20);
    - mxfp4: per 32 values an e8m0 scale 2^(floor(log2 amax_block) - 2); codes are e2m1,
      saturating at 6 (OCP MX).

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
    group = BLOCK_FORMATS.get(s.fmt) or (cols if s.granularity == "channel" else s.group_size)
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
    elif s.fmt == "mxfp4":
        scale = mx_block_scale(amax)
        codes = round_to_format(g / scale, "fp4_e2m1")
        deq = codes * scale
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
    """Controls of the quantization figure: the weight tensor, the format, and the deployment."""

    fmt: str = "int4"                # format (the bits slider picks "int8" .. "int2")
    granularity: str = "group"       # "tensor" | "channel" | "group" (nvfp4 / mxfp4: fixed blocks)
    group_size: int = 128
    symmetric: bool = True
    outliers: bool = False           # scale ~1% of input channels by outlier_scale
    outlier_fraction: float = 0.01
    outlier_scale: float = 20.0
    rows: int = 64                   # output channels of the demo weight matrix
    cols: int = 1024                 # input features
    std: float = 0.02                # standard deviation of the weights (a typical LLM scale; an assumption)
    distribution: str = "student-t"  # "student-t" (heavy tails) | "gaussian"
    tail_dof: float = 5.0            # Student-t degrees of freedom (lower: heavier tails; > 2 for a finite std)
    bins: int = 121
    seed: int = 0
    # what the format implies for decode speed
    gpu: str = "H100-SXM"
    model: str = "llama-3.1-8b"
    mode: str = "weights"            # "weights" (weight-only) | "weights+activations"
    kv_dtype: str = "bf16"           # "bf16" | "fp8"
    batch: int = 1
    context_tokens: int = 4096

    LIMITS = {"tail_dof": (1e6, "degrees of freedom")}

    def __post_init__(self) -> None:
        QuantScheme(self.fmt, self.granularity, self.group_size, self.symmetric)
        check_range("outlier_fraction", self.outlier_fraction, 0.0, 1.0)
        check_positive("outlier_scale", self.outlier_scale)
        check_int("rows", self.rows, minimum=1, maximum=8192)
        check_int("cols", self.cols, minimum=1, maximum=65536)
        check_positive("std", self.std)
        check_choice("distribution", self.distribution, DISTRIBUTIONS, "distributions")
        check_number("tail_dof", self.tail_dof)
        if not self.tail_dof > 2:
            raise ValueError(f"tail_dof must be > 2 (a Student-t with finite variance), got {self.tail_dof!r}")
        check_int("bins", self.bins, minimum=2, maximum=10_000)
        check_int("seed", self.seed, minimum=0)
        check_choice("mode", self.mode, MODES, "modes")
        check_choice("kv_dtype", self.kv_dtype, KV_DTYPES, "KV dtypes")
        check_int("batch", self.batch, minimum=1)
        check_int("context_tokens", self.context_tokens, minimum=0)


DISTRIBUTIONS = ("student-t", "gaussian")
MODES = ("weights", "weights+activations")
KV_DTYPES = ("bf16", "fp8")


def demo_weights(p: QuantDemoParams) -> tuple:
    """The seeded demo matrix (rows x cols, standard deviation `std`) and its outlier columns.

    Student-t weights are t(tail_dof) draws times std x sqrt((dof - 2) / dof), which gives
    them exactly the standard deviation `std` with heavier tails than a Gaussian.

    >>> w, cols = demo_weights(QuantDemoParams(rows=256, cols=4096))
    >>> round(float(w.std()) / 0.02, 2), len(cols)
    (1.0, 0)
    """
    key = (p.seed, p.distribution, p.rows, p.cols, p.std, p.tail_dof, p.outliers, p.outlier_fraction,
           p.outlier_scale)
    kept = _KEPT_DEMO.get(key)
    if kept is None:
        _KEPT_DEMO.clear()
        kept = _KEPT_DEMO[key] = _draw_demo_weights(p)
    return kept


# The last demo matrix, by the parameters that shape it: the quantization figure's other
# controls (format, bits, granularity, GPU, batch) quantize the same matrix again.
_KEPT_DEMO: dict = {}


def forget_demo_weights() -> None:
    """Drop the kept demo matrix, its values zeroed first: memory Python frees is not cleared,
    and the site's memory snapshot would carry half a MB of random floats (at the default size)
    to every first visit. A matrix demo_weights returned before reads as zeros after this."""
    for w, _ in _KEPT_DEMO.values():
        if w.flags.owndata:
            w.setflags(write=True)
            w[...] = 0.0
    _KEPT_DEMO.clear()


def _draw_demo_weights(p: QuantDemoParams) -> tuple:
    rng = np.random.default_rng(p.seed)
    if p.distribution == "gaussian":
        w = rng.normal(0.0, p.std, (p.rows, p.cols))
    else:
        w = rng.standard_t(p.tail_dof, (p.rows, p.cols)) * (p.std * math.sqrt((p.tail_dof - 2) / p.tail_dof))
    cols = np.zeros(0, dtype=np.int64)
    if p.outliers:
        w, cols = inject_outliers(w, p.outlier_fraction, p.outlier_scale, p.seed + 1)
    w.setflags(write=False)
    cols.setflags(write=False)
    return w, cols


# --------------------------------------------------------------------------------------------
# What a format implies for decode speed
# --------------------------------------------------------------------------------------------

# The tensor-core arithmetic a weights+activations deployment asks for, then what to fall back to
# when the GPU has no such tensor cores (an fp4 model on Hopper runs its matmuls in fp8).
_WA_MATH = {"int": ("int8", "bf16"), "fp8": ("fp8", "bf16"), "fp4": ("fp4", "fp8", "bf16")}


def _family(fmt: str) -> str:
    return "int" if fmt.startswith("int") else ("fp8" if fmt.startswith("fp8") else "fp4")


def deployment_precision(scheme: Optional[QuantScheme], gpu, mode: str = "weights", kv_dtype: str = "bf16",
                         hidden_size: int = 4096):
    """The sim.batch.Precision a deployment of `scheme` runs as on `gpu`, and the arithmetic it gets.

    The blocks' linear weights are stored at bits_per_weight(scheme) (scales included;
    per-channel scales over `hidden_size` inputs); the embedding table and output head stay
    in bf16; activations travel between kernels in bf16. Weight-only ("weights"): the
    matmuls run in bf16 on dequantized weights. "weights+activations": activations are
    quantized on entry to each matmul and it runs on the format's own tensor cores (int
    formats on int8 ones, fp8 on fp8, fp4 formats on fp4), or on the next wider ones the
    GPU has. `scheme` None is the bf16 baseline. Returns (precision, math dtype, bits per weight).

    >>> from sim.hardware import get
    >>> deployment_precision(QuantScheme("nvfp4"), get("H100-SXM"), "weights+activations")[1:]
    ('fp8', 4.5)
    """
    check_choice("mode", mode, MODES, "modes")
    check_choice("kv_dtype", kv_dtype, KV_DTYPES, "KV dtypes")
    if scheme is None:
        return Precision(kv_dtype=kv_dtype), "bf16", 16.0
    bpw = bits_per_weight(scheme, None, hidden_size)
    math_dtype = "bf16"
    if mode == "weights+activations":
        math_dtype = next(d for d in _WA_MATH[_family(scheme.fmt)] if d in gpu.dense_flops)
    storage = {"int": "int8" if scheme.bits == 8 else "int4", "fp8": "fp8", "fp4": "fp4"}[_family(scheme.fmt)]
    return (Precision(weight_dtype=storage, act_dtype="bf16", kv_dtype=kv_dtype, compute_dtype=math_dtype,
                      lm_head_dtype="bf16", weight_bytes_per_elem=bpw / 8), math_dtype, bpw)


SPEED_SCHEMES = (
    ("bf16", None),
    ("int8, per channel", QuantScheme("int8", "channel")),
    ("fp8 e4m3, per tensor", QuantScheme("fp8_e4m3", "tensor", scale_bits=32)),
    ("int4, group 128", QuantScheme("int4", "group", 128)),
    ("MXFP4", QuantScheme("mxfp4")),
    ("NVFP4", QuantScheme("nvfp4")),
)


@dataclass(frozen=True)
class QuantDemoResult:
    """A weight matrix before and after quantization, and the decode speed the format implies."""

    format_name: str                # e.g. "int4, group 128", "NVFP4 (e2m1, e4m3 scale per 16, fp32 per tensor)"
    hist_edges: np.ndarray          # (bins + 1,) over the original weights' range
    hist_counts: np.ndarray         # (bins,) original weights
    hist_counts_quantized: np.ndarray  # (bins,) dequantized weights
    levels_first_group: np.ndarray  # representable values of the first group (row 0, first scale)
    levels_widest_group: np.ndarray  # ... of the group with the largest scale
    mse: float
    sqnr_db: float
    zero_share: float               # share of non-zero weights that became exactly 0
    bits_per_weight: float          # of the demo matrix, scales included
    outlier_columns: np.ndarray     # indices of the scaled input channels (empty without outliers)
    # decode speed: the chosen format and the reference formats, on the chosen GPU and model
    speed_names: list               # "bf16", the SPEED_SCHEMES, then "this format"
    speed_bits_per_weight: np.ndarray  # (n,) stored bits per linear weight, scales included
    speed_math_dtype: list          # (n,) tensor-core arithmetic of the matmuls
    speed_step_time_s: np.ndarray   # (n,) one decode step at the chosen batch and context
    speed_tokens_per_s_per_user: np.ndarray  # (n,)
    speed_weight_bytes: np.ndarray  # (n,) weight bytes one step reads
    speed_kv_bytes: np.ndarray      # (n,) KV-cache bytes one step reads and writes
    speedup_vs_bf16: float          # the chosen format's step against bf16 (same KV dtype)
    model_name: str
    gpu_name: str
    speed_note: str                 # assumptions, fallbacks and the calibration note


def _levels(scheme: QuantScheme, scale: float, zero: Optional[float], tensor_scale: float) -> np.ndarray:
    if scheme.fmt.startswith("int"):
        b = scheme.bits
        if scheme.symmetric:
            q = 2 ** (b - 1) - 1
            return np.arange(-q, q + 1) * scale
        return (np.arange(0, 2 ** b) - zero) * scale
    base = "fp4_e2m1" if scheme.fmt in BLOCK_FORMATS else scheme.fmt
    pos = representable_values(base)
    grid = np.concatenate([-pos[::-1], pos[1:]])
    return grid * scale * (tensor_scale if scheme.fmt == "nvfp4" else 1.0)


def format_name(scheme: QuantScheme) -> str:
    """A short human name of a scheme: "int4, group 128", "fp8 e4m3, per tensor", "NVFP4".

    >>> format_name(QuantScheme("int3", "channel", symmetric=False))
    'int3 asymmetric, per channel'
    """
    if scheme.fmt in BLOCK_FORMATS:
        return scheme.fmt.upper()
    base = scheme.fmt.replace("_", " ")
    if scheme.fmt.startswith("int") and not scheme.symmetric:
        base += " asymmetric"
    where = {"tensor": "per tensor", "channel": "per channel", "group": f"group {scheme.group_size}"}
    return f"{base}, {where[scheme.granularity]}"


@lru_cache(maxsize=256)
def _speed_row(scheme: Optional[QuantScheme], model: str, gpu: str, mode: str, kv_dtype: str, batch: int,
               context_tokens: int) -> tuple:
    """(bits per weight, math dtype, decode step) of one deployment. Kept: the comparison
    rows are the same whatever format the figure quantizes, and they are most of its time."""
    m, g = resolve_model(model), resolve_gpu(gpu)
    prec, math_dtype, bpw = deployment_precision(scheme, g, mode, kv_dtype, m.hidden_size)
    return bpw, math_dtype, decode_step(m, g, batch, context_tokens, prec)


def quantize_demo(params: QuantDemoParams = QuantDemoParams()) -> QuantDemoResult:
    """Quantize a seeded heavy-tailed weight matrix (optionally with outlier channels), report the
    damage, and the decode speed the format implies on the chosen GPU and model.

    >>> a = quantize_demo(QuantDemoParams(fmt="int4", granularity="tensor", outliers=True))
    >>> b = quantize_demo(QuantDemoParams(fmt="int4", granularity="group", outliers=True))
    >>> a.zero_share > b.zero_share and a.sqnr_db < b.sqnr_db
    True
    """
    p = params
    w, cols = demo_weights(p)
    scheme = QuantScheme(p.fmt, p.granularity, p.group_size, p.symmetric)
    q = quantize(w, scheme)
    err = quant_error(w, q.values)
    lo, hi = float(w.min()), float(w.max())
    counts, edges = np.histogram(w, bins=p.bins, range=(lo, hi))       # uniform bins: the fast path
    counts_q, _ = np.histogram(np.clip(q.values, lo, hi), bins=p.bins, range=(lo, hi))
    zp = q.zero_points
    widest = np.unravel_index(int(np.argmax(q.scales)), q.scales.shape)

    m, g = resolve_model(p.model), resolve_gpu(p.gpu)
    rows = [*SPEED_SCHEMES, ("this format", scheme)]
    steps = [_speed_row(s, p.model, p.gpu, p.mode, p.kv_dtype, p.batch, p.context_tokens) for _, s in rows]
    notes = []
    chosen_math = steps[-1][1]
    if p.mode == "weights+activations" and chosen_math != _WA_MATH[_family(p.fmt)][0]:
        notes.append(f"{g.display_name} has no {_WA_MATH[_family(p.fmt)][0]} tensor cores: the matmuls run in "
                     f"{chosen_math}.")
    t = np.array([f.time_s for _, _, f in steps])
    notes.append("Linear weights at the format's bits (scales included), embedding and output head in bf16, "
                 "activations between kernels in bf16" +
                 ("; weights+activations quantizes them on entry to each matmul (an assumption)."
                  if p.mode == "weights+activations" else "; weight-only: the matmuls run in bf16."))
    notes.append(steps[-1][2].calibration_note)
    return QuantDemoResult(
        format_name=format_name(scheme),
        hist_edges=edges, hist_counts=counts, hist_counts_quantized=counts_q,
        levels_first_group=_levels(scheme, float(q.scales[0, 0]), None if zp is None else float(zp[0, 0]),
                                   q.tensor_scale),
        levels_widest_group=_levels(scheme, float(q.scales[widest]), None if zp is None else float(zp[widest]),
                                    q.tensor_scale),
        mse=err.mse, sqnr_db=err.sqnr_db, zero_share=err.zero_share, bits_per_weight=q.bits_per_weight,
        outlier_columns=cols,
        speed_names=[n for n, _ in rows], speed_bits_per_weight=np.array([b for b, _, _ in steps]),
        speed_math_dtype=[d for _, d, _ in steps], speed_step_time_s=t,
        speed_tokens_per_s_per_user=1.0 / t,
        speed_weight_bytes=np.array([f.weight_bytes for _, _, f in steps]),
        speed_kv_bytes=np.array([f.kv_bytes for _, _, f in steps]),
        speedup_vs_bf16=float(t[0] / t[-1]), model_name=m.display_name, gpu_name=g.display_name,
        speed_note=" ".join(notes))


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
    ("MXFP4", QuantScheme("mxfp4")),
    ("NVFP4", QuantScheme("nvfp4")),
)


def formats_table(n_params: float = 7e9, demo: QuantDemoParams = QuantDemoParams()) -> list:
    """Bits per weight, model size and demo SQNR of int8, int4 g128, fp8 e4m3, MXFP4 and NVFP4.

    >>> rows = formats_table()
    >>> [round(r.bits_per_weight, 3) for r in rows]
    [8.016, 4.125, 8.0, 4.25, 4.5]
    """
    check_non_negative("n_params", n_params)
    w, _ = demo_weights(demo)
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
