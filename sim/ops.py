"""The kernels of one transformer forward step: FLOPs, bytes and time of each operation.

Each operation (a GEMM, the attention kernel, an elementwise kernel) moves some bytes
through HBM and does some FLOPs. Its time is

    time = busy time + launch overhead,   busy = max(bytes / effective bandwidth, FLOPs / effective FLOP/s)

where the effective numbers come from `sim.calibration.for_gpu(gpu)`: a calibration
fitted from recorded kernels when one exists for that device, otherwise the guide's
stated assumption (80% of peak bandwidth, 60% of peak FLOP/s). Every time goes through
the calibration's own cost functions (`gemm_time_s`, `attention_time_s`,
`elementwise_time_s`, see `sim.kernel_model`), so a fitted calibration may refine the
plain formula above with shape terms; the memory/compute *bound* of an op always
compares the plain terms. An operation is *memory-bound* when the bytes term wins and
*compute-bound* when the FLOPs term wins; the crossover intensity FLOP/byte is the
*ridge point* (R26, R31; `sim.roofline`).

Conventions (the step's sequences are a `sim.batch.Batch`)
----------------------------------------------------------
- A GEMM of m tokens through a (k in -> n out) weight does 2 m n k FLOPs and moves
  k n weights, m k inputs and m n outputs.
- Attention (a fused FlashAttention-style kernel) does 4 x heads x head_dim FLOPs per
  query-key pair (QK^T and PV), causal inside the new tokens; it reads each cached K and
  V once per step, reads Q, writes O, and writes the new tokens' K and V.
- Elementwise kernels (fused residual-add + RMSNorm, RoPE, SiLU x up) move their
  inputs and outputs once.
- The embedding lookup reads only the rows of the tokens in the step, never the whole
  table; the output head reads all of its weights, for one token per sequence.

>>> t = op_times("llama-3.1-8b", "H100-SXM", tokens=1, context_len=1024)
>>> sorted(k for k in t if k.endswith("proj"))
['down_proj', 'gate_up_proj', 'o_proj', 'qkv_proj']
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Optional, Union

import numpy as np

from sim.batch import Batch, Precision
from sim.calibration import for_gpu
from sim.checks import check_int
from sim.hardware import GPU
from sim.hardware import resolve as resolve_gpu
from sim.kernel_model import Calibration
from sim.models import ModelConfig
from sim.models import resolve as resolve_model

GpuLike = Union[str, GPU]
ModelLike = Union[str, ModelConfig]

NORM_WEIGHT_BYTES = 2.0        # RMSNorm gains are kept in bf16 whatever the weight format
LOGITS_BYTES = 4.0             # logits are sampled in fp32
ATTENTION_DTYPE = "bf16"       # FlashAttention-2 style kernels run QK^T and PV in bf16
MODEL_LEVEL_OPS = ("embed", "final_norm", "lm_head", "sampling")   # once per forward pass, not per layer


@dataclass(frozen=True)
class Op:
    """One kernel of the forward pass, costed on one device."""

    name: str              # "qkv_proj", "attention", "attn_norm", ...
    kind: str              # "gemm" | "attention" | "elementwise"
    count: int             # instances per forward pass (num_layers for per-layer ops)
    flops: float           # one instance
    weight_bytes: float    # one instance: weights read
    act_bytes: float       # one instance: activations read and written
    kv_bytes: float        # one instance: KV cache read and written
    time_s: float          # one instance, including the calibration's launch overhead
    memory_time_s: float   # one instance: bytes / effective bandwidth
    compute_time_s: float  # one instance: FLOPs / effective FLOP/s
    dtype: str             # arithmetic dtype
    bound: str             # "memory" | "compute"

    @property
    def nbytes(self) -> float:
        """HBM bytes of one instance."""
        return self.weight_bytes + self.act_bytes + self.kv_bytes

    @property
    def intensity_flop_per_byte(self) -> float:
        """Arithmetic intensity: FLOPs per HBM byte."""
        return self.flops / self.nbytes if self.nbytes else math.inf


class OpSpec(NamedTuple):
    """An op before costing (a plain tuple: built thousands of times by sweeps and schedulers)."""

    name: str
    kind: str
    count: int
    flops: float
    weight_bytes: float
    act_bytes: float
    kv_bytes: float
    dtype: str
    gemm: Optional[tuple] = None   # (m, n, k, weight_bytes_per_elem) when the calibration's GEMM model applies


def expected_experts_touched(num_experts: int, experts_per_token: float, tokens: float) -> float:
    """Distinct experts a step of `tokens` tokens reads, routing uniformly at random.

    E x (1 - (1 - k / E) ** T): one token reads k experts; a large batch reads all E.
    This is why a mixture-of-experts step reads more weight bytes as the batch grows.

    >>> expected_experts_touched(8, 2, 1)
    2.0
    """
    if num_experts <= 1:
        return 1.0
    return num_experts * (1.0 - (1.0 - experts_per_token / num_experts) ** tokens)


def _elementwise(name: str, count: int, flops: float, act: float, weight: float = 0.0) -> OpSpec:
    return OpSpec(name, "elementwise", count, flops, weight, act, 0.0, "bf16")


def token_specs(m: ModelConfig, p: Precision, tokens) -> list:
    """Ops whose cost depends only on the tokens in the step: every layer op but attention,
    the embedding gather and the final norm. `tokens` may be an int or an array of ints."""
    T = tokens
    h, d = m.hidden_size, m.head_dim
    H, Hkv, I = m.num_heads, m.num_kv_heads, m.intermediate_size
    L = m.num_layers
    a, w = p.act_bytes, p.weight_bytes
    math_dt = p.math_dtype
    flop_scale = 0.5 if p.sparse_2_4 else 1.0
    shapes = m.linear_shapes()
    specs = []

    def dense_gemm(name: str) -> OpSpec:
        k, n = shapes[name]
        gemm = None if p.sparse_2_4 else (T, n, k, w)
        return OpSpec(name, "gemm", L, 2.0 * T * n * k * flop_scale, w * k * n, a * (T * k + T * n), 0.0,
                     math_dt, gemm)

    def norm(name: str, count: int, passes: float) -> OpSpec:
        # fused residual add + RMSNorm: read x and the residual, write both (passes = 4); the gain in bf16
        return _elementwise(name, count, 5.0 * T * h, passes * a * T * h, NORM_WEIGHT_BYTES * h)

    specs.append(norm("attn_norm", L, 4.0))
    specs.append(dense_gemm("qkv_proj"))
    rope_elems = T * (H + Hkv) * d
    specs.append(_elementwise("rope", L, 3.0 * rope_elems, 2.0 * a * rope_elems))
    specs.append(dense_gemm("o_proj"))
    specs.append(norm("mlp_norm", L, 4.0))
    if m.is_moe:
        E, k_e = m.num_experts, m.experts_per_token
        specs.append(OpSpec("router", "gemm", L, 2.0 * T * E * h, w * h * E, a * (T * h + T * E), 0.0,
                           math_dt, None if p.sparse_2_4 else (T, E, h, w)))
        touched = expected_experts_touched(E, k_e, T)
        routed = T * k_e      # token-expert assignments
        for name in ("gate_up_proj", "down_proj"):
            kk, nn = shapes[name]
            specs.append(OpSpec(name, "gemm", L, 2.0 * routed * nn * kk * flop_scale, touched * w * kk * nn,
                               a * (routed * kk + routed * nn), 0.0, math_dt, None))
            if name == "gate_up_proj":
                specs.append(_elementwise("silu_mul", L, 5.0 * routed * I, 3.0 * a * routed * I))
    else:
        specs.append(dense_gemm("gate_up_proj"))
        specs.append(_elementwise("silu_mul", L, 5.0 * T * I, 3.0 * a * T * I))
        specs.append(dense_gemm("down_proj"))
    # model-level ops: the gather reads one table row per token; the final norm has no residual
    specs.append(OpSpec("embed", "elementwise", 1, 0.0 * T, p.head_bytes * T * h, a * T * h, 0.0, "bf16"))
    specs.append(norm("final_norm", 1, 2.0))
    return specs


def logit_specs(m: ModelConfig, p: Precision, logits) -> list:
    """The output head (one row per sequence that samples) and the sampler; `logits` >= 1 (int or array)."""
    S, V, h = logits, m.vocab_size, m.hidden_size
    hb, a = p.head_bytes, p.act_bytes
    return [OpSpec("lm_head", "gemm", 1, 2.0 * S * V * h, hb * h * V, a * S * h + a * S * V, 0.0,
                  p.head_math_dtype, (S, V, h, hb)),
            # the logits are written at activation width, then read back in fp32 by the sampler
            _elementwise("sampling", 1, 5.0 * S * V, LOGITS_BYTES * S * V)]


def fixed_specs(m: ModelConfig, p: Precision, tokens: int, logits: int) -> list:
    """Every op of the forward pass except attention, whose cost depends on the contexts."""
    specs = token_specs(m, p, tokens)
    if logits > 0:
        specs.extend(logit_specs(m, p, logits))
    return specs


def attention_spec(m: ModelConfig, p: Precision, tokens, pairs, kv_read_tokens) -> OpSpec:
    h_q = m.num_heads * m.head_dim
    kv_row = 2.0 * m.num_kv_heads * m.head_dim * p.kv_bytes   # K and V of one token in one layer
    return OpSpec("attention", "attention", m.num_layers,
                 flops=4.0 * h_q * pairs,
                 weight_bytes=0.0,
                 act_bytes=2.0 * p.act_bytes * tokens * h_q,          # read Q, write O
                 kv_bytes=kv_row * (kv_read_tokens + tokens),        # read cached + new K/V, write new K/V
                 dtype=ATTENTION_DTYPE)


def _gemm_times(cal: Calibration, m, n: int, k: int, wb: float, ab: float, dtype: str):
    """The calibration's GEMM time for one row count `m`, or for an array of them."""
    if np.ndim(m) == 0:
        return cal.gemm_time_s(int(m), n, k, wb, ab, dtype)
    vectorised = getattr(cal, "gemm_times_s", None)   # a calibration may cost many shapes in one call
    if vectorised is not None:
        return np.broadcast_to(np.asarray(vectorised(m, n, k, wb, ab, dtype), dtype=float), np.shape(m)).copy()
    return np.array([cal.gemm_time_s(int(x), n, k, wb, ab, dtype) for x in np.ravel(m)]).reshape(np.shape(m))


