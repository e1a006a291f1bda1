"""Effective hardware numbers the simulations use: from a recorded trace, or stated defaults.

A *calibration* turns a GPU's spec sheet into the numbers a kernel actually achieves:
effective bandwidth, effective FLOP/s per dtype, and a fixed launch overhead per kernel.
Every time in `sim/` goes through `Calibration.op_time_s` (or the shape-aware helpers
built on it), so swapping the calibration moves every figure at once.

Where the numbers come from, in order of preference (see `for_gpu`):

1. "trace":        a calibration fitted from kernels recorded on this very GPU model
                   (files in sim/calibrations/, written by `python -m gpu_traces.calibrate`);
2. "carried-over": a calibration of another GPU of the same architecture; its
                   efficiencies (achieved / peak) are applied to this GPU's spec sheet;
3. "spec-sheet":   the guide's stated assumption, 80% of peak bandwidth and 60% of peak
                   FLOP/s, plus DEFAULT_LAUNCH_OVERHEAD_S per kernel.

>>> from sim import hardware
>>> cal = spec_sheet(hardware.get("H100-SXM"))
>>> round(cal.bandwidth_bytes_per_s / 1e12, 2)
2.68
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from sim.hardware import GPU

DEFAULT_BANDWIDTH_EFFICIENCY = 0.80   # the guide's simple-model assumption until traces calibrate it
DEFAULT_FLOPS_EFFICIENCY = 0.60       # the guide's simple-model assumption until traces calibrate it
DEFAULT_LAUNCH_OVERHEAD_S = 4e-6      # assumed per-kernel fixed cost (launch + tail) without CUDA graphs

CALIBRATION_DIR = Path(__file__).resolve().parent / "calibrations"


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
    extra: Mapping[str, object] = field(default_factory=dict)   # fitted shape parameters

    def flops(self, dtype: str) -> float:
        """Effective FLOP/s for `dtype`; ValueError lists what this calibration covers."""
        try:
            return self.flops_per_s[dtype]
        except KeyError:
            raise ValueError(f"{self.device}: no {dtype!r} throughput; "
                             f"valid dtypes: {', '.join(sorted(self.flops_per_s))}") from None

    def op_time_s(self, flops: float, nbytes: float, dtype: str = "bf16") -> float:
        """Roofline time of one kernel: launch + max(bytes / BW, FLOPs / FLOP/s)."""
        if flops < 0 or nbytes < 0:
            raise ValueError(f"flops and bytes must be >= 0, got {flops}, {nbytes}")
        return self.launch_overhead_s + max(nbytes / self.bandwidth_bytes_per_s,
                                             flops / self.flops(dtype) if flops else 0.0)

    def gemm_time_s(self, m: int, n: int, k: int, weight_bytes_per_elem: float = 2.0,
                    act_bytes_per_elem: float = 2.0, dtype: str = "bf16") -> float:
        """One linear layer: `m` tokens x (`k` in -> `n` out).

        FLOPs = 2 m n k; bytes = weights k n + input m k + output m n (each at its width).
        `dtype` is the arithmetic the tensor cores run (bf16 for weight-only quantisation).
        """
        if min(m, n, k) <= 0:
            raise ValueError(f"GEMM dims must be positive, got m={m}, n={n}, k={k}")
        flops = 2.0 * m * n * k
        nbytes = weight_bytes_per_elem * k * n + act_bytes_per_elem * (m * k + m * n)
        return self.op_time_s(flops, nbytes, dtype)

    def attention_time_s(self, flops: float, nbytes: float, dtype: str = "bf16") -> float:
        """One fused attention kernel moving `nbytes` of HBM traffic and doing `flops`."""
        return self.op_time_s(flops, nbytes, dtype)

    def elementwise_time_s(self, nbytes: float) -> float:
        """A memory-bound elementwise kernel (norm, activation, residual add) moving `nbytes`."""
        return self.op_time_s(0.0, nbytes)


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


def shipped() -> list[dict]:
    """The calibration files shipped with the package (sorted by file name)."""
    return [json.loads(p.read_text()) for p in sorted(CALIBRATION_DIR.glob("*.json"))]


def for_gpu(gpu: GPU) -> Calibration:
    """The best available calibration for `gpu` (trace > same-architecture > spec sheet)."""
    return spec_sheet(gpu)
