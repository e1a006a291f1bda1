"""Effective hardware numbers the simulations use: from a recorded trace, or stated defaults.

A *calibration* turns a device's spec sheet into the numbers its kernels actually reach:
effective bandwidth, effective FLOP/s per dtype, a fixed cost per kernel, and, when it
was fitted from a trace, a few shape terms. Every time in `sim/` goes through
`Calibration.op_time_s` or the shape-aware helpers next to it, so swapping the
calibration moves every figure at once.

Where the numbers come from, in order of preference (see `for_gpu`):

1. "trace":        fitted from kernels timed on this very GPU model: recorded by this
                   project, or imported from published profiles (the provenance says which);
                   files in sim/calibrations/, written by `python -m gpu_traces.calibrate`;
2. "carried-over": fitted on another GPU of the same architecture; its efficiencies
                   (achieved / that GPU's spec-sheet peak) are applied to this GPU's peaks;
3. "spec-sheet":   the guide's stated assumption, 80% of peak bandwidth and 60% of peak
                   FLOP/s, plus DEFAULT_LAUNCH_OVERHEAD_S per kernel.

The model, in a few sentences (the one formula both the fit and the figures use):

* plain roofline:  t = launch + max(bytes / BW, FLOPs / F)          (`op_time_s`)
* GEMM:            t = launch + fixed + smax_p(bytes / (beta BW), FLOPs / (alpha F eta(m, n)))
  where smax_p(a, b) = (a^p + b^p)^(1/p) rounds the roofline's corner (p -> inf is max),
  beta is the share of copy bandwidth a GEMM streams its weights at, alpha the share of
  the big-GEMM FLOP/s it reaches, and eta(m, n) the share of useful work once the
  (m, n) output is padded to whole tile_m x tile_n tiles and the tiles are dealt out
  in whole waves over the chip's compute units (SMs on a GPU, threads on a CPU; K is
  split when there are fewer tiles than units), times m / (m + m_half) for the multiply
  units a GEMM with few tokens leaves idle, and fixed the GEMM kernel's own start-up and
  tail (a small GEMM cannot keep enough bytes in flight to stream at full bandwidth);
* attention:       the same smooth roofline with its own alpha, beta, p and a fixed
                   start-up cost per SDPA backend; an unfused backend also moves the
                   score matrix (batch x heads x queries x keys) through memory a fitted
                   number of times (about 0 for flash, 2 or more for math);
* elementwise:     t = fixed + bytes / (beta BW) per op (eager PyTorch may run one op
                   as several kernels, so beta < 1 and fixed > launch are allowed).

>>> from sim import hardware
>>> cal = spec_sheet(hardware.get("H100-SXM"))
>>> round(cal.bandwidth_bytes_per_s / 1e12, 2)
2.68
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from sim import hardware
from sim.hardware import GPU, cpu_slug, device_slug  # noqa: F401 (re-exported)

DEFAULT_BANDWIDTH_EFFICIENCY = 0.80   # the guide's simple-model assumption until traces calibrate it
DEFAULT_FLOPS_EFFICIENCY = 0.60       # the guide's simple-model assumption until traces calibrate it
DEFAULT_LAUNCH_OVERHEAD_S = 4e-6      # assumed per-kernel fixed cost (launch + tail) without CUDA graphs

CALIBRATION_DIR = Path(__file__).resolve().parent / "calibrations"
CALIBRATION_FORMAT_VERSION = 1        # layout of the files in sim/calibrations/

KINDS = ("copy", "big-gemm", "gemm", "attention-decode", "attention-prefill", "elementwise")
SOURCES = ("trace", "carried-over", "spec-sheet")


# --------------------------------------------------------------------------------------
# The model's pieces (vectorised: every function takes scalars or numpy arrays)
# --------------------------------------------------------------------------------------

def smooth_max(a, b, p):
    """(a^p + b^p)^(1/p): the roofline's max with a rounded corner.

    p = 1 adds the two times (no overlap at all); p -> inf is the sharp max.

    >>> float(smooth_max(3.0, 4.0, 2.0))
    5.0
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    hi = np.maximum(a, b)
    safe = np.where(hi > 0, hi, 1.0)
    return np.where(hi > 0, safe * ((a / safe) ** p + (b / safe) ** p) ** (1.0 / p), 0.0)


def tile_wave_efficiency(m, n, tile_m, tile_n, units):
    """Share of useful work in an (m x n) GEMM output computed in whole tiles and waves.

    Beyond one tile, the output is padded up to whole tile_m x tile_n tiles (a dimension
    smaller than one tile gets a tile its own size, as libraries pick a smaller tile or
    swap the operands). The tiles run in waves of `units` at a time (one tile per SM or
    thread); when there are fewer tiles than units, K is split so that every unit gets a
    share. A wave that is only partly full still takes a whole wave's time.

    >>> float(tile_wave_efficiency(128, 128, 128, 128, 1))
    1.0
    >>> float(tile_wave_efficiency(129, 128, 128, 128, 1))   # a 2nd, almost empty tile row
    0.50390625
    >>> float(tile_wave_efficiency(384, 128, 128, 128, 4))   # 3 tiles on 4 units: one idles
    0.75
    >>> float(tile_wave_efficiency(128, 256, 128, 128, 4))   # 2 tiles, split in 2 along K
    1.0
    """
    m = np.asarray(m, dtype=float)
    n = np.asarray(n, dtype=float)
    tiles_m = np.ceil(m / tile_m)
    tiles_n = np.ceil(n / tile_n)
    padded_m = np.where(m > tile_m, tiles_m * tile_m, m)
    padded_n = np.where(n > tile_n, tiles_n * tile_n, n)
    tiles = tiles_m * tiles_n
    work = tiles * np.maximum(np.floor(units / tiles), 1.0)     # split-K when tiles < units
    waves = np.ceil(work / units)
    return (m * n) / (padded_m * padded_n) * work / (waves * units)


