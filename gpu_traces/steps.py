"""Time whole forward steps of a transformer built from plain torch ops: what a kernel trace
cannot show (the kernels a real step runs besides the big ones, the gaps between them, the
host's dispatch when nothing is captured in a CUDA graph).

    python -m gpu_traces.steps                     # a GPU: gpu_traces/steps/<device>/<time>-steps.json
    python -m gpu_traces.steps --device cpu --quick --out /tmp/steps.json            # the code path

The model is the catalogue's layer shapes (`sim.models`) with random bf16 weights: per layer
RMSNorm, the fused qkv projection, rotary embedding, writing the new keys and values into a
preallocated cache, scaled-dot-product attention (torch's default backend, grouped KV heads
read as they are), the output projection and residual add, RMSNorm, the fused gate/up
projection, SiLU-and-multiply, the down projection and residual add; then the final norm, the
output head on each sequence's last token and a greedy sampler (argmax over fp32 logits).
No kernel is fused beyond what torch itself does, so a step runs more kernels than an engine
with fused norms and rotary embeddings.

Each configuration (model, phase, batch, context, mode) is timed `--repeats` times after
warm-up with CUDA events around each step (CPU: wall time). Mode "cuda-graph" replays the
step captured in a CUDA graph (one launch); "eager" issues every kernel from Python. One eager
step of each configuration is also profiled: the number of GPU kernels it ran and their busy
time by category (matrix multiplication, attention, other), so the step time can be split
into the kernels' own time and the rest. A configuration that fails (out of memory, a
capture that torch refuses) is listed under `skipped` with the reason; the others are kept.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from sim.cli import ArgumentParser, UsageError, run

STEPS_DIR = Path(__file__).resolve().parent / "steps"     # <device slug>/<UTC time>-steps.json
FORMAT = "gpu-steps"
FORMAT_VERSION = 1
MODES = ("cuda-graph", "eager")
PHASES = ("decode", "prefill")

# (model, phase, batch, context tokens); context is the cached tokens before the step for a
# decode step, the prompt length for a prefill step (one sequence)
GPU_PLAN = tuple(
    [(m, "decode", b, c) for m in ("llama-3.1-8b", "llama-3.2-1b") for b in (1, 16, 64)
     for c in (1024, 8192, 32768) if b * c <= 524_288]
    + [(m, "prefill", 1, c) for m in ("llama-3.1-8b", "llama-3.2-1b") for c in (512, 2048, 8192)])
QUICK_PLAN = (("tiny", "decode", 1, 64), ("tiny", "decode", 4, 128), ("tiny", "prefill", 1, 64))


class TinyConfig:
    """A two-layer model for checking the code path on a CPU (never recorded as an LLM)."""
    name, display_name = "tiny", "tiny test model (2 layers)"
    hidden_size, num_heads, num_kv_heads, head_dim = 128, 4, 2, 32
    intermediate_size, num_layers, vocab_size = 256, 2, 1000

    def linear_shapes(self):
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return {"qkv_proj": (128, q + 2 * kv), "o_proj": (q, 128),
                "gate_up_proj": (128, 512), "down_proj": (256, 128)}


def _config(name: str):
    if name == "tiny":
        return TinyConfig()
    from sim import models
    m = models.get(name)
    if m.is_moe:
        raise ValueError(f"{name}: a mixture-of-experts model is not built by this recorder")
    return m


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------
# The model, in plain torch ops
# ------------------------------------------------------------------------------------

class Model:
    """Random bf16 weights of one model and a preallocated KV cache for one step size."""

    def __init__(self, cfg, device, dtype):
        import torch
        self.cfg, self.device, self.dtype = cfg, device, dtype
        shapes = cfg.linear_shapes()
        h, std = cfg.hidden_size, 0.02

        def w(n, k):            # nn.Linear layout: (out_features, in_features)
            return (torch.randn(n, k, device=device, dtype=dtype) * std)
        self.embed = w(cfg.vocab_size, h)
        self.head = w(cfg.vocab_size, h)
        self.layers = []
        for _ in range(cfg.num_layers):
            self.layers.append({name: w(n, k) for name, (k, n) in shapes.items()}
                               | {"attn_norm": torch.ones(h, device=device, dtype=dtype),
                                  "mlp_norm": torch.ones(h, device=device, dtype=dtype)})
        self.final_norm = torch.ones(h, device=device, dtype=dtype)

    def weight_bytes(self) -> int:
        n = self.embed.numel() + self.head.numel() + self.final_norm.numel()
        n += sum(t.numel() for layer in self.layers for t in layer.values())
        return n * self.embed.element_size()

    def make_step(self, batch: int, context: int, phase: str):
        """(step function, its inputs): one decode step over `context` cached tokens, or the
        prefill of one `context`-token prompt. The caches and rotary tables are allocated here."""
        import torch
        import torch.nn.functional as F
        cfg, dev, dt = self.cfg, self.device, self.dtype
        H, Hkv, d, h = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size
        T = 1 if phase == "decode" else context          # new tokens per sequence
        total = context + 1 if phase == "decode" else context
        start = context if phase == "decode" else 0      # where the new tokens' K/V go
        caches = [(torch.randn(batch, Hkv, total, d, device=dev, dtype=dt),
                   torch.randn(batch, Hkv, total, d, device=dev, dtype=dt))
                  for _ in range(cfg.num_layers)]
        pos = torch.arange(start, start + T, device=dev, dtype=torch.float32)
        inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
        ang = torch.outer(pos, inv)
        cos = torch.cat([ang.cos(), ang.cos()], -1).to(dt)[None, None]   # (1, 1, T, d)
        sin = torch.cat([ang.sin(), ang.sin()], -1).to(dt)[None, None]
        tokens = torch.randint(0, cfg.vocab_size, (batch, T), device=dev)
        q_out, kv_out = H * d, Hkv * d
        causal = phase == "prefill"

        def rope(x):
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
            return x * cos + torch.cat([-x2, x1], -1) * sin

        def step():
            x = F.embedding(tokens, self.embed).view(batch * T, h)
            for layer, (kc, vc) in zip(self.layers, caches):
                r = x
                y = F.rms_norm(x, (h,), layer["attn_norm"], eps=1e-5)
                qkv = F.linear(y, layer["qkv_proj"])
                q = qkv[:, :q_out].view(batch, T, H, d).transpose(1, 2)
                k = qkv[:, q_out:q_out + kv_out].view(batch, T, Hkv, d).transpose(1, 2)
                v = qkv[:, q_out + kv_out:].view(batch, T, Hkv, d).transpose(1, 2)
                q, k = rope(q), rope(k)
                kc[:, :, start:start + T] = k
                vc[:, :, start:start + T] = v
                o = F.scaled_dot_product_attention(q, kc, vc, is_causal=causal, enable_gqa=True)
                x = r + F.linear(o.transpose(1, 2).reshape(batch * T, q_out), layer["o_proj"])
                r = x
                y = F.rms_norm(x, (h,), layer["mlp_norm"], eps=1e-5)
                gu = F.linear(y, layer["gate_up_proj"])
                i = gu.shape[-1] // 2
                x = r + F.linear(F.silu(gu[:, :i]) * gu[:, i:], layer["down_proj"])
            last = F.rms_norm(x.view(batch, T, h)[:, -1], (h,), self.final_norm, eps=1e-5)
            logits = F.linear(last, self.head)
            return torch.argmax(logits.float(), dim=-1)

        return step, {"kv_cache_bytes": sum(c.numel() * c.element_size() for kv in caches for c in kv)}


# ------------------------------------------------------------------------------------
# Timing
# ------------------------------------------------------------------------------------

def _timer(device):
    """A function that runs `fn` `n` times and returns the seconds of each run."""
    import torch
    if device.type == "cuda":
        def run(fn, n):
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            torch.cuda.synchronize()
            for s, e in zip(starts, ends):
                s.record()
                fn()
                e.record()
            torch.cuda.synchronize()
            return [s.elapsed_time(e) * 1e-3 for s, e in zip(starts, ends)]
    else:
        def run(fn, n):
            out = []
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
            return out
    return run


def _capture(step, device):
    """The step captured in a CUDA graph: a function that replays it."""
    import torch
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    torch.cuda.synchronize()
    return graph.replay, graph


CATEGORIES = (("attention", ("attn", "fmha", "flash", "sdpa", "softmax")),
              ("matmul", ("gemm", "sm90_xmma", "nvjet", "cutlass", "cublas", "matmul", "splitk")))


def kernel_category(name: str) -> str:
    """'attention', 'matmul' or 'other' for a GPU kernel's name.

    >>> kernel_category("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7")
    'attention'
    >>> kernel_category("nvjet_tst_128x64_64x8_1x2_h_bz_coopA_NTN")
    'matmul'
    >>> kernel_category("void at::native::vectorized_elementwise_kernel<4, ...>")
    'other'
    """
    low = name.lower()
    for cat, keys in CATEGORIES:
        if any(k in low for k in keys):
            return cat
    return "other"


def profile_step(step, device) -> dict:
    """Kernels one eager step runs on the GPU: count and busy seconds by category."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from gpu_traces.kernels import first_line
    if device.type != "cuda":
        return {"available": False, "reason": "kernel profiles are recorded on a GPU only"}
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        events = [e for e in prof.events()
                  if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
    except Exception as e:                      # a profiler that cannot start: say so
        return {"available": False, "reason": first_line(e)}
    by_cat: dict[str, dict] = {}
    names: dict[str, int] = {}
    try:
        for e in events:
            cat = kernel_category(e.name)
            c = by_cat.setdefault(cat, {"kernels": 0, "busy_s": 0.0})
            c["kernels"] += 1
            us = getattr(e, "device_time_total", None)
            c["busy_s"] += float(e.cuda_time_total if us is None else us) * 1e-6
            names[e.name[:90]] = names.get(e.name[:90], 0) + 1
    except Exception as e:                      # an event API that differs: keep the timings
        return {"available": False, "reason": first_line(e)}
    top = sorted(names.items(), key=lambda kv: -kv[1])[:12]
    return {"available": True, "kernels": len(events),
            "busy_s": sum(c["busy_s"] for c in by_cat.values()),
            "by_category": {k: by_cat[k] for k in sorted(by_cat)},
            "most_frequent": [{"name": n, "count": c} for n, c in top]}


def record(device_type: str, quick: bool, out: Path | None, repeats: int,
           max_seconds: float) -> Path:
    """Time every configuration of the plan and write the checked file (default:
    gpu_traces/steps/<device slug>/<UTC time>-steps.json); its path."""
    import torch
    from gpu_traces import harness
    from gpu_traces.kernels import TensorCache, first_line
    from gpu_traces.record import check_writable
    from gpu_traces.schema import time_stats
    start = time.monotonic()
    if device_type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device")
    device = torch.device("cuda:0" if device_type == "cuda" else "cpu")
    torch.manual_seed(0)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    dev = harness.describe_device(device_type)
    if out is None:
        out = STEPS_DIR / dev["slug"] / f"{stamp.replace('-', '').replace(':', '')}-steps.json"
    check_writable(out)             # before any timing: a bad --out fails in one line now
    env = {"numerics": harness.pin_numerics(device_type)}
    if device_type == "cuda":
        env["gpu_state_start"] = harness.gpu_state()
    plan = QUICK_PLAN if quick else GPU_PLAN
    timer = _timer(device)
    steps, skipped = [], []
    dtype = torch.bfloat16
    models = TensorCache()                      # one model's weights on the device at a time

    def skip(name, phase, batch, context, mode, reason):
        skipped.append({"model": name, "phase": phase, "batch": batch, "context": context,
                        "mode": mode, "reason": reason})

    with torch.inference_mode():
        if device_type == "cuda":
            env["gpu_warmup"] = harness.warm_gpu(device)
        for name, phase, batch, context in plan:
            where = f"{name} {phase} batch={batch} context={context}"
            if time.monotonic() - start > max_seconds:
                skip(name, phase, batch, context, None, f"time limit ({max_seconds:.0f} s) reached")
                continue
            model = models.get(name, lambda: Model(_config(name), device, dtype))
            try:
                step, info = model.make_step(batch, context, phase)
                step()                          # compile-free warm-up; also checks it runs
            except Exception as e:
                skip(name, phase, batch, context, None, first_line(e, 200))
                _log(f"{where}: skipped ({type(e).__name__})")
                if device_type == "cuda":
                    torch.cuda.empty_cache()
                continue
            prof = profile_step(step, device)
            for mode in MODES:
                note = None
                try:
                    if mode == "cuda-graph":
                        if device_type != "cuda":
                            raise RuntimeError("CUDA graphs need a GPU")
                        try:
                            fn, graph = _capture(step, device)
                        except Exception as e:   # a backend that refuses capture: try flash
                            from torch.nn.attention import SDPBackend, sdpa_kernel
                            note = (f"captured with the flash backend: the default one failed "
                                    f"({first_line(e, 120)})")
                            torch.cuda.synchronize()
                            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                                fn, graph = _capture(step, device)
                    else:
                        fn, graph = step, None
                    for _ in range(2):
                        fn()
                    samples = timer(fn, repeats)
                    del graph
                except Exception as e:
                    skip(name, phase, batch, context, mode, first_line(e, 200))
                    _log(f"{where} {mode}: skipped ({first_line(e, 80)})")
                    continue
                t = time_stats(samples)
                steps.append({"model": name, "phase": phase, "batch": batch, "context": context,
                              "new_tokens": 1 if phase == "decode" else context, "mode": mode,
                              "weight_bytes": model.weight_bytes(),
                              "embedding_bytes": model.embed.numel() * model.embed.element_size(),
                              **info,
                              "time": t, "eager_kernels": prof,
                              **({"note": note} if note else {})})
                _log(f"{where} {mode}: {t['median_s'] * 1e3:.3f} ms (n={t['repeats']}, "
                     f"{time.monotonic() - start:.0f} s)")
            del step
            if device_type == "cuda":
                torch.cuda.empty_cache()
    if device_type == "cuda":
        env["gpu_state_end"] = harness.gpu_state()
    dev["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "recorded_at": stamp,
           "quick": quick, "elapsed_s": round(time.monotonic() - start, 3),
           "device": dev, "software": harness.describe_software(device_type),
           "environment": env,
           "method": ("plain torch ops with random bf16 weights (gpu_traces/steps.py); each step "
                      "timed after warm-up with CUDA events around it (CPU: wall time); cuda-graph: "
                      "one replay of the captured step; eager: every kernel issued from Python; "
                      "eager_kernels: one eager step under torch.profiler"),
           "units": {"time": "s", "bytes": "B"}, "steps": steps, "skipped": skipped}
    check_steps(doc, str(out))
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, out)
    _log(f"wrote {out}: {len(steps)} steps, {len(skipped)} skipped, {doc['elapsed_s']:.0f} s")
    return out


