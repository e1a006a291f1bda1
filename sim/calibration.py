"""Effective hardware numbers the simulations use: from a recorded trace, or stated defaults.

Where the numbers come from, in order of preference (see `for_gpu`):

1. "trace":        fitted from kernels timed on this very GPU model: recorded by this
                   project, or imported from published profiles (the provenance says which);
                   files in sim/calibrations/, written by `python -m gpu_traces.calibrate`;
2. "carried-over": fitted on another GPU of the same architecture; its efficiencies
                   (achieved / that GPU's spec-sheet peak) are applied to this GPU's peaks;
3. "spec-sheet":   the guide's stated assumption, 80% of peak bandwidth and 60% of peak
                   FLOP/s, plus DEFAULT_LAUNCH_OVERHEAD_S per kernel.

The numbers and the formula they feed (`Calibration`, `spec_sheet`) are
`sim.kernel_model`; this module reads the fitted calibration files, with their provenance and measured points, and
picks the best calibration for a GPU.

>>> from sim import hardware
>>> for_gpu(hardware.get("H100-SXM")).source in ("trace", "carried-over", "spec-sheet")
True
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Sequence

from sim.hardware import GPU
from sim.kernel_model import (DEFAULT_FLOPS_EFFICIENCY, AllReduceParams, Calibration, GemmShapeParams, LineParams,
                              RooflineParams, predict_rows, spec_sheet)
from sim.provenance import Provenance

CALIBRATION_DIR = Path(__file__).resolve().parent / "calibrations"
CALIBRATION_FORMAT_VERSION = 1        # layout of the files in sim/calibrations/


# --------------------------------------------------------------------------------------
# Measured points (the provenance of a calibration: sim.provenance)
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
    # (CALIBRATION_DIR is resolved once, at import: resolving a path stats every folder on
    # the way, and the figures ask for the recorded devices on every change)
    return _recorded_devices_in(str(CALIBRATION_DIR if directory is None else Path(directory).resolve()))


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
    >>> for_gpu(hardware.get("H100-SXM")).source in ("trace", "carried-over", "spec-sheet")
    True
    """
    own = own_recorded_device(gpu, directory)
    if own is not None:
        return _own_calibration(own, gpu)
    same_arch = [d for d in _catalogue_gpus(directory) if d.arch == gpu.arch and d.efficiency]
    if same_arch:
        return _carried_over(_preferred(same_arch), gpu)
    return spec_sheet(gpu)


def own_recorded_device(gpu: GPU, directory: Path | str | None = None) -> RecordedDevice | None:
    """The recorded device whose timings calibrate `gpu` itself (None when it has none).

    >>> from sim import hardware
    >>> own_recorded_device(hardware.get("B200")) is None
    True
    """
    own = [d for d in _catalogue_gpus(directory) if d.catalogue_key == gpu.name]
    return _preferred(own) if own else None


def _catalogue_gpus(directory: Path | str | None) -> list[RecordedDevice]:
    return [d for d in recorded_devices(directory) if d.device_type == "cuda" and d.catalogue_key]


def _preferred(devices: Sequence[RecordedDevice]) -> RecordedDevice:
    # full suites before quick ones, then the most recent recording, then by slug
    return sorted(devices, key=lambda d: ("quick" in d.provenance.suite,
                                          _neg(d.provenance.recorded_at), d.slug))[0]


def _neg(s: str) -> tuple:
    return tuple(-ord(ch) for ch in s)
