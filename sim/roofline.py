"""The roofline: ridge points, the decode ceilings, and the roofline charts of figure ch03-roofline.

A kernel that does I FLOPs per byte it moves can run no faster than
min(peak FLOP/s, I x bandwidth). The two limits meet at the *ridge point*, peak FLOP/s
over peak bandwidth: an op below it is memory-bound, above it compute-bound (R26, R31).
The chart places the ops of `sim.ops` on that roof, peak and effective (calibrated);
`measured_roofline` draws a recorded device's own fitted roof with its measured kernels.

>>> round(ridge_point("H100-SXM"))
295
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from sim.batch import MATH_DTYPES, Batch, Precision
from sim.calibration import own_recorded_device, recorded_device, recorded_devices
from sim.checks import check_choice, check_int, check_positive, checked_params
from sim.forward import decode_weight_bytes, stored_weight_bytes
from sim.hardware import CATALOGUE
from sim.hardware import get as get_gpu
from sim.hardware import resolve as resolve_gpu
from sim.kernel_model import Calibration, spec_sheet
from sim.models import resolve as resolve_model
from sim.ops import GpuLike, ModelLike, calibration_for, fixed_specs, layer_ops


# --------------------------------------------------------------------------------------------
# Ridge points and ceilings
# --------------------------------------------------------------------------------------------

def ridge_point(gpu: GpuLike, dtype: str = "bf16") -> float:
    """Peak FLOP/s over peak bandwidth: the intensity (FLOP/byte) where a kernel stops being memory-bound.

    H100 SXM, bf16: 989e12 / 3.35e12 = 295 FLOP/B (R4, R31).

    >>> round(ridge_point("H100-SXM", "fp8"))
    591
    """
    g = resolve_gpu(gpu)
    return g.peak_flops(dtype) / g.hbm_bandwidth_bytes_per_s


def effective_ridge_point(gpu: GpuLike, dtype: str = "bf16", calibration: Optional[Calibration] = None) -> float:
    """Ridge point of the calibrated (effective) roofline: effective FLOP/s over effective bandwidth.

    With the stated default (60% of FLOP/s, 80% of bandwidth) it is 0.75 x the peak ridge.

    >>> round(effective_ridge_point("H100-SXM", calibration=spec_sheet(resolve_gpu("H100-SXM"))))
    221
    """
    g = resolve_gpu(gpu)
    cal = calibration_for(g, calibration)
    return cal.flops(dtype) / cal.bandwidth_bytes_per_s



@dataclass(frozen=True)
class DecodeCeiling:
    """Peak-hardware bounds on single-user decode: the guide's opening paradox."""

    model: str
    gpu: str
    weight_bytes: float             # weights one token reads (decode_weight_bytes: all but the embedding table)
    stored_weight_bytes: float      # the whole model, embedding table included
    flops_per_token: float          # 2 FLOPs per weight multiplied (R3): the GEMMs of one token
    step_time_s: float              # weight_bytes / peak bandwidth
    tokens_per_s: float             # 1 / step_time_s: one user's ceiling
    compute_time_s: float           # flops_per_token / peak FLOP/s
    compute_tokens_per_s: float     # peak FLOP/s / flops_per_token: what the math alone would allow
    flops_per_byte: float           # ~1 in bf16 (R3)


def decode_ceiling(model: ModelLike, gpu: GpuLike, dtype: str = "bf16") -> DecodeCeiling:
    """Single-user decode at peak bandwidth vs at peak FLOP/s, reading each weight the step uses once.

    Llama 3.1 8B on H100 SXM in bf16: 15.01 GB / 3.35 TB/s = 4.5 ms per token (~220
    tokens/s), while its 15 GFLOP take 15 us at 989 TFLOP/s (~66,000 tokens/s) (R3, R4).
    The bytes and FLOPs are those of the simulated forward pass without a KV cache
    (`decode_weight_bytes`), so every chapter uses the same figure.

    >>> c = decode_ceiling("llama-3.1-8b", "H100-SXM")
    >>> round(c.tokens_per_s), round(c.compute_tokens_per_s, -3)
    (223, 66000.0)
    """
    m, g = resolve_model(model), resolve_gpu(gpu)
    p = Precision(weight_dtype=dtype, act_dtype=dtype)
    wbytes = decode_weight_bytes(m, p)
    flops = float(sum(s.count * s.flops for s in fixed_specs(m, p, 1, 1) if s.kind == "gemm"))
    peak = g.peak_flops(p.math_dtype)
    step = wbytes / g.hbm_bandwidth_bytes_per_s
    return DecodeCeiling(model=m.display_name, gpu=g.display_name, weight_bytes=wbytes,
                         stored_weight_bytes=stored_weight_bytes(m, p), flops_per_token=flops,
                         step_time_s=step, tokens_per_s=1.0 / step, compute_time_s=flops / peak,
                         compute_tokens_per_s=peak / flops, flops_per_byte=flops / wbytes)



