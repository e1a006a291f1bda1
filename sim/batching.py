"""Batching decode steps: the batch knee and the batch sweep of figure ch04-batch-knee.

A decode step reads every weight once whatever the batch, so its time stays nearly flat
while the GEMMs are memory-bound and rises once the batch passes the *knee*, where the
GEMMs turn compute-bound (close to the effective ridge point in bf16). The figure also
shows measured GEMM times of one layer from the recorded traces.

>>> batch_grid(16, 4).tolist()
[1, 2, 3, 4, 6, 8, 16]
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

from sim.batch import Precision
from sim.calibration import MeasuredPoint, RecordedDevice, own_recorded_device, recorded_device, recorded_devices
from sim.checks import check_int, checked_params
from sim.forward import stored_weight_bytes, summarise
from sim.hardware import resolve as resolve_gpu
from sim.kernel_model import Calibration, spec_sheet
from sim.models import ModelConfig, measured_model_name
from sim.models import resolve as resolve_model
from sim.ops import GpuLike, ModelLike, calibration_for, expected_experts_touched
from sim.roofline import effective_ridge_point, ridge_point


def _gemm_balance(m: ModelConfig, p: Precision, cal: Calibration, tokens: float) -> float:
    """Compute time minus memory time of all GEMMs of a decode step with `tokens` rows (continuous in tokens)."""
    diff = 0.0
    a = p.act_bytes
    bw = cal.bandwidth_bytes_per_s
    scale = 0.5 if p.sparse_2_4 else 1.0
    shapes = m.linear_shapes()
    F = cal.flops(p.math_dtype)
    for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
        k, n = shapes[name]
        if m.is_moe and name in ("gate_up_proj", "down_proj"):
            routed = tokens * m.experts_per_token
            touched = expected_experts_touched(m.num_experts, m.experts_per_token, tokens)
            fl = 2.0 * routed * n * k * scale
            by = touched * p.weight_bytes * k * n + a * routed * (k + n)
        else:
            fl = 2.0 * tokens * n * k * scale
            by = p.weight_bytes * k * n + a * tokens * (k + n)
        diff += m.num_layers * (fl / F - by / bw)
    V, h = m.vocab_size, m.hidden_size
    Fh = cal.flops(p.head_math_dtype)
    diff += 2.0 * tokens * V * h / Fh - (p.head_bytes * V * h + a * tokens * (V + h)) / bw
    return diff


def batch_knee(model: ModelLike, gpu: GpuLike, precision: Optional[Precision] = None,
               calibration: Optional[Calibration] = None) -> float:
    """Decode batch size at which the step's GEMMs turn from memory-bound to compute-bound.

    Below the knee a decode step costs about the same at any batch (every step reads all
    weights once); above it, FLOPs grow faster than the time to read the weights. For a
    dense model with P weights per GEMM of total in+out width S, the knee solves
    2 B P / F = (w P + a B S) / BW, i.e. B = (w P / BW) / (2 P / F - a S / BW): close to
    the effective ridge point times w / 2 (bf16: B ~ ridge). Returns a real number; inf
    if the GEMMs never become compute-bound.

    >>> 200 < batch_knee("llama-3.1-8b", "H100-SXM", calibration=spec_sheet(resolve_gpu("H100-SXM"))) < 260
    True
    """
    m, g = resolve_model(model), resolve_gpu(gpu)
    p = precision or Precision()
    cal = calibration_for(g, calibration)
    lo, hi = 1e-3, 1.0
    if _gemm_balance(m, p, cal, lo) >= 0:
        return lo
    while _gemm_balance(m, p, cal, hi) < 0:
        hi *= 2.0
        if hi > 1e9:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _gemm_balance(m, p, cal, mid) < 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9 * hi:
            break
    return 0.5 * (lo + hi)



# --------------------------------------------------------------------------------------------
# Figure ch04-batch-knee
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class BatchSweepParams:
    """Controls of the batch-knee figure."""

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    batch: int = 1                      # the batch the reader picked (the figure opens at one user)
    context_tokens: int = 256           # tokens each user already holds in the KV cache
    max_batch: int = 1024               # right end of the batch grid
    grid_points: int = 48               # about this many log-spaced batch sizes (1, 2, 4, ... included)
    precision: Precision = Precision()
    cuda_graphs: bool = True            # decode steps replayed as graphs (R2)

    def __post_init__(self) -> None:
        check_int("max_batch", self.max_batch, minimum=1)
        check_int("batch", self.batch, minimum=1, maximum=self.max_batch)
        check_int("context_tokens", self.context_tokens, minimum=0)
        check_int("grid_points", self.grid_points, minimum=2, maximum=4096)


@dataclass(frozen=True)
class BatchSweepResult:
    """Decode step time and throughput over a batch grid, plus the values at the chosen batch."""

    batch_grid: np.ndarray              # (n,) batch sizes, ascending
    step_time_s: np.ndarray             # (n,)
    tokens_per_s_total: np.ndarray      # (n,) batch / step time
    tokens_per_s_per_user: np.ndarray   # (n,) 1 / step time
    gemm_time_s: np.ndarray             # (n,) busy time of the GEMMs
    attention_time_s: np.ndarray        # (n,) busy time of attention
    other_time_s: np.ndarray            # (n,) elementwise ops and launch overhead
    weight_bytes: np.ndarray            # (n,) weights read per step
    kv_bytes: np.ndarray                # (n,) KV cache read and written per step
    gemm_compute_bound: np.ndarray      # (n,) bool: GEMM FLOPs outlast GEMM bytes
    fits_in_memory: np.ndarray          # (n,) bool: weights + KV cache fit in device memory
    knee_batch: float                   # batch_knee(): GEMMs turn compute-bound
    ridge_flop_per_byte: float          # peak ridge of the GEMM dtype
    effective_ridge_flop_per_byte: float
    batch: int                          # the chosen batch
    step_time_s_at_batch: float
    tokens_per_s_total_at_batch: float
    tokens_per_s_per_user_at_batch: float
    bound_at_batch: str                 # "memory" | "compute" (of the GEMMs)
    calibration_source: str
    calibration_note: str
    model: str                          # display name
    measured: Optional[LayerGemmMeasurements]  # one layer's GEMMs as timed (None: no timings shipped)
    measured_note: str                  # which device and model `measured` shows, and its provenance


def batch_grid(max_batch: int, points: int) -> np.ndarray:
    """Log-spaced integer batch sizes from 1 to `max_batch`, with every power of two included.

    >>> batch_grid(16, 4).tolist()
    [1, 2, 3, 4, 6, 8, 16]
    """
    g = np.geomspace(1, max_batch, points).round().astype(np.int64)
    pow2 = 2 ** np.arange(int(math.log2(max_batch)) + 1)
    return np.unique(np.concatenate([g, pow2, [max_batch]]))


def sweep_batch(params: BatchSweepParams = BatchSweepParams(),
                calibration: Optional[Calibration] = None) -> BatchSweepResult:
    """Decode step time, total tokens/s and per-user tokens/s for batch 1..max_batch.

    Step time stays nearly flat while the GEMMs are memory-bound (each step reads all
    weights whatever the batch), then rises once the batch passes the knee near the
    ridge point; total tokens/s = B / step time climbs and flattens, per-user tokens/s
    = 1 / step time falls. KV reads grow with B x context and bend the curve earlier for
    long contexts.

    >>> r = sweep_batch()
    >>> bool(r.step_time_s[list(r.batch_grid).index(8)] < 1.1 * r.step_time_s[0])   # flat well below the knee
    True
    """
    p = params
    m, g = resolve_model(p.model), resolve_gpu(p.gpu)
    cal = calibration_for(g, calibration)
    grid = batch_grid(p.max_batch, p.grid_points)
    if p.batch not in grid:
        grid = np.unique(np.append(grid, p.batch))
    C = p.context_tokens
    sm = summarise(m, p.precision, cal, grid, grid, grid * (C + 1), grid * (C + 1), p.cuda_graphs)
    step, gemm, attn = sm.time_s, sm.busy_s["gemm"], sm.busy_s["attention"]
    other = sm.busy_s["elementwise"] + sm.launch_s
    wb, kvb = sm.weight_bytes, sm.kv_bytes
    comp = sm.gemm_compute_s > sm.gemm_memory_s
    wtotal = stored_weight_bytes(m, p.precision)
    kv_per_token = 2.0 * m.num_layers * m.num_kv_heads * m.head_dim * p.precision.kv_bytes
    fits = wtotal + grid * (p.context_tokens + 1) * kv_per_token <= g.memory_bytes
    j = int(np.searchsorted(grid, p.batch))
    measured, measured_note = measured_layer_gemms(m.name, p.gpu)
    return BatchSweepResult(
        batch_grid=grid, step_time_s=step, tokens_per_s_total=grid / step, tokens_per_s_per_user=1.0 / step,
        gemm_time_s=gemm, attention_time_s=attn, other_time_s=other, weight_bytes=wb, kv_bytes=kvb,
        gemm_compute_bound=comp, fits_in_memory=fits, knee_batch=batch_knee(m, g, p.precision, cal),
        ridge_flop_per_byte=ridge_point(g, p.precision.math_dtype),
        effective_ridge_flop_per_byte=effective_ridge_point(g, p.precision.math_dtype, cal),
        batch=p.batch, step_time_s_at_batch=float(step[j]), tokens_per_s_total_at_batch=float(grid[j] / step[j]),
        tokens_per_s_per_user_at_batch=float(1.0 / step[j]), bound_at_batch="compute" if comp[j] else "memory",
        calibration_source=cal.source, calibration_note=cal.note, model=m.display_name,
        measured=measured, measured_note=measured_note)


# --------------------------------------------------------------------------------------------
# Measured GEMMs of one transformer layer (the figure's lower panel)
# --------------------------------------------------------------------------------------------

LAYER_GEMMS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


@dataclass(frozen=True)
class LayerGemmMeasurements:
    """One layer's four linear layers, timed together, at each recorded token count."""

    device: str                  # as recorded, e.g. "AMD EPYC (CPU, 1 thread)"
    device_type: str             # "cuda" | "cpu"
    catalogue_key: str | None    # the catalogue GPU it is (never for a CPU)
    model: str
    dtype: str
    tokens: np.ndarray           # (n,) token counts at which all four layers were measured
    measured_s: np.ndarray       # (n,) sum of the four measured medians
    measured_p25_s: np.ndarray   # (n,) sum of the four lower quartiles (a spread, not a quartile)
    measured_p75_s: np.ndarray   # (n,) sum of the four upper quartiles
    model_s: np.ndarray          # (n,) the calibrated model's prediction of the same sum
    roofline_s: np.ndarray       # (n,) the plain roofline's prediction (same peaks, no shape terms)
    heldout: np.ndarray          # (n,) bool: at least one of the four was held out of the fit
    caption: str                 # provenance: device, date, software, held-out fit error


