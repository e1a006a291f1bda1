"""The fits behind a calibration: a recorded trace's kernels -> the parameters of
sim/kernel_model.py's formulas, and the error of the calibrated model and of a plain
roofline on the points held out (steps 1-6 of `python -m gpu_traces.calibrate`).

Only numpy: a small deterministic Nelder-Mead instead of scipy, so this runs in the site's
environment and the recorder's alike. Parameters and times are rounded to SIG_DIGITS
significant digits, so the same trace always gives the same file.
"""
from __future__ import annotations

import hashlib
from typing import Callable, Mapping, Sequence

import numpy as np

from sim import hardware, kernel_model
from sim.calibration import CALIBRATION_FORMAT_VERSION, POINT_COLUMNS, calibration_from_section
from sim.kernel_model import predict_rows, relative_errors, spec_sheet

GENERATOR = "python -m gpu_traces.calibrate"   # what the calibration files say wrote them
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
