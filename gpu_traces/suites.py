"""What each recorder suite measures: shapes and sizes only (pure Python, no torch).

Four suites: "cuda" (the full GPU suite, budgeted to 6 minutes on one H100/H200), "cuda-quick",
"cpu" (sized for a small CPU: about 10 minutes on 2 cores) and "cpu-quick" (under a
minute, run by the tests). GEMM shapes are the linear layers of the catalogue models,
exactly as `sim.models.ModelConfig.linear_shapes()` gives them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpu_traces.shapes import DTYPE_BYTES
from sim import models

GEMM_MODELS = ("llama-3.1-8b", "llama-3.1-70b", "llama-2-7b")
LAYERS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
ATTENTION_MODEL = "llama-3.1-8b"      # heads, KV heads and head dim of the attention kernels
ELEMENTWISE_MODEL = "llama-3.1-8b"    # hidden size (norms, residual) and FFN width (SiLU x mul)
SDPA_BACKENDS = ("flash", "efficient", "math")
CUDA_SDPA_BACKENDS = ("flash", "cudnn", "efficient", "math")   # cuDNN: preferred on Hopper
FP8_USE_FAST_ACCUM = False      # torch._scaled_mm's default (exact fp32 accumulation), pinned
FP8_SLOW_M = 16                 # fp8 GEMMs with m <= 16 take cuBLASLt's slow small-m path, which
                                # serving engines avoid by padding to 17 rows

# token counts for the GPU: powers of two at the small end, steps of 16-64 through the
# knee (bf16 ridge of an H100 is near 300 FLOP/byte, i.e. ~300 tokens), then sparser
CUDA_TOKENS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 192, 224, 256,
               288, 320, 352, 384, 448, 512, 640, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
# a 2-core CPU's bf16 ridge is near 30 FLOP/byte, so the knee sits at a few dozen tokens
CPU_TOKENS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)


@dataclass(frozen=True)
class GemmGroup:
    """GEMMs of one dtype: every linear layer of `models` at every token count."""

    dtype: str                       # "bf16", "fp8", "fp32"
    models: tuple[str, ...]
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class Suite:
    """Everything one recorder run measures, and how hard it tries."""

    name: str                        # "cuda", "cuda-quick", "cpu", "cpu-quick"
    description: str                 # written into the trace
    gemm: tuple[GemmGroup, ...]
    big_gemm_sizes: tuple[int, ...]  # square GEMMs (m = n = k) for achievable FLOP/s
    big_gemm_dtypes: tuple[str, ...]
    attention_dtype: str
    decode_batches: tuple[int, ...]
    decode_kv_lens: tuple[int, ...]
    decode_max_kv_tokens: int        # skip batch x kv_len above this (memory and time)
    prefill_seq_lens: tuple[int, ...]
    math_max_kv_tokens: int          # the unfused math backend gets smaller sizes
    math_max_prefill_seq: int
    elementwise_tokens: tuple[int, ...]
    elementwise_dtype: str
    copy_bytes: tuple[int, ...]      # source sizes of the copy sweep
    warmup: int                      # untimed runs before timing
    target_s: float                  # timed repeats per point aim at this much kernel time
    min_repeats: int
    max_repeats: int
    max_seconds: float               # default wall-clock guard for the whole run
    rounds: int = 1                  # passes over the suite, each taking a share of the repeats
    sdpa_backends: tuple[str, ...] = SDPA_BACKENDS

    def gemm_cases(self) -> list[tuple[str, str, str, int, int, int]]:
        """(dtype, model, layer, m, n, k) of every GEMM, in recording order."""
        out = []
        for g in self.gemm:
            for model in g.models:
                shapes = models.get(model).linear_shapes()
                for layer in LAYERS:
                    k, n = shapes[layer]
                    for m in g.tokens:
                        out.append((g.dtype, model, layer, m, n, k))
        return out

    def decode_cases(self) -> list[tuple[int, int]]:
        """(batch, kv_len) of every decode-attention point within decode_max_kv_tokens."""
        return [(b, kv) for b in self.decode_batches for kv in self.decode_kv_lens
                if b * kv <= self.decode_max_kv_tokens]


@dataclass(frozen=True)
class Point:
    """One kernel to time: what it is and its full shape record (as written to the trace)."""

    kind: str
    label: str
    dtype: str
    backend: str | None
    shape: dict = field(hash=False)


@dataclass(frozen=True)
class Skip:
    """A point the suite leaves out on purpose, with the reason written to the trace."""

    kind: str
    label: str
    dtype: str
    backend: str | None
    reason: str


def gemm_shape(m: int, n: int, k: int, dtype: str, **extra) -> dict:
    """Shape record of out(m x n) = x(m x k) @ W(n x k)^T; an fp8 GEMM writes a bf16 output."""
    e = DTYPE_BYTES[dtype]
    shape = {"m": m, "n": n, "k": k, "weight_bytes_per_elem": e, "act_bytes_per_elem": e,
             "out_bytes_per_elem": 2 if dtype == "fp8" else e,
             "impl": ("torch._scaled_mm (e4m3, per-tensor scales)" if dtype == "fp8"
                      else "torch.mm(x, W.t(), out=...) as in nn.Linear"),
             **extra}
    if dtype == "fp8":
        shape["use_fast_accum"] = FP8_USE_FAST_ACCUM
        shape["fp8_small_m_path"] = m <= FP8_SLOW_M
    return shape


def attention_shape(batch: int, q_len: int, kv_len: int, causal: bool, dtype: str) -> dict:
    """Shape record of one SDPA call with the attention model's heads (native grouped KV)."""
    cfg = models.get(ATTENTION_MODEL)
    return {"batch": batch, "q_len": q_len, "kv_len": kv_len, "heads": cfg.num_heads,
            "kv_heads": cfg.num_kv_heads, "kv_heads_read": cfg.num_kv_heads,
            "head_dim": cfg.head_dim, "causal": causal, "bytes_per_elem": DTYPE_BYTES[dtype],
            "score_elements": batch * cfg.num_heads * q_len * kv_len, "model": ATTENTION_MODEL}