def layer_gemm_measurements(device: Union[RecordedDevice, str], model: str,
                            dtype: str | None = None) -> LayerGemmMeasurements:
    """Measured time of one layer's qkv, o, gate/up and down GEMMs against token count.

    Sums, per token count m, the four GEMMs of `model` recorded on `device` (a
    RecordedDevice or its slug), with the calibrated model's and the plain roofline's
    predictions of the same sum. Token counts missing any of the four are left out.
    Raises ValueError when the trace has no GEMMs of that model and dtype.
    """
    rec = device if isinstance(device, RecordedDevice) else recorded_device(device)
    if dtype is None:
        have = sorted({p.dtype for p in rec.points_of("gemm") if p.shape.get("model") == model})
        dtype = "bf16" if "bf16" in have or not have else have[0]
    by_m: dict[int, dict[str, MeasuredPoint]] = {}
    for p in rec.points_of("gemm"):
        if p.shape.get("model") == model and p.dtype == dtype and p.shape.get("layer") in LAYER_GEMMS:
            by_m.setdefault(int(p.shape["m"]), {})[p.shape["layer"]] = p
    rows = [(m, pts) for m, pts in sorted(by_m.items()) if len(pts) == len(LAYER_GEMMS)]
    if not rows:
        have = sorted({(p.shape.get("model"), p.dtype) for p in rec.points_of("gemm")})
        raise ValueError(f"{rec.name}: no recorded GEMMs of {model} in {dtype}; recorded: {have}")

    def total(attr: str) -> np.ndarray:
        return np.array([sum(getattr(p, attr) for p in pts.values()) for _, pts in rows])

    return LayerGemmMeasurements(
        device=rec.name, device_type=rec.device_type, catalogue_key=rec.catalogue_key,
        model=model, dtype=dtype, tokens=np.array([m for m, _ in rows]),
        measured_s=total("time_s"), measured_p25_s=total("p25_s"), measured_p75_s=total("p75_s"),
        model_s=total("model_s"), roofline_s=total("roofline_s"),
        heldout=np.array([any(p.split != "train" for p in pts.values()) for _, pts in rows]),
        caption=rec.provenance.caption())