@dataclass(frozen=True)
class GemmShapeParams:
    """Fitted shape terms of one dtype's GEMMs (see the module docstring for the formula)."""

    compute_efficiency: float     # alpha: share of the big-GEMM FLOP/s a model GEMM reaches
    bandwidth_efficiency: float   # beta: share of copy bandwidth the weights stream at
    tile_m: int                   # output tile along the token dimension
    tile_n: int                   # output tile along the feature dimension
    smoothness: float             # p of smooth_max; larger = sharper roofline corner
    half_rate_tokens: float = 0.0  # m_half: with m tokens the math runs m / (m + m_half) as fast
    fixed_s: float = 0.0          # a GEMM kernel's own start-up and tail beyond one launch, s

    def efficiency(self, m, n, compute_units):
        """Share of alpha x F a GEMM with output (m x n) reaches: tiles, waves, few tokens."""
        m = np.asarray(m, dtype=float)
        return (tile_wave_efficiency(m, n, self.tile_m, self.tile_n, compute_units)
                * m / (m + self.half_rate_tokens))

    def time_s(self, flops, nbytes, m, n, *, bandwidth_bytes_per_s, flops_per_s,
               launch_overhead_s, compute_units):
        """Predicted seconds for GEMMs with output (m x n) doing `flops` and moving `nbytes`."""
        mem = np.asarray(nbytes, dtype=float) / (bandwidth_bytes_per_s * self.bandwidth_efficiency)
        eta = self.efficiency(m, n, compute_units)
        comp = np.asarray(flops, dtype=float) / (flops_per_s * self.compute_efficiency * eta)
        return launch_overhead_s + self.fixed_s + smooth_max(mem, comp, self.smoothness)


@dataclass(frozen=True)
class RooflineParams:
    """A smooth roofline with its own efficiencies (attention kernels, one set per backend)."""

    compute_efficiency: float     # share of the big-GEMM FLOP/s of the same dtype
    bandwidth_efficiency: float   # share of copy bandwidth
    smoothness: float             # p of smooth_max
    fixed_s: float = 0.0          # start-up cost of the kernel(s) beyond one launch
    score_traffic: float = 0.0    # times the score matrix crosses memory (0: fused, ~2: unfused)

    def time_s(self, flops, nbytes, *, bandwidth_bytes_per_s, flops_per_s, launch_overhead_s,
               score_bytes=0.0):
        """Predicted seconds for kernels doing `flops` and moving `nbytes`, plus
        `score_traffic` x `score_bytes` for a kernel that writes the score matrix out."""
        traffic = np.asarray(nbytes, dtype=float) + self.score_traffic * np.asarray(score_bytes,
                                                                                   dtype=float)
        mem = traffic / (bandwidth_bytes_per_s * self.bandwidth_efficiency)
        comp = np.asarray(flops, dtype=float) / (flops_per_s * self.compute_efficiency)
        return launch_overhead_s + self.fixed_s + smooth_max(mem, comp, self.smoothness)


@dataclass(frozen=True)
class LineParams:
    """An elementwise op: a fixed cost plus its bytes at a share of copy bandwidth."""

    fixed_s: float                # cost at zero bytes (all the kernels the op launches)
    bandwidth_efficiency: float   # share of copy bandwidth the op's minimal traffic moves at

    def time_s(self, nbytes, *, bandwidth_bytes_per_s):
        """Predicted seconds for an op whose inputs and outputs total `nbytes`."""
        return self.fixed_s + np.asarray(nbytes, dtype=float) / (bandwidth_bytes_per_s
                                                                 * self.bandwidth_efficiency)


@dataclass(frozen=True)
class AllReduceParams:
    """All-reduce inside one server, fitted to measured collectives (see gpu_traces.calibrate).

    t = smooth_max(latency, 2 (g - 1) / g x bytes / bus): a fixed latency that the ring's
    traffic hides once messages are large, with a rounded corner (p = smoothness).
    """

    latency_s: float              # time of an all-reduce too small to matter
    bus_bytes_per_s: float        # rate of the 2 (g - 1) / g x bytes a ring moves per GPU
    smoothness: float             # p of smooth_max
    topology: str                 # the server it was measured in, as the source names it
    median_rel_err: float         # leave-one-GPU-count-out error
    max_rel_err: float

    def times_s(self, message_bytes, gpus) -> np.ndarray:
        """Vectorised `time_s` (every GPU count > 1)."""
        g = np.asarray(gpus, dtype=float)
        traffic = 2.0 * (g - 1) / g * np.asarray(message_bytes, dtype=float) / self.bus_bytes_per_s
        return smooth_max(np.full_like(traffic, self.latency_s), traffic, self.smoothness)

    def time_s(self, message_bytes: float, gpus: int) -> float:
        """Seconds for an all-reduce of `message_bytes` over `gpus` GPUs (0 for one GPU).

        >>> round(AllReduceParams(10e-6, 100e9, 64.0, "x", 0, 0).time_s(100e6, 2), 6)
        0.001
        """
        if gpus <= 1:
            return 0.0
        return float(self.times_s(message_bytes, gpus))