RMS_NORM_IMPL = "torch.nn.functional.rms_norm"
ELEMENTWISE_IMPL = {"rms_norm": RMS_NORM_IMPL,
                    "silu_mul": "F.silu(gate) * up on the gate_up output",
                    "residual_add": "torch.add(x, r, out=...)"}


def plan(suite: Suite) -> tuple[list[Point], list[Skip]]:
    """Every point of `suite` in recording order (the peaks first), and the planned skips."""
    points: list[Point] = []
    skips: list[Skip] = []
    for nbytes in suite.copy_bytes:
        points.append(Point("copy", f"copy {_human_bytes(nbytes)}", "fp32", None,
                            {"elements": nbytes // 4, "bytes_per_elem": 4}))
    for dtype in suite.big_gemm_dtypes:
        for s in suite.big_gemm_sizes:
            points.append(Point("big-gemm", f"square GEMM {s}x{s}x{s}", dtype, None,
                                gemm_shape(s, s, s, dtype)))
    for dtype, model, layer, m, n, k in suite.gemm_cases():
        points.append(Point("gemm", f"{model} {layer} m={m}", dtype, None,
                            gemm_shape(m, n, k, dtype, model=model, layer=layer)))
    dtype = suite.attention_dtype
    for kind in ("attention-decode", "attention-prefill"):
        for backend in suite.sdpa_backends:
            if kind == "attention-decode":
                sizes = [(f"decode b={b} kv={kv}", b * kv > suite.math_max_kv_tokens,
                          attention_shape(b, 1, kv, False, dtype)) for b, kv in suite.decode_cases()]
                why = (f"the unfused math backend is limited to batch x kv_len <= "
                       f"{suite.math_max_kv_tokens} in this suite")
            else:
                sizes = [(f"prefill s={s}", s > suite.math_max_prefill_seq,
                          attention_shape(1, s, s, True, dtype)) for s in suite.prefill_seq_lens]
                why = (f"the unfused math backend writes the whole score matrix; limited to "
                       f"s <= {suite.math_max_prefill_seq} in this suite")
            for label, too_big, shape in sizes:
                if backend == "math" and too_big:
                    skips.append(Skip(kind, label, dtype, backend, why))
                else:
                    points.append(Point(kind, label, dtype, backend, shape))
    cfg = models.get(ELEMENTWISE_MODEL)
    e = DTYPE_BYTES[suite.elementwise_dtype]
    for tokens in suite.elementwise_tokens:
        for op, hidden in (("rms_norm", cfg.hidden_size), ("silu_mul", cfg.intermediate_size),
                           ("residual_add", cfg.hidden_size)):
            points.append(Point("elementwise", f"{op} tokens={tokens}", suite.elementwise_dtype,
                                None, {"op": op, "tokens": tokens, "hidden": hidden,
                                       "bytes_per_elem": e, "impl": ELEMENTWISE_IMPL[op]}))
    return points, skips


def _human_bytes(n: int) -> str:
    """4096 -> '4 KiB', 2**30 -> '1 GiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}"
        n /= 1024
    return f"{n} B"


def _pow2_bytes(lo: int, hi: int, step: int = 2) -> tuple[int, ...]:
    return tuple(2 ** e for e in range(lo, hi + 1, step))


SUITES: dict[str, Suite] = {
    "cuda": Suite(
        name="cuda",
        description=("full GPU suite: bf16 (and fp8 where supported) GEMMs of Llama 3.1 8B/70B "
                     "and Llama 2 7B at 1-8192 tokens, SDPA decode and prefill per backend "
                     "(flash, cuDNN, efficient, math), elementwise ops, a copy sweep and square "
                     "GEMMs"),
        gemm=(GemmGroup("bf16", GEMM_MODELS, CUDA_TOKENS),
              GemmGroup("fp8", GEMM_MODELS, CUDA_TOKENS)),
        big_gemm_sizes=(4096, 8192, 16384), big_gemm_dtypes=("bf16", "fp8"),
        attention_dtype="bf16",
        decode_batches=(1, 4, 16, 64, 256), decode_kv_lens=(512, 2048, 8192, 32768, 131072),
        decode_max_kv_tokens=2 ** 22,
        prefill_seq_lens=(256, 512, 1024, 2048, 4096, 8192, 16384, 32768),
        math_max_kv_tokens=2 ** 20, math_max_prefill_seq=8192,
        elementwise_tokens=(1, 8, 64, 512, 4096, 32768), elementwise_dtype="bf16",
        copy_bytes=_pow2_bytes(12, 32),
        warmup=2, target_s=0.06, min_repeats=15, max_repeats=150, max_seconds=360.0,
        rounds=3, sdpa_backends=CUDA_SDPA_BACKENDS,
    ),
    "cuda-quick": Suite(
        name="cuda-quick",
        description="quick GPU suite: Llama 3.1 8B GEMMs at a few token counts, a few attention "
                    "and elementwise sizes, a short copy sweep, one square GEMM per dtype",
        gemm=(GemmGroup("bf16", ("llama-3.1-8b",), (1, 16, 64, 256, 1024, 4096)),
              GemmGroup("fp8", ("llama-3.1-8b",), (1, 16, 64, 256, 1024, 4096))),
        big_gemm_sizes=(8192,), big_gemm_dtypes=("bf16", "fp8"),
        attention_dtype="bf16",
        decode_batches=(1, 16), decode_kv_lens=(1024, 8192), decode_max_kv_tokens=2 ** 22,
        prefill_seq_lens=(512, 2048), math_max_kv_tokens=2 ** 20, math_max_prefill_seq=8192,
        elementwise_tokens=(1, 4096), elementwise_dtype="bf16",
        copy_bytes=_pow2_bytes(12, 30, 6),
        warmup=2, target_s=0.02, min_repeats=6, max_repeats=30, max_seconds=60.0,
        rounds=2, sdpa_backends=CUDA_SDPA_BACKENDS,
    ),
    "cpu": Suite(
        name="cpu",
        description=("CPU suite (not a GPU): bf16 GEMMs of Llama 3.1 8B/70B and Llama 2 7B at "
                     "1-256 tokens, fp32 GEMMs of Llama 3.1 8B, SDPA decode and prefill "
                     "(flash and math; the efficient backend has no CPU kernel), elementwise "
                     "ops, a copy sweep and square GEMMs; sizes cut to fit a small CPU"),
        gemm=(GemmGroup("bf16", GEMM_MODELS, CPU_TOKENS),
              GemmGroup("fp32", ("llama-3.1-8b",), (1, 2, 4, 8, 16, 32, 64, 128))),
        big_gemm_sizes=(1024, 2048, 4096), big_gemm_dtypes=("bf16", "fp32"),
        attention_dtype="bf16",
        decode_batches=(1, 4, 16), decode_kv_lens=(256, 1024, 4096, 16384),
        decode_max_kv_tokens=2 ** 16,
        prefill_seq_lens=(64, 128, 256, 512, 1024, 2048),
        math_max_kv_tokens=2 ** 14, math_max_prefill_seq=1024,
        elementwise_tokens=(1, 16, 128, 1024, 4096), elementwise_dtype="bf16",
        copy_bytes=_pow2_bytes(12, 28),
        warmup=1, target_s=0.3, min_repeats=9, max_repeats=24, max_seconds=900.0, rounds=3,
    ),
    "cpu-quick": Suite(
        name="cpu-quick",
        description=("quick CPU suite (not a GPU): bf16 GEMMs of Llama 3.1 8B at a few token "
                     "counts, a few attention and elementwise sizes, a short copy sweep, one "
                     "square GEMM"),
        gemm=(GemmGroup("bf16", ("llama-3.1-8b",), (1, 8, 32, 128)),),
        big_gemm_sizes=(1024,), big_gemm_dtypes=("bf16",),
        attention_dtype="bf16",
        decode_batches=(1, 4), decode_kv_lens=(256, 1024), decode_max_kv_tokens=2 ** 12,
        prefill_seq_lens=(128, 512), math_max_kv_tokens=2 ** 12, math_max_prefill_seq=512,
        elementwise_tokens=(1, 256), elementwise_dtype="bf16",
        copy_bytes=_pow2_bytes(12, 24, 4),
        warmup=1, target_s=0.03, min_repeats=4, max_repeats=8, max_seconds=50.0, rounds=2,
    ),
}


def get(device_type: str, quick: bool) -> Suite:
    """The suite for a device type ("cuda" | "cpu"), full or quick."""
    return SUITES[device_type + ("-quick" if quick else "")]