def _each(fn, *args):
    """Apply a scalar cost function elementwise over array arguments (scalars pass straight through)."""
    if all(isinstance(x, (int, float)) or np.ndim(x) == 0 for x in args):
        return fn(*(float(x) for x in args))
    cols = np.broadcast_arrays(*[np.asarray(x, dtype=float) for x in args])
    return np.array([fn(*row) for row in zip(*(c.ravel().tolist() for c in cols))]).reshape(cols[0].shape)


def spec_time_s(cal: Calibration, s: OpSpec, act_bytes: float):
    """Seconds of one instance of `s` (an array when the spec holds arrays), launch overhead included."""
    if s.kind == "gemm":
        if s.gemm is not None:
            mm, nn, kk, wb = s.gemm
            return _gemm_times(cal, mm, nn, kk, wb, act_bytes, s.dtype)
        return _each(lambda f, b: cal.op_time_s(f, b, s.dtype), s.flops, s.weight_bytes + s.act_bytes)
    if s.kind == "attention":
        nbytes = s.weight_bytes + s.act_bytes + s.kv_bytes
        if np.ndim(s.flops) == 0 and np.ndim(nbytes) == 0:
            return cal.attention_time_s(float(s.flops), float(nbytes), s.dtype)
        return cal.attention_times_s(s.flops, nbytes, s.dtype)
    return _each(cal.elementwise_time_s, s.weight_bytes + s.act_bytes + s.kv_bytes)