# --------------------------------------------------------------------------------------
# Provenance and calibration
# --------------------------------------------------------------------------------------

def _pct(x: float) -> str:
    """A relative error as a short percentage: 0.0412 -> '4.1%', 1.5 -> '150%'."""
    x *= 100.0
    return f"{x:.1f}%" if x < 10 else f"{x:.0f}%"


@dataclass(frozen=True)
class Provenance:
    """Where a fitted calibration came from, and how well it fits what was measured."""

    device: str                   # the recorded device, as torch names it (CPU: its model name)
    slug: str                     # file name stem in sim/calibrations/, e.g. "h200"
    device_type: str              # "cuda" | "cpu"
    recorded_at: str              # ISO 8601 UTC time the trace was recorded
    torch: str | None             # torch version that ran the kernels (None: not stated by a source)
    cuda: str | None              # CUDA version torch was built with (None on CPU)
    driver: str | None            # GPU driver version (None on CPU or if unknown)
    suite: str                    # recorder suite, e.g. "cuda", "cpu", "cpu-quick"
    trace_file: str               # the trace, relative to the repository root
    n_points: int                 # measured points in the calibration
    n_heldout: int                # points kept out of the fit and used to report its error
    heldout_median_rel_err: float         # calibrated model, |pred - meas| / meas
    heldout_max_rel_err: float
    roofline_heldout_median_rel_err: float  # plain roofline at the same measured peaks
    roofline_heldout_max_rel_err: float
    source_repository: str | None = None   # imported timings: the repository that published them
    source_commit: str | None = None       # ... at this commit
    source_licence: str | None = None      # ... under this licence
    source_models: tuple[str, ...] = ()    # ... of these models' layers
    linear_heldout_median_rel_err: float | None = None   # imported: linear layers only
    linear_heldout_max_rel_err: float | None = None

    @property
    def imported(self) -> bool:
        """True when the timings were published by others, not recorded by this project."""
        return self.source_repository is not None

    @property
    def date(self) -> str:
        """The recording date, YYYY-MM-DD."""
        return self.recorded_at[:10]

    def caption(self) -> str:
        """One line for a figure: device, date, torch, held-out error of model and roofline."""
        if self.imported:
            repo = self.source_repository.removeprefix("https://github.com/")
            linear = ("" if self.linear_heldout_median_rel_err is None else
                      f"linear layers median {_pct(self.linear_heldout_median_rel_err)}, max "
                      f"{_pct(self.linear_heldout_max_rel_err)}; ")
            return (f"Calibrated from kernel timings of the {self.device} published by {repo} "
                    f"(commit {self.source_commit[:7]}, {self.source_licence} licence; fp16 layers of "
                    f"{len(self.source_models)} models), not recorded by this project; "
                    f"leave-one-model-out error of the calibrated model: {linear}all ops median "
                    f"{_pct(self.heldout_median_rel_err)}, max {_pct(self.heldout_max_rel_err)} "
                    f"(plain roofline: median {_pct(self.roofline_heldout_median_rel_err)}, max "
                    f"{_pct(self.roofline_heldout_max_rel_err)}; {self.n_heldout} points)")
        sw = f"torch {self.torch}" + (f", CUDA {self.cuda}" if self.cuda else "")
        return (f"Measured on {self.device} on {self.date} ({sw}); held-out error of the "
                f"calibrated model: median {_pct(self.heldout_median_rel_err)}, max "
                f"{_pct(self.heldout_max_rel_err)} (plain roofline: median "
                f"{_pct(self.roofline_heldout_median_rel_err)}, max "
                f"{_pct(self.roofline_heldout_max_rel_err)}; {self.n_heldout} points)")


