"""Fit a calibration to every recorded trace and write sim/calibrations/<device>.json.

    python -m gpu_traces.calibrate            # all traces under gpu_traces/traces/
    python -m gpu_traces.calibrate --check    # exit 1 if the shipped files are out of date
    python -m gpu_traces.calibrate --report   # the leave-one-out tables of the shipped files
    python -m gpu_traces.calibrate --residuals  # every imported linear layer's held-out miss

What is fitted (the formulas live in sim/kernel_model.py, shared with the simulations):

1. Every point is put in the training or the held-out set by a hash of its kind, dtype,
   backend and label (a quarter held out). The copy sweep and the square GEMMs define
   the peaks and always train.
2. Launch overhead and bandwidth: a straight line t = launch + bytes / BW through the
   copy sweep, least squares on the relative error.
3. FLOP/s per dtype: the best square GEMM, after its launch overhead.
4. GEMM shape terms per dtype (alpha, beta, tile_m, tile_n, p, m_half, fixed, fixed_m,
   m_fixed, k_step): Nelder-Mead on the mean
   log error (soft-L1, so a disturbed point cannot drag the fit) for every tile pair of
   a small grid; the best pair wins.
5. Attention per SDPA backend (alpha, beta, p, fixed cost, passes of the score matrix
   through memory), and a line per elementwise op.
6. The errors of the calibrated model and of the plain roofline (the same peaks and
   launch overhead, no shape terms) on the held-out points: median and max of
   |predicted - measured| / measured, overall and per kind.

Only numpy is used, so this runs in the site's environment and the recorder's alike.
Same traces in, byte-identical files out: parameters and times are rounded to 6
significant digits and keys are sorted.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from gpu_traces.schema import TraceError, load_trace
from sim import hardware, kernel_model
from sim.calibration import CALIBRATION_DIR, CALIBRATION_FORMAT_VERSION, POINT_COLUMNS, calibration_from_section
from sim.kernel_model import predict_rows, relative_errors, spec_sheet

REPO_ROOT = Path(__file__).resolve().parent.parent
TRACES_DIR = Path(__file__).resolve().parent / "traces"
GENERATOR = "python -m gpu_traces.calibrate"
ANCHOR_KINDS = ("copy", "big-gemm")           # define the peaks; always in the training set
HELDOUT_SHARE = 4                             # one point in HELDOUT_SHARE is held out
TILE_M_GRID = (1, 16, 32, 64, 128, 256)
TILE_N_GRID = (1, 32, 64, 128, 256)
GPU_TILE_M_GRID = (16, 32, 64, 128)           # a GPU (64 SMs or more): the tiles its GEMM kernels use
GPU_TILE_N_GRID = (64, 128, 256)
STREAMING_BYTES = 128 * 2**20                 # imported residual adds this large stream from HBM
GRID_ITERATIONS = 300                         # Nelder-Mead steps of the quick fit that ranks tiles
MAX_SMOOTHNESS = 64.0                         # p beyond this is a sharp max in practice
SIG_DIGITS = 6
LOSS_DIGITS = 9                               # the fits compare losses to this many digits


class CalibrationError(ValueError):
    """A trace that validates but cannot be calibrated (e.g. no copy sweep)."""


def sig(x: float, digits: int = SIG_DIGITS) -> float:
    """`x` rounded to `digits` significant digits (the files' fixed float format)."""
    return float(f"{float(x):.{digits}g}")


# ------------------------------------------------------------------------------------
# A small, deterministic Nelder-Mead (no scipy in the browser's environment)
# ------------------------------------------------------------------------------------

def nelder_mead(f: Callable[[np.ndarray], float], x0: Sequence[float], step: float = 0.5,
                max_iter: int = 800, xtol: float = 1e-8, ftol: float = 1e-12) -> tuple[np.ndarray, float]:
    """Minimise `f` from `x0`; returns (x, f(x)). Standard reflection/expansion/contraction.

    `f` is compared at LOSS_DIGITS significant digits: numpy's exp, log and power differ in
    their last bits between CPUs (SIMD or libm), and where the loss is flat along a
    parameter that noise alone would steer the simplex to another end point."""
    f0 = f

    def f(x):
        v = f0(x)
        return float(f"{v:.{LOSS_DIGITS}g}") if np.isfinite(v) else float("inf")
    x0 = np.asarray(x0, dtype=float)
    n = len(x0)
    pts = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(max_iter):
        order = np.argsort(vals, kind="stable")
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        if (np.max(np.abs(np.asarray(pts[1:]) - pts[0])) < xtol
                and abs(vals[-1] - vals[0]) < ftol):
            break
        centroid = np.mean(pts[:-1], axis=0)
        xr = centroid + (centroid - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = centroid + 2.0 * (centroid - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (pts[-1] - centroid)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (p - pts[0]) for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    best = int(np.argmin(vals))
    return pts[best], vals[best]


ROBUST_SCALE = 0.05   # log errors beyond ~5% count less than squared (soft-L1)


def _log_loss(pred: np.ndarray, meas: np.ndarray) -> float:
    """Soft-L1 loss of the log errors: squared when small, linear when large, so a point
    disturbed by the machine (a preempted repeat) cannot drag the whole fit."""
    r = np.log(pred / meas) / ROBUST_SCALE
    terms = 2.0 * (np.sqrt(1.0 + r * r) - 1.0)
    loss = float(np.add.reduce(terms, axis=None) / terms.size)   # np.mean's sum and division, less its overhead
    return loss if np.isfinite(loss) else float("inf")   # a term is inf or nan where r is


def _smoothness(theta: float) -> float:
    return float(min(max(np.exp(min(theta, 50.0)), 1.0), MAX_SMOOTHNESS))   # e^50 > MAX_SMOOTHNESS: no overflow


MAX_EFFICIENCY = 4.0   # an efficiency this high means "never the limit" (the other term rules)
MAX_SCORE_TRAFFIC = 16.0   # passes of the score matrix through memory, at most


def _exp(theta: float) -> float:
    return float(np.exp(min(theta, 200.0)))      # no overflow where Nelder-Mead wanders far


def _efficiency(theta: float) -> float:
    # e^50 > MAX_EFFICIENCY: the same value, without an overflow where Nelder-Mead wanders far
    return float(min(max(np.exp(min(theta, 50.0)), 1e-6), MAX_EFFICIENCY))


# ------------------------------------------------------------------------------------
# The fits
# ------------------------------------------------------------------------------------

def heldout(kind: str, dtype: str, backend: str | None, label: str) -> bool:
    """Whether a point is held out of the fit (stable across runs and machines)."""
    if kind in ANCHOR_KINDS:
        return False
    key = f"{kind}|{dtype}|{backend}|{label}".encode()
    return int(hashlib.sha256(key).hexdigest()[:8], 16) % HELDOUT_SHARE == 0


def fit_line(nbytes: np.ndarray, t: np.ndarray,
             max_rate: float | None = None) -> tuple[float, float]:
    """(fixed_s, bytes_per_s) of t = fixed + bytes / rate, least squares on relative error.

    A negative intercept is clamped to zero and the slope refitted. With `max_rate`, a
    faster rate is clamped to it and the intercept refitted.
    """
    a = np.stack([1.0 / t, nbytes / t], axis=1)
    (fixed, inv_rate), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if max_rate is not None and 0 < inv_rate < 1.0 / max_rate:
        inv_rate = 1.0 / max_rate
        fixed = max(float(np.sum((1.0 - nbytes * inv_rate / t) / t) / np.sum(1.0 / t ** 2)), 0.0)
        return float(fixed), float(max_rate)
    if fixed < 0:
        fixed = 0.0
        inv_rate = float(np.sum(nbytes / t) / np.sum((nbytes / t) ** 2))
    if inv_rate <= 0:
        raise CalibrationError("copy/elementwise times do not grow with bytes; cannot fit a rate")
    return float(fixed), float(1.0 / inv_rate)


def _polish(loss, starts: Sequence[Sequence[float]], restarts: int = 3) -> tuple[np.ndarray, float]:
    """Best Nelder-Mead result over several starts, each restarted from where it stopped
    (a fresh simplex escapes the collapsed ones that stall the method)."""
    best = None
    for x0 in starts:
        x, val = nelder_mead(loss, x0)
        for _ in range(restarts):
            x, val = nelder_mead(loss, x, step=0.2)
        if best is None or val < best[1] - 1e-12:
            best = (x, val)
    return best


def fit_gemm(points: list[dict], bw: float, flops_per_s: float, launch: float,
             units: int) -> dict:
    """Shape terms of one dtype's GEMMs.

    Every tile pair of the grid gets a quick fit; the two best are then fitted again
    from several starting corners (p = 1.5, 4, 16) and the best result wins. The
    parameters (theta, all logs): alpha, beta, p, m_half, fixed, fixed_m, m_fixed, k_step.
    """
    fl = np.array([p["flops"] for p in points])
    nb = np.array([p["bytes"] for p in points])
    m = np.array([p["shape"]["m"] for p in points], dtype=float)
    n = np.array([p["shape"]["n"] for p in points], dtype=float)
    k = np.array([p["shape"]["k"] for p in points], dtype=float)
    t = np.array([p["time_s"] for p in points])
    # m_fixed stays within the token counts timed: beyond them fixed_m m / (m + m_fixed)
    # is a cost per token, not a start-up, and fixed_m could grow without bound with it
    max_m = float(np.max(m))

    def params(theta, tile_m, tile_n):
        return kernel_model.GemmShapeParams(
            _efficiency(theta[0]), _efficiency(theta[1]), tile_m, tile_n, _smoothness(theta[2]),
            half_rate_tokens=float(np.exp(theta[3])), fixed_s=float(np.exp(theta[4])),
            fixed_m_s=float(np.exp(theta[5])), fixed_half_tokens=min(_exp(theta[6]), max_m),
            k_step_s=float(np.exp(theta[7])))

    def make_loss(tile_m, tile_n):
        wave = kernel_model.tile_wave_efficiency(m, n, tile_m, tile_n, units)

        def loss(theta):
            return _log_loss(params(theta, tile_m, tile_n).time_s(
                fl, nb, m, n, k, bandwidth_bytes_per_s=bw, flops_per_s=flops_per_s,
                launch_overhead_s=launch, compute_units=units, tile_wave=wave), t)
        return loss

    # the fixed costs start at a twentieth of the fastest GEMM each, the walk along K at a
    # tenth of it for the median depth; each may shrink to 0
    fixed0 = np.log(0.05 * float(np.min(t)))
    step0 = np.log(0.1 * float(np.min(t)) / float(np.median(k)))

    def start(p0):
        return [0.0, 0.0, np.log(p0), np.log(4.0), fixed0, fixed0, np.log(64.0), step0]
    grid_m, grid_n = (TILE_M_GRID, TILE_N_GRID) if units < 64 else (GPU_TILE_M_GRID, GPU_TILE_N_GRID)
    first = []
    for tile_m in grid_m:
        for tile_n in grid_n:
            _, val = nelder_mead(make_loss(tile_m, tile_n), start(4.0), max_iter=GRID_ITERATIONS)
            first.append((val, tile_m, tile_n))
    first.sort(key=lambda x: x[0])                    # stable: grid order breaks ties
    best = None
    for _, tile_m, tile_n in first[:2]:
        theta, val = _polish(make_loss(tile_m, tile_n), [start(p0) for p0 in (1.5, 4.0, 16.0)])
        if best is None or val < best[0] - 1e-12:
            best = (val, theta, tile_m, tile_n)
    _, theta, tile_m, tile_n = best
    g = params(theta, tile_m, tile_n)
    tiny = 1e-4 * float(np.min(t))                    # below this a cost is reported as none
    fixed_m = g.fixed_m_s if g.fixed_m_s > tiny else 0.0
    return {"compute_efficiency": sig(g.compute_efficiency),
            "bandwidth_efficiency": sig(g.bandwidth_efficiency), "tile_m": tile_m,
            "tile_n": tile_n, "smoothness": sig(g.smoothness),
            "half_rate_tokens": sig(g.half_rate_tokens) if g.half_rate_tokens > 1e-3 else 0.0,
            "fixed_s": sig(g.fixed_s) if g.fixed_s > tiny else 0.0,
            "fixed_m_s": sig(fixed_m),
            "fixed_half_tokens": sig(g.fixed_half_tokens) if fixed_m and g.fixed_half_tokens > 1e-3
            else 0.0,
            "k_step_s": sig(g.k_step_s) if g.k_step_s * float(np.max(k)) > tiny else 0.0}


UNFUSED_BACKENDS = ("math",)   # write the score matrix to memory; the fused ones never do


def fit_roofline(points: list[dict], bw: float, flops_per_s: float, launch: float,
                 unfused: bool = True) -> dict:
    """Efficiencies, corner, fixed cost and score-matrix traffic of one attention backend.

    Only an unfused backend (`unfused`) gets a score-matrix traffic term: a fused kernel keeps
    the scores on chip, and a traffic term there would stand in for arithmetic the simulations
    (which never pass a score size) could then not see: on the H200 it made cuDNN's prefill
    attention half as slow in the fit as the simulations predicted it.
    """
    fl = np.array([p["flops"] for p in points])
    nb = np.array([p["bytes"] for p in points])
    sb = np.array([kernel_model.score_bytes(p["shape"]) for p in points])
    t = np.array([p["time_s"] for p in points])

    def traffic_of(theta):
        return float(min(np.exp(min(theta[4], 50.0)), MAX_SCORE_TRAFFIC)) if unfused else 0.0

    def loss(theta):
        params = kernel_model.RooflineParams(_efficiency(theta[0]), _efficiency(theta[1]),
                                        _smoothness(theta[2]), float(np.exp(theta[3])),
                                        traffic_of(theta))
        return _log_loss(params.time_s(fl, nb, bandwidth_bytes_per_s=bw, flops_per_s=flops_per_s,
                                       launch_overhead_s=launch, score_bytes=sb), t)
    # the fixed cost starts at a tenth of the fastest kernel, the score traffic at one pass;
    # both may shrink towards zero
    fixed0 = np.log(0.1 * float(np.min(t)))
    starts = [[0.0, 0.0, np.log(p0), fixed0] + ([0.0] if unfused else []) for p0 in (1.5, 4.0, 16.0)]
    theta, _ = _polish(loss, starts)
    fixed = float(np.exp(theta[3]))
    traffic = traffic_of(theta)
    return {"compute_efficiency": sig(_efficiency(theta[0])),
            "bandwidth_efficiency": sig(_efficiency(theta[1])), "smoothness": sig(_smoothness(theta[2])),
            "fixed_s": sig(fixed) if fixed > 1e-4 * float(np.min(t)) else 0.0,
            "score_traffic": sig(traffic) if traffic > 1e-3 else 0.0}


def _summary(pred: np.ndarray, roof: np.ndarray, meas: np.ndarray, mask: np.ndarray) -> dict:
    def stats(x):
        e = relative_errors(x[mask], meas[mask])
        return {"median_rel_err": sig(np.median(e), 4), "max_rel_err": sig(np.max(e), 4)}
    if not np.any(mask):
        return {"n": 0, "model": None, "roofline": None}
    return {"n": int(np.sum(mask)), "model": stats(pred), "roofline": stats(roof)}


def _row(m: Mapping, **rest) -> dict:
    """The calibration's row for one measurement: what it is, its work and its median time.

    The shape leaves out `impl` (which torch call ran: the same text on hundreds of rows,
    kept in the trace), so the files the site ships stay small.
    """
    shape = {k: v for k, v in m["shape"].items() if k != "impl"}
    return {"kind": m["kind"], "label": m["label"], "dtype": m["dtype"], "backend": m["backend"],
            "shape": shape, "flops": float(m["flops"]), "bytes": float(m["bytes"]),
            "time_s": sig(m["time"]["median_s"]), **rest}


def _point_rows(trace: Mapping) -> list[dict]:
    return [_row(m, p25_s=sig(m["time"]["p25_s"]), p75_s=sig(m["time"]["p75_s"]),
                 split="heldout" if heldout(m["kind"], m["dtype"], m["backend"], m["label"])
                 else "train")
            for m in trace["measurements"]]


def device_identity(dev: Mapping) -> tuple[str | None, str]:
    """(catalogue key or None, slug) of a trace's device: one identity for every tool."""
    if dev["type"] != "cuda":
        return None, dev["slug"]
    ident = hardware.identify_device(dev["name"])
    return ident.key, ident.slug


def _add_spec(section: dict, gpu) -> None:
    """The spec-sheet peaks and the achieved share of them (what carries over to a sibling GPU)."""
    section["spec"] = {"catalogue_key": gpu.name,
                       "bandwidth_bytes_per_s": gpu.hbm_bandwidth_bytes_per_s,
                       "flops_per_s": dict(gpu.dense_flops)}
    section["efficiency"] = {
        "bandwidth": sig(section["bandwidth_bytes_per_s"] / gpu.hbm_bandwidth_bytes_per_s),
        "flops": {dt: sig(f / gpu.dense_flops[dt]) for dt, f in section["flops_per_s"].items()
                  if dt in gpu.dense_flops}}


def fit_section(train: list[dict], units: int, trace_file: str) -> dict:
    """The "calibration" section fitted to the training rows of one device."""
    def of(kind, dtype=None, backend=None, rows=train):
        return [r for r in rows if r["kind"] == kind and (dtype is None or r["dtype"] == dtype)
                and (backend is None or r["backend"] == backend)]
    rows = train
    copies = of("copy")
    imported = not copies
    if imported:
        # imported profiles have no copy sweep: the residual add (read two tensors, write
        # one, nothing else) is the closest thing to a copy they time. With no cache flush
        # between its repeats, only adds far larger than any L2 give the bandwidth; the
        # fixed cost per kernel is the intercept of the line through all of them.
        adds = [r for r in of("elementwise") if r["shape"]["op"] == "residual_add"]
        copies = [r for r in adds if r["bytes"] >= STREAMING_BYTES]
    if len(copies) < 2:
        raise CalibrationError(f"{trace_file}: needs at least 2 copy (or residual add) "
                               f"measurements to fit bandwidth and launch overhead, has "
                               f"{len(copies)}")
    launch, bw = fit_line(np.array([r["bytes"] for r in copies]),
                          np.array([r["time_s"] for r in copies]))
    if imported:
        launch, _ = fit_line(np.array([r["bytes"] for r in adds]),
                             np.array([r["time_s"] for r in adds]))
    launch, bw = sig(launch), sig(bw)

    flops_per_s = {}
    for dtype in sorted({r["dtype"] for r in rows if r["kind"] in ("gemm", "big-gemm")}):
        src = of("big-gemm", dtype) or of("gemm", dtype)
        flops_per_s[dtype] = sig(max(r["flops"] / max(r["time_s"] - launch, 0.5 * r["time_s"])
                                     for r in src))
    gemm = {}
    for dtype, peak in flops_per_s.items():
        pts = of("gemm", dtype) + of("big-gemm", dtype)
        if len(pts) >= 4:
            gemm[dtype] = fit_gemm(pts, bw, peak, launch, units)

    attention = {}
    att_rows = [r for r in train if r["kind"].startswith("attention")]
    for backend in sorted({r["backend"] for r in att_rows}):
        pts = [r for r in att_rows if r["backend"] == backend]
        dtypes = {r["dtype"] for r in pts}
        if len(pts) >= 4 and len(dtypes) == 1 and next(iter(dtypes)) in flops_per_s:
            attention[backend] = fit_roofline(pts, bw, flops_per_s[next(iter(dtypes))], launch,
                                              unfused=backend in UNFUSED_BACKENDS)
    default_backend = (torch_default_backend(att_rows, attention)
                       or next((b for b in ("flash", "cudnn", "efficient", "math") if b in attention),
                               None))

    elementwise = {}
    for op in sorted({r["shape"]["op"] for r in of("elementwise")}):
        pts = [r for r in of("elementwise") if r["shape"]["op"] == op]
        if len(pts) >= 2:
            try:
                # imported (L2-resident small tensors): no faster than the streaming bandwidth
                fixed, rate = fit_line(np.array([r["bytes"] for r in pts]),
                                       np.array([r["time_s"] for r in pts]),
                                       max_rate=bw if imported else None)
            except CalibrationError:
                continue            # no growth with size: left to the plain roofline
            elementwise[op] = {"fixed_s": sig(fixed), "bandwidth_efficiency": sig(rate / bw)}

    return {
        "launch_overhead_s": launch, "bandwidth_bytes_per_s": bw, "flops_per_s": flops_per_s,
        "compute_units": units, "gemm": gemm, "attention": attention,
        "default_attention_backend": default_backend, "elementwise": elementwise,
        "efficiency": None, "spec": None,
    }


def torch_default_backend(rows: Sequence[Mapping], fitted: Mapping) -> str | None:
    """The SDPA backend torch itself picks (each attention point's `default_backend`, which
    the recorder stores in its shape) for most of these attention points, if the calibration
    fitted that backend; else None (imported profiles and older traces do not say).

    A fit uses it when `attention_time_s` is given no backend, so a figure that says
    "attention" times what torch would run on that device (cuDNN on Hopper with recent torch),
    not whichever backend happens to come first in a fixed list.
    """
    picks = [r["shape"].get("default_backend") for r in rows if r["kind"].startswith("attention")]
    picks = [p for p in picks if p in fitted]
    return max(sorted(set(picks)), key=picks.count) if picks else None


def fit_trace(trace: Mapping, trace_file: str) -> dict:
    """The calibration file's contents for one validated trace."""
    dev = trace["device"]
    rows = _point_rows(trace)
    train = [r for r in rows if r["split"] == "train"]
    units = int(dev["compute_units"])
    section = fit_section(train, units, trace_file)
    key, slug = device_identity(dev)
    gpu = hardware.get(key) if key else None
    name = (dev["name"] if dev["type"] == "cuda"
            else f"{dev['name']} (CPU, {units} thread{'s' * (units > 1)})")
    if gpu is not None:
        _add_spec(section, gpu)

    cal = calibration_from_section(name, section)
    model, roof = predict_rows(cal, rows)
    meas = np.array([r["time_s"] for r in rows])
    held = np.array([r["split"] == "heldout" for r in rows])
    kinds = np.array([r["kind"] for r in rows])
    fit = {
        "split": (f"one point in {HELDOUT_SHARE} held out by a hash of kind, dtype, backend and "
                  f"label; the copy sweep and square GEMMs always train"),
        "n_points": len(rows),
        "heldout": _summary(model, roof, meas, held),
        "train": _summary(model, roof, meas, ~held),
        "by_kind": {k: {"heldout": _summary(model, roof, meas, held & (kinds == k)),
                        "train": _summary(model, roof, meas, ~held & (kinds == k))}
                    for k in sorted(set(kinds))},
        "spec_sheet_heldout": None,
    }
    if fit["heldout"]["n"] == 0:
        raise CalibrationError(f"{trace_file}: no held-out points; the trace is too small to "
                               f"report a fit error")
    if gpu is not None:
        spec = spec_sheet(gpu)
        spec_pred = np.array([spec.op_time_s(r["flops"], r["bytes"], r["dtype"])
                              if r["dtype"] in spec.flops_per_s or r["flops"] == 0 else np.nan
                              for r in rows])
        ok = held & np.isfinite(spec_pred)
        fit["spec_sheet_heldout"] = _summary(spec_pred, spec_pred, meas, ok)["model"]

    sw = trace["software"]
    return {
        "format_version": CALIBRATION_FORMAT_VERSION,
        "generated_by": GENERATOR,
        "device": {"name": name, "recorded_name": dev["name"], "type": dev["type"],
                   "slug": slug, "catalogue_key": key, "arch": gpu.arch if gpu else None,
                   "compute_units": units, "compute_unit_kind": dev["compute_unit_kind"],
                   "memory_bytes": dev["memory_bytes"]},
        "trace": {"file": trace_file, "recorded_at": trace["recorded_at"],
                  "suite": trace["suite"]["name"], "torch": sw["torch"], "cuda": sw["cuda"],
                  "driver": sw["driver"], "timing": trace["timing"]["method"],
                  "skipped": len(trace["skipped"])},
        "calibration": section,
        "fit": fit,
        "points": {"columns": list(POINT_COLUMNS),
                   "rows": [[r[c] for c in POINT_COLUMNS] for r in rows if _shown(r)]},
    }


# The GEMMs of one model go into a recorded trace's file for the figures (every other kernel
# does too); the fit and its errors use every point. This keeps the files the site ships
# small: the H200 trace has 792 GEMMs of three models.
SHOWN_GEMM_MODEL = "llama-3.1-8b"


def _shown(row: Mapping) -> bool:
    return row["kind"] != "gemm" or row["shape"].get("model") == SHOWN_GEMM_MODEL


# ------------------------------------------------------------------------------------
# Imported profiles: several models of one device, judged by leaving one model out
# ------------------------------------------------------------------------------------

SHOWN_MODEL = {"H100-SXM": "llama-2-7b-hf", "A100-80GB": "meta-llama-3-8b"}   # points kept in the file
ALLREDUCE_TOPOLOGY = {"H100-SXM": "h100_dgx", "A100-80GB": "a100_dgx"}     # what sim.parallel models


def op_kind(row: Mapping) -> str:
    """The op kind a leave-one-model-out error is reported for: 'linear' or the elementwise op."""
    return "linear" if row["kind"] in ("gemm", "big-gemm") else row["shape"].get("op", row["kind"])


def _imported_rows(trace: Mapping) -> list[dict]:
    model = (trace["source"].get("model") or "").split("/")[-1].lower() or None
    return [_row(m, p25_s=None, p75_s=None, split="train", model=model)
            for m in trace["measurements"] if m["kind"] != "collective"]


def _errors(pred, meas, mask) -> dict:
    e = relative_errors(pred[mask], meas[mask])
    return {"n": int(np.sum(mask)), "median_rel_err": sig(np.median(e), 4),
            "max_rel_err": sig(np.max(e), 4)}


def in_processes(fn: Callable, calls: Sequence[tuple], jobs: int | None = None) -> list:
    """[fn(*args) for args in calls], in order, on up to `jobs` processes (default: the
    machine's cores). The calibration's fits are deterministic and run the same code either
    way, so the results are those of one process. Where processes cannot be started, the
    calls run here, one after the other; an exception `fn` raises is raised here either way."""
    workers = min(len(calls), jobs or os.cpu_count() or 1)
    if workers > 1:
        try:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                futures = [pool.submit(fn, *args) for args in calls]
                return [f.result() for f in futures]
        except (OSError, NotImplementedError, ImportError, BrokenProcessPool):
            pass                          # no processes here (a sandbox, a browser): call in turn
    return [fn(*args) for args in calls]


def leave_one_model_out(rows: list[dict], units: int, where: str,
                        jobs: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(model, plain roofline) predictions of every row by a fit on every other model (the
    folds fitted on up to `jobs` processes: in_processes)."""
    pred = np.full(len(rows), np.nan)
    roof = np.full(len(rows), np.nan)
    models = sorted({r["model"] for r in rows})
    sections = in_processes(fit_section, [([r for r in rows if r["model"] != model], units,
                                           f"{where} without {model}") for model in models], jobs)
    for model, section in zip(models, sections):
        idx = [i for i, r in enumerate(rows) if r["model"] == model]
        cal = calibration_from_section("fold", section)
        pred[idx], roof[idx] = predict_rows(cal, [rows[i] for i in idx])
    return pred, roof


def monotone_floor(rows: list[dict]) -> dict | None:
    """The smallest worst-case error any prediction that never falls as tokens grow can
    reach on these linear layers, whatever its formula or parameters.

    A layer (model, layer, n, k, tensor-parallel degree) is timed at many token counts m.
    A prediction non-decreasing in m that is within eps of every time needs, for every
    m_a < m_b (or m_a = m_b), t_a (1 - eps) <= t_b (1 + eps), and these pairs suffice
    (predict the running maximum of t (1 - eps)). So eps >= (t_a - t_b) / (t_a + t_b)
    for every pair in which the time falls, and the largest of these is the floor. Every
    formula of sim.kernel_model's kind (padded tiles, waves, m_half more rows of math, a
    rising start-up) is non-decreasing in m, and so is the fastest of several such kernels.

    >>> r = [{"kind": "gemm", "model": "x", "dtype": "fp16", "time_s": t,
    ...       "shape": {"m": m, "n": 8, "k": 8, "layer": "o"}} for m, t in ((1, 3.0), (2, 1.0))]
    >>> monotone_floor(r)["max_rel_err"]
    0.5
    """
    series: dict[tuple, list[tuple[int, float]]] = {}
    for r in rows:
        if op_kind(r) == "linear" and r.get("model"):
            s = r["shape"]
            key = (r["model"], s.get("layer", ""), int(s["n"]), int(s["k"]),
                   int(s.get("tensor_parallel", 1)), r["dtype"])
            series.setdefault(key, []).append((int(s["m"]), float(r["time_s"])))
    floors = {key: _falling_floor(pts) for key, pts in sorted(series.items())}
    falling = {key: f for key, f in floors.items() if f is not None}
    if not falling:
        return None
    key = max(falling, key=lambda kk: falling[kk][0])      # first of equals: sorted keys
    e, (m_a, t_a), (m_b, t_b) = falling[key]
    model, layer, n, k, tp, _ = key
    return {"max_rel_err": sig(e, 4), "series": len(series),
            "series_over_15pct": sum(1 for f in falling.values() if f[0] > 0.15),
            "model": model, "layer": layer, "n": n, "k": k, "tensor_parallel": tp,
            "tokens": [m_a, m_b], "times_s": [t_a, t_b]}


def _falling_floor(pts: Sequence[tuple[int, float]]):
    """(floor, (m_a, t_a), (m_b, t_b)) of one layer's (tokens, time) points: the pair in which
    the time falls the most as tokens grow (equal tokens count both ways); None if it never falls."""
    worst = None
    peak = None                                  # the slowest point at these tokens or fewer
    for m, t in sorted(pts, key=lambda mt: (mt[0], -mt[1])):
        if peak is not None and peak[1] > t:
            e = (peak[1] - t) / (peak[1] + t)
            if worst is None or e > worst[0]:
                worst = (e, peak, (m, t))
        if peak is None or t > peak[1]:
            peak = (m, t)
    return worst


def lomo_report(rows: list[dict], pred: np.ndarray, roof: np.ndarray) -> dict:
    """Median and max leave-one-model-out error, overall and per op kind, model vs roofline."""
    meas = np.array([r["time_s"] for r in rows])
    kinds = np.array([op_kind(r) for r in rows])
    models = np.array([r["model"] for r in rows])
    everything = np.ones(len(rows), dtype=bool)

    def both(mask):
        return {"model": _errors(pred, meas, mask), "roofline": _errors(roof, meas, mask)}
    return {"all": both(everything),
            "by_op": {k: both(kinds == k) for k in sorted(set(kinds))},
            "by_left_out_model": {m: both(models == m) for m in sorted(set(models))},
            "linear_monotone_floor": monotone_floor(rows)}


def fit_allreduce(traces: Sequence[Mapping], topology: str) -> dict | None:
    """All-reduce inside one server: t = smax_p(latency, 2 (g - 1) / g x bytes / bus).

    A fixed latency (NCCL's setup and synchronisation) that a ring's traffic hides once the
    message is large, with the roofline's rounded corner (sim.kernel_model.smooth_max).
    Robust fit on the log error over the server's GPU counts; judged by leaving one GPU
    count out (fit on the others, predict it). Returns None without such a profile.
    """
    pts = [m for tr in traces for m in tr["measurements"]
           if m["kind"] == "collective" and m["shape"]["op"] == "all_reduce"
           and m["shape"].get("topology") == topology and m["shape"]["gpus"] > 1
           and m["shape"]["gpus"] == m["shape"]["gpus_per_node"]]
    if not pts:
        return None
    g = np.array([p["shape"]["gpus"] for p in pts], dtype=float)
    b = np.array([p["bytes"] for p in pts])
    t = np.array([sig(p["time"]["median_s"]) for p in pts])

    def params(theta):
        return kernel_model.AllReduceParams(float(np.exp(theta[0])), float(np.exp(theta[1])),
                                       _smoothness(theta[2]), topology, 0.0, 0.0)

    def fit(mask):
        def loss(theta):
            return _log_loss(params(theta).times_s(b[mask], g[mask]), t[mask])
        x0 = [np.log(float(np.median(t[mask]))), np.log(float(np.max(b[mask] / t[mask]))), np.log(4.0)]
        theta, _ = _polish(loss, [x0])
        return params(theta)

    full = fit(np.ones(len(t), dtype=bool))
    pred = np.empty(len(t))
    for count in sorted(set(g)):
        out = g == count
        pred[out] = fit(~out).times_s(b[out], g[out])
    everything = np.ones(len(t), dtype=bool)
    return {
        "topology": topology,
        "latency_s": sig(full.latency_s), "bus_bytes_per_s": sig(full.bus_bytes_per_s),
        "smoothness": sig(full.smoothness),
        "gpu_counts": sorted(int(x) for x in set(g)),
        "bytes_range": [float(b.min()), float(b.max())],
        "fit": {"leave_one_gpu_count_out": {
                    "all": _errors(pred, t, everything),
                    "by_gpus": {str(int(c)): _errors(pred, t, g == c) for c in sorted(set(g))}},
                "in_sample": _errors(full.times_s(b, g), t, everything)},
        "formula": "smooth_max(latency_s, 2 (g - 1) / g x bytes / bus_bytes_per_s; smoothness)",
    }


def fit_imported(traces: Sequence[tuple[Path, Mapping]], root: Path, jobs: int | None = None) -> dict:
    """The calibration file's contents for the imported profiles of one catalogue GPU."""
    first = traces[0][1]
    dev = first["device"]
    key = dev["catalogue_key"]
    gpu = hardware.get(key)
    units = int(dev["compute_units"])
    files = sorted(_rel(p, root) for p, _ in traces)
    folder = files[0].rsplit("/", 1)[0]
    rows = [r for _, tr in sorted(traces, key=lambda pt: str(pt[0])) for r in _imported_rows(tr)]
    if not rows or len({r["model"] for r in rows}) < 2:
        raise CalibrationError(f"{folder}: imported profiles of at least 2 models are needed to "
                               f"fit and to judge the fit by leaving one model out")
    section = fit_section(rows, units, folder)
    _add_spec(section, gpu)
    allreduce = fit_allreduce([tr for _, tr in traces], ALLREDUCE_TOPOLOGY.get(key, ""))
    section["allreduce"] = allreduce
    cal = calibration_from_section(gpu.display_name, section)
    full, _ = predict_rows(cal, rows)
    pred, roof = leave_one_model_out(rows, units, folder, jobs)
    report = lomo_report(rows, pred, roof)
    meas = np.array([r["time_s"] for r in rows])
    src = first["source"]
    shown = SHOWN_MODEL.get(key)
    kept = [r for r in rows if r["model"] == shown and r["shape"].get("tensor_parallel", 1) == 1]
    fit = {
        "split": ("leave one model out: for each model, fit on every other model and predict "
                  "it; every point is predicted once, by a fit that never saw its model"),
        "n_points": len(rows),
        "heldout": {"n": len(rows), "model": report["all"]["model"],
                    "roofline": report["all"]["roofline"]},
        "leave_one_model_out": report,
        "in_sample": _errors(full, meas, np.ones(len(rows), dtype=bool)),
        "by_kind": {}, "train": None,
    }
    # the spec-sheet assumption fits nothing, so every point is held out from it
    spec = spec_sheet(gpu)
    spec_pred = np.array([spec.op_time_s(r["flops"], r["bytes"], r["dtype"]) for r in rows])
    spec_err = _errors(spec_pred, meas, np.ones(len(rows), dtype=bool))
    fit["spec_sheet_heldout"] = {k: spec_err[k] for k in ("median_rel_err", "max_rel_err")}
    return {
        "format_version": CALIBRATION_FORMAT_VERSION,
        "generated_by": GENERATOR,
        "device": {"name": gpu.display_name, "recorded_name": src["device_as_named"],
                   "type": "cuda", "slug": hardware.device_slug(key), "catalogue_key": key,
                   "arch": gpu.arch, "compute_units": units, "compute_unit_kind": "SM",
                   "memory_bytes": dev["memory_bytes"]},
        "trace": {"file": folder, "recorded_at": first["recorded_at"], "suite": "imported",
                  "torch": None, "cuda": None, "driver": None,
                  "timing": first["timing"]["method"], "skipped": 0,
                  "source": {"repository": src["repository"], "commit": src["commit"],
                             "licence": src["licence"],
                             "licence_file": f"{folder.rsplit('/', 1)[0]}/{src['licence_file']}",
                             "device_as_named": src["device_as_named"],
                             "models": sorted({r["model"] for r in rows}),
                             "files": sorted(f for _, tr in traces for f in tr["source"]["files"]),
                             "recorded_by_project": False}},
        "calibration": section,
        "fit": fit,
        "points": {"columns": list(POINT_COLUMNS),
                   "rows": [[r[c] for c in POINT_COLUMNS] for r in kept]},
    }


def linear_residuals(traces_dir: Path = TRACES_DIR, jobs: int | None = None) -> str:
    """Every linear layer of the imported profiles with its leave-one-model-out prediction,
    worst first, then the errors by token count, layer and tensor-parallel degree: where the
    model misses, for whoever works on the formula (refits every fold; about a minute per GPU).
    """
    groups: dict[str, list] = {}
    for path in sorted(Path(traces_dir).rglob("*.json")):
        trace = load_trace(path)
        if "source" in trace and trace["device"]["catalogue_key"]:
            groups.setdefault(trace["device"]["catalogue_key"], []).append((path, trace))
    out = ["device,model,layer,m,n,k,tensor_parallel,measured_us,predicted_us,rel_err"]
    summary = []
    for key, traces in sorted(groups.items()):
        rows = [r for _, tr in sorted(traces, key=lambda pt: str(pt[0])) for r in _imported_rows(tr)]
        units = int(traces[0][1]["device"]["compute_units"])
        pred, _ = leave_one_model_out(rows, units, key, jobs)
        lin = [(r, p) for r, p in zip(rows, pred) if op_kind(r) == "linear"]
        err = np.array([(p - r["time_s"]) / r["time_s"] for r, p in lin])
        for i in np.argsort(-np.abs(err), kind="stable"):
            r, p = lin[i]
            s = r["shape"]
            out.append(f"{key},{r['model']},{s['layer']},{s['m']},{s['n']},{s['k']},"
                       f"{s.get('tensor_parallel', 1)},{r['time_s'] * 1e6:.4g},{p * 1e6:.4g},"
                       f"{err[i]:+.4f}")

        def line(name, mask):
            e = np.abs(err[mask])
            return (f"{key} {name}: n={int(mask.sum())} median {np.median(e):.1%}, "
                    f"max {np.max(e):.1%}, over 15% {np.mean(e > 0.15):.1%}")
        m = np.array([r["shape"]["m"] for r, _ in lin])
        summary.append(line("all", np.ones(len(lin), dtype=bool)))
        for lo, hi in ((1, 8), (9, 64), (65, 256), (257, 1024), (1025, 1 << 30)):
            summary.append(line(f"m {lo}-{hi if hi < 1 << 30 else 'up'}", (m >= lo) & (m <= hi)))
        for attr in ("layer", "tensor_parallel"):
            vals = np.array([r["shape"].get(attr, 1) for r, _ in lin])
            summary += [line(f"{attr} {v}", vals == v) for v in sorted(set(vals.tolist()))]
    return "\n".join(out) + "\n\n" + "\n".join(summary) + "\n"


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return path.name


# ------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------

def dumps(data: Mapping) -> str:
    """The file text: sorted keys, one point per line, a newline at the end."""
    head = {**data, "points": {**data["points"], "rows": "__ROWS__"}}
    text = json.dumps(head, indent=1, sort_keys=True, ensure_ascii=False)
    rows = ",\n".join("   " + json.dumps(r, sort_keys=True, separators=(",", ":"))
                      for r in data["points"]["rows"])
    return text.replace('"__ROWS__"', "[\n" + rows + "\n  ]") + "\n"


def _choose(traces: list[tuple[Path, dict]]) -> tuple[Path, dict]:
    # full suites before quick ones, then the most recent, then by path
    return sorted(traces, key=lambda pt: (pt[1]["suite"]["quick"],
                                          tuple(-ord(c) for c in pt[1]["recorded_at"]),
                                          str(pt[0])))[0]


def build_calibrations(traces_dir: Path = TRACES_DIR, root: Path = REPO_ROOT,
                       log=print, jobs: int | None = None) -> dict[str, str]:
    """{file name: text} of every calibration the traces under `traces_dir` give (the
    leave-one-model-out folds of imported profiles fitted on up to `jobs` processes)."""
    by_slug: dict[str, list] = {}
    imported: dict[str, list] = {}
    for path in sorted(Path(traces_dir).rglob("*.json")):
        trace = load_trace(path)                     # TraceError says what is wrong
        if trace.get("synthetic"):
            raise CalibrationError(f"{path}: a synthetic trace (made up by the model for tests) "
                                   f"does not belong among the recorded traces")
        dev = trace["device"]
        if "source" in trace:
            if not dev["catalogue_key"]:
                raise CalibrationError(f"{path}: an imported trace must name its catalogue GPU")
            imported.setdefault(hardware.device_slug(dev["catalogue_key"]), []).append((path, trace))
            continue
        key, slug = device_identity(dev)
        if dev["type"] == "cuda" and key is None:
            log(f"warning: {path}: {hardware.identify_device(dev['name']).reason}. Its "
                f"calibration (sim/calibrations/{slug}.json) is listed among the recorded "
                f"devices, but no catalogue GPU takes its numbers from it; if it is a catalogue "
                f"part, add its device name to that GPU in sim/hardware.py")
        by_slug.setdefault(slug, []).append((path, trace))
    out = {}
    for slug in sorted(set(by_slug) | set(imported)):
        if slug not in by_slug:
            data = fit_imported(imported[slug], root, jobs)
            out[f"{slug}.json"] = dumps(data)
            lomo = data["fit"]["leave_one_model_out"]
            log(f"{data['trace']['file']} (imported, {len(imported[slug])} files) => "
                f"sim/calibrations/{slug}.json: leave-one-model-out error (n={lomo['all']['model']['n']}) "
                f"model median {lomo['all']['model']['median_rel_err']:.1%}, max "
                f"{lomo['all']['model']['max_rel_err']:.1%}; plain roofline median "
                f"{lomo['all']['roofline']['median_rel_err']:.1%}, max "
                f"{lomo['all']['roofline']['max_rel_err']:.1%}")
            continue
        path, trace = _choose(by_slug[slug])
        rel = _rel(path, root)
        data = fit_trace(trace, rel)
        out[f"{slug}.json"] = dumps(data)
        h = data["fit"]["heldout"]
        log(f"{rel} => sim/calibrations/{slug}.json: held-out error (n={h['n']}) model median "
            f"{h['model']['median_rel_err']:.1%}, max {h['model']['max_rel_err']:.1%}; plain "
            f"roofline median {h['roofline']['median_rel_err']:.1%}, max "
            f"{h['roofline']['max_rel_err']:.1%}")
        for other, _ in by_slug[slug]:
            if other != path:
                log(f"  (not used: {other}, an older or quick trace of the same device)")
        for other, _ in imported.get(slug, []):
            log(f"  (not used: {other}, imported; this project's own recording of the device wins)")
    return out


def _atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename, so a
    full disk or a crash leaves the old file (or none), never a truncated one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _is_generated(path: Path) -> bool:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("generated_by") == GENERATOR


def stray_files(out_dir: Path, files: Mapping[str, str]) -> list[str]:
    """Files in `out_dir` that no trace produces and that this tool did not write."""
    return sorted(q.name for q in Path(out_dir).glob("*.json")
                  if q.name not in files and not _is_generated(q))


def _stray_message(out_dir: Path, stray: Sequence[str]) -> str:
    return (f"{', '.join(stray)} in {out_dir} {'was' if len(stray) == 1 else 'were'} not written "
            f"by `{GENERATOR}` (no \"generated_by\": \"{GENERATOR}\") and no trace produces "
            f"{'it' if len(stray) == 1 else 'them'}: every calibration must come from a recorded "
            f"trace. Delete {'it' if len(stray) == 1 else 'them'}, or record a trace of that device "
            f"(gpu_traces/README.md); running `{GENERATOR}` does not remove files it did not write")


def write_calibrations(files: Mapping[str, str], out_dir: Path = CALIBRATION_DIR) -> None:
    """Write the files (atomically) and remove generated ones that no trace produces any more."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in sorted(out_dir.glob("*.json")):
        if old.name not in files and _is_generated(old):
            old.unlink()
    for name, text in files.items():
        p = out_dir / name
        if not p.exists() or p.read_text() != text:
            _atomic_write(p, text)


def quality_report(cal_dir: Path = CALIBRATION_DIR) -> str:
    """Markdown tables of the leave-one-out errors in the calibration files (no refitting).

    One row per device and op kind: points, the calibrated model's median and max
    |predicted - measured| / measured when fitted without the predicted model, and the
    plain roofline's on the same points; the floor under the linear layers' worst case
    (`monotone_floor`); then the linear-layer terms fitted to every model (GPUs),
    with their units; then each recorded trace's held-out errors per kernel kind, and the
    stated spec-sheet fallback's on the same GPU points; then the all-reduce fits, leaving
    one GPU count out.
    """
    out = ["| device | op kind | points | model median | model max | plain roofline median "
           "| plain roofline max |", "|---|---|---:|---:|---:|---:|---:|"]
    gemm = ["| device | dtype | FLOP/s reached, alpha F (of spec) | weights streamed, beta BW (of "
            "spec) | tile | corner p | m_half | launch | fixed | fixed_m | k_step per K element |",
            "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    floors = []
    recorded = ["| device | kernel kind | points | model median | model max | plain roofline median "
                "| plain roofline max |", "|---|---|---:|---:|---:|---:|---:|"]
    spec_rows = []
    comm = ["| device | measured in | GPUs | points | median | max | latency | bus bandwidth "
            "| corner p |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for path in sorted(Path(cal_dir).glob("*.json")):
        data = json.loads(path.read_text())
        lomo = data["fit"].get("leave_one_model_out")
        name = data["device"]["name"]

        def error_row(op, n, e):
            return (f"| {name} | {op} | {n} | {e['model']['median_rel_err']:.1%} "
                    f"| {e['model']['max_rel_err']:.1%} | {e['roofline']['median_rel_err']:.1%} "
                    f"| {e['roofline']['max_rel_err']:.1%} |")
        if lomo:
            out += [error_row(op, e["model"]["n"], e)
                    for op, e in [*lomo["by_op"].items(), ("all", lomo["all"])]]
        else:
            fit = data["fit"]
            rows = [(k, v["heldout"]) for k, v in fit["by_kind"].items() if v["heldout"]["n"]]
            recorded += [error_row(op, e["n"], e) for op, e in [*rows, ("all", fit["heldout"])]]
            spec = fit.get("spec_sheet_heldout")
            if spec:
                spec_rows.append(f"- {name}: median {spec['median_rel_err']:.1%}, max "
                                 f"{spec['max_rel_err']:.1%} ({data['trace']['file']}, recorded "
                                 f"{data['trace']['recorded_at'][:10]})")
        f = lomo.get("linear_monotone_floor") if lomo else None
        if f:
            t_a, t_b = (x * 1e6 for x in f["times_s"])
            floors.append(
                f"- {name}: {f['max_rel_err']:.1%}, from {f['model']} {f['layer']} "
                f"({f['n']} x {f['k']}, tensor-parallel {f['tensor_parallel']}): {t_a:.3g} µs "
                f"at {f['tokens'][0]} tokens, {t_b:.3g} µs at {f['tokens'][1]}; in "
                f"{f['series_over_15pct']} of the {f['series']} layers timed (model, layer, "
                f"tensor-parallel degree) the time falls by more than a 15% worst case allows")
        cal = data["calibration"]
        for dtype, g in sorted(cal["gemm"].items()) if cal["spec"] else ():   # GPUs only
            spec = cal["spec"]
            f = g["compute_efficiency"] * cal["flops_per_s"][dtype]
            b = g["bandwidth_efficiency"] * cal["bandwidth_bytes_per_s"]
            gemm.append(
                f"| {name} | {dtype} | {f / 1e12:.0f} TFLOP/s ({f / spec['flops_per_s'][dtype]:.0%}) "
                f"| {b / 1e12:.2f} TB/s ({b / spec['bandwidth_bytes_per_s']:.0%}) "
                f"| {g['tile_m']} x {g['tile_n']} | {g['smoothness']:.3g} "
                f"| {g['half_rate_tokens']:.3g} tokens | {cal['launch_overhead_s'] * 1e6:.2f} µs "
                f"| {g['fixed_s'] * 1e6:.2f} µs | {g.get('fixed_m_s', 0.0) * 1e6:.2f} µs "
                f"(half at {g.get('fixed_half_tokens', 0.0):.3g} tokens) "
                f"| {g.get('k_step_s', 0.0) * 1e12:.0f} ps |")
        a = data["calibration"].get("allreduce")
        if a:
            e = a["fit"]["leave_one_gpu_count_out"]["all"]
            comm.append(f"| {name} | {a['topology']} | {', '.join(map(str, a['gpu_counts']))} "
                        f"| {e['n']} | {e['median_rel_err']:.1%} | {e['max_rel_err']:.1%} "
                        f"| {a['latency_s'] * 1e6:.1f} µs | {a['bus_bytes_per_s'] / 1e9:.0f} GB/s "
                        f"| {a['smoothness']:.3g} |")
    floor = ("" if not floors else
             "\n\nLinear layers, the lowest worst case open to any model whose time never "
             "falls as tokens grow (some measured times do fall; the largest fall sets it):"
             "\n\n" + "\n".join(floors))
    return ("Leave one model out (fit on every other model, predict this one):\n\n"
            + "\n".join(out) + floor + "\n\nLinear layers, the fitted terms (imported profiles: fitted to every model; recorded traces: to the points not held out) (sim/kernel_model.py: "
            "t = launch + fixed + fixed_m m / (m + m_fixed) + k_step k + smooth-max_p(bytes / "
            "(beta BW), FLOPs / (alpha F eta))):\n\n" + "\n".join(gemm)
            + "\n\nRecorded traces (this project's recorder), a quarter of the points held out of "
            "the fit by a hash of their names:\n\n" + "\n".join(recorded)
            + ("" if not spec_rows else "\n\nThe stated fallback (80% of the datasheet's bandwidth, "
               "60% of its FLOP/s, a fixed launch cost) on the same held-out GPU points:\n\n"
               + "\n".join(spec_rows))
            + "\n\nAll-reduce inside one server, leave one GPU count out:\n\n"
            + "\n".join(comm) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=GENERATOR, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traces", type=Path, default=TRACES_DIR, help="folder of traces")
    p.add_argument("--out", type=Path, default=CALIBRATION_DIR, help="folder for the calibrations")
    p.add_argument("--report", action="store_true",
                   help="print the leave-one-out error tables of the files in --out (no refit)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if the files in --out differ from what the traces give")
    p.add_argument("--residuals", action="store_true",
                   help="print every imported linear layer's leave-one-model-out error, worst "
                        "first, and a summary by token count, layer and tensor-parallel degree")
    p.add_argument("--jobs", type=int, default=None,
                   help="processes for the leave-one-model-out folds (default: the machine's "
                        "cores; 1 fits them in this process); the output is the same either way")
    args = p.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        p.error("--jobs must be 1 or more")
    if args.residuals:
        print(linear_residuals(args.traces, args.jobs), end="")
        return 0
    if args.report:
        print(quality_report(args.out), end="")
        return 0
    try:
        files = build_calibrations(args.traces, log=lambda s: print(s, file=sys.stderr), jobs=args.jobs)
    except (TraceError, CalibrationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    stray = stray_files(args.out, files)
    if args.check:
        stale = [n for n, text in files.items()
                 if not (args.out / n).exists() or (args.out / n).read_text() != text]
        gone = [q.name for q in args.out.glob("*.json")
                if q.name not in files and q.name not in stray]
        if stale or gone:
            print(f"out of date: {', '.join(stale + gone)}; run `{GENERATOR}`", file=sys.stderr)
        if stray:
            print(f"error: {_stray_message(args.out, stray)}", file=sys.stderr)
        return 1 if stale or gone or stray else 0
    try:
        write_calibrations(files, args.out)
    except OSError as e:
        print(f"error: cannot write {args.out}: {e}; the files there are unchanged",
              file=sys.stderr)
        return 2
    if stray:
        print(f"warning: {_stray_message(args.out, stray)}", file=sys.stderr)
    if not files:
        print(f"no traces under {args.traces}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