# --------------------------------------------------------------------------------------------
# Figure ch03-roofline
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class RooflineChartParams:
    """Controls of the roofline chart."""

    gpu: str = "H100-SXM"
    dtype: str = "bf16"                 # tensor-core dtype of the roof (and of the ops' weights/activations)
    model: str = "llama-3.1-8b"
    batch: int = 64                     # decode batch B for the "decode GEMM, batch B" points
    prompt_tokens: int = 2048           # prefill length for the prefill points
    context_tokens: int = 4096          # KV length for the decode attention point
    intensity_min: float = 0.1          # left end of the x axis, FLOP/byte
    intensity_max: float = 10_000.0     # right end of the x axis, FLOP/byte
    points: int = 200                   # samples along the roof

    def __post_init__(self) -> None:
        check_choice("dtype", self.dtype, MATH_DTYPES)
        check_int("batch", self.batch, minimum=1)
        check_int("prompt_tokens", self.prompt_tokens, minimum=1)
        check_int("context_tokens", self.context_tokens, minimum=0)
        check_positive("intensity_min", self.intensity_min)
        if not self.intensity_max > self.intensity_min:
            raise ValueError("intensity_max must exceed intensity_min")
        check_int("points", self.points, minimum=2)


@dataclass(frozen=True)
class RooflineChartResult:
    """A roofline (peak and effective) with the LLM's operations placed on it."""

    gpu: str
    dtype: str
    intensity_flop_per_byte: np.ndarray       # (points,) x axis
    peak_flops_per_s: np.ndarray              # (points,) min(peak FLOP/s, I x peak bandwidth)
    effective_flops_per_s: np.ndarray         # (points,) the same with the calibration's numbers
    ridge_flop_per_byte: float                # peak ridge
    effective_ridge_flop_per_byte: float
    peak_compute_flops_per_s: float
    peak_bandwidth_bytes_per_s: float
    op_labels: list                           # e.g. "gate_up_proj, prefill 2048"
    op_groups: list                           # "prefill GEMM" | "decode GEMM, batch 1" | "decode GEMM, batch B"
                                              # | "attention (decode)" | "elementwise"
    op_intensity_flop_per_byte: np.ndarray
    op_attainable_flops_per_s: np.ndarray     # effective roof at the op's intensity
    op_achieved_flops_per_s: np.ndarray       # FLOPs / modelled time (launch overhead included)
    op_bound: list                            # "memory" | "compute"
    calibration_source: str
    calibration_note: str
    model: str                                # display name
    measured: Optional[MeasuredRooflineResult]  # the GPU's own measured kernels of this dtype, if any
    no_measured_reason: str                   # why `measured` is None ("" when it is not)
    measured_on: list                         # names of every device with measured kernels