@dataclass(frozen=True)
class Calibration:
    """Effective numbers for one device, and where they came from."""

    device: str                          # what the numbers describe, e.g. "NVIDIA H100 SXM5 80GB"
    source: str                          # "trace" | "carried-over" | "spec-sheet"
    bandwidth_bytes_per_s: float         # effective streaming bandwidth
    flops_per_s: Mapping[str, float]     # effective dense FLOP/s per dtype
    launch_overhead_s: float             # fixed cost per kernel
    note: str                            # one line of provenance for a figure caption
    fit: Mapping[str, float] | None = None   # held-out fit error when fitted from a trace
    extra: Mapping[str, object] = field(default_factory=dict)   # small facts for captions
    gemm: Mapping[str, GemmShapeParams] = field(default_factory=dict)      # dtype -> shape terms
    attention: Mapping[str, RooflineParams] = field(default_factory=dict)  # backend -> terms
    elementwise: Mapping[str, LineParams] = field(default_factory=dict)    # op -> line
    compute_units: int | None = None     # SMs (GPU) or threads (CPU) for the wave term
    default_attention_backend: str | None = None   # used when attention_time_s gets none
    provenance: Provenance | None = None  # the trace behind a "trace"/"carried-over" calibration
    allreduce: AllReduceParams | None = None  # measured all-reduce inside one server, if any

    def flops(self, dtype: str) -> float:
        """Effective FLOP/s for `dtype`; ValueError lists what this calibration covers."""
        try:
            return self.flops_per_s[dtype]
        except KeyError:
            raise ValueError(f"{self.device}: no {dtype!r} throughput; "
                             f"valid dtypes: {', '.join(sorted(self.flops_per_s))}") from None

    def op_time_s(self, flops: float, nbytes: float, dtype: str = "bf16") -> float:
        """Plain roofline time of one kernel: launch + max(bytes / BW, FLOPs / FLOP/s)."""
        if flops < 0 or nbytes < 0:
            raise ValueError(f"flops and bytes must be >= 0, got {flops}, {nbytes}")
        return self.launch_overhead_s + max(nbytes / self.bandwidth_bytes_per_s,
                                             flops / self.flops(dtype) if flops else 0.0)

    def _gemm_params(self, dtype: str) -> GemmShapeParams | None:
        # dtypes without their own GEMM sweep borrow the bf16 (else fp16: the same tensor-core
        # rate on every catalogue GPU) shape terms
        return self.gemm.get(dtype) or self.gemm.get("bf16") or self.gemm.get("fp16")

    def gemm_times_s(self, m, n, k, weight_bytes_per_elem: float = 2.0,
                     act_bytes_per_elem: float = 2.0, dtype: str = "bf16") -> np.ndarray:
        """`gemm_time_s` over arrays of shapes (e.g. every batch size of a sweep at once)."""
        m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
        if np.any(m <= 0) or np.any(n <= 0) or np.any(k <= 0):
            raise ValueError("GEMM dims must be positive")
        flops = 2.0 * m * n * k
        nbytes = weight_bytes_per_elem * k * n + act_bytes_per_elem * (m * k + m * n)
        params = self._gemm_params(dtype)
        if params is None or self.compute_units is None:
            peak = self.flops(dtype)
            return self.launch_overhead_s + np.maximum(nbytes / self.bandwidth_bytes_per_s,
                                                       flops / peak)
        return params.time_s(flops, nbytes, m, n, bandwidth_bytes_per_s=self.bandwidth_bytes_per_s,
                             flops_per_s=self.flops(dtype),
                             launch_overhead_s=self.launch_overhead_s,
                             compute_units=self.compute_units)

    def gemm_time_s(self, m: int, n: int, k: int, weight_bytes_per_elem: float = 2.0,
                    act_bytes_per_elem: float = 2.0, dtype: str = "bf16") -> float:
        """One linear layer: `m` tokens x (`k` in -> `n` out).

        FLOPs = 2 m n k; bytes = weights k n + input m k + output m n (each at its width).
        `dtype` is the arithmetic the tensor cores run (bf16 for weight-only quantisation).
        With fitted shape terms this is the GEMM formula of the module docstring, else the
        plain roofline `op_time_s`.
        """
        if min(m, n, k) <= 0:
            raise ValueError(f"GEMM dims must be positive, got m={m}, n={n}, k={k}")
        return float(self.gemm_times_s(m, n, k, weight_bytes_per_elem, act_bytes_per_elem, dtype))

    def attention_time_s(self, flops: float, nbytes: float, dtype: str = "bf16",
                         backend: str | None = None, score_bytes: float = 0.0) -> float:
        """One fused attention kernel moving `nbytes` of HBM traffic and doing `flops`.

        `backend` ("flash", "efficient", "math") picks that backend's fitted terms; by
        default the calibration's default backend (flash where it was measured).
        `score_bytes` is the size of the score matrix (batch x heads x queries x keys x
        bytes per element): an unfused backend's fitted `score_traffic` moves it through
        memory that many times. Without fitted terms this is the plain roofline.
        """
        if flops < 0 or nbytes < 0:
            raise ValueError(f"flops and bytes must be >= 0, got {flops}, {nbytes}")
        name = backend or self.default_attention_backend
        if name is None or not self.attention:
            return self.op_time_s(flops, nbytes, dtype)
        if name not in self.attention:
            raise ValueError(f"{self.device}: no fitted attention backend {name!r}; "
                             f"valid: {', '.join(sorted(self.attention))}")
        return float(self.attention[name].time_s(
            flops, nbytes, bandwidth_bytes_per_s=self.bandwidth_bytes_per_s,
            flops_per_s=self.flops(dtype), launch_overhead_s=self.launch_overhead_s,
            score_bytes=score_bytes))

    def elementwise_time_s(self, nbytes: float, op: str | None = None) -> float:
        """A memory-bound elementwise kernel (norm, activation, residual add) moving `nbytes`.

        `op` ("rms_norm", "silu_mul", "residual_add") uses that op's fitted line, as eager
        PyTorch runs it; without it (or without a fit) the plain roofline of one fused kernel.
        """
        if nbytes < 0:
            raise ValueError(f"bytes must be >= 0, got {nbytes}")
        if op is None:
            return self.op_time_s(0.0, nbytes)
        if op not in self.elementwise:
            raise ValueError(f"{self.device}: no fitted elementwise op {op!r}; "
                             f"valid: {', '.join(sorted(self.elementwise)) or 'none'}")
        return float(self.elementwise[op].time_s(nbytes,
                                                 bandwidth_bytes_per_s=self.bandwidth_bytes_per_s))


