"""Where a fitted calibration came from, and how well it fits what was measured.

Its own module so that both the kernel-time model (sim.kernel_model, whose Calibration
carries it) and the reader of the calibration files (sim.calibration) import it downward.

>>> p = Provenance("NVIDIA H200", "h200", "cuda", "2026-12-04T11:58:57Z", "2.13.0", "12.8", "570.1",
...                "cuda", "gpu_traces/traces/h200/t.json", 900, 234, 0.044, 0.757, 0.101, 0.987)
>>> p.date, p.imported
('2026-12-04', False)
>>> p.caption()[:60]
'Measured on NVIDIA H200 on 2026-12-04 (torch 2.13.0, CUDA 12'
"""
from __future__ import annotations

from dataclasses import dataclass


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