def to_op(cal: Calibration, s: OpSpec, act_bytes: float) -> Op:
    """`s` costed on `cal`: its time, its plain memory and compute terms, and which of them bounds it."""
    t = spec_time_s(cal, s, act_bytes)
    mem = (s.weight_bytes + s.act_bytes + s.kv_bytes) / cal.bandwidth_bytes_per_s
    comp = s.flops / cal.flops(s.dtype) if s.kind != "elementwise" and s.flops else 0.0
    return Op(s.name, s.kind, s.count, s.flops, s.weight_bytes, s.act_bytes, s.kv_bytes, t, mem, comp,
              s.dtype, "compute" if comp > mem else "memory")


def calibration_for(gpu: GPU, calibration: Optional[Calibration]) -> Calibration:
    """`calibration` when given, else the best one shipped for `gpu` (`sim.calibration.for_gpu`)."""
    return calibration if calibration is not None else for_gpu(gpu)


def layer_ops(model: ModelLike, gpu: GpuLike, batch: Batch, precision: Optional[Precision] = None,
              calibration: Optional[Calibration] = None) -> list:
    """The ops of ONE transformer layer for `batch`, costed on `gpu` (list of `Op`, count = 1 each).

    >>> [o.name for o in layer_ops("llama-3.1-8b", "H100-SXM", Batch.decode(8, 100))]
    ['attn_norm', 'qkv_proj', 'rope', 'attention', 'o_proj', 'mlp_norm', 'gate_up_proj', 'silu_mul', 'down_proj']
    """
    m, g = resolve_model(model), resolve_gpu(gpu)
    p = precision or Precision()
    cal = calibration_for(g, calibration)
    specs = [s for s in token_specs(m, p, batch.tokens) if s.name not in MODEL_LEVEL_OPS]
    specs.insert(3, attention_spec(m, p, batch.tokens, batch.attention_pairs(), batch.kv_tokens_read()))
    ops = [to_op(cal, s, p.act_bytes) for s in specs]
    return [Op(o.name, o.kind, 1, o.flops, o.weight_bytes, o.act_bytes, o.kv_bytes, o.time_s, o.memory_time_s,
               o.compute_time_s, o.dtype, o.bound) for o in ops]