def spec_sheet(gpu: GPU) -> Calibration:
    """The stated default: 80% of peak bandwidth, 60% of peak FLOP/s, a fixed launch cost."""
    return Calibration(
        device=gpu.display_name,
        source="spec-sheet",
        bandwidth_bytes_per_s=DEFAULT_BANDWIDTH_EFFICIENCY * gpu.hbm_bandwidth_bytes_per_s,
        flops_per_s={k: DEFAULT_FLOPS_EFFICIENCY * v for k, v in gpu.dense_flops.items()},
        launch_overhead_s=DEFAULT_LAUNCH_OVERHEAD_S,
        note=(f"{gpu.display_name}: spec-sheet assumption (80% of peak bandwidth, "
              f"60% of peak FLOP/s); no trace recorded for this GPU"),
    )


# --------------------------------------------------------------------------------------
# Measured points, and predicting them
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MeasuredPoint:
    """One measured kernel with the calibrated model's and the plain roofline's prediction."""

    kind: str                     # one of KINDS
    label: str                    # short text, e.g. "llama-3.1-8b qkv_proj m=16"
    shape: Mapping[str, object]   # m, n, k, model, layer / batch, kv_len, ... / op, tokens, ...
    dtype: str                    # "bf16", "fp8", "fp32", ...
    backend: str | None           # attention backend ("flash", "efficient", "math"), else None
    flops: float                  # FLOPs the kernel does
    bytes: float                  # minimal bytes it must move (inputs + outputs once)
    time_s: float                 # measured median
    p25_s: float                  # measured 25th percentile (NaN: not published by the source)
    p75_s: float                  # measured 75th percentile (NaN: not published by the source)
    split: str                    # "train" (used by the fit) | "heldout" (used to report it)
    model_s: float                # calibrated model's prediction
    roofline_s: float             # plain roofline's prediction (same peaks, no shape terms)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP per byte (0 for copies and elementwise ops)."""
        return self.flops / self.bytes

    @property
    def achieved_flops_per_s(self) -> float:
        """FLOP/s the measured kernel reached."""
        return self.flops / self.time_s

    @property
    def achieved_bytes_per_s(self) -> float:
        """Bytes per second the measured kernel moved (its minimal traffic / time)."""
        return self.bytes / self.time_s

    @property
    def model_rel_err(self) -> float:
        """|model - measured| / measured."""
        return abs(self.model_s - self.time_s) / self.time_s

    @property
    def roofline_rel_err(self) -> float:
        """|plain roofline - measured| / measured."""
        return abs(self.roofline_s - self.time_s) / self.time_s


def predict_s(cal: Calibration, kind: str, flops, nbytes, dtype: str, *, shape=None,
              backend: str | None = None):
    """The calibrated model's time for measured kernels of one kind and dtype (vectorised).

    `shape` is a list of shape dicts (GEMMs need m and n, elementwise ops their op name);
    `flops` and `nbytes` are arrays of the same length.
    """
    flops = np.asarray(flops, dtype=float)
    nbytes = np.asarray(nbytes, dtype=float)
    if kind in ("gemm", "big-gemm"):
        params = cal._gemm_params(dtype)
        if params is None or cal.compute_units is None:
            return roofline_s(cal, flops, nbytes, dtype)
        m = np.array([s["m"] for s in shape], dtype=float)
        n = np.array([s["n"] for s in shape], dtype=float)
        return params.time_s(flops, nbytes, m, n, bandwidth_bytes_per_s=cal.bandwidth_bytes_per_s,
                             flops_per_s=cal.flops(dtype),
                             launch_overhead_s=cal.launch_overhead_s,
                             compute_units=cal.compute_units)
    if kind in ("attention-decode", "attention-prefill"):
        params = cal.attention.get(backend or "")
        if params is None:
            return roofline_s(cal, flops, nbytes, dtype)
        scores = np.array([score_bytes(s) for s in shape], dtype=float)
        return params.time_s(flops, nbytes, bandwidth_bytes_per_s=cal.bandwidth_bytes_per_s,
                             flops_per_s=cal.flops(dtype), launch_overhead_s=cal.launch_overhead_s,
                             score_bytes=scores)
    if kind == "elementwise":
        out = np.empty(len(nbytes))
        for i, s in enumerate(shape):
            params = cal.elementwise.get(s["op"])
            out[i] = (params.time_s(nbytes[i], bandwidth_bytes_per_s=cal.bandwidth_bytes_per_s)
                      if params else roofline_s(cal, flops[i:i + 1], nbytes[i:i + 1], dtype)[0])
        return out
    if kind == "copy":
        return roofline_s(cal, flops, nbytes, dtype)
    raise ValueError(f"unknown kernel kind {kind!r}; valid: {', '.join(KINDS)}")


def score_bytes(shape: Mapping) -> float:
    """Bytes of the score matrix of an attention shape: score_elements x bytes per element."""
    return float(shape["score_elements"] * shape["bytes_per_elem"])


