"""One timing harness for every device: only the timer differs between CPU and CUDA.

For each point: untimed warm-up runs, one timed run to size the repeats, then the timed
repeats. Before every timed run the last-level cache is flushed by writing a buffer twice
its size, so each kernel reads its inputs from device memory as it does in a real forward
pass (where the previous layer's weights have long left the cache).

* CUDA: CUDA events recorded on the stream around the kernel. The flush kernel runs
  between the repeats, so the CPU has queued the timed kernel before the GPU reaches it:
  the time is the GPU's, from the moment it starts the kernel to the moment it finishes,
  as in a CUDA graph or a busy stream. All repeats are queued, then one synchronize.
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
import subprocess
import time
from pathlib import Path

import torch

from gpu_traces.schema import time_stats
from sim.calibration import catalogue_key_for_device, cpu_slug, device_slug


class CpuTimer:
    """Timer for synchronous CPU kernels, with an LLC flush before each run.

    With one torch thread the kernel runs in the calling thread, and its time is that
    thread's CPU time (time.thread_time_ns): on a shared machine this leaves out the
    slices the OS gives to other programs. With more threads, wall time
    (time.perf_counter_ns), since a parallel kernel's CPU time is spread over threads.
    """

    def __init__(self, flush_bytes: int, threads: int):
        self.flush_bytes = flush_bytes
        self.method = "thread-cpu-time" if threads == 1 else "perf-counter"
        self._clock = time.thread_time_ns if threads == 1 else time.perf_counter_ns
        self._buf = torch.empty(max(flush_bytes // 4, 1), dtype=torch.int32)

    def flush(self) -> None:
        self._buf.zero_()

    def sync(self) -> None:
        pass

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
    """CUDA-event timer: GPU time of each run, with an L2 flush kernel before each run."""

    method = "cuda-events"

    def __init__(self, device: torch.device, flush_bytes: int):
        self.flush_bytes = flush_bytes
        self._buf = torch.empty(max(flush_bytes // 4, 1), dtype=torch.int32, device=device)

    def flush(self) -> None:
        self._buf.zero_()

    def sync(self) -> None:
        torch.cuda.synchronize()

    def time_repeats(self, fn, repeats: int) -> list[float]:
        """Seconds of `repeats` runs of `fn`, each after an L2 flush; one synchronize at the end."""
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        torch.cuda.synchronize()
        for start, end in zip(starts, ends):
            self.flush()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        # elapsed_time is in milliseconds with about half a microsecond of resolution
        return [max(s.elapsed_time(e), 1e-4) * 1e-3 for s, e in zip(starts, ends)]


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
        name = torch.cuda.get_device_name(0)
        key = catalogue_key_for_device(name)
        l2 = int(getattr(props, "L2_cache_size", 0) or 50 * 1024 ** 2)
        return {"type": "cuda", "name": name, "slug": device_slug(key or name),
                "catalogue_key": key, "memory_bytes": int(props.total_memory),
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
