"""The kernel-time model: effective numbers of one device and the one formula that times a kernel.

A *calibration* turns a device's spec sheet into the numbers its kernels actually reach:
effective bandwidth, effective FLOP/s per dtype, a fixed cost per kernel, and, when it
was fitted from a trace, a few shape terms. Every time in `sim/` goes through
`Calibration.op_time_s` or the shape-aware helpers next to it, so swapping the
calibration moves every figure at once. `spec_sheet` is the stated default; fitted
calibrations are read from files by `sim.calibration`, which also picks the best one
for a GPU (`sim.calibration.for_gpu`).

The model, in a few sentences (the one formula both the fit and the figures use):

* plain roofline:  t = launch + max(bytes / BW, FLOPs / F)          (`op_time_s`)
* GEMM:            t = launch + fixed(m) + k_step k + smax_p(bytes / (beta BW), FLOPs / (alpha F eta(m, n)))
  where smax_p(a, b) = (a^p + b^p)^(1/p) rounds the roofline's corner (p -> inf is max),
  beta is the share of copy bandwidth a GEMM streams its weights at, alpha the share of
  the big-GEMM FLOP/s it reaches, and eta(m, n) the share of useful work once the
  (m, n) output is padded to whole tile_m x tile_n tiles and the tiles are dealt out
  in whole waves over the chip's compute units (SMs on a GPU, threads on a CPU; K is
  split when there are fewer tiles than units), lowered further for the multiply units
  a GEMM with few tokens leaves idle: the math takes as long as m_half more token rows
  would at the full rate (FLOPs / (alpha F eta) = 2 n k (m / w + m_half) / (alpha F),
  w being the tiles-and-waves share). Every term grows with m, so the model never
  predicts a shorter time for more tokens. fixed(m) = fixed + fixed_m m / (m + m_fixed)
  is the kernel's own start-up and tail: a GEMM of a handful of tokens runs as a light
  kernel, and the tiled tensor-core kernels that take over as m grows cost fixed_m more
  to start and drain. k_step k is the latency of walking the K dimension: each step of
  the main loop waits on the loads of the one before, which a GEMM with little work per
  unit cannot hide behind other tiles (k_step is seconds per element of K);
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

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from sim.hardware import GPU
from sim.provenance import Provenance

DEFAULT_BANDWIDTH_EFFICIENCY = 0.80   # the guide's simple-model assumption until traces calibrate it
DEFAULT_FLOPS_EFFICIENCY = 0.60       # the guide's simple-model assumption until traces calibrate it
DEFAULT_LAUNCH_OVERHEAD_S = 4e-6      # assumed per-kernel fixed cost (launch + tail) without CUDA graphs

KINDS = ("copy", "big-gemm", "gemm", "attention-decode", "attention-prefill", "elementwise")
SOURCES = ("trace", "carried-over", "spec-sheet")   # where a Calibration's numbers come from


# --------------------------------------------------------------------------------------
# The model's pieces (vectorised: every function takes scalars or numpy arrays)
# --------------------------------------------------------------------------------------

def smooth_max(a, b, p):
    """(a^p + b^p)^(1/p): the roofline's max with a rounded corner.

    p = 1 adds the two times (no overlap at all); p -> inf is the sharp max.

    >>> float(smooth_max(3.0, 4.0, 2.0))
    5.0

    Computed as hi (1 + (lo / hi)^p)^(1/p) with hi the larger term: the larger term's
    ratio is exactly 1 and 1^p is exactly 1, so this is the same number to the last bit,
    with one power an element fewer (a calibration evaluates it half a million times).
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    hi = np.maximum(a, b)
    lo = np.minimum(a, b)
    safe = np.where(hi > 0, hi, 1.0)
    return np.where(hi > 0, safe * ((lo / safe) ** p + 1.0) ** (1.0 / p), 0.0)


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
    half_rate_tokens: float = 0.0  # m_half: the math takes as long as m + m_half tokens would
    fixed_s: float = 0.0          # a GEMM kernel's own start-up and tail beyond one launch, s
    fixed_m_s: float = 0.0        # extra start-up of the kernels used with many tokens, s
    fixed_half_tokens: float = 0.0  # m_fixed: with m tokens, fixed_m_s x m / (m + m_fixed) is paid
    k_step_s: float = 0.0         # serial latency per element of K (the main loop's steps), s

    def efficiency(self, m, n, compute_units, tile_wave=None):
        """Share of alpha x F a GEMM with output (m x n) reaches: tiles, waves, few tokens.
        `tile_wave` is `tile_wave_efficiency` of these shapes when already known (a fit
        that tries many parameters on the same tiles)."""
        m = np.asarray(m, dtype=float)
        if tile_wave is None:
            tile_wave = tile_wave_efficiency(m, n, self.tile_m, self.tile_n, compute_units)
        # FLOPs / (alpha F eta) = 2 n k (m / tile_wave + m_half) / (alpha F): m / tile_wave
        # grows with m (whole tiles, whole waves), so the time never falls as m grows
        return tile_wave * m / (m + self.half_rate_tokens * tile_wave)

    def overhead_s(self, m, k):
        """The kernel's time beyond one launch that no roofline term explains: its start-up
        and tail (larger for the kernels used with many tokens) and the walk along K."""
        m = np.asarray(m, dtype=float)
        grow = m / (m + self.fixed_half_tokens) if self.fixed_half_tokens > 0 else 1.0
        return self.fixed_s + self.fixed_m_s * grow + self.k_step_s * np.asarray(k, dtype=float)

    def time_s(self, flops, nbytes, m, n, k, *, bandwidth_bytes_per_s, flops_per_s,
               launch_overhead_s, compute_units, tile_wave=None):
        """Predicted seconds for GEMMs with output (m x n) and depth k doing `flops` and
        moving `nbytes`."""
        mem = np.asarray(nbytes, dtype=float) / (bandwidth_bytes_per_s * self.bandwidth_efficiency)
        eta = self.efficiency(m, n, compute_units, tile_wave)
        comp = np.asarray(flops, dtype=float) / (flops_per_s * self.compute_efficiency * eta)
        return launch_overhead_s + self.overhead_s(m, k) + smooth_max(mem, comp, self.smoothness)


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
# Calibration
# --------------------------------------------------------------------------------------

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
        return params.time_s(flops, nbytes, m, n, k,
                             bandwidth_bytes_per_s=self.bandwidth_bytes_per_s,
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
        terms = self._attention_terms(backend)
        if terms is None:
            return self.op_time_s(flops, nbytes, dtype)
        return float(terms.time_s(flops, nbytes, bandwidth_bytes_per_s=self.bandwidth_bytes_per_s,
                                  flops_per_s=self.flops(dtype), launch_overhead_s=self.launch_overhead_s,
                                  score_bytes=score_bytes))

    def attention_times_s(self, flops, nbytes, dtype: str = "bf16", backend: str | None = None,
                          score_bytes=0.0) -> np.ndarray:
        """`attention_time_s` over arrays of kernels (e.g. one decode step at every context
        length of a request), element by element the same numbers."""
        flops, nbytes = np.asarray(flops, dtype=float), np.asarray(nbytes, dtype=float)
        if np.any(flops < 0) or np.any(nbytes < 0):
            raise ValueError(f"flops and bytes must be >= 0, got {flops}, {nbytes}")
        terms = self._attention_terms(backend)
        if terms is None:        # the plain roofline, as op_time_s
            comp = flops / self.flops(dtype) if np.any(flops) else np.zeros(np.shape(flops))
            return self.launch_overhead_s + np.maximum(nbytes / self.bandwidth_bytes_per_s, comp)
        return np.asarray(terms.time_s(flops, nbytes, bandwidth_bytes_per_s=self.bandwidth_bytes_per_s,
                                       flops_per_s=self.flops(dtype), launch_overhead_s=self.launch_overhead_s,
                                       score_bytes=score_bytes), dtype=float)

    def _attention_terms(self, backend: str | None) -> RooflineParams | None:
        """The fitted terms of `backend` (default: the calibration's default backend); None
        where the calibration has none (the plain roofline)."""
        name = backend or self.default_attention_backend
        if name is None or not self.attention:
            return None
        if name not in self.attention:
            raise ValueError(f"{self.device}: no fitted attention backend {name!r}; "
                             f"valid: {', '.join(sorted(self.attention))}")
        return self.attention[name]

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
# Predicting measured kernels
# --------------------------------------------------------------------------------------

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
        k = np.array([s["k"] for s in shape], dtype=float)
        return params.time_s(flops, nbytes, m, n, k, bandwidth_bytes_per_s=cal.bandwidth_bytes_per_s,
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