def roofline_s(cal: Calibration, flops, nbytes, dtype: str):
    """The plain roofline, vectorised: launch + max(bytes / BW, FLOPs / F) at `cal`'s peaks."""
    flops = np.asarray(flops, dtype=float)
    nbytes = np.asarray(nbytes, dtype=float)
    comp = flops / cal.flops(dtype) if np.any(flops > 0) else np.zeros_like(flops)
    return cal.launch_overhead_s + np.maximum(nbytes / cal.bandwidth_bytes_per_s, comp)


def relative_errors(pred, measured) -> np.ndarray:
    """|pred - measured| / measured, elementwise."""
    pred = np.asarray(pred, dtype=float)
    measured = np.asarray(measured, dtype=float)
    return np.abs(pred - measured) / measured


# --------------------------------------------------------------------------------------
# Mapping recorded devices onto the catalogue
# --------------------------------------------------------------------------------------

# The device identity lives with the catalogue (sim.hardware.identify_device); cpu_slug and
# device_slug stay importable from here.

def catalogue_key_for_device(name: str) -> str | None:
    """The catalogue key of a torch device name, or None (see sim.hardware.identify_device)."""
    return hardware.identify_device(name).key


# --------------------------------------------------------------------------------------
# Loading the shipped calibration files
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RecordedDevice:
    """A device with a recorded trace: its calibration, provenance and measured points."""

    slug: str                     # file stem, e.g. "h200", "cpu-amd-epyc-2threads"
    name: str                     # as recorded, e.g. "NVIDIA H200", "AMD EPYC (2 threads)"
    device_type: str              # "cuda" | "cpu"
    catalogue_key: str | None     # the sim.hardware GPU it is, if any (never for a CPU)
    arch: str | None              # catalogue architecture, e.g. "hopper"
    calibration: Calibration      # fitted numbers for the recorded device itself
    provenance: Provenance
    points: tuple[MeasuredPoint, ...]
    efficiency: Mapping[str, object] | None  # achieved / spec-sheet peak (catalogue GPUs only)
    fit_summary: Mapping[str, object]   # the file's "fit" section: errors overall and per kind

    def points_of(self, *kinds: str) -> list[MeasuredPoint]:
        """The measured points of the given kinds (all when none are given)."""
        return [p for p in self.points if not kinds or p.kind in kinds]


class CalibrationFileError(ValueError):
    """A calibration file that cannot be read; the message names the file and the problem."""


def _need(d: Mapping, key: str, where: str, path: Path):
    if not isinstance(d, Mapping) or key not in d:
        raise CalibrationFileError(f"{path}: missing {where}{key!r}")
    return d[key]


def calibration_from_section(name: str, c: Mapping, *, note: str = "",
                             fit: Mapping[str, float] | None = None,
                             provenance: Provenance | None = None) -> Calibration:
    """A Calibration from the "calibration" section of a calibration file."""
    return Calibration(
        device=name,
        source="trace",
        bandwidth_bytes_per_s=float(c["bandwidth_bytes_per_s"]),
        flops_per_s={k: float(v) for k, v in c["flops_per_s"].items()},
        launch_overhead_s=float(c["launch_overhead_s"]),
        note=note,
        fit=fit,
        extra={"measured_dtypes": tuple(sorted(c["flops_per_s"]))},
        gemm={k: GemmShapeParams(**v) for k, v in c["gemm"].items()},
        attention={k: RooflineParams(**v) for k, v in c["attention"].items()},
        elementwise={k: LineParams(**v) for k, v in c["elementwise"].items()},
        compute_units=int(c["compute_units"]),
        default_attention_backend=c.get("default_attention_backend"),
        provenance=provenance,
        allreduce=_allreduce(c.get("allreduce")),
    )


def _allreduce(a: Mapping | None) -> AllReduceParams | None:
    if not a:
        return None
    err = a["fit"]["leave_one_gpu_count_out"]["all"]
    return AllReduceParams(latency_s=float(a["latency_s"]),
                           bus_bytes_per_s=float(a["bus_bytes_per_s"]),
                           smoothness=float(a["smoothness"]), topology=a["topology"],
                           median_rel_err=float(err["median_rel_err"]),
                           max_rel_err=float(err["max_rel_err"]))