# ------------------------------------------------------------------------------------
# Reading and checking a steps file (no torch needed)
# ------------------------------------------------------------------------------------

class StepsError(ValueError):
    """A steps file that cannot be used; the message names the file and the problem."""


def check_steps(doc: dict, where: str = "<steps>") -> None:
    """Structure and physics: every step a known configuration, times that agree with their
    samples, and no decode step faster than reading its weights at the datasheet bandwidth."""
    from gpu_traces.schema import time_stats
    from sim import hardware
    problems = []
    if doc.get("format") != FORMAT or doc.get("format_version") != FORMAT_VERSION:
        raise StepsError(f"{where}: not a {FORMAT} file of version {FORMAT_VERSION}")
    for key in ("recorded_at", "device", "software", "steps", "skipped", "quick"):
        if key not in doc:
            problems.append(f"missing {key!r}")
    if problems:
        raise StepsError(f"{where}: " + "; ".join(problems))
    dev = doc["device"]
    gpu = hardware.get(dev["catalogue_key"]) if dev.get("catalogue_key") else None
    seen = set()
    for i, s in enumerate(doc["steps"]):
        here = f"steps[{i}]"
        key = (s.get("model"), s.get("phase"), s.get("batch"), s.get("context"), s.get("mode"))
        if key in seen:
            problems.append(f"{here}: {key} appears twice")
        seen.add(key)
        if s.get("phase") not in PHASES or s.get("mode") not in MODES:
            problems.append(f"{here}: phase {s.get('phase')!r} / mode {s.get('mode')!r} unknown")
            continue
        t = s.get("time") or {}
        samples = t.get("samples_s") or []
        if not samples or any(not (1e-6 <= x <= 60) for x in samples):
            problems.append(f"{here}: samples must be 1 µs to 60 s")
            continue
        if time_stats(samples)["median_s"] != t.get("median_s"):
            problems.append(f"{here}: median_s is not the median of its samples")
        if gpu is not None and s["phase"] == "decode":
            # every weight but the embedding table (a decode step gathers a few of its rows)
            floor = (s["weight_bytes"] - s["embedding_bytes"]) / gpu.hbm_bandwidth_bytes_per_s
            if t["median_s"] < floor:
                problems.append(f"{here}: {t['median_s'] * 1e3:.3f} ms is faster than reading "
                                f"{s['weight_bytes'] / 1e9:.1f} GB of weights at the "
                                f"{gpu.display_name}'s datasheet bandwidth ({floor * 1e3:.3f} ms)")
    if problems:
        raise StepsError(f"{where}: " + "; ".join(problems[:10]))


