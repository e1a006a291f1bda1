"""The recorder's GPU paths, checked on the CPU with stand-ins for torch.cuda, NVML and
nvidia-smi (run in the recorder's environment, which has torch): what is queued before the
timed kernels, what is recorded about the GPU and its numeric settings, what happens on
out-of-memory and with an unwritable output path."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TRACE_PYTHON = REPO / ".venv-trace" / "bin" / "python"


def run_in_trace_env(code: str) -> str:
    """Run `code` with torch (the recorder's environment); its stdout."""
    if not TRACE_PYTHON.exists():
        pytest.fail(f"{TRACE_PYTHON} is missing: `./dev test` creates it")
    proc = subprocess.run([str(TRACE_PYTHON), "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


FAKE_CUDA = '''
import torch
from gpu_traces import harness

class FakeCuda:
    """torch.cuda as far as the timer uses it; `gate_done` scripts Event.query()."""
    def __init__(self, gate_done):
        self.log, self.gate_done, self.n = [], list(gate_done), 0
    def synchronize(self):
        self.log.append("sync")
    def _sleep(self, cycles):
        self.log.append(("sleep", cycles))
    def Event(self, enable_timing=False):
        cuda = self
        class E:
            def __init__(self):
                cuda.n += 1
                self.id, self.t = cuda.n, None
            def record(self):
                self.t = len(cuda.log)
                cuda.log.append("event" if enable_timing else "gate")
            def query(self):
                return cuda.gate_done.pop(0)
            def elapsed_time(self, other):
                return 0.002                     # 2 us, in ms as torch gives it
        return E()

def fake_timer(gate_done):
    t = harness.CudaTimer(torch.device("cpu"), 1024, cuda=FakeCuda(gate_done))
    t.spin_cycles_per_s = 1e9                     # skip the spin calibration
    return t
'''


def test_the_gpu_is_handed_a_spin_before_the_timed_kernels():
    out = run_in_trace_env(FAKE_CUDA + '''
calls = []
t = fake_timer([False])
times = t.time_repeats(lambda: t.cuda.log.append("fn"), 3)
log = [x if isinstance(x, str) else x[0] for x in t.cuda.log]
print(log)
print(times, t.requeued_batches, t.uncovered_repeats)
''')
    log, rest = out.strip().splitlines()
    # one synchronize, the spin, the gate, then flush/start/fn/end for each repeat, all
    # queued while the GPU spins; one synchronize to read the events
    assert log == str(["sync", "sleep", "gate"] + ["event", "fn", "event"] * 3 + ["sync"])
    assert rest == "[2e-06, 2e-06, 2e-06] 0 0"


def test_a_batch_the_gpu_caught_up_with_is_timed_again_behind_a_longer_spin():
    out = run_in_trace_env(FAKE_CUDA + '''
t = fake_timer([True, False])      # the first spin ended before queueing did
times = t.time_repeats(lambda: None, 2)
spins = [x[1] for x in t.cuda.log if isinstance(x, tuple)]
print(len(times), t.requeued_batches, t.uncovered_repeats, len(spins), spins[1] > spins[0])
t = fake_timer([True] * 4)         # never covered: kept, and counted in the trace
t.time_repeats(lambda: None, 2)
print(t.record()["gpu_idle_guard"]["uncovered_repeats"], t.requeued_batches)
''')
    first, second = out.strip().splitlines()
    assert first == "2 1 0 2 True"
    assert second == "2 3"


def test_nvidia_smi_and_nvml_state_are_parsed():
    out = run_in_trace_env('''
import sys, types
from gpu_traces import harness
s = harness.parse_smi_state("1755, 2619, 1980, 2619, 698.51, 700.00, 83, 0x0000000000000024, "
                            "Enabled, [N/A]")
print(s["sm_clock_mhz"], s["power_w"], s["temperature_c"], s["throttle_reasons"], s["ecc_mode"],
      s["mig_mode"])
class NVMLError(Exception): pass
nv = types.SimpleNamespace(
    NVMLError=NVMLError, NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1, NVML_TEMPERATURE_GPU=0,
    nvmlInit=lambda: None, nvmlShutdown=lambda: None,
    nvmlDeviceGetHandleByUUID=lambda u: ("h", u), nvmlDeviceGetHandleByIndex=lambda i: ("h", i),
    nvmlDeviceGetClockInfo=lambda h, c: [1980, 2619][c],
    nvmlDeviceGetMaxClockInfo=lambda h, c: [1980, 2619][c],
    nvmlDeviceGetPowerUsage=lambda h: 512300, nvmlDeviceGetEnforcedPowerLimit=lambda h: 700000,
    nvmlDeviceGetTemperature=lambda h, s: 41,
    nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x1,
    nvmlDeviceGetEccMode=lambda h: (1, 1), nvmlDeviceGetMigMode=lambda h: (0, 0))
sys.modules["pynvml"] = nv
s = harness.gpu_state("1234-abcd")
print(s["source"], s["power_w"], s["power_limit_w"], s["throttle_reasons"], s["ecc_mode"],
      s["mig_mode"])
sys.modules["pynvml"] = None                     # not importable
import shutil
shutil.which = lambda name: None
print(harness.gpu_state())
''')
    smi, nvml, none = out.strip().splitlines()
    assert smi == "1755.0 698.51 83.0 ['sw_power_cap', 'sw_thermal_slowdown'] enabled None"
    assert nvml == "nvml 512.3 700.0 ['gpu_idle'] enabled disabled"
    assert "'available': False" in none and "pynvml is not installed" in none \
        and "nvidia-smi is not on PATH" in none


def test_numeric_settings_are_pinned_and_what_was_changed_is_recorded():
    out = run_in_trace_env('''
import torch
from gpu_traces import harness
torch.backends.cuda.matmul.allow_tf32 = True           # as a site customisation might
n = harness.pin_numerics("cpu")
print(torch.backends.cuda.matmul.allow_tf32, n["matmul_allow_tf32"], n["changed_from"])
print(n["fp8_use_fast_accum"], n["math_sdp_fp16_bf16_reduction"], "math" in n["sdpa_enabled"])
''')
    first, second = out.strip().splitlines()
    assert first.startswith("False False {") and "'matmul_allow_tf32': True" in first
    assert second == "False False True"


def test_what_ran_is_recorded_for_math_attention_and_rms_norm():
    out = run_in_trace_env('''
import torch
from gpu_traces import harness, kernels, suites
shape = suites.attention_shape(1, 1, 256, False, "bf16")
point = suites.Point("attention-decode", "d", "bf16", "math", shape)
with kernels.context(point):
    fn, s = kernels.prepare(point, torch.device("cpu"), kernels.TensorCache(), {})
    ran = harness.dispatched(fn, "cpu")
print(s["kv_heads_read"], s["heads"], s["compute_dtype"], s["default_backend"])
print("aten::_scaled_dot_product_attention_math" in ran["ops"])
fn, s = kernels.prepare(suites.Point("elementwise", "r", "bf16", None,
                        {"op": "rms_norm", "tokens": 4, "hidden": 64, "bytes_per_elem": 2,
                         "impl": "x"}), torch.device("cpu"), kernels.TensorCache(), {})
print(harness.rms_norm_is_fused(harness.dispatched(fn, "cpu")))
g = suites.gemm_shape(16, 64, 64, "fp8"), suites.gemm_shape(17, 64, 64, "fp8")
print(g[0]["fp8_small_m_path"], g[1]["fp8_small_m_path"], g[0]["use_fast_accum"])
''')
    lines = out.strip().splitlines()
    # math SDPA repeats K/V to all 32 query heads and computes bf16 in fp32
    assert lines[0] == "32 32 fp32 flash"
    assert lines[1] == "True"
    assert lines[2] == "False"          # on the CPU F.rms_norm decomposes into pow, mean, ...
    assert lines[3] == "True False False"


def test_out_of_memory_is_not_retried_and_frees_memory():
    out = run_in_trace_env('''
import torch, torch.nn.functional as F
from gpu_traces import kernels, record, suites
calls = []
def oom(q, k, v, **kw):
    calls.append(k.shape[1])
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
F.scaled_dot_product_attention = oom
shape = suites.attention_shape(1, 1, 256, False, "bf16")
point = suites.Point("attention-decode", "decode b=1 kv=256", "bf16", "flash", shape)
try:
    kernels.prepare(point, torch.device("cpu"), kernels.TensorCache(), {})
except torch.OutOfMemoryError:
    print("raised", calls)                 # not retried with K/V expanded to 32 heads
suite = suites.get("cpu", True)
rec = record.Recorder(suite, None, 100.0, torch.device("cpu"))
rec.cache.get("k", lambda: "big tensors")
freed = []
rec._free_memory = lambda: freed.append(rec.cache.clear())
rec.run([point])
print(rec.skipped[0]["reason"][:40], len(freed), rec.measurements)
''')
    first, second = out.strip().splitlines()
    assert first == "raised [8]"
    assert second == "out of memory: OutOfMemoryError: CUDA ou 1 []"


def test_a_point_that_fails_unexpectedly_is_skipped_and_the_run_goes_on():
    """A torch whose API differs (a TypeError inside one kernel) loses that point, with the
    error as its reason, not the measurements of the whole run."""
    out = run_in_trace_env('''
import torch
from gpu_traces import kernels, record, suites
suite = suites.get("cpu", True)
points, _ = suites.plan(suite)
copy = next(p for p in points if p.kind == "copy")
bad = suites.Point("elementwise", "rms_norm tokens=1", "fp32", None,
                   {"op": "rms_norm", "tokens": 1, "hidden": 64, "bytes_per_elem": 4, "impl": "x"})
real = kernels.prepare
def prepare(point, *a):
    if point is bad:
        raise TypeError("rms_norm() got an unexpected keyword argument 'eps'")
    return real(point, *a)
kernels.prepare = prepare
from gpu_traces import harness
rec = record.Recorder(suite, harness.CpuTimer(1 << 20, 1), 100.0, torch.device("cpu"))
rec.run([bad, copy])
print(rec.skipped[0]["reason"])
print([m["label"] for m in rec.measurements])
''')
    reason, measured = out.strip().splitlines()
    assert reason == ("error in the recorder: TypeError: rms_norm() got an unexpected keyword "
                      "argument 'eps'")
    assert measured.startswith("['copy ")


def test_an_unwritable_output_path_fails_before_measuring(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    proc = subprocess.run([str(TRACE_PYTHON), "-m", "gpu_traces.record", "--device", "cpu",
                           "--quick", "--out", str(tmp_path / "file" / "t.json")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "cannot write there" in proc.stderr and "Traceback" not in proc.stderr
    assert "nothing was measured" in proc.stderr and "copy 4 KiB" not in proc.stderr


def test_a_path_that_fails_at_the_end_keeps_the_trace():
    out = run_in_trace_env('''
import json, os, tempfile
from pathlib import Path
from gpu_traces import record
from tests.synthetic import synthesize_trace
from sim import kernel_model
cal = kernel_model.Calibration(device="c", source="spec-sheet", bandwidth_bytes_per_s=2e10,
                              flops_per_s={"bf16": 3e11}, launch_overhead_s=5e-6, note="",
                              compute_units=2)
trace = synthesize_trace(cal, suite="cpu-quick", device_name="Test CPU", device_type="cpu")
d = Path(tempfile.mkdtemp())
record.check_writable(d / "dev" / "t.json")           # fine at the start ...
(d / "dev").rmdir()
(d / "dev").write_text("a file where the folder was")  # ... gone by the end
try:
    record.write_trace(trace, d / "dev" / "t.json")
except SystemExit as e:
    saved = Path(str(e).rsplit("saved to ", 1)[1])
    print(json.loads(saved.read_text())["measurements"] == trace["measurements"])
    saved.unlink()
bad = json.loads(json.dumps(trace))
bad["measurements"][0]["time"] = {**bad["measurements"][0]["time"], "min_s": 1e-300}
try:
    record.write_trace(bad, d / "t.json")
except SystemExit as e:
    safe = Path(str(e).split("the measurements are in ", 1)[1].splitlines()[0])
    print("invalid kept", safe.name.endswith(".invalid.json"), not (d / "t.json").exists())
    safe.unlink()
''')
    lines = out.strip().splitlines()
    assert lines[0] == "True"
    assert lines[1] == "invalid kept True True"


def test_the_faster_flush_is_kept():
    out = run_in_trace_env('''
from gpu_traces import harness
class T:
    flush_mode = "write"
    def sync(self): pass
    def time_repeats(self, fn, n):           # dirty lines make the kernel after a write slower
        return [3e-5 if self.flush_mode == "write" else 2e-5] * n
t = T()
c = harness.compare_flushes(lambda: None, t, "probe", 5)
print(t.flush_mode, c["chosen"], c["write_median_s"], c["read_median_s"])
''')
    assert out.strip() == "read read 3e-05 2e-05"


def test_the_full_gpu_suite_is_budgeted_to_its_limit():
    # Peaks of an H100-class GPU as the recorder would learn them from its copy sweep and
    # square GEMMs (assumed rates, not measurements): the plan must fit in 92% of the limit.
    out = run_in_trace_env('''
import torch
from gpu_traces import record, suites
suite = suites.get("cuda", False)
cases, _ = suites.plan(suite)
class T:
    flush_bytes = 100 * 2 ** 20
rec = record.Recorder(suite, T(), suite.max_seconds, torch.device("cuda"))
rec._bw, rec._flops = 3.0e12, {"bf16": 7e14, "fp8": 1.3e15}
rec._flush_s = T.flush_bytes / rec._bw
rec.plan_budget(cases, set())
print(suite.max_seconds, len(cases), round(rec.estimated_s), round(rec.scale, 3))
rec._bw, rec._flops = 1.0e11, {"bf16": 2e13, "fp8": 4e13}   # a GPU 30 times slower
rec._flush_s = T.flush_bytes / rec._bw
rec.plan_budget(cases, set())
print(round(rec.estimated_s), round(rec.scale, 3))
''')
    first, second = out.strip().splitlines()
    limit, n, est, scale = first.split()
    assert float(limit) == 360.0 and int(n) > 900
    assert float(est) <= 0.92 * 360 and 0 < float(scale) <= 1
    est2, scale2 = map(float, second.split())
    assert est2 <= 0.92 * 360 + 1 and scale2 < 1
