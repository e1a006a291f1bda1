"""Record a kernel trace: time the kernels an LLM runs on the torch device present.

    python -m gpu_traces.record                       # CUDA if present, else CPU; full suite
    python -m gpu_traces.record --device cpu --quick  # the quick CPU suite (under a minute)
    python -m gpu_traces.record --device cuda --out /tmp/h200.json

The trace goes to gpu_traces/traces/<device>/<UTC time>-<suite>.json unless --out names
a .json file (or another directory to put <device>/... under). It is validated against
gpu_traces/trace.schema.json before it is written; a run stopped by --max-seconds still
writes what it measured and lists the rest as skipped.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from gpu_traces import harness, kernels, suites
from gpu_traces.schema import SCHEMA_VERSION, time_stats, validate_trace
from gpu_traces.shapes import counts
from sim.calibration import KINDS

TRACES_DIR = Path(__file__).resolve().parent / "traces"
ORDER = ("copy", "big-gemm", "gemm", "attention-decode", "attention-prefill", "elementwise")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _fmt_s(t: float) -> str:
    if t < 1e-3:
        return f"{t * 1e6:.1f} us"
    if t < 1:
        return f"{t * 1e3:.2f} ms"
    return f"{t:.2f} s"


class Recorder:
    """Runs the cases of one suite in order, with progress, an estimate and a time limit."""

    def __init__(self, suite: suites.Suite, timer, max_seconds: float, device: torch.device):
        self.suite = suite
        self.device = device
        self.cache = kernels.TensorCache()
        self.max_m = {g.dtype: max(g.tokens) for g in suite.gemm}
        self.timer = timer
        self.max_seconds = max_seconds
        self.start = time.monotonic()
        self.measurements: list[dict] = []
        self.skipped: list[dict] = []
        self.stopped = False
        self._bw = None                 # rough achieved bandwidth and FLOP/s, for the estimate
        self._flops: dict[str, float] = {}
        self._flush_s = 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def skip(self, kind, label, dtype, backend, reason) -> None:
        self.skipped.append({"kind": kind, "label": label, "dtype": dtype, "backend": backend,
                             "reason": reason})

    def _estimate_case_s(self, case: suites.Point) -> float:
        """Rough wall time of one point, all rounds, from the peaks measured so far."""
        if self._bw is None:
            return 0.0
        flops, nbytes = counts(case.kind, case.shape)
        f = self._flops.get(case.dtype) or max(self._flops.values(), default=0.0)
        t = 5e-6 + max(nbytes / self._bw, flops / f if f else 0.0)
        if case.backend == "math":
            t *= 4.0                    # unfused attention moves its score matrix too
        s = self.suite
        reps = min(max(s.target_s / t, s.min_repeats), s.max_repeats)
        return (s.rounds * s.warmup + reps) * (t + self._flush_s) + 2e-3 * s.rounds

    def _seconds_left(self, cases, done_rounds: int) -> list[float] | None:
        """Estimated seconds still to go after each point of the current round."""
        if self._bw is None:
            return None
        per_round = [self._estimate_case_s(c) / self.suite.rounds for c in cases]
        later = sum(per_round) * (self.suite.rounds - done_rounds - 1)
        out, acc = [0.0] * len(cases), later
        for j in range(len(cases) - 1, -1, -1):
            out[j] = acc
            acc += per_round[j]
        return out

    def run(self, cases: list[suites.Point]) -> None:
        """Measure every point in `suite.rounds` passes; past the time limit, stop.

        Each pass takes a share of every point's repeats, so a burst of other work on a
        shared machine disturbs a minority of each point's samples, not all of them.
        """
        total, rounds = len(cases), self.suite.rounds
        samples: dict[int, list[float]] = {}
        shapes: dict[int, dict] = {}
        per_round: dict[int, int] = {}
        failed: set[int] = set()
        suffix = None                   # estimated seconds left after each point
        for rnd in range(rounds):
            tag = f"r{rnd + 1}/{rounds} " if rounds > 1 else ""
            for i, case in enumerate(cases):
                if i in failed:
                    continue
                if self.elapsed() > self.max_seconds:
                    if not self.stopped:
                        _log(f"time limit of {self.max_seconds:.0f} s reached in pass {rnd + 1}")
                    self.stopped = True
                    break
                try:
                    with kernels.context(case):
                        fn, shape = kernels.prepare(case, self.device, self.cache, self.max_m)
                        first = harness.warm_up(fn, self.timer, self.suite.warmup)
                        if i not in per_round:
                            reps = harness.repeats_for(first, self.suite.target_s,
                                                       self.suite.min_repeats,
                                                       self.suite.max_repeats)
                            per_round[i] = -(-reps // rounds)
                        samples.setdefault(i, []).extend(
                            self.timer.time_repeats(fn, per_round[i]))
                        shapes[i] = shape
                except (kernels.Unsupported, RuntimeError) as e:
                    # an unsupported backend, a shape the library refuses, out of memory:
                    # keep going and say why
                    if isinstance(e, torch.cuda.OutOfMemoryError):
                        torch.cuda.empty_cache()
                    failed.add(i)
                    samples.pop(i, None)
                    reason = str(e) if isinstance(e, kernels.Unsupported) else (
                        f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
                    self.skip(case.kind, case.label, case.dtype, case.backend, reason)
                    _log(f"{tag}[{i + 1:4d}/{total}] {case.kind} {case.label}: skipped ({reason})")
                    continue
                t = time_stats(samples[i])
                flops, nbytes = counts(case.kind, shape)
                if self._learn(case, flops, nbytes, t["median_s"]) or suffix is None:
                    suffix = self._seconds_left(cases, rnd)
                eta = f", ~{suffix[i]:.0f} s left" if suffix else ""
                spread = (t["p75_s"] - t["p25_s"]) / t["median_s"] * 100
                _log(f"{tag}[{i + 1:4d}/{total}] {case.kind:17s} {case.dtype:4s} "
                     f"{(case.backend or ''):9s} {case.label}: {_fmt_s(t['median_s'])} "
                     f"(IQR {spread:.0f}%, n={t['repeats']}) | {self.elapsed():.0f} s{eta}")
            suffix = None
        for i, case in enumerate(cases):
            if i in samples:
                flops, nbytes = counts(case.kind, shapes[i])
                self.measurements.append({"kind": case.kind, "label": case.label,
                                          "dtype": case.dtype, "backend": case.backend,
                                          "shape": shapes[i], "flops": flops, "bytes": nbytes,
                                          "time": time_stats(samples[i])})
            elif i not in failed:
                self.skip(case.kind, case.label, case.dtype, case.backend,
                          f"not measured: the run's time limit ({self.max_seconds:.0f} s) "
                          f"was reached")

    def _learn(self, case, flops, nbytes, median_s) -> bool:
        """Update the rough peaks from a copy or square GEMM; True if they changed."""
        if case.kind == "copy":
            self._bw = max(self._bw or 0.0, nbytes / median_s)
            self._flush_s = self.timer.flush_bytes / self._bw
            return True
        if case.kind == "big-gemm":
            self._flops[case.dtype] = max(self._flops.get(case.dtype, 0.0), flops / median_s)
            return True
        return False


def build_plan(suite: suites.Suite, device: torch.device, kinds) -> tuple[list, list]:
    """The points to time, in order (peaks first), and the skips known before timing."""
    points, skips = suites.plan(suite)
    skips = [(x.kind, x.label, x.dtype, x.backend, x.reason) for x in skips]
    fp8_reason = (kernels.fp8_support(device) if any(p.dtype == "fp8" for p in points)
                  else None)
    if fp8_reason:
        skips += [(p.kind, p.label, p.dtype, p.backend, fp8_reason)
                  for p in points if p.dtype == "fp8"]
        points = [p for p in points if p.dtype != "fp8"]
    return ([p for p in points if p.kind in kinds],
            [x for x in skips if x[0] in kinds])


def _output_path(out: str | None, slug: str, stamp: str, suite_name: str) -> Path:
    name = f"{stamp.replace('-', '').replace(':', '')}-{suite_name}.json"
    if out and out.endswith(".json"):
        return Path(out)
    root = Path(out) if out else TRACES_DIR
    return root / slug / name


def record(device_type: str, quick: bool, out: str | None = None,
           max_seconds: float | None = None, kinds=KINDS, threads: int | None = None) -> Path:
    """Run a suite on `device_type` ("cuda" | "cpu") and write the validated trace; its path."""
    if device_type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device (torch "
                         f"{torch.__version__}, built for CUDA {torch.version.cuda}); "
                         "install a CUDA build of torch or use --device cpu")
    if threads:
        torch.set_num_threads(threads)
    suite = suites.get(device_type, quick)
    limit = max_seconds or suite.max_seconds
    device = torch.device("cuda:0" if device_type == "cuda" else "cpu")
    torch.manual_seed(0)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    dev = harness.describe_device(device_type)
    flush_bytes = 2 * dev["cache_bytes"]
    timer = (harness.CudaTimer(device, flush_bytes) if device_type == "cuda"
             else harness.CpuTimer(flush_bytes, torch.get_num_threads()))
    units = dev["compute_units"]
    _log(f"recording suite {suite.name!r} on {dev['name']} ({units} {dev['compute_unit_kind']}"
         f"{'s' * (units != 1)}, torch {torch.__version__}); time limit {limit:.0f} s")
    cases, known_skips = build_plan(suite, device, set(kinds))
    rec = Recorder(suite, timer, limit, device)
    for s in known_skips:
        rec.skip(*s)
    with torch.inference_mode():
        rec.run(cases)
    dev["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    suite_rec = {"name": suite.name, "quick": quick, "description": suite.description,
                 "max_seconds": float(limit), "elapsed_s": round(rec.elapsed(), 3),
                 "stopped_by_time_limit": rec.stopped}
    if set(kinds) != set(KINDS):
        suite_rec["kinds"] = [k for k in ORDER if k in kinds]
    trace = {
        "schema_version": SCHEMA_VERSION,
        "recorded_at": stamp,
        "suite": suite_rec,
        "device": dev,
        "software": harness.describe_software(device_type),
        "timing": {"method": timer.method, "warmup": suite.warmup, "rounds": suite.rounds,
                   "min_repeats": suite.min_repeats, "max_repeats": suite.max_repeats,
                   "target_s": suite.target_s, "cache_flush_bytes": flush_bytes,
                   "statistic": "median of the timed repeats; spread as quartiles, min and max"},
        "units": {"time": "s", "bytes": "B", "flops": "FLOP"},
        "measurements": rec.measurements,
        "skipped": rec.skipped,
    }
    path = _output_path(out, dev["slug"], stamp, suite.name)
    validate_trace(trace, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(trace, indent=1) + "\n")
    os.replace(tmp, path)                 # never leave a half-written trace behind
    _log(f"wrote {path}: {len(rec.measurements)} measurements, {len(rec.skipped)} skipped, "
         f"{rec.elapsed():.0f} s")
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpu_traces.record", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu"),
                   help="device to time (default: cuda if torch sees one, else cpu)")
    p.add_argument("--quick", action="store_true", help="the quick suite (CPU: under a minute)")
    p.add_argument("--out", help="a .json file, or a directory for <device>/<time>-<suite>.json "
                                 f"(default: {TRACES_DIR})")
    p.add_argument("--max-seconds", type=float,
                   help="stop measuring after this many seconds (default: the suite's own)")
    p.add_argument("--kinds", default=",".join(KINDS),
                   help=f"comma-separated kinds to record (default: all: {','.join(KINDS)})")
    p.add_argument("--threads", type=int, help="CPU: torch threads to use (default: torch's)")
    args = p.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    bad = sorted(set(kinds) - set(KINDS))
    if bad:
        p.error(f"unknown kinds {bad}; valid: {', '.join(KINDS)}")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    path = record(device, args.quick, args.out, args.max_seconds, kinds, args.threads)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
