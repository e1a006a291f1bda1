"""The torch calls behind each planned point (`gpu_traces.suites.plan`).

`prepare(point, device, cache)` allocates (or reuses) the tensors and returns `(fn,
shape)`: a zero-argument call that runs the kernel once, and the final shape record
(attention says how many KV heads the backend really reads). A point that cannot run on
this device raises `Unsupported` with the reason, which the recorder writes into the trace.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from gpu_traces.suites import FP8_USE_FAST_ACCUM, Point

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SDPA_NAMES = {"FLASH_ATTENTION": "flash", "EFFICIENT_ATTENTION": "efficient", "MATH": "math",
              "CUDNN_ATTENTION": "cudnn", "OVERRIDEABLE": "overrideable"}


class Unsupported(Exception):
    """This kernel cannot run here; the message is the reason recorded in the trace."""


class TensorCache:
    """Keeps the tensors of the latest key only, so consecutive points share their weights."""

    def __init__(self):
        self._key = None
        self._value = None

    def clear(self) -> None:
        self._key, self._value = None, None

    def get(self, key, factory):
        if key != self._key:
            self._key, self._value = None, None          # free the old tensors first
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            self._value = factory()
            self._key = key
        return self._value


def _randn(shape, dtype: str, device):
    return torch.randn(shape, dtype=TORCH_DTYPES[dtype], device=device)


def fp8_support(device: torch.device) -> str | None:
    """None if fp8 GEMMs (torch._scaled_mm, e4m3) run here, else the reason they do not."""
    if device.type != "cuda":
        return "fp8 GEMMs need a CUDA GPU with fp8 tensor cores"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 9):
        return f"fp8 tensor cores need compute capability 8.9 or newer; this GPU is {major}.{minor}"
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no float8_e4m3fn / _scaled_mm"
    try:
        a = torch.zeros(16, 32, device=device).to(torch.float8_e4m3fn)
        b = torch.zeros(32, 32, device=device).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
    except Exception as e:                                # any failure is the reason to skip
        return f"torch._scaled_mm failed on this GPU: {type(e).__name__}: {str(e)[:200]}"
    return None


# ------------------------------------------------------------------------------------
# GEMMs
# ------------------------------------------------------------------------------------

def _gemm_tensors(dtype: str, n: int, k: int, max_m: int, device) -> dict:
    if dtype == "fp8":
        return {"w": torch.randn(n, k, device=device).to(torch.float8_e4m3fn),
                "x": torch.randn(max_m, k, device=device).to(torch.float8_e4m3fn),
                "scale": torch.ones((), device=device)}
    return {"w": _randn((n, k), dtype, device), "x": _randn((max_m, k), dtype, device),
            "out": torch.empty(max_m, n, dtype=TORCH_DTYPES[dtype], device=device)}


def _gemm(point: Point, device, cache: TensorCache, max_m: int):
    s, dtype = point.shape, point.dtype
    t = cache.get(("gemm", dtype, s["n"], s["k"], max_m),
                  lambda: _gemm_tensors(dtype, s["n"], s["k"], max_m, device))
    x = t["x"][:s["m"]]
    if dtype == "fp8":
        w_t, one = t["w"].t(), t["scale"]          # column-major (k x n), as _scaled_mm needs
        return lambda: torch._scaled_mm(x, w_t, scale_a=one, scale_b=one,
                                        out_dtype=torch.bfloat16,
                                        use_fast_accum=FP8_USE_FAST_ACCUM)
    w_t, out = t["w"].t(), t["out"][:s["m"]]
    return lambda: torch.mm(x, w_t, out=out)


# ------------------------------------------------------------------------------------
# Attention
# ------------------------------------------------------------------------------------

def sdpa_context(backend: str):
    """A context that restricts scaled_dot_product_attention to one backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([{"flash": SDPBackend.FLASH_ATTENTION,
                         "efficient": SDPBackend.EFFICIENT_ATTENTION,
                         "cudnn": SDPBackend.CUDNN_ATTENTION,
                         "math": SDPBackend.MATH}[backend]])


def sdpa_backend_name(value) -> str | None:
    """The trace's name of an SDPBackend (or its int), e.g. 'cudnn'; None for ERROR."""
    from torch.nn.attention import SDPBackend
    return SDPA_NAMES.get(SDPBackend(int(value)).name)


