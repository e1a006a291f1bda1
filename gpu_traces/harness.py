"""One timing harness for every device: only the timer differs between CPU and CUDA.

For each point: untimed warm-up runs, one timed run to size the repeats, then the timed
repeats. Before every timed run the last-level cache is flushed, so each kernel reads its
inputs from device memory as it does in a real forward pass (where the previous layer's
weights have long left the cache). The flush either writes a buffer twice the cache's size
or only reads it; a write leaves the cache full of dirty lines that are written back while
the timed kernel runs, so the recorder times one memory-bound kernel with both flushes
(`compare_flushes`) and keeps the faster.

* CUDA: CUDA events recorded on the stream around the kernel. Before a batch of repeats the
  GPU is handed a spin (`torch.cuda._sleep`) long enough for the CPU to queue the whole
  batch behind it, so the GPU never waits for the CPU between repeats: without it an op of
  several kernels (unfused attention, SiLU x mul, an unfused RMSNorm) or a small one whose
  Python and dispatch cost exceeds its kernel time would be timed with CPU launch gaps in
  it. After queueing, the timer asks whether the spin is still running; if not, the GPU may
  have caught up, and the batch is discarded and queued again behind a longer spin. The
  time is the GPU's, from the moment it starts the kernel to the moment it finishes, as in
  a CUDA graph or a busy stream.
* CPU: the clock is read around the call (torch CPU ops return when done), so the time
  includes the Python and dispatcher cost of the call, the CPU's launch overhead. With
  one torch thread the clock is the thread's CPU time, which a busy shared machine does
  not inflate; with more threads, wall time.

torch.utils.benchmark is not used because it cannot keep a cache flush between repeats
out of the timed region.
"""
from __future__ import annotations

import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import torch

from gpu_traces.kernels import sdpa_backend_name
from gpu_traces.suites import FP8_USE_FAST_ACCUM
from gpu_traces.schema import time_stats
from sim.hardware import cpu_slug, identify_device

FLUSH_MODES = ("write", "read")


def _flush(buf: torch.Tensor, mode: str) -> None:
    if mode == "write":
        buf.zero_()
    else:
        buf.max()                # reads every element, writes one


