"""The calibrated kernel-time model and the plain roofline against every shipped kernel timing.

Each shipped calibration (sim/calibrations/<slug>.json) keeps the kernels it was fitted to,
each with the calibrated model's prediction and the plain roofline's (launch + max(bytes /
bandwidth, FLOPs / FLOP/s) at the same measured peaks), and the error of the model on
kernels it was not fitted to: for imported GPU profiles, each model's layers predicted by a
fit on every other model (leave one model out); for a recorded trace, a held-out share of
its points. `check_model` reads one device's points and errors for a figure; nothing is
refitted here (`python -m gpu_traces.calibrate` does that).

>>> r = check_model(ModelCheckParams(device="h100-sxm", op="matmul"))
>>> r.imported, r.n_points == len(r.measured_s) > 0
(True, True)
>>> [e.op for e in r.heldout_errors][-1]
'all'
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.calibration import recorded_device, recorded_devices
from sim.checks import check_choice, checked_params

# Op groups a reader picks from; every kernel kind of a trace belongs to one.
OP_GROUPS = {"matmul": ("gemm", "big-gemm"), "attention": ("attention-decode", "attention-prefill"),
             "elementwise": ("elementwise",), "copy": ("copy",)}
OPS = ("all", *OP_GROUPS)
OP_NAMES = {"all": "every kernel", "matmul": "matrix multiplications", "attention": "attention",
            "elementwise": "norms, activations, adds", "copy": "memory copies"}


def device_choices() -> dict[str, str]:
    """Display name -> slug of every device with a shipped calibration (CPUs last)."""
    devs = sorted(recorded_devices(), key=lambda d: (d.device_type != "cuda", d.name))
    return {d.name: d.slug for d in devs}


@checked_params
@dataclass(frozen=True)
class ModelCheckParams:
    """Which device's timings, and which kernels of it."""

    device: str = "h100-sxm"     # slug of a shipped calibration (device_choices())
    op: str = "matmul"           # "all" or a key of OP_GROUPS

    def __post_init__(self) -> None:
        check_choice("device", self.device, tuple(device_choices().values()))
        check_choice("op", self.op, OPS)


@dataclass(frozen=True)
class ErrorRow:
    """Median and worst |predicted - measured| / measured on kernels the fit did not see."""

    op: str                      # the op kind as the calibration file names it, or "all"
    n: int                       # kernels predicted
    model_median: float
    model_max: float
    roofline_median: float       # plain roofline on the same kernels
    roofline_max: float


@dataclass(frozen=True)
class ModelCheckResult:
    device: str                  # display name of the device the kernels ran on
    slug: str
    imported: bool               # timings published by others (not recorded by this project)
    op: str
    labels: tuple[str, ...]      # one per shown kernel: its op and shape
    kinds: tuple[str, ...]       # the kernel kind of each (gemm, big-gemm, elementwise, ...)
    measured_s: np.ndarray       # (points,) measured median time
    model_s: np.ndarray          # (points,) calibrated model
    roofline_s: np.ndarray       # (points,) plain roofline at the same measured peaks
    heldout: np.ndarray          # (points,) bool: the shown prediction is out of sample
    model_ratio: np.ndarray      # (points,) model / measured
    roofline_ratio: np.ndarray   # (points,) roofline / measured
    n_points: int
    shown_model_median: float    # median |model - measured| / measured over the shown kernels
    shown_roofline_median: float
    heldout_method: str          # how the errors below were obtained
    heldout_errors: tuple[ErrorRow, ...]
    spec_sheet_median: float | None   # the guide's 80%/60% assumption on every kernel (catalogue GPUs)
    spec_sheet_max: float | None
    launch_overhead_s: float     # the calibration's fixed cost per kernel
    allreduce_latency_s: float | None       # measured all-reduce inside one server, if any
    allreduce_bus_bytes_per_s: float | None
    allreduce_median: float | None          # leave one GPU count out
    allreduce_max: float | None
    note: str                    # provenance for the figure