def default_sdpa_backend(q, k, v, causal: bool, gqa: bool) -> str | None:
    """The SDPA backend torch itself picks for these tensors with its default settings
    (every backend enabled, torch's own priority), whatever backend is chosen around it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    every = [v for name, v in SDPBackend.__members__.items() if name != "ERROR"]
    try:
        with sdpa_kernel(every):
            choice = torch._fused_sdp_choice(q, k, v, None, 0.0, causal, enable_gqa=gqa)
    except (AttributeError, RuntimeError, TypeError):
        return None
    return sdpa_backend_name(choice)


def first_line(e: BaseException, n: int = 160) -> str:
    """An error as one short line for a trace: its type and the first `n` characters of its
    message's first line."""
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:n]}"


def _attention(point: Point, device):
    """SDPA on one backend; the shape record says what that backend really does.

    Out of memory is raised as it is (never retried with the larger expanded K/V). The math
    backend expands grouped K/V to every query head itself and, for bf16/fp16 inputs,
    computes in fp32 unless torch allows reduced-precision reductions in math SDPA: the
    record says so (`kv_heads_read`, `compute_dtype`).
    """
    s, dtype, backend = point.shape, point.dtype, point.backend
    h, kvh, d, causal = s["heads"], s["kv_heads"], s["head_dim"], s["causal"]
    q = _randn((s["batch"], h, s["q_len"], d), dtype, device)
    k = _randn((s["batch"], kvh, s["kv_len"], d), dtype, device)
    v = _randn((s["batch"], kvh, s["kv_len"], d), dtype, device)
    shape = {**s, "default_backend": default_sdpa_backend(q, k, v, causal, kvh != h)}
    if backend == "math":
        low = dtype in ("bf16", "fp16")
        upcast = low and not torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
        shape["compute_dtype"] = "fp32" if upcast else dtype
    try:                            # grouped-query attention straight from the KV heads
        with sdpa_context(backend):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        # the math backend repeats K/V to every query head inside the call
        read = h if backend == "math" else kvh
        return (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                       enable_gqa=True),
                {**shape, "kv_heads_read": read})
    except torch.OutOfMemoryError:
        raise
    except (RuntimeError, TypeError) as e:       # TypeError: a torch without enable_gqa
        native_error = first_line(e)
    # the backend cannot read grouped KV heads: give it K/V expanded to every query head
    k = k.repeat_interleave(h // kvh, dim=1)
    v = v.repeat_interleave(h // kvh, dim=1)
    try:
        with sdpa_context(backend):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    except torch.OutOfMemoryError:
        raise
    except RuntimeError as e:
        raise Unsupported(f"SDPA backend {backend!r} cannot run this here (grouped KV: "
                          f"{native_error}; expanded KV: {first_line(e)})") from None
    return (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
            {**shape, "kv_heads_read": h})


# ------------------------------------------------------------------------------------
# Elementwise ops and copies
# ------------------------------------------------------------------------------------

def _elementwise(point: Point, device):
    s, dtype = point.shape, point.dtype
    t, hidden = s["tokens"], s["hidden"]
    if s["op"] == "rms_norm":
        x, w = _randn((t, hidden), dtype, device), _randn((hidden,), dtype, device)
        if hasattr(F, "rms_norm"):
            return lambda: F.rms_norm(x, (hidden,), w, eps=1e-5), s

        def manual():                  # torch < 2.4: the same computation in eager ops
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * w
        return manual, {**s, "impl": "eager x * rsqrt(mean(x^2) + eps) * w"}
    if s["op"] == "silu_mul":
        gate_up = _randn((t, 2 * hidden), dtype, device)
        gate, up = gate_up[:, :hidden], gate_up[:, hidden:]
        return lambda: F.silu(gate) * up, s
    x, r = _randn((t, hidden), dtype, device), _randn((t, hidden), dtype, device)
    out = torch.empty_like(x)
    return lambda: torch.add(x, r, out=out), s


def _copy(point: Point, device):
    src = torch.randn(point.shape["elements"], device=device)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src), point.shape


def prepare(point: Point, device, cache: TensorCache, max_m: dict[str, int]):
    """(fn, shape) for one planned point; Unsupported if it cannot run here."""
    if point.kind in ("gemm", "big-gemm"):
        m = max_m.get(point.dtype, point.shape["m"]) if point.kind == "gemm" else point.shape["m"]
        return _gemm(point, device, cache, m), point.shape
    if point.kind.startswith("attention"):
        return _attention(point, device)
    if point.kind == "elementwise":
        return _elementwise(point, device)
    if point.kind == "copy":
        return _copy(point, device)
    raise ValueError(f"unknown kernel kind {point.kind!r}")


def context(point: Point):
    """The context the point's timed runs need (an SDPA backend choice), else a no-op."""
    return sdpa_context(point.backend) if point.kind.startswith("attention") else contextlib.nullcontext()
