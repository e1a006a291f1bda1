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
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from gpu_traces import harness, kernels, suites
from gpu_traces.schema import SCHEMA_VERSION, TraceError, time_stats, validate_trace
from gpu_traces.shapes import counts
from sim.kernel_model import KINDS
from sim.cli import ArgumentParser, UsageError, run

TRACES_DIR = Path(__file__).resolve().parent / "traces"
ORDER = ("copy", "big-gemm", "gemm", "attention-decode", "attention-prefill", "elementwise")
PEAK_KINDS = ("copy", "big-gemm")     # measured first; the budget is planned from them
PROFILED_KINDS = ("attention-decode", "attention-prefill", "elementwise")  # dispatch recorded


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _fmt_s(t: float) -> str:
    if t < 1e-3:
        return f"{t * 1e6:.1f} us"
    if t < 1:
        return f"{t * 1e3:.2f} ms"
    return f"{t:.2f} s"


class Recorder:
    """Runs the cases of one suite in order, with progress, an estimate and a time limit.

    Budget: once the peaks (copy sweep, square GEMMs) are measured, the whole run is
    estimated from them; if it would overrun the limit, every later point's target time and
    repeat cap are scaled down together (never below the suite's `min_repeats`). Points are
    measured in `rounds` passes, so if the limit still stops the run, every point reached
    has samples from the early passes.
    """

    def __init__(self, suite: suites.Suite, timer, max_seconds: float, device: torch.device,
                 start: float | None = None):
        self.suite = suite
        self.device = device
        self.cache = kernels.TensorCache()
        self.max_m = {g.dtype: max(g.tokens) for g in suite.gemm}
        self.timer = timer
        self.max_seconds = max_seconds
        self.start = time.monotonic() if start is None else start
        self.measurements: list[dict] = []
        self.skipped: list[dict] = []
        self.stopped = False
        self.interrupted = False
        self.scale = 1.0                # share of target_s and max_repeats, to fit the budget
        self.estimated_s: float | None = None
        self.dispatch: dict[tuple, dict] = {}   # (kind, dtype, backend, op) -> what one call ran
        self._bw = None                 # rough achieved bandwidth and FLOP/s, for the estimate
        self._flops: dict[str, float] = {}
        self._flush_s = 0.0
        self._overheads: list[float] = []   # wall seconds per point and pass beyond its kernels
        self._overhead_guess = 5e-3 if device.type == "cuda" else 2e-3
        self._per_repeat_extra = 50e-6 if device.type == "cuda" else 0.0   # spin and queueing

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def skip(self, kind, label, dtype, backend, reason) -> None:
        self.skipped.append({"kind": kind, "label": label, "dtype": dtype, "backend": backend,
                             "reason": reason})

    def _overhead_s(self) -> float:
        return statistics.median(self._overheads) if self._overheads else self._overhead_guess

    def _kernel_s(self, case: suites.Point) -> float:
        flops, nbytes = counts(case.kind, case.shape)
        f = self._flops.get(case.dtype) or max(self._flops.values(), default=0.0)
        t = 5e-6 + max(nbytes / self._bw, flops / f if f else 0.0)
        if case.backend == "math":
            t *= 4.0                    # unfused attention moves its score matrix too
        return t

    def _estimate_case_s(self, case: suites.Point, scale: float | None = None,
                         rounds: int | None = None) -> float:
        """Rough wall time of `rounds` passes (default all) over one point."""
        s = self.suite
        rounds = s.rounds if rounds is None else rounds
        scale = self.scale if scale is None else scale
        t = self._kernel_s(case)
        reps = min(max(s.target_s * scale / t, s.min_repeats),
                   max(s.max_repeats * scale, s.min_repeats))
        per_repeat = t + self._flush_s + self._per_repeat_extra
        return rounds * (s.warmup + 1) * per_repeat + reps * rounds / s.rounds * per_repeat \
            + rounds * self._overhead_s()

    def plan_budget(self, cases, done: set[int]) -> None:
        """Estimate the run; scale the remaining points' repeats down until it fits."""
        if self._bw is None:
            return
        todo = [c for i, c in enumerate(cases) if i not in done]
        budget = 0.92 * self.max_seconds - self.elapsed()        # keep time to write the trace

        def total(scale):
            return sum(self._estimate_case_s(c, scale) for c in todo)
        scale = 1.0
        if total(1.0) > budget:
            lo, hi = 0.0, 1.0
            for _ in range(30):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if total(mid) <= budget else (lo, mid)
            scale = max(lo, 1e-3)
        self.scale = scale
        self.estimated_s = self.elapsed() + total(scale)
        note = ""
        if self.estimated_s > 0.92 * self.max_seconds:
            note = (" even at the suite's minimum repeats: the limit will stop the run, and "
                    "points not reached are listed as skipped")
        elif scale < 1:
            note = f" (repeats scaled to {scale:.1%} to fit)"
        _log(f"estimated total {self.estimated_s:.0f} s of the {self.max_seconds:.0f} s "
             f"budget{note}")

    def _seconds_left(self, cases, done_rounds: int) -> list[float] | None:
        """Estimated seconds still to go after each point of the current round."""
        if self._bw is None:
            return None
        per_round = [self._estimate_case_s(c, rounds=1) for c in cases]
        later = sum(per_round) * (self.suite.rounds - done_rounds - 1)
        out, acc = [0.0] * len(cases), later
        for j in range(len(cases) - 1, -1, -1):
            out[j] = acc
            acc += per_round[j]
        return out

    def _dispatch_key(self, case: suites.Point) -> tuple:
        return (case.kind, case.dtype, case.backend, case.shape.get("op"))

    def _free_memory(self) -> None:
        """After an out-of-memory error: drop every cached tensor and return it to the device."""
        self.cache.clear()
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _measure_once(self, i, case, samples, shapes, per_round) -> None:
        """One pass over one point: prepare, warm up, size (first pass), time its share."""
        t0 = time.monotonic()
        with kernels.context(case):
            fn, shape = kernels.prepare(case, self.device, self.cache, self.max_m)
            key = self._dispatch_key(case)
            if key not in self.dispatch and (case.kind in PROFILED_KINDS or case.dtype == "fp8"
                                             or self.device.type == "cuda"):
                fn()
                self.timer.sync()
                self.dispatch[key] = {"kind": case.kind, "label": case.label,
                                      "dtype": case.dtype, "backend": case.backend,
                                      **harness.dispatched(fn, self.device.type)}
            first = harness.warm_up(fn, self.timer, self.suite.warmup)
            if i not in per_round:
                s = self.suite
                reps = harness.repeats_for(first, s.target_s * self.scale, s.min_repeats,
                                           max(round(s.max_repeats * self.scale), s.min_repeats))
                per_round[i] = -(-reps // s.rounds)
            times = self.timer.time_repeats(fn, per_round[i])
        samples.setdefault(i, []).extend(times)
        shapes[i] = shape
        kernel = (self.suite.warmup + len(times)) * (statistics.median(times) + self._flush_s)
        self._overheads.append(max(time.monotonic() - t0 - kernel, 0.0))
        del self._overheads[:-50]

    def run(self, cases: list[suites.Point]) -> None:
        """Measure every point in `suite.rounds` passes; past the time limit, stop.

        Each pass takes a share of every point's repeats, so a burst of other work on a
        shared machine disturbs a minority of each point's samples, not all of them.
        Ctrl-C stops the run; what was measured is kept.
        """
        total, rounds = len(cases), self.suite.rounds
        samples: dict[int, list[float]] = {}
        shapes: dict[int, dict] = {}
        per_round: dict[int, int] = {}
        failed: set[int] = set()
        suffix = None                   # estimated seconds left after each point
        budgeted = False
        try:
            for rnd in range(rounds):
                tag = f"r{rnd + 1}/{rounds} " if rounds > 1 else ""
                for i, case in enumerate(cases):
                    if i in failed:
                        continue
                    if self.elapsed() > self.max_seconds:
                        if not self.stopped:
                            _log(f"time limit of {self.max_seconds:.0f} s reached in pass "
                                 f"{rnd + 1}")
                        self.stopped = True
                        break
                    if not budgeted and case.kind not in PEAK_KINDS:
                        self.plan_budget(cases, set(samples))
                        budgeted = True
                    reason = None
                    try:
                        self._measure_once(i, case, samples, shapes, per_round)
                    except torch.OutOfMemoryError as e:
                        reason = f"out of memory: {kernels.first_line(e, 200)}"
                    except (kernels.Unsupported, RuntimeError) as e:
                        # an unsupported backend or a shape the library refuses: say why
                        reason = (str(e) if isinstance(e, kernels.Unsupported)
                                  else kernels.first_line(e, 200))
                    except Exception as e:
                        # a torch whose API differs from the one this was written against
                        # (a TypeError, an AttributeError): lose this point, not the run
                        reason = f"error in the recorder: {kernels.first_line(e, 200)}"
                    if reason is not None:
                        if reason.startswith("out of memory"):
                            self._free_memory()
                        failed.add(i)
                        samples.pop(i, None)
                        self.skip(case.kind, case.label, case.dtype, case.backend, reason)
                        _log(f"{tag}[{i + 1:4d}/{total}] {case.kind} {case.label}: skipped "
                             f"({reason})")
                        continue
                    t = time_stats(samples[i])
                    flops, nbytes = counts(case.kind, shapes[i])
                    if self._learn(case, flops, nbytes, t["median_s"]) or suffix is None:
                        suffix = self._seconds_left(cases, rnd)
                    eta = f", ~{suffix[i]:.0f} s left" if suffix else ""
                    spread = (t["p75_s"] - t["p25_s"]) / t["median_s"] * 100
                    _log(f"{tag}[{i + 1:4d}/{total}] {case.kind:17s} {case.dtype:4s} "
                         f"{(case.backend or ''):9s} {case.label}: {_fmt_s(t['median_s'])} "
                         f"(IQR {spread:.0f}%, n={t['repeats']}) | {self.elapsed():.0f} s{eta}")
                suffix = None
        except KeyboardInterrupt:
            _log("interrupted: writing what was measured")
            self.interrupted = self.stopped = True
        self._collect(cases, samples, shapes, failed)

    def _collect(self, cases, samples, shapes, failed) -> None:
        """Measurements of every point with samples; the rest listed as skipped, with why."""
        fused, expanded = {}, set()
        for key, ran in self.dispatch.items():
            if key[0] == "elementwise" and key[3] == "rms_norm":
                fused[key] = harness.rms_norm_is_fused(ran)
            if key[0].startswith("attention") and "aten::repeat_interleave" in ran.get("ops", ()):
                expanded.add(key)           # the backend repeated K/V to every query head
        for i, case in enumerate(cases):
            if i in samples:
                shape = dict(shapes[i])
                if self._dispatch_key(case) in expanded:
                    shape["kv_heads_read"] = shape["heads"]
                f = fused.get(self._dispatch_key(case))
                if f is not None:
                    shape["impl"] = (f"{shape['impl']}: one fused op (aten::_fused_rms_norm)" if f
                                     else f"{shape['impl']}: unfused (pow, mean, rsqrt and mul "
                                          f"as separate ops)")
                flops, nbytes = counts(case.kind, shape)
                self.measurements.append({"kind": case.kind, "label": case.label,
                                          "dtype": case.dtype, "backend": case.backend,
                                          "shape": shape, "flops": flops, "bytes": nbytes,
                                          "time": time_stats(samples[i])})
            elif i not in failed:
                why = ("the run was interrupted" if self.interrupted else
                       f"the run's time limit ({self.max_seconds:.0f} s) was reached")
                self.skip(case.kind, case.label, case.dtype, case.backend,
                          f"not measured: {why}")

    def default_backends(self) -> dict:
        """Per attention kind, the backend torch picks for most of its measured shapes."""
        out = {}
        for kind in ("attention-decode", "attention-prefill"):
            picks = [m["shape"].get("default_backend") for m in self.measurements
                     if m["kind"] == kind]
            if picks:
                out[kind] = max(sorted(set(picks), key=str), key=picks.count)
        return out

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


def check_writable(path: Path) -> None:
    """Fail now, before any measuring, if the trace could not be written to `path`."""
    if path.is_dir():
        raise UsageError(f"--out {path}: is a directory; give a .json file or a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as e:
        raise UsageError(f"--out {path}: cannot write there ({e.strerror or e}); nothing was "
                         f"measured") from None


def fallback_path(path: Path) -> Path:
    """Where a trace goes when its own path fails at the end: the system's temporary folder."""
    return Path(tempfile.gettempdir()) / f"gpu-trace-{path.parent.name}-{path.name}"


def write_trace(trace: dict, path: Path) -> Path:
    """Validate and write atomically; if either fails, keep the measurements in a safe place.

    A trace that fails validation (a point no device could produce, say) is saved beside the
    fallback path as .invalid.json for inspection; a write that fails (a full disk, a folder
    gone) saves it in the temporary folder. Both end the run with an error naming the file.
    """
    text = json.dumps(trace, indent=1) + "\n"
    try:
        validate_trace(trace, str(path))
    except TraceError as e:
        safe = fallback_path(path).with_suffix(".invalid.json")
        safe.write_text(text)
        raise SystemExit(f"error: the trace does not validate, so it was not written to {path}; "
                         f"the measurements are in {safe}\n{e}") from None
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        os.replace(tmp, path)             # never leave a half-written trace behind
    except OSError as e:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        safe = fallback_path(path)
        safe.write_text(text)
        raise SystemExit(f"error: cannot write {path} ({e.strerror or e}); the trace was saved "
                         f"to {safe}") from None
    return path


def _flush_probe(cache_bytes: int) -> suites.Point:
    """A copy whose source is half the cache: memory-bound, and sensitive to dirty lines."""
    elements = max(cache_bytes // 8, 1024)
    return suites.Point("copy", f"copy {elements * 4 // 2 ** 20} MiB (flush probe)", "fp32", None,
                        {"elements": elements, "bytes_per_elem": 4})


def record(device_type: str, quick: bool, out: str | None = None,
           max_seconds: float | None = None, kinds=KINDS, threads: int | None = None) -> Path:
    """Run a suite on `device_type` ("cuda" | "cpu") and write the validated trace; its path."""
    if device_type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device (torch "
                         f"{torch.__version__}, built for CUDA {torch.version.cuda}); "
                         "install a CUDA build of torch or use --device cpu")
    start = time.monotonic()
    if threads:
        torch.set_num_threads(threads)
    suite = suites.get(device_type, quick)
    limit = max_seconds or suite.max_seconds
    device = torch.device("cuda:0" if device_type == "cuda" else "cpu")
    torch.manual_seed(0)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    dev = harness.describe_device(device_type)
    path = _output_path(out, dev["slug"], stamp, suite.name)
    check_writable(path)
    if device_type == "cuda" and dev["catalogue_key"] is None:
        _log(f"warning: {harness.identify_device(dev['name']).reason}; the trace describes this "
             f"device only, and no catalogue GPU's figures will use it")
    env: dict = {"numerics": harness.pin_numerics(device_type)}
    uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", "") or "") \
        if device_type == "cuda" else None
    if device_type == "cuda":
        env["gpu_state_start"] = harness.gpu_state(uuid)
    flush_bytes = 2 * dev["cache_bytes"]
    timer = (harness.CudaTimer(device, flush_bytes) if device_type == "cuda"
             else harness.CpuTimer(flush_bytes, torch.get_num_threads()))
    units = dev["compute_units"]
    _log(f"recording suite {suite.name!r} on {dev['name']} ({units} {dev['compute_unit_kind']}"
         f"{'s' * (units != 1)}, torch {torch.__version__}) into {path}; time limit {limit:.0f} s")
    cases, known_skips = build_plan(suite, device, set(kinds))
    rec = Recorder(suite, timer, limit, device, start=start)
    for s in known_skips:
        rec.skip(*s)
    comparison = None                 # the CPU keeps the writing flush of its shipped trace
    with torch.inference_mode():
        if device_type == "cuda":
            env["gpu_warmup"] = harness.warm_gpu(device)
            _log(f"warmed up: {env['gpu_warmup']['gemms']} GEMMs in "
                 f"{env['gpu_warmup']['seconds']:.1f} s")
            probe = _flush_probe(dev["cache_bytes"])
            fn, _ = kernels.prepare(probe, device, rec.cache, rec.max_m)
            comparison = harness.compare_flushes(fn, timer, probe.label, suite.min_repeats)
            del fn
            _log(f"cache flush: {comparison['chosen']} (median after a writing flush "
                 f"{_fmt_s(comparison['write_median_s'])}, after a read-only one "
                 f"{_fmt_s(comparison['read_median_s'])})")
        rec.run(cases)
    dev["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    if device_type == "cuda":
        env["gpu_state_end"] = harness.gpu_state(uuid)
    env["sdpa_default_backend"] = rec.default_backends()
    env["dispatch"] = list(rec.dispatch.values())
    suite_rec = {"name": suite.name, "quick": quick, "description": suite.description,
                 "max_seconds": float(limit), "elapsed_s": round(rec.elapsed(), 3),
                 "stopped_by_time_limit": rec.stopped and not rec.interrupted,
                 "repeat_scale": round(rec.scale, 4)}
    if rec.estimated_s is not None:
        suite_rec["estimated_s"] = round(rec.estimated_s, 1)
    if rec.interrupted:
        suite_rec["interrupted"] = True
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
                   "cache_flush_mode": timer.flush_mode,
                   **({"cache_flush_comparison": comparison} if comparison else {}),
                   **timer.record(),
                   "statistic": "median of the timed repeats; spread as quartiles, min and max"},
        "environment": env,
        "units": {"time": "s", "bytes": "B", "flops": "FLOP"},
        "measurements": rec.measurements,
        "skipped": rec.skipped,
    }
    write_trace(trace, path)
    _log(f"wrote {path}: {len(rec.measurements)} measurements, {len(rec.skipped)} skipped, "
         f"{rec.elapsed():.0f} s")
    return path


def main(argv=None) -> int:
    p = ArgumentParser(prog="python -m gpu_traces.record", description=__doc__,
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
    sys.exit(run("python -m gpu_traces.record", main))