def measured_layer_gemms(model: str, gpu: GpuLike) -> tuple:
    """(LayerGemmMeasurements or None, a note saying what they are) for the figure's lower panel.

    The GEMMs come from `gpu`'s own timings when it has some, else from another recorded
    GPU, else from any recorded device, and are of `model` when it was timed there, else of
    Llama 3.1 8B or the first model that was; the note says which, so that another device's
    or model's numbers are never read as the chosen ones.

    >>> m, note = measured_layer_gemms("llama-3.1-8b", "B200")
    >>> note.startswith("No kernel timings of the B200 are shipped")
    True
    """
    g = resolve_gpu(gpu)
    devices = recorded_devices()
    own = own_recorded_device(g)
    others = [d for d in devices if d.device_type == "cuda"] or list(devices)
    device = own or (others[0] if others else None)
    timed = sorted({q.shape.get("model") for q in device.points_of("gemm")}) if device else []
    if not timed:
        return None, "No kernel timings of one layer's GEMMs are shipped."
    name = model if model in timed else ("llama-3.1-8b" if "llama-3.1-8b" in timed else timed[0])
    m = layer_gemm_measurements(device, name)
    where = ("" if own else f"No kernel timings of the {g.name} are shipped, so these points come from another "
             f"device; they are not {g.name} numbers. ")
    shown = measured_model_name(name)
    which = "" if name == model else f"{resolve_model(model).display_name} was not timed there; showing {shown}. "
    return m, f"{where}{which}Model: {shown}, {m.dtype}. {m.caption}."