class CpuTimer:
    """Timer for synchronous CPU kernels, with an LLC flush before each run.

    With one torch thread the kernel runs in the calling thread, and its time is that
    thread's CPU time (time.thread_time_ns): on a shared machine this leaves out the
    slices the OS gives to other programs. With more threads, wall time
    (time.perf_counter_ns), since a parallel kernel's CPU time is spread over threads.
    """

    def __init__(self, flush_bytes: int, threads: int):
        self.flush_bytes = flush_bytes
        self.flush_mode = "write"
        self.method = "thread-cpu-time" if threads == 1 else "perf-counter"
        self._clock = time.thread_time_ns if threads == 1 else time.perf_counter_ns
        self._buf = torch.empty(max(flush_bytes // 4, 1), dtype=torch.int32)

    def flush(self) -> None:
        _flush(self._buf, self.flush_mode)

    def sync(self) -> None:
        pass

    def record(self) -> dict:
        return {}

    def time_repeats(self, fn, repeats: int) -> list[float]:
        """Seconds of `repeats` runs of `fn`, each after a cache flush."""
        clock = self._clock
        out = []
        for _ in range(repeats):
            self.flush()
            t0 = clock()
            fn()
            t1 = clock()
            out.append(max(t1 - t0, 1) * 1e-9)
        return out


class CudaTimer:
    """CUDA-event timer: GPU time of each run, with an L2 flush kernel before each run.

    `cuda` is the torch.cuda module (a stand-in in the tests). Repeats are queued in
    batches of at most `max_batch_enqueue_s` of CPU time, each behind a GPU spin that
    covers its queueing time (`spin_margin` times the estimate, plus `spin_extra_s`).
    """

    method = "cuda-events"
    max_batch_enqueue_s = 0.02
    spin_margin = 1.5
    spin_extra_s = 100e-6
    first_enqueue_guess_s = 1e-3     # per repeat, until one batch of the same fn is measured
    max_attempts = 4

    def __init__(self, device: torch.device, flush_bytes: int, cuda=None):
        self.cuda = cuda or torch.cuda
        self.flush_bytes = flush_bytes
        self.flush_mode = "write"
        self._buf = torch.empty(max(flush_bytes // 4, 1), dtype=torch.int32, device=device)
        self.spin_cycles_per_s: float | None = None
        self._fn = None
        self._enqueue_s = self.first_enqueue_guess_s
        self.requeued_batches = 0     # batches queued again because the GPU caught up
        self.uncovered_repeats = 0    # repeats kept although the GPU may have waited

    def flush(self) -> None:
        _flush(self._buf, self.flush_mode)

    def sync(self) -> None:
        self.cuda.synchronize()

    def _calibrate_spin(self) -> float:
        """GPU clock cycles per second of torch.cuda._sleep, timed with events once."""
        cycles = 20_000_000
        start = self.cuda.Event(enable_timing=True)
        end = self.cuda.Event(enable_timing=True)
        self.cuda.synchronize()
        start.record()
        self.cuda._sleep(cycles)
        end.record()
        self.cuda.synchronize()
        return cycles / max(start.elapsed_time(end) * 1e-3, 1e-6)

    def _batch(self, fn, n: int, spin_s: float) -> tuple[list[float], bool, float]:
        """(seconds of n repeats, whether the spin covered the queueing, CPU s per repeat)."""
        cuda = self.cuda
        starts = [cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [cuda.Event(enable_timing=True) for _ in range(n)]
        gate = cuda.Event()
        cuda.synchronize()
        cuda._sleep(int(spin_s * self.spin_cycles_per_s))
        gate.record()
        t0 = time.perf_counter()
        for start, end in zip(starts, ends):
            self.flush()
            start.record()
            fn()
            end.record()
        queued_s = time.perf_counter() - t0
        covered = not gate.query()        # still spinning: every repeat was queued in time
        cuda.synchronize()
        # elapsed_time is in milliseconds with about half a microsecond of resolution
        return ([max(s.elapsed_time(e), 1e-4) * 1e-3 for s, e in zip(starts, ends)],
                covered, queued_s / n)

    def time_repeats(self, fn, repeats: int) -> list[float]:
        """Seconds of `repeats` runs of `fn`, each after an L2 flush, queued behind a spin."""
        if self.spin_cycles_per_s is None:
            self.spin_cycles_per_s = self._calibrate_spin()
        if fn is not self._fn:
            self._fn, self._enqueue_s = fn, self.first_enqueue_guess_s
        out: list[float] = []
        while len(out) < repeats:
            n = max(1, min(repeats - len(out), int(self.max_batch_enqueue_s / self._enqueue_s)))
            for attempt in range(self.max_attempts):
                spin_s = n * self._enqueue_s * self.spin_margin + self.spin_extra_s
                times, covered, per_repeat = self._batch(fn, n, spin_s)
                if covered:
                    self._enqueue_s = max(per_repeat, 1e-6)
                    break
                # the spin was short: twice the longer of the estimate and what queueing took
                self._enqueue_s = 2 * max(per_repeat, self._enqueue_s)
                if attempt + 1 < self.max_attempts:
                    self.requeued_batches += 1
            else:
                self.uncovered_repeats += n
            out.extend(times)
        return out

    def record(self) -> dict:
        """How the GPU was kept from waiting on the CPU, for the trace's `timing`."""
        return {"gpu_idle_guard": {
            "method": "torch.cuda._sleep before each batch of repeats, covering its queueing",
            "spin_cycles_per_s": self.spin_cycles_per_s,
            "requeued_batches": self.requeued_batches,
            "uncovered_repeats": self.uncovered_repeats}}


def warm_up(fn, timer, warmup: int) -> float:
    """Untimed warm-up runs, then one timed run (the last warm-up); its seconds."""
    for _ in range(max(warmup - 1, 0)):
        fn()
    timer.sync()
    return timer.time_repeats(fn, 1)[0]


def repeats_for(first_s: float, target_s: float, min_repeats: int, max_repeats: int) -> int:
    """Timed repeats that fill about `target_s` of kernel time, within the bounds."""
    return min(max(math.ceil(target_s / first_s), min_repeats), max_repeats)


def measure(fn, timer, *, warmup: int, target_s: float, min_repeats: int,
            max_repeats: int) -> dict:
    """Time `fn`: warm-up, one sizing run, then enough repeats to fill about `target_s`.

    Returns the trace's `time` record: median, quartiles, min, max, repeats, samples.
    """
    first = warm_up(fn, timer, warmup)
    return time_stats(timer.time_repeats(fn, repeats_for(first, target_s, min_repeats,
                                                         max_repeats)))


def compare_flushes(fn, timer, label: str, repeats: int) -> dict:
    """Time `fn` after a writing and after a read-only flush; keep the faster flush.

    A writing flush leaves the cache full of dirty lines, written back to memory while the
    next kernel runs; a read-only flush leaves clean lines. The mode with the lower median
    disturbs the timed kernel less and is kept for the whole run.
    """
    medians = {}
    for mode in FLUSH_MODES:
        timer.flush_mode = mode
        warm_up(fn, timer, 2)
        medians[mode] = statistics.median(timer.time_repeats(fn, repeats))
    timer.flush_mode = min(FLUSH_MODES, key=lambda m: medians[m])
    return {"chosen": timer.flush_mode, "probe": label, "repeats": repeats,
            "write_median_s": medians["write"], "read_median_s": medians["read"]}


def warm_gpu(device: torch.device, seconds: float = 2.0, size: int = 8192) -> dict:
    """Square bf16 GEMMs for about `seconds`, so clocks and temperature settle before timing."""
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(8):
            torch.mm(a, b, out=c)
        n += 8
        torch.cuda.synchronize()
    return {"method": f"square bf16 GEMMs of {size}", "gemms": n,
            "seconds": round(time.perf_counter() - t0, 3)}


# ------------------------------------------------------------------------------------
# Numeric settings: pinned, and recorded with what torch will run
# ------------------------------------------------------------------------------------

# setting -> (value pinned for every recording, how to read it, how to set it)
def _pinned_settings():
    cm = torch.backends.cuda.matmul
    return {
        "matmul_allow_tf32": (False, lambda: cm.allow_tf32,
                              lambda v: setattr(cm, "allow_tf32", v)),
        "float32_matmul_precision": ("highest", torch.get_float32_matmul_precision,
                                     torch.set_float32_matmul_precision),
        "cudnn_allow_tf32": (True, lambda: torch.backends.cudnn.allow_tf32,
                             lambda v: setattr(torch.backends.cudnn, "allow_tf32", v)),
        "bf16_reduced_precision_reduction": (
            True, lambda: cm.allow_bf16_reduced_precision_reduction,
            lambda v: setattr(cm, "allow_bf16_reduced_precision_reduction", v)),
        "fp16_reduced_precision_reduction": (
            True, lambda: cm.allow_fp16_reduced_precision_reduction,
            lambda v: setattr(cm, "allow_fp16_reduced_precision_reduction", v)),
        "math_sdp_fp16_bf16_reduction": (
            False, torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed,
            torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp),
    }


def pin_numerics(device_type: str) -> dict:
    """Pin TF32 and reduced-precision settings to torch's defaults; record what runs.

    Returns the trace's `environment.numerics`: every pinned setting, the ones that had
    another value before (an environment variable or a site customisation), the BLAS
    library, the SDPA backends enabled and their priority, the flash implementation, and
    whether fp8 GEMMs accumulate fast.
    """
    out, changed, errors = {}, {}, {}
    for name, (value, get, put) in _pinned_settings().items():
        try:
            before = get()
            if before != value:
                put(value)
                changed[name] = before
            out[name] = get()
        except (RuntimeError, AttributeError, TypeError) as e:
            errors[name] = f"{type(e).__name__}: {str(e)[:160]}"
    out["changed_from"] = changed
    try:
        order = [sdpa_backend_name(b) for b in torch._C._get_sdp_priority_order()]
    except (AttributeError, RuntimeError, ValueError):
        order = None
    try:
        from torch.nn.attention import _cur_sdpa_kernel_backends
        enabled = {sdpa_backend_name(b) for b in _cur_sdpa_kernel_backends()}
    except (ImportError, AttributeError, RuntimeError, ValueError) as e:   # a private API
        enabled, errors["sdpa_enabled"] = None, f"{type(e).__name__}: {str(e)[:160]}"
    out["sdpa_priority"] = [b for b in order if b] if order else None
    out["sdpa_enabled"] = sorted(b for b in enabled if b) if enabled is not None else None
    try:
        from torch.nn.attention import current_flash_attention_impl
        impl = current_flash_attention_impl()
    except ImportError:
        impl = None
    out["flash_impl"] = impl or "built in (FlashAttention-2 kernels compiled into torch)"
    out["blas_library"] = (torch.backends.cuda.preferred_blas_library().name.lower()
                           if device_type == "cuda" else None)
    if os.environ.get("TORCH_BLAS_PREFER_CUBLASLT"):
        out["blas_env"] = f"TORCH_BLAS_PREFER_CUBLASLT={os.environ['TORCH_BLAS_PREFER_CUBLASLT']}"
    out["fp8_use_fast_accum"] = FP8_USE_FAST_ACCUM
    if errors:
        out["errors"] = errors
    return out


def dispatched(fn, device_type: str, limit: int = 24) -> dict:
    """The aten ops (three levels deep; on a GPU also the kernels) one call of `fn` runs.

    Says which SDPA backend or flash implementation ran, whether K/V were expanded or cast,
    and whether an RMSNorm was one fused kernel.
    """
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_type == "cuda" else [])
    try:
        with profile(activities=acts) as prof:
            fn()
            if device_type == "cuda":
                torch.cuda.synchronize()
        events = list(prof.events())
    except Exception as e:                      # a profiler that cannot start: say so
        return {"error": f"{type(e).__name__}: {str(e)[:160]}"}
    ops, kernels = [], []
    for e in events:
        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA:
            kernels.append(e.name[:100])
            continue
        depth, p = 0, e.cpu_parent
        while p is not None:
            depth, p = depth + 1, p.cpu_parent
        if depth <= 2 and e.name.startswith("aten::") and e.name not in ops:
            ops.append(e.name)
    out = {"ops": ops[:limit]}
    if device_type == "cuda":
        out["kernels"] = kernels[:limit]
        out["kernel_count"] = len(kernels)
    return out


def rms_norm_is_fused(ran: dict) -> bool | None:
    """True when F.rms_norm ran as one fused op, False when it was decomposed, None unknown."""
    ops = ran.get("ops")
    if not ops:
        return None
    return not any(op in ops for op in ("aten::pow", "aten::mean", "aten::rsqrt"))


# ------------------------------------------------------------------------------------
# GPU clocks, power, temperature, throttling, ECC and MIG: pynvml, else nvidia-smi
# ------------------------------------------------------------------------------------

# NVML's clock-throttle ("clock event") reason bits, nvml.h
THROTTLE_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                    0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                    0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
                    0x100: "display_clock_setting"}
SMI_FIELDS = ("clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem", "power.draw",
              "power.limit", "temperature.gpu", "{reasons}.active", "ecc.mode.current",
              "mig.mode.current")
STATE_KEYS = ("sm_clock_mhz", "mem_clock_mhz", "max_sm_clock_mhz", "max_mem_clock_mhz",
              "power_w", "power_limit_w", "temperature_c", "throttle_reasons", "ecc_mode",
              "mig_mode")


def throttle_names(mask: int) -> list[str]:
    """Names of the set bits of an NVML throttle-reason mask.

    >>> throttle_names(0x4 | 0x20)
    ['sw_power_cap', 'sw_thermal_slowdown']
    """
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def _num(text: str):
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None                 # "[N/A]", "[Not Supported]"


def parse_smi_state(line: str) -> dict:
    """The `gpu_state` record from one line of `nvidia-smi --query-gpu=SMI_FIELDS
    --format=csv,noheader,nounits`.

    >>> s = parse_smi_state("1980, 2619, 1980, 2619, 512.3, 700.00, 41, 0x0000000000000004, "
    ...                     "Enabled, Disabled")
    >>> s["sm_clock_mhz"], s["power_limit_w"], s["throttle_reasons"], s["mig_mode"]
    (1980.0, 700.0, ['sw_power_cap'], 'disabled')
    """
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(SMI_FIELDS):
        raise ValueError(f"expected {len(SMI_FIELDS)} fields from nvidia-smi, got {line!r}")
    state = {k: _num(v) for k, v in zip(STATE_KEYS[:7], parts[:7])}
    try:
        state["throttle_reasons"] = throttle_names(int(parts[7], 16))
    except ValueError:
        state["throttle_reasons"] = None
    for key, text in zip(("ecc_mode", "mig_mode"), parts[8:]):
        state[key] = text.lower() if text.lower() in ("enabled", "disabled") else None
    return {"available": True, "source": "nvidia-smi", **state}


def _nvml_state(nvml, uuid: str | None) -> dict:
    nvml.nvmlInit()
    try:
        h = (nvml.nvmlDeviceGetHandleByUUID(uuid) if uuid
             else nvml.nvmlDeviceGetHandleByIndex(0))

        def get(call, *args, scale=1.0):
            try:
                return call(h, *args) * scale
            except nvml.NVMLError:
                return None

        def mode(call):
            try:
                current = call(h)[0]
            except nvml.NVMLError:
                return None
            return "enabled" if current else "disabled"
        sm, mem = nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM
        reasons = get(nvml.nvmlDeviceGetCurrentClocksThrottleReasons)
        return {"available": True, "source": "nvml",
                "sm_clock_mhz": get(nvml.nvmlDeviceGetClockInfo, sm),
                "mem_clock_mhz": get(nvml.nvmlDeviceGetClockInfo, mem),
                "max_sm_clock_mhz": get(nvml.nvmlDeviceGetMaxClockInfo, sm),
                "max_mem_clock_mhz": get(nvml.nvmlDeviceGetMaxClockInfo, mem),
                "power_w": get(nvml.nvmlDeviceGetPowerUsage, scale=1e-3),
                "power_limit_w": get(nvml.nvmlDeviceGetEnforcedPowerLimit, scale=1e-3),
                "temperature_c": get(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU),
                "throttle_reasons": None if reasons is None else throttle_names(int(reasons)),
                "ecc_mode": mode(nvml.nvmlDeviceGetEccMode),
                "mig_mode": mode(nvml.nvmlDeviceGetMigMode)}
    finally:
        nvml.nvmlShutdown()


def gpu_state(uuid: str | None = None) -> dict:
    """Clocks, power, temperature, throttle reasons, ECC and MIG mode of the GPU now.

    Through pynvml if it imports, else `nvidia-smi`, else recorded as unavailable with the
    reason. `uuid` (torch's device UUID) picks the GPU torch runs on.
    """
    if uuid and not uuid.startswith(("GPU-", "MIG-")):
        uuid = f"GPU-{uuid}"
    problems = []
    try:
        import pynvml
    except ImportError:
        problems.append("pynvml is not installed")
    else:
        try:
            return _nvml_state(pynvml, uuid)
        except Exception as e:                       # any NVML failure: try nvidia-smi
            problems.append(f"pynvml failed: {type(e).__name__}: {str(e)[:120]}")
    exe = shutil.which("nvidia-smi")
    if exe is None:
        problems.append("nvidia-smi is not on PATH")
        return {"available": False, "reason": "; ".join(problems)}
    for reasons in ("clocks_event_reasons", "clocks_throttle_reasons"):   # new name, old name
        fields = ",".join(SMI_FIELDS).format(reasons=reasons)
        cmd = [exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits"]
        if uuid:
            cmd.append(f"--id={uuid}")
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True)
            return parse_smi_state(out.stdout.strip().splitlines()[0])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
            problems.append(f"nvidia-smi {reasons}: {type(e).__name__}: {str(e)[:120]}")
    return {"available": False, "reason": "; ".join(problems)}


# ------------------------------------------------------------------------------------
# Describing the device and software
# ------------------------------------------------------------------------------------

def _cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _cpu_llc_bytes() -> int:
    """Largest cache level of cpu0 from sysfs (bytes); 32 MiB if sysfs does not say."""
    best = 0
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (d / "size").read_text().strip()
        except OSError:
            continue
        m = re.fullmatch(r"(\d+)([KMG]?)", text)
        if m:
            best = max(best, int(m.group(1)) * {"": 1, "K": 1024, "M": 1024 ** 2,
                                                 "G": 1024 ** 3}[m.group(2)])
    return best or 32 * 1024 ** 2


def _cpu_memory_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _nvidia_driver() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0].strip() if out.strip() else None


def describe_device(device_type: str) -> dict:
    """The trace's `device` record for the device torch will run on."""
    load = [round(x, 2) for x in os.getloadavg()]
    if device_type == "cuda":
        props = torch.cuda.get_device_properties(0)
        ident = identify_device(torch.cuda.get_device_name(0))
        l2 = int(getattr(props, "L2_cache_size", 0) or 50 * 1024 ** 2)
        return {"type": "cuda", "name": ident.name, "slug": ident.slug,
                "catalogue_key": ident.key, "memory_bytes": int(props.total_memory),
                "compute_units": int(props.multi_processor_count), "compute_unit_kind": "SM",
                "logical_cores": os.cpu_count() or 1,
                "capability": f"{props.major}.{props.minor}", "cache_bytes": l2,
                "cpu_capability": None, "load_average_start": load}
    name = _cpu_model_name()
    threads = torch.get_num_threads()
    return {"type": "cpu", "name": name,
            "slug": cpu_slug(name, threads),
            "catalogue_key": None, "memory_bytes": _cpu_memory_bytes(),
            "compute_units": threads, "compute_unit_kind": "thread",
            "logical_cores": os.cpu_count() or 1, "capability": None,
            "cache_bytes": _cpu_llc_bytes(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "load_average_start": load}


def describe_software(device_type: str) -> dict:
    """The trace's `software` record: torch, CUDA, driver, cuDNN, Python, numpy, OS."""
    try:
        import numpy
        numpy_version = numpy.__version__
    except ImportError:
        numpy_version = None
    cudnn = None
    if device_type == "cuda" and torch.backends.cudnn.is_available():
        cudnn = str(torch.backends.cudnn.version())
    return {"torch": torch.__version__,
            "cuda": torch.version.cuda if device_type == "cuda" else None,
            "driver": _nvidia_driver() if device_type == "cuda" else None,
            "cudnn": cudnn, "python": platform.python_version(), "numpy": numpy_version,
            "platform": platform.platform()}