def roofline_chart(params: RooflineChartParams = RooflineChartParams(),
                   calibration: Optional[Calibration] = None) -> RooflineChartResult:
    """Attainable FLOP/s vs arithmetic intensity, with prefill, decode, attention and elementwise ops placed.

    Roof: min(peak FLOP/s, intensity x bandwidth), peak and effective. Op points: each
    GEMM of a prefill of `prompt_tokens`; each GEMM of a decode step at batch 1 and at
    batch B (B drags them right: intensity ~ B FLOP/byte in bf16); decode attention over a
    `context_tokens` cache (intensity 2 x query heads / (KV heads x KV bytes), the same at
    any batch); and the elementwise kernels (intensity below 2).

    >>> r = roofline_chart()
    >>> round(r.ridge_flop_per_byte)
    295
    """
    p = params
    m, g = resolve_model(p.model), resolve_gpu(p.gpu)
    cal = calibration_for(g, calibration)
    prec = Precision(weight_dtype=p.dtype, act_dtype=p.dtype, kv_dtype="bf16", compute_dtype=p.dtype)
    grid = np.geomspace(p.intensity_min, p.intensity_max, p.points)
    peak_f, bw = g.peak_flops(p.dtype), g.hbm_bandwidth_bytes_per_s
    eff_f, eff_bw = cal.flops(p.dtype), cal.bandwidth_bytes_per_s
    labels, groups, inten, achieved, bound = [], [], [], [], []

    def place(ops: list, group: str, suffix: str, kinds: tuple) -> None:
        for o in ops:
            if o.kind in kinds:
                labels.append(f"{o.name}, {suffix}")
                groups.append(group)
                inten.append(o.intensity_flop_per_byte)
                achieved.append(o.flops / o.time_s if o.time_s > 0 else 0.0)
                bound.append(o.bound)

    place(layer_ops(m, g, Batch.prefill(p.prompt_tokens), prec, cal), "prefill GEMM",
          f"prefill {p.prompt_tokens}", ("gemm",))
    place(layer_ops(m, g, Batch.decode(1, p.context_tokens), prec, cal), "decode GEMM, batch 1",
          "decode, batch 1", ("gemm",))
    decode_b = layer_ops(m, g, Batch.decode(p.batch, p.context_tokens), prec, cal)
    place(decode_b, "decode GEMM, batch B", f"decode, batch {p.batch}", ("gemm",))
    place(decode_b, "attention (decode)", f"{p.context_tokens}-token cache, batch {p.batch}", ("attention",))
    place(decode_b, "elementwise", f"batch {p.batch}", ("elementwise",))
    inten_a = np.array(inten)
    measured, why = _own_measured(g.name, p.dtype)
    return RooflineChartResult(
        gpu=g.display_name, dtype=p.dtype, intensity_flop_per_byte=grid,
        peak_flops_per_s=np.minimum(peak_f, grid * bw), effective_flops_per_s=np.minimum(eff_f, grid * eff_bw),
        ridge_flop_per_byte=peak_f / bw, effective_ridge_flop_per_byte=eff_f / eff_bw,
        peak_compute_flops_per_s=peak_f, peak_bandwidth_bytes_per_s=bw,
        op_labels=labels, op_groups=groups, op_intensity_flop_per_byte=inten_a,
        op_attainable_flops_per_s=np.minimum(eff_f, inten_a * eff_bw),
        op_achieved_flops_per_s=np.array(achieved), op_bound=bound,
        calibration_source=cal.source, calibration_note=cal.note, model=m.display_name,
        measured=measured, no_measured_reason=why,
        measured_on=[d.name if key is None else get_gpu(key).display_name for key, d in measured_devices()])


def measured_devices() -> list:
    """(catalogue key or None, RecordedDevice) for every device with measured kernels: first the
    catalogue GPUs, each with the recording that calibrates it, then every other recording (a CPU,
    a GPU outside the catalogue), by slug.

    >>> [key for key, _ in measured_devices()][:2]
    ['A100-80GB', 'H100-SXM']
    """
    recs = recorded_devices()
    keys = dict.fromkeys(d.catalogue_key for d in recs if d.device_type == "cuda" and d.catalogue_key in CATALOGUE)
    own = [(k, own_recorded_device(get_gpu(k))) for k in keys]
    chosen = {id(d) for _, d in own}
    return own + [(None, d) for d in recs if id(d) not in chosen]


def _own_measured(gpu: str, dtype: str) -> tuple:
    """(the measured roofline of `gpu`'s own timings in `dtype`, or None; why there is none)."""
    rec = own_recorded_device(get_gpu(gpu))
    have = rec.calibration.flops_per_s if rec is not None else {}
    # fp16 and bf16 run at the same tensor-core rate on the catalogue GPUs: fp16 timings stand for bf16
    shown = dtype if dtype in have else ("fp16" if dtype == "bf16" and "fp16" in have else None)
    if shown is None:
        return None, (f"its timings have no {dtype} kernels" if rec is not None else "no kernel timings of this GPU")
    return measured_roofline(MeasuredRooflineParams(device=rec.slug, dtype=shown)), ""



# --------------------------------------------------------------------------------------------
# Figure ch03-roofline: measured kernels of a recorded device
# --------------------------------------------------------------------------------------------

MEASURED_FLOP_KINDS = ("big-gemm", "gemm", "attention-decode", "attention-prefill")  # kernels with FLOPs