def calibration_from_dict(data: Mapping, path: Path | str = "<calibration>") -> RecordedDevice:
    """Build a RecordedDevice from the contents of one calibration file.

    The files are written by `python -m gpu_traces.calibrate`; this is the one reader.
    """
    path = Path(path)
    version = _need(data, "format_version", "", path)
    if version != CALIBRATION_FORMAT_VERSION:
        raise CalibrationFileError(f"{path}: format_version {version!r} is not supported "
                                   f"(this reader expects {CALIBRATION_FORMAT_VERSION}); "
                                   f"rerun `python -m gpu_traces.calibrate`")
    dev = _need(data, "device", "", path)
    trace = _need(data, "trace", "", path)
    c = _need(data, "calibration", "", path)
    fit = _need(data, "fit", "", path)
    held = _need(fit, "heldout", "fit.", path)
    src = trace.get("source") or {}
    linear = (fit.get("leave_one_model_out") or {}).get("by_op", {}).get("linear", {}).get("model")
    prov = Provenance(
        source_repository=src.get("repository"), source_commit=src.get("commit"),
        source_licence=src.get("licence"), source_models=tuple(src.get("models", ())),
        linear_heldout_median_rel_err=float(linear["median_rel_err"]) if linear else None,
        linear_heldout_max_rel_err=float(linear["max_rel_err"]) if linear else None,
        device=dev["name"], slug=dev["slug"], device_type=dev["type"],
        recorded_at=trace["recorded_at"], torch=trace["torch"], cuda=trace.get("cuda"),
        driver=trace.get("driver"), suite=trace["suite"], trace_file=trace["file"],
        n_points=int(fit["n_points"]), n_heldout=int(held["n"]),
        heldout_median_rel_err=float(held["model"]["median_rel_err"]),
        heldout_max_rel_err=float(held["model"]["max_rel_err"]),
        roofline_heldout_median_rel_err=float(held["roofline"]["median_rel_err"]),
        roofline_heldout_max_rel_err=float(held["roofline"]["max_rel_err"]),
    )
    fit_flat = {
        "heldout_median_rel_err": prov.heldout_median_rel_err,
        "heldout_max_rel_err": prov.heldout_max_rel_err,
        "roofline_heldout_median_rel_err": prov.roofline_heldout_median_rel_err,
        "roofline_heldout_max_rel_err": prov.roofline_heldout_max_rel_err,
        "n_heldout": float(prov.n_heldout),
        "n_train": float(prov.n_points - prov.n_heldout),
    }
    how = "imported kernel timings" if prov.imported else "its own trace"
    cal = calibration_from_section(dev["name"], c, fit=fit_flat, provenance=prov,
                                   note=f"{dev['name']}: calibrated from {how}. "
                                        f"{prov.caption()}")
    cal = replace(cal, extra={**cal.extra, "slug": dev["slug"]})
    points = _points_from_table(cal, _need(data, "points", "", path), path)
    return RecordedDevice(
        slug=dev["slug"], name=dev["name"], device_type=dev["type"],
        catalogue_key=dev.get("catalogue_key"), arch=dev.get("arch"), calibration=cal,
        provenance=prov, points=points, efficiency=c.get("efficiency"), fit_summary=fit,
    )


POINT_COLUMNS = ("kind", "label", "dtype", "backend", "shape", "flops", "bytes",
                 "time_s", "p25_s", "p75_s", "split")


def predict_rows(cal: Calibration, rows: Sequence[Mapping]) -> tuple[np.ndarray, np.ndarray]:
    """(calibrated model, plain roofline) seconds for rows with kind, dtype, backend, shape,
    flops and bytes (the point records of a calibration file)."""
    model = np.empty(len(rows))
    roof = np.empty(len(rows))
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r["kind"], r["dtype"], r["backend"]), []).append(i)
    for (kind, dtype, backend), idx in groups.items():
        fl = [rows[i]["flops"] for i in idx]
        nb = [rows[i]["bytes"] for i in idx]
        model[idx] = predict_s(cal, kind, fl, nb, dtype, shape=[rows[i]["shape"] for i in idx],
                               backend=backend)
        roof[idx] = roofline_s(cal, fl, nb, dtype)
    return model, roof


def _points_from_table(cal: Calibration, table: Mapping, path: Path) -> tuple[MeasuredPoint, ...]:
    cols = tuple(_need(table, "columns", "points.", path))
    if cols != POINT_COLUMNS:
        raise CalibrationFileError(f"{path}: points.columns is {list(cols)}, expected "
                                   f"{list(POINT_COLUMNS)}")
    rows = [dict(zip(cols, r)) for r in table["rows"]]
    model, roof = predict_rows(cal, rows)
    return tuple(MeasuredPoint(kind=r["kind"], label=r["label"], shape=r["shape"],
                               dtype=r["dtype"], backend=r["backend"], flops=float(r["flops"]),
                               bytes=float(r["bytes"]), time_s=float(r["time_s"]),
                               p25_s=_num(r["p25_s"]), p75_s=_num(r["p75_s"]),
                               split=r["split"], model_s=float(model[i]),
                               roofline_s=float(roof[i]))
                 for i, r in enumerate(rows))


def _num(x) -> float:
    # quartiles an imported source did not publish are stored as null: NaN here (no spread drawn)
    return float("nan") if x is None else float(x)