def load_steps(path: Path | str) -> dict:
    """Read and check one steps file; StepsError says what is wrong."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise StepsError(f"{path}: cannot read ({e})") from None
    check_steps(doc, str(path))
    return doc


def shipped(directory: Path | str = STEPS_DIR) -> list[dict]:
    """Every steps file under gpu_traces/steps/, checked, oldest first; each with its `file`
    (relative to the repository) added."""
    root = Path(directory)
    docs = []
    for path in sorted(root.rglob("*-steps.json")):
        doc = load_steps(path)
        doc["file"] = path.relative_to(root.parent.parent).as_posix()
        docs.append(doc)
    return sorted(docs, key=lambda d: (d["recorded_at"], d["file"]))


def main(argv=None) -> int:
    p = ArgumentParser(prog="python -m gpu_traces.steps", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--quick", action="store_true", help="a tiny two-layer model (checks the code path)")
    p.add_argument("--out", type=Path, help="the .json file to write (default: "
                                            "gpu_traces/steps/<device>/<UTC time>-steps.json)")
    p.add_argument("--repeats", type=int, default=20, help="timed steps per configuration and mode")
    p.add_argument("--max-seconds", type=float, default=300.0,
                   help="start no configuration after this many seconds (the rest are skipped)")
    a = p.parse_args(argv)
    print(record(a.device, a.quick, a.out, a.repeats, a.max_seconds))
    return 0


if __name__ == "__main__":
    sys.exit(run("python -m gpu_traces.steps", main))