def op_times(model: ModelLike, gpu: GpuLike, tokens: int, context_len: int = 0, *, seqs: int = 1,
             precision: Optional[Precision] = None, calibration: Optional[Calibration] = None) -> dict:
    """Seconds of each op of ONE layer processing `tokens` tokens, on `gpu`'s shipped calibration.

    `tokens` are split evenly over `seqs` sequences, each of which already holds
    `context_len` tokens in its KV cache. So `op_times(m, g, 2048)` is one layer of a
    2,048-token prefill, `op_times(m, g, 1, context_len=C)` a single-user decode step and
    `op_times(m, g, B, context_len=C, seqs=B)` a decode step at batch B.

    Keys: "attn_norm", "qkv_proj", "rope", "attention", "o_proj", "mlp_norm",
    "gate_up_proj", "silu_mul", "down_proj" (and "router" for mixture-of-experts models).
    Each value is the calibration's launch overhead + max(bytes / BW, FLOPs / FLOP/s).

    >>> t = op_times("llama-3.1-8b", "H100-SXM", tokens=1, context_len=0)
    >>> t["gate_up_proj"] > t["o_proj"]      # 4x the weights of o_proj
    True
    """
    check_int("tokens", tokens, minimum=1)
    check_int("context_len", context_len, minimum=0)
    check_int("seqs", seqs, minimum=1)
    if tokens % seqs:
        raise ValueError(f"tokens ({tokens}) must split evenly over seqs ({seqs})")
    batch = Batch((tokens // seqs,) * seqs, (context_len,) * seqs)
    return {o.name: o.time_s for o in layer_ops(model, gpu, batch, precision, calibration)}