def load_calibration_file(path: Path | str) -> RecordedDevice:
    """Read and check one calibration file; CalibrationFileError says what is wrong."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CalibrationFileError(f"{path}: not valid JSON ({e})") from None
    try:
        return calibration_from_dict(data, path)
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, CalibrationFileError):
            raise
        raise CalibrationFileError(f"{path}: malformed calibration ({type(e).__name__}: {e})") from None


def shipped() -> list[dict]:
    """The calibration files shipped with the package, as raw dicts (sorted by file name)."""
    return [json.loads(p.read_text()) for p in sorted(CALIBRATION_DIR.glob("*.json"))]


@lru_cache(maxsize=None)
def _recorded_devices_in(directory: str) -> tuple[RecordedDevice, ...]:
    return tuple(load_calibration_file(p) for p in sorted(Path(directory).glob("*.json")))


def recorded_devices(directory: Path | str | None = None) -> tuple[RecordedDevice, ...]:
    """Every device with a shipped calibration, sorted by slug.

    Each carries its Calibration, Provenance (device, date, torch, held-out errors of the
    model and of the plain roofline) and every measured point with both predictions.
    """
    return _recorded_devices_in(str(Path(directory or CALIBRATION_DIR).resolve()))


def recorded_device(slug: str, directory: Path | str | None = None) -> RecordedDevice:
    """The recorded device with this slug; ValueError lists the valid slugs."""
    devices = recorded_devices(directory)
    for d in devices:
        if d.slug == slug:
            return d
    raise ValueError(f"no calibration for {slug!r}; valid: {', '.join(d.slug for d in devices)}")


def _fill_dtypes(achieved: Mapping[str, float], gpu: GPU, flops_eff: Mapping[str, float]) -> dict:
    # dtypes the trace did not measure reach the bf16 efficiency of the chip's own peak
    base = flops_eff.get("bf16", flops_eff.get("fp16", DEFAULT_FLOPS_EFFICIENCY))
    return {dt: achieved[dt] if dt in achieved else flops_eff.get(dt, base) * peak
            for dt, peak in gpu.dense_flops.items()}


def _own_calibration(rec: RecordedDevice, gpu: GPU) -> Calibration:
    cal = rec.calibration
    eff = rec.efficiency or {}
    flops = _fill_dtypes(cal.flops_per_s, gpu, eff.get("flops", {}))
    inferred = sorted(set(flops) - set(cal.flops_per_s))
    measured = "bf16" if "bf16" in cal.flops_per_s else ", ".join(sorted(cal.flops_per_s))
    extra_note = (f" Unmeasured dtypes ({', '.join(inferred)}) use the measured {measured} "
                  f"efficiency." if inferred else "")
    what = ("kernel timings of this GPU published by others" if rec.provenance.imported
            else "a trace of this GPU")
    return replace(cal, device=gpu.display_name, flops_per_s=flops,
                   note=(f"{gpu.display_name}: calibrated from {what}. "
                         f"{rec.provenance.caption()}.{extra_note}"))


def _carried_over(rec: RecordedDevice, gpu: GPU) -> Calibration:
    cal = rec.calibration
    eff = rec.efficiency
    flops_eff = dict(eff["flops"])
    base = flops_eff.get("bf16", flops_eff.get("fp16", DEFAULT_FLOPS_EFFICIENCY))
    flops = {dt: flops_eff.get(dt, base) * peak for dt, peak in gpu.dense_flops.items()}
    return replace(
        cal, device=gpu.display_name, source="carried-over",
        bandwidth_bytes_per_s=float(eff["bandwidth"]) * gpu.hbm_bandwidth_bytes_per_s,
        flops_per_s=flops, compute_units=gpu.sm_count,
        extra={**cal.extra, "carried_over_from": rec.slug},
        note=(f"{gpu.display_name}: no timings of its own; carried over from {rec.name} (same "
              f"{rec.arch.capitalize()} SMs): its efficiencies (achieved / peak) applied to this "
              f"GPU's own spec sheet (HBM bandwidth {gpu.hbm_bandwidth_bytes_per_s / 1e12:.2f} TB/s, "
              f"{gpu.memory_mib:,} MiB). There: {rec.provenance.caption()}"),
    )


def for_gpu(gpu: GPU, directory: Path | str | None = None) -> Calibration:
    """The best available calibration for `gpu`: its own trace > same architecture > spec sheet.

    A CPU trace never stands in for a GPU. `directory` reads calibrations from elsewhere
    than the shipped sim/calibrations/ (tests).

    >>> from sim import hardware
    >>> for_gpu(hardware.get("H100-SXM")).source in SOURCES
    True
    """
    devices = [d for d in recorded_devices(directory)
               if d.device_type == "cuda" and d.catalogue_key]
    own = [d for d in devices if d.catalogue_key == gpu.name]
    if own:
        return _own_calibration(_preferred(own), gpu)
    same_arch = [d for d in devices if d.arch == gpu.arch and d.efficiency]
    if same_arch:
        return _carried_over(_preferred(same_arch), gpu)
    return spec_sheet(gpu)


def _preferred(devices: Sequence[RecordedDevice]) -> RecordedDevice:
    # full suites before quick ones, then the most recent recording, then by slug
    return sorted(devices, key=lambda d: ("quick" in d.provenance.suite,
                                          _neg(d.provenance.recorded_at), d.slug))[0]


def _neg(s: str) -> tuple:
    return tuple(-ord(ch) for ch in s)


# --------------------------------------------------------------------------------------------
# Measured GEMMs of one transformer layer (the batch-knee figure's overlay)
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


def measured_model_name(label: str) -> str:
    """A display name for the model label of measured points: the catalogue's name when the
    label is a catalogue model (an imported "-hf" checkpoint name included), else the label.

    >>> measured_model_name("llama-2-7b-hf")
    'Llama 2 7B'
    >>> measured_model_name("qwen-72b")
    'qwen-72b'
    """
    from sim import models
    key = label.removesuffix("-hf")
    return models.get(key).display_name if key in models.names() else label


def layer_gemm_measurements(device: "RecordedDevice | str", model: str,
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
