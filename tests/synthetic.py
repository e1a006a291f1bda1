"""Traces made up by the model itself, to test that the fit recovers known parameters.

A synthetic trace has every point of a real suite's plan, with times predicted by a given
Calibration (optionally with log-normal noise on each repeat). It carries
`"synthetic": true`, and `python -m gpu_traces.calibrate` refuses to ship one: these are
test fixtures, never measurements.
"""
from __future__ import annotations

import numpy as np

from gpu_traces import suites
from gpu_traces.schema import SCHEMA_VERSION, time_stats
from gpu_traces.shapes import counts
from sim.hardware import cpu_slug, identify_device
from sim.kernel_model import Calibration, predict_rows


def synthesize_trace(cal: Calibration, *, suite: str = "cuda", device_name: str = "NVIDIA H200",
                     device_type: str = "cuda", noise: float = 0.0, repeats: int = 5,
                     seed: int = 0) -> dict:
    """A schema-valid trace of `suite`'s points timed by `cal`'s model (plus noise)."""
    points, skips = suites.plan(suites.SUITES[suite])
    rows = []
    for p in points:
        flops, nbytes = counts(p.kind, p.shape)
        rows.append({"kind": p.kind, "label": p.label, "dtype": p.dtype, "backend": p.backend,
                     "shape": p.shape, "flops": flops, "bytes": nbytes})
    model, _ = predict_rows(cal, rows)
    rng = np.random.default_rng(seed)
    measurements = []
    for r, t in zip(rows, model):
        samples = t * np.exp(noise * rng.standard_normal(repeats)) if noise else np.full(repeats, t)
        measurements.append({**r, "time": time_stats([float(x) for x in samples])})
    ident = identify_device(device_name) if device_type == "cuda" else None
    units = int(cal.compute_units or 1)
    return {
        "schema_version": SCHEMA_VERSION,
        "synthetic": True,
        "recorded_at": "2000-01-01T00:00:00Z",
        "suite": {"name": suite, "quick": suite.endswith("quick"),
                  "description": "synthetic: times predicted by the model, not measured",
                  "max_seconds": 1.0, "elapsed_s": 0.0, "stopped_by_time_limit": False},
        "device": {"type": device_type, "name": device_name,
                   "slug": ident.slug if ident else cpu_slug(device_name, units),
                   "catalogue_key": ident.key if ident else None,
                   "memory_bytes": 80 * 10 ** 9, "compute_units": units,
                   "compute_unit_kind": "SM" if device_type == "cuda" else "thread",
                   "cache_bytes": 50 * 2 ** 20},
        "software": {"torch": "synthetic", "cuda": None, "driver": None, "python": "synthetic",
                     "numpy": np.__version__, "platform": "synthetic"},
        "timing": {"method": "cuda-events" if device_type == "cuda" else "perf-counter",
                   "warmup": 0, "min_repeats": repeats, "max_repeats": repeats, "target_s": 1.0,
                   "cache_flush_bytes": 0, "statistic": "synthetic"},
        "units": {"time": "s", "bytes": "B", "flops": "FLOP"},
        "measurements": measurements,
        "skipped": [{"kind": s.kind, "label": s.label, "dtype": s.dtype, "backend": s.backend,
                     "reason": s.reason} for s in skips],
    }