def _median(x: np.ndarray) -> float:
    return float(np.median(x)) if len(x) else float("nan")


def _rows(fit: dict) -> tuple[tuple[ErrorRow, ...], str]:
    lomo = fit.get("leave_one_model_out")
    if lomo:
        items = [*lomo["by_op"].items(), ("all", lomo["all"])]
        how = "leave one model out: each model's kernels predicted by a fit on the other models"
    else:
        items = [(k, v["heldout"]) for k, v in fit["by_kind"].items()
                 if v["heldout"]["n"] and v["heldout"]["model"]]
        items.append(("all", fit["heldout"]))
        how = "a held-out share of the recorded kernels, never used by the fit"
    rows = tuple(ErrorRow(op, int(e.get("n") or e["model"].get("n")), e["model"]["median_rel_err"],
                          e["model"]["max_rel_err"], e["roofline"]["median_rel_err"],
                          e["roofline"]["max_rel_err"]) for op, e in items)
    return rows, how


def ratios_below(result: "ModelCheckResult", measured_below_s: float) -> tuple[int, float, float]:
    """(kernels, median roofline / measured, median model / measured) of the shown kernels
    that took less than `measured_below_s`.

    >>> n, roof, model = ratios_below(check_model(), 20e-6)
    >>> n > 0 and roof < 1
    True
    """
    small = result.measured_s < measured_below_s
    return int(small.sum()), _median(result.roofline_ratio[small]), _median(result.model_ratio[small])


def check_model(params: ModelCheckParams = ModelCheckParams()) -> ModelCheckResult:
    """The shipped kernel timings of one device against the calibrated model and the roofline.

    Ratios are predicted / measured (1 is exact, 2 predicts twice the time). The shown
    points of an imported profile are predicted by the shipped fit, which saw them; the
    held-out errors (`heldout_errors`) are the out-of-sample judgement.
    """
    dev = recorded_device(params.device)
    kinds = OP_GROUPS.get(params.op)
    pts = [p for p in dev.points if kinds is None or p.kind in kinds]
    meas = np.array([p.time_s for p in pts], dtype=float)
    model = np.array([p.model_s for p in pts], dtype=float)
    roof = np.array([p.roofline_s for p in pts], dtype=float)
    held = np.array([p.split == "heldout" for p in pts], dtype=bool)
    rows, how = _rows(dev.fit_summary)
    cal, prov = dev.calibration, dev.provenance
    ar = cal.allreduce
    spec = dev.fit_summary.get("spec_sheet_heldout") or {}
    shown = ("in-sample predictions of the shipped fit (it saw every model)" if prov.imported else
             "held-out kernels filled, kernels the fit used faint")
    return ModelCheckResult(
        device=dev.name, slug=dev.slug, imported=prov.imported, op=params.op,
        labels=tuple(p.label for p in pts), kinds=tuple(p.kind for p in pts),
        measured_s=meas, model_s=model, roofline_s=roof, heldout=held,
        model_ratio=model / meas if len(pts) else model, roofline_ratio=roof / meas if len(pts) else roof,
        n_points=len(pts),
        shown_model_median=_median(np.abs(model - meas) / meas) if len(pts) else float("nan"),
        shown_roofline_median=_median(np.abs(roof - meas) / meas) if len(pts) else float("nan"),
        heldout_method=how, heldout_errors=rows,
        spec_sheet_median=spec.get("median_rel_err"), spec_sheet_max=spec.get("max_rel_err"),
        launch_overhead_s=cal.launch_overhead_s,
        allreduce_latency_s=ar.latency_s if ar else None,
        allreduce_bus_bytes_per_s=ar.bus_bytes_per_s if ar else None,
        allreduce_median=ar.median_rel_err if ar else None, allreduce_max=ar.max_rel_err if ar else None,
        note=(f"{prov.caption()}. Dots: {shown}; {len(pts)} of the {prov.n_points} kernels "
              f"the calibration was judged on are shipped with it."),
    )