@checked_params
@dataclass(frozen=True)
class MeasuredRooflineParams:
    """A recorded device (a slug of `sim.calibration.recorded_devices()`) and the dtype to show."""

    device: str                         # e.g. "cpu-amd-epyc-7b13-2-threads"
    dtype: str = "bf16"                 # kernels of this dtype, and the fitted FLOP/s of this dtype
    intensity_min: float = 0.1          # left end of the x axis, FLOP/byte
    intensity_max: float = 10_000.0     # right end of the x axis, FLOP/byte
    points: int = 200                   # samples along the roof

    def __post_init__(self) -> None:
        check_positive("intensity_min", self.intensity_min)
        if not self.intensity_max > self.intensity_min:
            raise ValueError("intensity_max must exceed intensity_min")
        check_int("points", self.points, minimum=2)


@dataclass(frozen=True)
class MeasuredRooflineResult:
    """The roof fitted to one recorded device, and its measured kernels placed on it."""

    device: str                         # as recorded, e.g. "AMD EPYC 7B13 (CPU, 2 threads)"
    device_type: str                    # "cuda" | "cpu"
    catalogue_key: Optional[str]        # the catalogue GPU it is (never for a CPU)
    dtype: str
    measured_dtypes: list               # dtypes the trace has a fitted FLOP/s for
    intensity_flop_per_byte: np.ndarray     # (points,) x axis
    fitted_flops_per_s: np.ndarray          # (points,) min(fitted FLOP/s, I x fitted bandwidth)
    ridge_flop_per_byte: float              # fitted FLOP/s / fitted bandwidth
    compute_flops_per_s: float              # fitted FLOP/s of `dtype` (largest square GEMMs)
    bandwidth_bytes_per_s: float            # fitted streaming bandwidth (copy sweep)
    point_labels: list                      # (n,) kernels of `dtype` that do FLOPs
    point_kinds: list                       # (n,) "gemm", "big-gemm", "attention-decode", ...
    point_splits: list                      # (n,) "train" (in the fit) | "heldout"
    point_intensity_flop_per_byte: np.ndarray   # (n,) FLOPs / minimal bytes
    point_measured_flops_per_s: np.ndarray      # (n,) FLOPs / measured median time
    point_model_flops_per_s: np.ndarray         # (n,) FLOPs / the calibrated model's time
    point_roofline_flops_per_s: np.ndarray      # (n,) FLOPs / the plain roofline's time
    memory_only_points: int             # copies and elementwise kernels: no FLOPs, so not on this chart
    caption: str                        # device, date, software, held-out errors


def measured_roofline(params: MeasuredRooflineParams, directory=None) -> MeasuredRooflineResult:
    """The roofline of a recorded device from its own fitted calibration, with its measured kernels.

    Roof: min(F, I x BW) with F the fitted FLOP/s of `dtype` and BW the fitted bandwidth,
    both measured on that device (no spec sheet is involved, so this works for a CPU).
    Points: every measured kernel of `dtype` that does FLOPs (GEMMs and attention), at
    intensity FLOPs / minimal bytes and FLOP/s = FLOPs / time, measured and as the calibrated
    model and the plain roofline predict it. ValueError lists the devices, or the dtypes the
    device was measured in.
    """
    p = params
    rec = recorded_device(p.device, directory)
    cal = rec.calibration
    check_choice("dtype", p.dtype, cal.flops_per_s)
    f, bw = cal.flops(p.dtype), cal.bandwidth_bytes_per_s
    grid = np.geomspace(p.intensity_min, p.intensity_max, p.points)
    pts = [q for q in rec.points if q.kind in MEASURED_FLOP_KINDS and q.dtype == p.dtype and q.flops > 0]
    flops = np.array([q.flops for q in pts], dtype=float)
    return MeasuredRooflineResult(
        device=rec.name, device_type=rec.device_type, catalogue_key=rec.catalogue_key, dtype=p.dtype,
        measured_dtypes=sorted(cal.flops_per_s), intensity_flop_per_byte=grid,
        fitted_flops_per_s=np.minimum(f, grid * bw), ridge_flop_per_byte=f / bw,
        compute_flops_per_s=f, bandwidth_bytes_per_s=bw,
        point_labels=[q.label for q in pts], point_kinds=[q.kind for q in pts],
        point_splits=[q.split for q in pts],
        point_intensity_flop_per_byte=np.array([q.intensity for q in pts], dtype=float),
        point_measured_flops_per_s=flops / np.array([q.time_s for q in pts], dtype=float),
        point_model_flops_per_s=flops / np.array([q.model_s for q in pts], dtype=float),
        point_roofline_flops_per_s=flops / np.array([q.roofline_s for q in pts], dtype=float),
        memory_only_points=sum(q.kind in ("copy", "elementwise") for q in rec.points),
        caption=rec.provenance.caption())
