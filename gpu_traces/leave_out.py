"""Imported profiles: several models' layers timed on one device by others, fitted and
judged by leaving one model out at a time (the error a reader can expect for a model the
fit never saw), with the monotone floor no formula of this kind goes below, and the
all-reduce fit of one server's GPUs.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from gpu_traces.fitting import (GENERATOR, CalibrationError, _add_spec, _log_loss, _polish, _row, _smoothness,
                                fit_section, sig)
from sim import hardware, kernel_model
from sim.calibration import CALIBRATION_FORMAT_VERSION, POINT_COLUMNS, calibration_from_section
from sim.kernel_model import predict_rows, relative_errors, spec_sheet
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


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return path.name
