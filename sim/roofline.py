"""Roofline model of a transformer forward pass: FLOPs, bytes and time of every operation.

Each operation (a GEMM, the attention kernel, an elementwise kernel) moves some bytes
through HBM and does some FLOPs. Its time is

    time = busy time + launch overhead,   busy = max(bytes / effective bandwidth, FLOPs / effective FLOP/s)

where the effective numbers come from `sim.calibration.for_gpu(gpu)`: a calibration
fitted from recorded kernels when one exists for that device, otherwise the guide's
stated assumption (80% of peak bandwidth, 60% of peak FLOP/s). Every time goes through
the calibration's own cost functions (`gemm_time_s`, `attention_time_s`,
`elementwise_time_s`), so a fitted calibration may refine the plain formula above with
shape terms; the memory/compute *bound* of an op always compares the plain terms. An operation is
*memory-bound* when the bytes term wins and *compute-bound* when the FLOPs term wins; the
crossover intensity FLOP/byte is the *ridge point* (R26, R31).

Conventions
-----------
- One *step* (forward pass) processes a `Batch`: sequence i brings `new_tokens[i]` new
  tokens and already holds `context_tokens[i]` tokens in its KV cache. A prefill of N
  tokens is `Batch.prefill(N)`; a decode step at batch B and context C is
  `Batch.decode(B, C)`; the scheduler mixes both in one step.
- A GEMM of m tokens through a (k in -> n out) weight does 2 m n k FLOPs and moves
  k n weights, m k inputs and m n outputs.
- Attention (a fused FlashAttention-style kernel) does 4 x heads x head_dim FLOPs per
  query-key pair (QK^T and PV), causal inside the new tokens; it reads each cached K and
  V once per step, reads Q, writes O, and writes the new tokens' K and V.
- Elementwise kernels (fused residual-add + RMSNorm, RoPE, SiLU x up) move their
  inputs and outputs once.
- The embedding lookup reads only the rows of the tokens in the step, never the whole
  table; the output head reads all of its weights, for one token per sequence.
- Launches are asynchronous. Eagerly, the host issues one kernel every
  `HOST_DISPATCH_S_PER_KERNEL` (Python, framework dispatch, the launch call) while the GPU
  works through the queue; a kernel starts when it has been issued and the one before it
  has finished. Kernels longer than the dispatch hide the host's work; runs of shorter ones
  leave the GPU waiting (`eager_step_time_s`). With `cuda_graphs=True` the host launches the
  whole step once and the kernels run back to back: one launch plus the busy time (R2).

>>> round(ridge_point("H100-SXM"))
295
>>> t = op_times("llama-3.1-8b", "H100-SXM", tokens=1, context_len=1024)
>>> sorted(k for k in t if k.endswith("proj"))
['down_proj', 'gate_up_proj', 'o_proj', 'qkv_proj']
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Optional, Sequence, Union

import numpy as np

from sim import calibration as _calibration
from sim.calibration import Calibration
from sim.checks import check_choice, check_int, check_positive, checked_params
from sim.dtypes import DTYPE_BYTES, arithmetic_dtype, bytes_per_elem
from sim.hardware import GPU
from sim.hardware import resolve as resolve_gpu
from sim.models import ModelConfig, parameter_breakdown
from sim.models import resolve as resolve_model

GpuLike = Union[str, GPU]
ModelLike = Union[str, ModelConfig]

NORM_WEIGHT_BYTES = 2.0        # RMSNorm gains are kept in bf16 whatever the weight format
LOGITS_BYTES = 4.0             # logits are sampled in fp32
ATTENTION_DTYPE = "bf16"       # FlashAttention-2 style kernels run QK^T and PV in bf16
MATH_DTYPES = ("bf16", "fp16", "fp8", "int8", "fp4")
MODEL_LEVEL_OPS = ("embed", "final_norm", "lm_head", "sampling")   # once per forward pass, not per layer
HOST_DISPATCH_S_PER_KERNEL = 10e-6   # assumed: host time to issue one kernel in an eager forward pass
                                     # (Python, framework dispatch and cudaLaunchKernel); not from a trace


# --------------------------------------------------------------------------------------------
# Inputs: precision and batch shape
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class Precision:
    """Number formats of one deployment."""

    weight_dtype: str = "bf16"          # storage of the blocks' linear weights
    act_dtype: str = "bf16"             # activations passed between kernels
    kv_dtype: str = "bf16"              # KV-cache entries
    compute_dtype: Optional[str] = None  # tensor-core arithmetic; None: arithmetic_dtype(weight, act)
    lm_head_dtype: Optional[str] = None  # embedding table and output head; None: as weight_dtype
    weight_bytes_per_elem: Optional[float] = None  # overrides weight_dtype's width (scales, 2:4 metadata)
    sparse_2_4: bool = False            # 2:4 sparse tensor cores: half the GEMM math of the blocks (R22)

    def __post_init__(self) -> None:
        for name in ("weight_dtype", "act_dtype", "kv_dtype"):
            check_choice("dtype", getattr(self, name), DTYPE_BYTES)
        if self.lm_head_dtype is not None:
            check_choice("dtype", self.lm_head_dtype, DTYPE_BYTES)
        if self.compute_dtype is not None:
            check_choice("compute dtype", self.compute_dtype, MATH_DTYPES)
        if self.weight_bytes_per_elem is not None:
            check_positive("weight_bytes_per_elem", self.weight_bytes_per_elem)

    @property
    def weight_bytes(self) -> float:
        """Bytes per weight of the blocks' linear layers."""
        if self.weight_bytes_per_elem is not None:
            return float(self.weight_bytes_per_elem)
        return DTYPE_BYTES[self.weight_dtype]

    @property
    def head_bytes(self) -> float:
        """Bytes per weight of the embedding table and output head."""
        return DTYPE_BYTES[self.lm_head_dtype or self.weight_dtype]

    @property
    def act_bytes(self) -> float:
        """Bytes per activation element."""
        return DTYPE_BYTES[self.act_dtype]

    @property
    def kv_bytes(self) -> float:
        """Bytes per KV-cache element."""
        return DTYPE_BYTES[self.kv_dtype]

    @property
    def math_dtype(self) -> str:
        """The tensor-core dtype the GEMMs run in."""
        return self.compute_dtype or arithmetic_dtype(self.weight_dtype, self.act_dtype)

    @property
    def head_math_dtype(self) -> str:
        """The tensor-core dtype of the output-head GEMM."""
        return self.compute_dtype or arithmetic_dtype(self.lm_head_dtype or self.weight_dtype, self.act_dtype)


@dataclass(frozen=True)
class Batch:
    """The sequences one forward step processes."""

    new_tokens: tuple                   # (seqs,) tokens each sequence processes in this step
    context_tokens: tuple               # (seqs,) tokens each sequence already holds in its KV cache
    logits_seqs: Optional[int] = None   # rows of logits the step computes; None: one per sequence

    def __post_init__(self) -> None:
        new = tuple(check_int("new_tokens", n, minimum=1) for n in self.new_tokens)
        ctx = tuple(check_int("context_tokens", c, minimum=0) for c in self.context_tokens)
        if not new:
            raise ValueError("a batch needs at least one sequence")
        if len(new) != len(ctx):
            raise ValueError(f"new_tokens has {len(new)} entries but context_tokens has {len(ctx)}")
        object.__setattr__(self, "new_tokens", new)
        object.__setattr__(self, "context_tokens", ctx)
        if self.logits_seqs is not None:
            check_int("logits_seqs", self.logits_seqs, minimum=0, maximum=sum(new))

    @classmethod
    def prefill(cls, prompt_tokens: int, seqs: int = 1) -> "Batch":
        """`seqs` prompts of `prompt_tokens` tokens each, nothing cached yet."""
        check_int("seqs", seqs, minimum=1)
        return cls((prompt_tokens,) * seqs, (0,) * seqs)

    @classmethod
    def decode(cls, seqs: int, context_tokens: int) -> "Batch":
        """One decode step: `seqs` sequences, one new token each, `context_tokens` cached each."""
        check_int("seqs", seqs, minimum=1)
        return cls((1,) * seqs, (context_tokens,) * seqs)

    @property
    def tokens(self) -> int:
        """Tokens processed in the step (rows of every GEMM)."""
        return sum(self.new_tokens)

    @property
    def seqs(self) -> int:
        return len(self.new_tokens)

    @property
    def logits(self) -> int:
        """Rows of the output-head GEMM: one per sequence that samples a token."""
        return self.seqs if self.logits_seqs is None else self.logits_seqs

    def attention_pairs(self) -> int:
        """Query-key pairs attention scores: sum of new x context + new (new + 1) / 2 (causal)."""
        return sum(n * c + n * (n + 1) // 2 for n, c in zip(self.new_tokens, self.context_tokens))

    def kv_tokens_read(self) -> int:
        """Cached plus new tokens whose K and V the attention kernel reads."""
        return sum(self.new_tokens) + sum(self.context_tokens)


# --------------------------------------------------------------------------------------------
# Operations
# --------------------------------------------------------------------------------------------

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


class _Spec(NamedTuple):
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


def _elementwise(name: str, count: int, flops: float, act: float, weight: float = 0.0) -> _Spec:
    return _Spec(name, "elementwise", count, flops, weight, act, 0.0, "bf16")


def _token_specs(m: ModelConfig, p: Precision, tokens) -> list:
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

    def dense_gemm(name: str) -> _Spec:
        k, n = shapes[name]
        gemm = None if p.sparse_2_4 else (T, n, k, w)
        return _Spec(name, "gemm", L, 2.0 * T * n * k * flop_scale, w * k * n, a * (T * k + T * n), 0.0,
                     math_dt, gemm)

    def norm(name: str, count: int, passes: float) -> _Spec:
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
        specs.append(_Spec("router", "gemm", L, 2.0 * T * E * h, w * h * E, a * (T * h + T * E), 0.0,
                           math_dt, None if p.sparse_2_4 else (T, E, h, w)))
        touched = expected_experts_touched(E, k_e, T)
        routed = T * k_e      # token-expert assignments
        for name in ("gate_up_proj", "down_proj"):
            kk, nn = shapes[name]
            specs.append(_Spec(name, "gemm", L, 2.0 * routed * nn * kk * flop_scale, touched * w * kk * nn,
                               a * (routed * kk + routed * nn), 0.0, math_dt, None))
            if name == "gate_up_proj":
                specs.append(_elementwise("silu_mul", L, 5.0 * routed * I, 3.0 * a * routed * I))
    else:
        specs.append(dense_gemm("gate_up_proj"))
        specs.append(_elementwise("silu_mul", L, 5.0 * T * I, 3.0 * a * T * I))
        specs.append(dense_gemm("down_proj"))
    # model-level ops: the gather reads one table row per token; the final norm has no residual
    specs.append(_Spec("embed", "elementwise", 1, 0.0 * T, p.head_bytes * T * h, a * T * h, 0.0, "bf16"))
    specs.append(norm("final_norm", 1, 2.0))
    return specs


def _logit_specs(m: ModelConfig, p: Precision, logits) -> list:
    """The output head (one row per sequence that samples) and the sampler; `logits` >= 1 (int or array)."""
    S, V, h = logits, m.vocab_size, m.hidden_size
    hb, a = p.head_bytes, p.act_bytes
    return [_Spec("lm_head", "gemm", 1, 2.0 * S * V * h, hb * h * V, a * S * h + a * S * V, 0.0,
                  p.head_math_dtype, (S, V, h, hb)),
            # the logits are written at activation width, then read back in fp32 by the sampler
            _elementwise("sampling", 1, 5.0 * S * V, LOGITS_BYTES * S * V)]


def _fixed_specs(m: ModelConfig, p: Precision, tokens: int, logits: int) -> list:
    """Every op of the forward pass except attention, whose cost depends on the contexts."""
    specs = _token_specs(m, p, tokens)
    if logits > 0:
        specs.extend(_logit_specs(m, p, logits))
    return specs


def _attention_spec(m: ModelConfig, p: Precision, tokens, pairs, kv_read_tokens) -> _Spec:
    h_q = m.num_heads * m.head_dim
    kv_row = 2.0 * m.num_kv_heads * m.head_dim * p.kv_bytes   # K and V of one token in one layer
    return _Spec("attention", "attention", m.num_layers,
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


def _spec_time_s(cal: Calibration, s: _Spec, act_bytes: float):
    """Seconds of one instance of `s` (an array when the spec holds arrays), launch overhead included."""
    if s.kind == "gemm":
        if s.gemm is not None:
            mm, nn, kk, wb = s.gemm
            return _gemm_times(cal, mm, nn, kk, wb, act_bytes, s.dtype)
        return _each(lambda f, b: cal.op_time_s(f, b, s.dtype), s.flops, s.weight_bytes + s.act_bytes)
    if s.kind == "attention":
        return _each(lambda f, b: cal.attention_time_s(f, b, s.dtype), s.flops,
                     s.weight_bytes + s.act_bytes + s.kv_bytes)
    return _each(cal.elementwise_time_s, s.weight_bytes + s.act_bytes + s.kv_bytes)


def _to_op(cal: Calibration, s: _Spec, act_bytes: float) -> Op:
    t = _spec_time_s(cal, s, act_bytes)
    mem = (s.weight_bytes + s.act_bytes + s.kv_bytes) / cal.bandwidth_bytes_per_s
    comp = s.flops / cal.flops(s.dtype) if s.kind != "elementwise" and s.flops else 0.0
    return Op(s.name, s.kind, s.count, s.flops, s.weight_bytes, s.act_bytes, s.kv_bytes, t, mem, comp,
              s.dtype, "compute" if comp > mem else "memory")


def _calibration_for(gpu: GPU, calibration: Optional[Calibration]) -> Calibration:
    return calibration if calibration is not None else _calibration.for_gpu(gpu)


def layer_ops(model: ModelLike, gpu: GpuLike, batch: Batch, precision: Optional[Precision] = None,
              calibration: Optional[Calibration] = None) -> list:
    """The ops of ONE transformer layer for `batch`, costed on `gpu` (list of `Op`, count = 1 each).

    >>> [o.name for o in layer_ops("llama-3.1-8b", "H100-SXM", Batch.decode(8, 100))]
    ['attn_norm', 'qkv_proj', 'rope', 'attention', 'o_proj', 'mlp_norm', 'gate_up_proj', 'silu_mul', 'down_proj']
    """
    m, g = resolve_model(model), resolve_gpu(gpu)
    p = precision or Precision()
    cal = _calibration_for(g, calibration)
    specs = [s for s in _token_specs(m, p, batch.tokens) if s.name not in MODEL_LEVEL_OPS]
    specs.insert(3, _attention_spec(m, p, batch.tokens, batch.attention_pairs(), batch.kv_tokens_read()))
    ops = [_to_op(cal, s, p.act_bytes) for s in specs]
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


# --------------------------------------------------------------------------------------------
# Whole forward pass
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ForwardResult:
    """Cost of one forward pass (one step) on one device."""

    model: str                       # display name
    gpu: str                         # display name
    tokens: int                      # tokens processed
    seqs: int                        # sequences in the step
    ops: list                        # [Op], layer ops first (count = num_layers), then model-level ops
    op_names: list                   # (ops,)
    op_flops: np.ndarray             # (ops,) totals over all instances
    op_bytes: np.ndarray             # (ops,) totals over all instances
    op_busy_time_s: np.ndarray       # (ops,) totals, excluding launch overhead
    flops: float
    weight_bytes: float              # weights read
    kv_bytes: float                  # KV cache read and written
    act_bytes: float                 # activations read and written
    bytes: float                     # all HBM traffic
    kernels: int                     # kernels in the step
    host_dispatch_s: float           # host time to issue them one by one (eager), whether hidden or not
    launch_overhead_s: float         # time_s - busy time: the graph launch, or the dispatch the GPU waited for
    time_s: float                    # step time = busy time + launch overhead
    memory_time_s: float             # sum over ops of bytes / effective bandwidth
    compute_time_s: float            # sum over ops of FLOPs / effective FLOP/s
    tensor_core_utilisation: float   # FLOPs / (time_s x peak FLOP/s of the GEMM dtype)
    bandwidth_utilisation: float     # bytes / (time_s x peak bandwidth)
    calibration_source: str          # "trace" | "carried-over" | "spec-sheet"
    calibration_note: str

    @property
    def intensity_flop_per_byte(self) -> float:
        """FLOPs per byte of the whole step."""
        return self.flops / self.bytes

    @property
    def bound(self) -> str:
        """"compute" when the ops' compute time exceeds their memory time, else "memory"."""
        return "compute" if self.compute_time_s > self.memory_time_s else "memory"

    def busy_time_by_kind_s(self) -> dict:
        """Busy time (without launch overhead) of gemm, attention and elementwise ops."""
        out = {"gemm": 0.0, "attention": 0.0, "elementwise": 0.0}
        for op, t in zip(self.ops, self.op_busy_time_s):
            out[op.kind] += float(t)
        return out


def eager_step_time_s(pre: Sequence, layer: Sequence, post: Sequence, layers: int,
                      dispatch_s: float = HOST_DISPATCH_S_PER_KERNEL):
    """Time of a step whose kernels the host issues one by one, asynchronously.

    The kernels run in order: `pre` (busy seconds of each, e.g. the embedding gather),
    then `layer` repeated `layers` times, then `post`. The host issues kernel i at
    (i + 1) x dispatch_s; the GPU starts it once it is issued and the previous kernel is
    done, so end_i = max((i + 1) d, end_(i-1)) + busy_i, and the step ends with the last
    kernel. Two limits: when every kernel outlasts the dispatch, the host runs ahead and
    the step costs d + the busy time (the launches are hidden); when kernels are shorter,
    the GPU waits and the step approaches kernels x d. Entries may be numpy arrays (one
    step per element).

    >>> round(float(eager_step_time_s([], [50e-6], [], layers=10, dispatch_s=10e-6)), 9)   # d + 10 x 50 us
    0.00051
    >>> round(float(eager_step_time_s([], [2e-6], [], layers=10, dispatch_s=10e-6)), 9)    # 10 x 10 us + 2 us
    0.000102
    """
    d = float(dispatch_s)
    lag = 0.0                     # how far the GPU's finish trails the host's latest issue
    for b in pre:
        lag = np.maximum(lag - d, 0.0) + b
    done = 0
    while done < layers:
        start, waited = lag, False
        for b in layer:
            waited = waited | (lag < d)          # the GPU idled before this kernel
            lag = np.maximum(lag - d, 0.0) + b
        done += 1
        # a layer that ended where it began repeats forever; one in which the GPU never waited
        # and that ended later repeats its growth; either way the rest follows in closed form
        if np.all((lag == start) | (~np.asarray(waited) & (lag >= start))):
            lag = lag + (layers - done) * (lag - start)
            break
    for b in post:
        lag = np.maximum(lag - d, 0.0) + b
    return (len(pre) + layers * len(layer) + len(post)) * d + lag


def launched_step_time_s(busy_by_spec: list, specs: list, layers: int, launch_s: float, cuda_graphs: bool):
    """Step time from the busy seconds of one instance of each op (`specs`: ops with .name and .count, per-layer
    ops in execution order, model-level ops anywhere): busy time + `launch_s` when the step replays CUDA graphs,
    else the eager launch queue (`eager_step_time_s`)."""
    if cuda_graphs:
        return sum(s.count * b for s, b in zip(specs, busy_by_spec)) + launch_s
    pre = [b for s, b in zip(specs, busy_by_spec) if s.name == "embed"]
    post = [b for s, b in zip(specs, busy_by_spec) if s.name in MODEL_LEVEL_OPS and s.name != "embed"]
    layer = [b for s, b in zip(specs, busy_by_spec) if s.name not in MODEL_LEVEL_OPS]
    return eager_step_time_s(pre, layer, post, layers)


def _assemble(m: ModelConfig, g: GPU, cal: Calibration, p: Precision, batch: Batch, ops: list,
              cuda_graphs: bool) -> ForwardResult:
    launch = cal.launch_overhead_s
    counts = np.array([o.count for o in ops], dtype=float)
    flops = np.array([o.flops for o in ops]) * counts
    nbytes = np.array([o.nbytes for o in ops]) * counts
    each = [max(o.time_s - launch, 0.0) for o in ops]
    busy = np.array(each) * counts
    kernels = int(counts.sum())
    time_s = float(launched_step_time_s(each, ops, m.num_layers, launch, cuda_graphs))
    overhead = time_s - float(busy.sum())
    total_flops = float(flops.sum())
    total_bytes = float(nbytes.sum())
    peak_flops = g.peak_flops(p.math_dtype)
    return ForwardResult(
        model=m.display_name, gpu=g.display_name, tokens=batch.tokens, seqs=batch.seqs, ops=ops,
        op_names=[o.name for o in ops], op_flops=flops, op_bytes=nbytes, op_busy_time_s=busy,
        flops=total_flops,
        weight_bytes=float(sum(o.weight_bytes * o.count for o in ops)),
        kv_bytes=float(sum(o.kv_bytes * o.count for o in ops)),
        act_bytes=float(sum(o.act_bytes * o.count for o in ops)),
        bytes=total_bytes, kernels=kernels, host_dispatch_s=kernels * HOST_DISPATCH_S_PER_KERNEL,
        launch_overhead_s=overhead, time_s=time_s,
        memory_time_s=float(sum(o.memory_time_s * o.count for o in ops)),
        compute_time_s=float(sum(o.compute_time_s * o.count for o in ops)),
        tensor_core_utilisation=total_flops / (time_s * peak_flops),
        bandwidth_utilisation=total_bytes / (time_s * g.hbm_bandwidth_bytes_per_s),
        calibration_source=cal.source, calibration_note=cal.note)


def forward_pass(model: ModelLike, gpu: GpuLike, batch: Batch, precision: Optional[Precision] = None,
                 calibration: Optional[Calibration] = None, cuda_graphs: bool = False) -> ForwardResult:
    """FLOPs, bytes and time of every op of one forward step over `batch` on `gpu`.

    Step time = sum over kernels of max(bytes / BW, FLOPs / FLOP/s) + what the launches add:
    one launch with `cuda_graphs`; eagerly, whatever host dispatch the kernels do not
    hide (`eager_step_time_s`).

    >>> r = forward_pass("llama-3.1-8b", "H100-SXM", Batch.decode(1, 1024), cuda_graphs=True)
    >>> round(r.weight_bytes / 1e9, 1)       # every weight except the embedding table
    15.0
    >>> r.bound
    'memory'
    """
    m, g = resolve_model(model), resolve_gpu(gpu)
    p = precision or Precision()
    cal = _calibration_for(g, calibration)
    specs = _fixed_specs(m, p, batch.tokens, batch.logits)
    specs.insert(3, _attention_spec(m, p, batch.tokens, batch.attention_pairs(), batch.kv_tokens_read()))
    ops = [_to_op(cal, s, p.act_bytes) for s in specs]
    return _assemble(m, g, cal, p, batch, ops, cuda_graphs)


def prefill_pass(model: ModelLike, gpu: GpuLike, prompt_tokens: int, seqs: int = 1,
                 precision: Optional[Precision] = None, calibration: Optional[Calibration] = None,
                 cuda_graphs: bool = False) -> ForwardResult:
    """The prefill of `seqs` prompts of `prompt_tokens` tokens (its logits give the first output token).

    >>> prefill_pass("llama-3.1-8b", "H100-SXM", 4096).bound
    'compute'
    """
    return forward_pass(model, gpu, Batch.prefill(prompt_tokens, seqs), precision, calibration, cuda_graphs)


def decode_step(model: ModelLike, gpu: GpuLike, batch: int, context_tokens: int,
                precision: Optional[Precision] = None, calibration: Optional[Calibration] = None,
                cuda_graphs: bool = True) -> ForwardResult:
    """One decode step: `batch` sequences each add one token on top of `context_tokens` cached ones.

    >>> f = decode_step("llama-3.1-8b", "H100-SXM", 1, 1000)
    >>> f.bound, round(f.intensity_flop_per_byte, 1)
    ('memory', 1.0)
    """
    return forward_pass(model, gpu, Batch.decode(batch, context_tokens), precision, calibration, cuda_graphs)


@dataclass
class _Summary:
    """Totals of a step (arrays when the step sizes are arrays)."""

    time_s: np.ndarray
    launch_s: np.ndarray       # time beyond the kernels' busy time (graph launch or exposed dispatch)
    busy_s: dict               # kind -> busy seconds
    weight_bytes: np.ndarray
    kv_bytes: np.ndarray
    gemm_compute_s: np.ndarray
    gemm_memory_s: np.ndarray


def _summarise(m: ModelConfig, p: Precision, cal: Calibration, tokens, logits, pairs, kv_read,
               cuda_graphs: bool) -> _Summary:
    """Step totals without building `Op` objects, vectorised over arrays of step sizes (logits >= 1)."""
    specs = _token_specs(m, p, tokens)
    specs = specs[:3] + [_attention_spec(m, p, tokens, pairs, kv_read)] + specs[3:] + _logit_specs(m, p, logits)
    launch = cal.launch_overhead_s
    zero = np.zeros(np.shape(tokens))
    busy = {"gemm": zero.copy(), "attention": zero.copy(), "elementwise": zero.copy()}
    wbytes, kvbytes, g_comp, g_mem = zero.copy(), zero.copy(), zero.copy(), zero.copy()
    bw = cal.bandwidth_bytes_per_s
    each = []
    for sp in specs:
        each.append(np.maximum(np.asarray(_spec_time_s(cal, sp, p.act_bytes)) - launch, 0.0))
        busy[sp.kind] = busy[sp.kind] + sp.count * each[-1]
        wbytes = wbytes + sp.count * sp.weight_bytes
        kvbytes = kvbytes + sp.count * sp.kv_bytes
        if sp.kind == "gemm":
            g_comp = g_comp + sp.count * sp.flops / cal.flops(sp.dtype)
            g_mem = g_mem + sp.count * (sp.weight_bytes + sp.act_bytes) / bw
    busy_total = busy["gemm"] + busy["attention"] + busy["elementwise"]
    time_s = launched_step_time_s(each, specs, m.num_layers, launch, cuda_graphs) + zero
    return _Summary(time_s, time_s - busy_total, busy, wbytes, kvbytes, g_comp, g_mem)


def attention_share_of_prefill(model: ModelLike, gpu: GpuLike, prompt_tokens, precision: Optional[Precision] = None,
                               calibration: Optional[Calibration] = None) -> np.ndarray:
    """Share of a single prompt's prefill time spent in attention, for each prompt length given.

    Attention FLOPs grow with the square of the prompt (4 x heads x head_dim x N(N+1)/2 per
    layer) while GEMM FLOPs grow linearly, so the share climbs with N. Vectorised.

    >>> s = attention_share_of_prefill("llama-3.1-8b", "H100-SXM", [1024, 131072])
    >>> bool(s[0] < 0.05 < 0.5 < s[1])
    True
    """
    m, g = resolve_model(model), resolve_gpu(gpu)
    p = precision or Precision()
    cal = _calibration_for(g, calibration)
    n = np.asarray(prompt_tokens, dtype=np.int64)
    if n.ndim != 1 or n.size == 0 or np.any(n < 1):
        raise ValueError("prompt_tokens must be a non-empty 1-D array of lengths >= 1")
    sm = _summarise(m, p, cal, n, np.ones_like(n), n * (n + 1) // 2, n, cuda_graphs=False)
    return sm.busy_s["attention"] / sm.time_s


class StepCost:
    """Fast step times for many batches of one model on one device (schedulers, sweeps).

    The cost of everything but attention depends only on the number of tokens (and the
    output head on the number of logits rows), so those costs are memoised; `prime`
    costs many token counts in one vectorised pass. Attention is costed per call. The
    result equals `forward_pass(...).time_s` for the same batch. `cuda_graphs` given to a
    call overrides the instance's setting (decode-only steps replay graphs, mixed ones
    launch eagerly).

    >>> cost = StepCost("llama-3.1-8b", "H100-SXM", cuda_graphs=True)
    >>> t = cost.time_s([1, 1], [100, 200])
    >>> f = forward_pass("llama-3.1-8b", "H100-SXM", Batch((1, 1), (100, 200)), cuda_graphs=True)
    >>> abs(t - f.time_s) < 1e-12
    True
    """

    def __init__(self, model: ModelLike, gpu: GpuLike, precision: Optional[Precision] = None,
                 calibration: Optional[Calibration] = None, cuda_graphs: bool = False):
        self.model = resolve_model(model)
        self.gpu = resolve_gpu(gpu)
        self.precision = precision or Precision()
        self.calibration = _calibration_for(self.gpu, calibration)
        self.cuda_graphs = cuda_graphs
        # memoised per step size: (busy seconds of all instances, busy seconds of one instance of each op)
        self._tokens: dict = {}   # tokens -> the token-dependent ops
        self._logits: dict = {0: (0.0, ())}   # logits rows -> head + sampler
        token_specs = _token_specs(self.model, self.precision, 1)
        # kernel order of a step, for eager timing: attention is the fourth op of each layer
        self._order = token_specs[:3] + [_attention_spec(self.model, self.precision, 1, 1, 1)] + token_specs[3:]
        self._logit_order = _logit_specs(self.model, self.precision, 1)

    def _busy(self, specs: list, n: int) -> tuple:
        """(total busy seconds (n,), per-instance busy seconds of each spec (specs, n)) for n step sizes."""
        launch = self.calibration.launch_overhead_s
        each = np.array([np.broadcast_to(np.maximum(np.asarray(
            _spec_time_s(self.calibration, s, self.precision.act_bytes)) - launch, 0.0), (n,)) for s in specs])
        counts = np.array([s.count for s in specs], dtype=float)
        return counts @ each, each

    def _memo(self, memo: dict, sizes, make) -> None:
        n = np.unique(np.asarray(sizes, dtype=np.int64))
        n = n[(n >= 1) & ~np.isin(n, list(memo))]
        if n.size:
            total, each = self._busy(make(n), n.size)
            for j, k in enumerate(n.tolist()):
                memo[k] = (float(total[j]), tuple(each[:, j].tolist()))

    def prime(self, tokens=(), logits=()) -> None:
        """Cost these token counts and logits row counts in one vectorised pass each."""
        self._memo(self._tokens, tokens, lambda n: _token_specs(self.model, self.precision, n))
        self._memo(self._logits, logits, lambda n: _logit_specs(self.model, self.precision, n))

    def _token_entry(self, tokens: int) -> tuple:
        if tokens not in self._tokens:
            self._memo(self._tokens, [tokens], lambda n: _token_specs(self.model, self.precision, n))
        return self._tokens[tokens]

    def _logit_entry(self, logits: int) -> tuple:
        if logits not in self._logits:
            self._memo(self._logits, [logits], lambda n: _logit_specs(self.model, self.precision, n))
        return self._logits[logits]

    def _attention_busy_s(self, tokens: int, pairs: int, kv_read: int) -> float:
        """Busy seconds of ONE layer's attention kernel."""
        s = _attention_spec(self.model, self.precision, tokens, pairs, kv_read)
        cal = self.calibration
        return max(cal.attention_time_s(s.flops, s.act_bytes + s.kv_bytes, s.dtype) - cal.launch_overhead_s, 0.0)

    def _total(self, tokens: int, logits: int, pairs: int, kv_read: int, cuda_graphs: Optional[bool]) -> float:
        tok_total, tok_each = self._token_entry(tokens)
        log_total, log_each = self._logit_entry(logits)
        attn = self._attention_busy_s(tokens, pairs, kv_read)
        if self.cuda_graphs if cuda_graphs is None else cuda_graphs:
            return tok_total + log_total + self.model.num_layers * attn + self.calibration.launch_overhead_s
        each = list(tok_each[:3]) + [attn] + list(tok_each[3:]) + list(log_each)
        specs = self._order + (self._logit_order if logits else [])
        return float(launched_step_time_s(each, specs, self.model.num_layers, 0.0, cuda_graphs=False))

    def time_s(self, new_tokens: Sequence[int], context_tokens: Sequence[int],
               logits_seqs: Optional[int] = None, cuda_graphs: Optional[bool] = None) -> float:
        """Step time for sequences with these new and cached token counts (plain int sequences)."""
        tokens = 0
        pairs = 0
        kv_read = 0
        for n, c in zip(new_tokens, context_tokens):
            tokens += n
            pairs += n * c + n * (n + 1) // 2
            kv_read += n + c
        if tokens <= 0:
            raise ValueError("a step needs at least one token")
        logits = len(new_tokens) if logits_seqs is None else logits_seqs
        return self._total(tokens, logits, pairs, kv_read, cuda_graphs)

    def uniform_time_s(self, seqs: int, new_tokens: int, context_tokens: int,
                       logits_seqs: Optional[int] = None, cuda_graphs: Optional[bool] = None) -> float:
        """Step time when all `seqs` sequences bring `new_tokens` each on `context_tokens` cached each.

        Same value as `time_s([new_tokens] * seqs, [context_tokens] * seqs)`, without the lists.
        """
        if seqs < 1 or new_tokens < 1 or context_tokens < 0:
            raise ValueError(f"need seqs >= 1, new_tokens >= 1, context_tokens >= 0; got "
                             f"{seqs}, {new_tokens}, {context_tokens}")
        tokens = seqs * new_tokens
        pairs = seqs * (new_tokens * context_tokens + new_tokens * (new_tokens + 1) // 2)
        kv_read = seqs * (new_tokens + context_tokens)
        return self._total(tokens, seqs if logits_seqs is None else logits_seqs, pairs, kv_read, cuda_graphs)

    def batch_time_s(self, batch: Batch) -> float:
        """Step time of a `Batch`."""
        return self.time_s(batch.new_tokens, batch.context_tokens, batch.logits_seqs)

    def decode_times_s(self, batch: int, context_tokens: np.ndarray, max_exact: int = 64) -> np.ndarray:
        """Decode step times at batch `batch` for each context length in `context_tokens`.

        Up to `max_exact` contexts are costed one by one; longer runs are costed on
        `max_exact` evenly spaced contexts and linearly interpolated (the attention cost
        is piecewise linear in the context, so the error is confined to its one kink).
        """
        ctx = np.asarray(context_tokens, dtype=np.int64)
        if ctx.size == 0:
            return np.zeros(0)
        if ctx.size <= max_exact:
            pts = ctx
        else:
            pts = np.unique(np.linspace(ctx.min(), ctx.max(), max_exact).round().astype(np.int64))
        vals = np.array([self.uniform_time_s(batch, 1, int(c)) for c in pts])
        if pts is ctx:
            return vals
        return np.interp(ctx, pts, vals)


def stored_weight_bytes(model: ModelLike, precision: Optional[Precision] = None) -> float:
    """Bytes of all stored weights: block linears at the weight width, embedding and head at the
    head width, norm gains in bf16.

    >>> round(stored_weight_bytes("llama-3.1-8b") / 1e9, 2)
    16.06
    """
    m = resolve_model(model)
    p = precision or Precision()
    b = parameter_breakdown(m)
    return ((b.attention + b.mlp + b.router) * p.weight_bytes + (b.embedding + b.head) * p.head_bytes
            + b.norms * NORM_WEIGHT_BYTES)


# --------------------------------------------------------------------------------------------
# Ridge point, knee, ceilings
# --------------------------------------------------------------------------------------------

def ridge_point(gpu: GpuLike, dtype: str = "bf16") -> float:
    """Peak FLOP/s over peak bandwidth: the intensity (FLOP/byte) where a kernel stops being memory-bound.

    H100 SXM, bf16: 989e12 / 3.35e12 = 295 FLOP/B (R4, R31).

    >>> round(ridge_point("H100-SXM", "fp8"))
    591
    """
    g = resolve_gpu(gpu)
    return g.peak_flops(dtype) / g.hbm_bandwidth_bytes_per_s


def effective_ridge_point(gpu: GpuLike, dtype: str = "bf16", calibration: Optional[Calibration] = None) -> float:
    """Ridge point of the calibrated (effective) roofline: effective FLOP/s over effective bandwidth.

    With the stated default (60% of FLOP/s, 80% of bandwidth) it is 0.75 x the peak ridge.

    >>> round(effective_ridge_point("H100-SXM", calibration=_calibration.spec_sheet(resolve_gpu("H100-SXM"))))
    221
    """
    g = resolve_gpu(gpu)
    cal = _calibration_for(g, calibration)
    return cal.flops(dtype) / cal.bandwidth_bytes_per_s


def _gemm_balance(m: ModelConfig, p: Precision, cal: Calibration, tokens: float) -> float:
    """Compute time minus memory time of all GEMMs of a decode step with `tokens` rows (continuous in tokens)."""
    diff = 0.0
    a = p.act_bytes
    bw = cal.bandwidth_bytes_per_s
    scale = 0.5 if p.sparse_2_4 else 1.0
    shapes = m.linear_shapes()
    F = cal.flops(p.math_dtype)
    for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
        k, n = shapes[name]
        if m.is_moe and name in ("gate_up_proj", "down_proj"):
            routed = tokens * m.experts_per_token
            touched = expected_experts_touched(m.num_experts, m.experts_per_token, tokens)
            fl = 2.0 * routed * n * k * scale
            by = touched * p.weight_bytes * k * n + a * routed * (k + n)
        else:
            fl = 2.0 * tokens * n * k * scale
            by = p.weight_bytes * k * n + a * tokens * (k + n)
        diff += m.num_layers * (fl / F - by / bw)
    V, h = m.vocab_size, m.hidden_size
    Fh = cal.flops(p.head_math_dtype)
    diff += 2.0 * tokens * V * h / Fh - (p.head_bytes * V * h + a * tokens * (V + h)) / bw
    return diff


def batch_knee(model: ModelLike, gpu: GpuLike, precision: Optional[Precision] = None,
               calibration: Optional[Calibration] = None) -> float:
    """Decode batch size at which the step's GEMMs turn from memory-bound to compute-bound.

    Below the knee a decode step costs about the same at any batch (every step reads all
    weights once); above it, FLOPs grow faster than the time to read the weights. For a
    dense model with P weights per GEMM of total in+out width S, the knee solves
    2 B P / F = (w P + a B S) / BW, i.e. B = (w P / BW) / (2 P / F - a S / BW): close to
    the effective ridge point times w / 2 (bf16: B ~ ridge). Returns a real number; inf
    if the GEMMs never become compute-bound.

    >>> 200 < batch_knee("llama-3.1-8b", "H100-SXM", calibration=_calibration.spec_sheet(resolve_gpu("H100-SXM"))) < 260
    True
    """
    m, g = resolve_model(model), resolve_gpu(gpu)
    p = precision or Precision()
    cal = _calibration_for(g, calibration)
    lo, hi = 1e-3, 1.0
    if _gemm_balance(m, p, cal, lo) >= 0:
        return lo
    while _gemm_balance(m, p, cal, hi) < 0:
        hi *= 2.0
        if hi > 1e9:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _gemm_balance(m, p, cal, mid) < 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9 * hi:
            break
    return 0.5 * (lo + hi)


def decode_weight_bytes(model: ModelLike, precision: Optional[Precision] = None, seqs: int = 1) -> float:
    """Weight bytes one decode step of `seqs` sequences reads: every block weight, the norms
    and the output head once, and one embedding row per sequence.

    The embedding table is a lookup, not a matrix multiply: the step gathers the row of each
    new token and never reads the rest. So a step of Llama 3.1 8B reads 15.01 GB of its
    16.06 GB of bf16 weights (the 1.05 GB table is the difference); a model whose head is
    tied to its embedding reads the table whole, through the head.

    >>> round(decode_weight_bytes("llama-3.1-8b") / 1e9, 2), round(stored_weight_bytes("llama-3.1-8b") / 1e9, 2)
    (15.01, 16.06)
    """
    m = resolve_model(model)
    check_int("seqs", seqs, minimum=1)
    return float(sum(s.count * s.weight_bytes for s in _fixed_specs(m, precision or Precision(), seqs, seqs)))


def context_where_kv_reads_equal_weights(model: ModelLike, batch: int = 1,
                                         precision: Optional[Precision] = None) -> float:
    """Context per sequence (tokens) at which one decode step reads as many KV-cache bytes as weight bytes.

    A decode step of `batch` sequences at context C reads the weights once
    (`decode_weight_bytes`) and batch x C x (2 x layers x KV heads x head_dim x KV bytes) of
    cache. Below this context the weights dominate and the step time is nearly flat in C;
    above it the cache does, and the step grows in proportion to C. The GPU does not enter:
    both are bytes.

    >>> round(context_where_kv_reads_equal_weights("llama-3.1-8b"))        # 15.01 GB / 128 KiB
    114516
    >>> round(context_where_kv_reads_equal_weights("llama-3.1-8b", batch=16))
    7157
    """
    m = resolve_model(model)
    check_int("batch", batch, minimum=1)
    p = precision or Precision()
    kv_per_token = 2.0 * m.num_layers * m.num_kv_heads * m.head_dim * p.kv_bytes
    return decode_weight_bytes(m, p, batch) / (batch * kv_per_token)


@dataclass(frozen=True)
class DecodeCeiling:
    """Peak-hardware bounds on single-user decode: the guide's opening paradox."""

    model: str
    gpu: str
    weight_bytes: float             # weights one token reads (decode_weight_bytes: all but the embedding table)
    stored_weight_bytes: float      # the whole model, embedding table included
    flops_per_token: float          # 2 FLOPs per weight multiplied (R3): the GEMMs of one token
    step_time_s: float              # weight_bytes / peak bandwidth
    tokens_per_s: float             # 1 / step_time_s: one user's ceiling
    compute_time_s: float           # flops_per_token / peak FLOP/s
    compute_tokens_per_s: float     # peak FLOP/s / flops_per_token: what the math alone would allow
    flops_per_byte: float           # ~1 in bf16 (R3)


def decode_ceiling(model: ModelLike, gpu: GpuLike, dtype: str = "bf16") -> DecodeCeiling:
    """Single-user decode at peak bandwidth vs at peak FLOP/s, reading each weight the step uses once.

    Llama 3.1 8B on H100 SXM in bf16: 15.01 GB / 3.35 TB/s = 4.5 ms per token (~220
    tokens/s), while its 15 GFLOP take 15 us at 989 TFLOP/s (~66,000 tokens/s) (R3, R4).
    The bytes and FLOPs are those of the simulated forward pass without a KV cache
    (`decode_weight_bytes`), so every chapter uses the same figure.

    >>> c = decode_ceiling("llama-3.1-8b", "H100-SXM")
    >>> round(c.tokens_per_s), round(c.compute_tokens_per_s, -3)
    (223, 66000.0)
    """
    m, g = resolve_model(model), resolve_gpu(gpu)
    p = Precision(weight_dtype=dtype, act_dtype=dtype)
    wbytes = decode_weight_bytes(m, p)
    flops = float(sum(s.count * s.flops for s in _fixed_specs(m, p, 1, 1) if s.kind == "gemm"))
    peak = g.peak_flops(p.math_dtype)
    step = wbytes / g.hbm_bandwidth_bytes_per_s
    return DecodeCeiling(model=m.display_name, gpu=g.display_name, weight_bytes=wbytes,
                         stored_weight_bytes=stored_weight_bytes(m, p), flops_per_token=flops,
                         step_time_s=step, tokens_per_s=1.0 / step, compute_time_s=flops / peak,
                         compute_tokens_per_s=peak / flops, flops_per_byte=flops / wbytes)


# --------------------------------------------------------------------------------------------
# Figure ch00-decode-meter
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class DecodeMeterParams:
    """Controls of the decode meter: step through decode passes."""

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    batch: int = 1                      # users decoding together
    prompt_tokens: int = 512            # tokens in each user's cache before the first step
    steps: int = 32                     # decode steps to show
    precision: Precision = Precision()
    cuda_graphs: bool = True            # a decode step replayed as one graph (R2)
    kv_cache: bool = True               # False: no cache, every step recomputes the whole prefix

    def __post_init__(self) -> None:
        check_int("batch", self.batch, minimum=1)
        check_int("prompt_tokens", self.prompt_tokens, minimum=0)
        check_int("steps", self.steps, minimum=1, maximum=100_000)
        if not isinstance(self.kv_cache, bool):
            raise ValueError(f"kv_cache must be True or False, got {self.kv_cache!r}")


@dataclass(frozen=True)
class DecodeMeterResult:
    """Per decode step: bytes read vs FLOPs done, and how busy the tensor cores are."""

    step: np.ndarray                     # (steps,) 1, 2, ...
    context_tokens: np.ndarray           # (steps,) cached tokens per user at each step
    step_time_s: np.ndarray              # (steps,)
    bytes_per_step: np.ndarray           # (steps,) all HBM traffic
    weight_bytes_per_step: np.ndarray    # (steps,)
    kv_bytes_per_step: np.ndarray        # (steps,)
    flops_per_step: np.ndarray           # (steps,)
    flops_per_byte: np.ndarray           # (steps,)
    tensor_core_utilisation: np.ndarray  # (steps,) FLOPs / (step time x peak FLOP/s)
    bandwidth_utilisation: np.ndarray    # (steps,) bytes / (step time x peak bandwidth)
    cumulative_time_s: np.ndarray        # (steps,)
    cumulative_bytes: np.ndarray         # (steps,)
    tokens_generated: np.ndarray         # (steps,) batch x step
    memory_floor_s: np.ndarray           # (steps,) bytes / peak bandwidth
    compute_floor_s: np.ndarray          # (steps,) FLOPs / peak FLOP/s
    tokens_per_s_per_user: float         # mean over the steps
    tokens_per_s_total: float
    peak_flops_per_s: float
    peak_bandwidth_bytes_per_s: float
    calibration_note: str


def decode_meter(params: DecodeMeterParams = DecodeMeterParams(),
                 calibration: Optional[Calibration] = None) -> DecodeMeterResult:
    """Bytes, FLOPs, time and tensor-core utilisation of successive decode steps.

    Step s has every user holding prompt_tokens + s - 1 cached tokens. Bytes and FLOPs
    are affine in the context (weights fixed, KV reads growing), so they are computed
    exactly from two forward passes; times come from `StepCost`.

    With `kv_cache=False` nothing is kept between steps: step s pushes the whole prefix,
    prompt_tokens + s tokens per user, through the model again to get one new token
    (R14). Its FLOPs grow with the prefix (attention's with its square), the step turns
    compute-bound, and the total time grows with the square of the length.

    >>> r = decode_meter()
    >>> bool(r.tensor_core_utilisation.max() < 0.01)     # one user: well under 1%
    True
    >>> nc = decode_meter(DecodeMeterParams(kv_cache=False))
    >>> bool(nc.step_time_s[-1] > nc.step_time_s[0] > 2 * r.step_time_s[0])
    True
    """
    p = params
    m, g = resolve_model(p.model), resolve_gpu(p.gpu)
    cost = StepCost(m, g, p.precision, calibration, p.cuda_graphs)
    steps = np.arange(1, p.steps + 1)
    ctx = p.prompt_tokens + steps - 1
    if not p.kv_cache:
        return _recompute_meter(p, m, g, cost, steps, ctx)
    f0 = forward_pass(m, g, Batch.decode(p.batch, int(ctx[0])), p.precision, cost.calibration, p.cuda_graphs)
    f1 = forward_pass(m, g, Batch.decode(p.batch, int(ctx[0]) + 1), p.precision, cost.calibration, p.cuda_graphs)
    dc = ctx - ctx[0]

    def affine(a0: float, a1: float) -> np.ndarray:
        return a0 + (a1 - a0) * dc

    total = affine(f0.bytes, f1.bytes)
    weights = affine(f0.weight_bytes, f1.weight_bytes)
    kv = affine(f0.kv_bytes, f1.kv_bytes)
    flops = affine(f0.flops, f1.flops)
    times = cost.decode_times_s(p.batch, ctx)
    peak_f = g.peak_flops(p.precision.math_dtype)
    bw = g.hbm_bandwidth_bytes_per_s
    cum_t = np.cumsum(times)
    return DecodeMeterResult(
        step=steps, context_tokens=ctx, step_time_s=times, bytes_per_step=total,
        weight_bytes_per_step=weights, kv_bytes_per_step=kv, flops_per_step=flops,
        flops_per_byte=flops / total, tensor_core_utilisation=flops / (times * peak_f),
        bandwidth_utilisation=total / (times * bw), cumulative_time_s=cum_t,
        cumulative_bytes=np.cumsum(total), tokens_generated=steps * p.batch,
        memory_floor_s=total / bw, compute_floor_s=flops / peak_f,
        tokens_per_s_per_user=float(p.steps / cum_t[-1]), tokens_per_s_total=float(p.batch * p.steps / cum_t[-1]),
        peak_flops_per_s=peak_f, peak_bandwidth_bytes_per_s=bw, calibration_note=cost.calibration.note)


def _recompute_meter(p: DecodeMeterParams, m: ModelConfig, g: GPU, cost: StepCost, steps: np.ndarray,
                     ctx: np.ndarray) -> DecodeMeterResult:
    """The decode meter without a KV cache: step s runs the whole prefix (ctx + 1 tokens per user)."""
    n = (ctx + 1).astype(np.int64)               # tokens each user pushes through the model (int64: token x width
                                                 # products pass 2**31, and numpy's default int is 32-bit in wasm)
    B = p.batch
    specs = _fixed_specs(m, p.precision, B * n, B)
    specs.append(_attention_spec(m, p.precision, B * n, B * n * (n + 1) // 2, B * n))   # causal over the prefix
    zero = np.zeros(len(n))
    flops = sum((s.count * s.flops for s in specs), zero)
    weights = sum((s.count * s.weight_bytes for s in specs), zero)
    kv = sum((s.count * s.kv_bytes for s in specs), zero)
    total = weights + kv + sum((s.count * s.act_bytes for s in specs), zero)
    cost.prime(tokens=B * n, logits=[B])
    times = np.array([cost.uniform_time_s(B, int(k), 0, logits_seqs=B) for k in n])
    peak_f = g.peak_flops(p.precision.math_dtype)
    bw = g.hbm_bandwidth_bytes_per_s
    cum_t = np.cumsum(times)
    return DecodeMeterResult(
        step=steps, context_tokens=np.zeros_like(ctx), step_time_s=times, bytes_per_step=total,
        weight_bytes_per_step=weights, kv_bytes_per_step=kv, flops_per_step=flops,
        flops_per_byte=flops / total, tensor_core_utilisation=flops / (times * peak_f),
        bandwidth_utilisation=total / (times * bw), cumulative_time_s=cum_t,
        cumulative_bytes=np.cumsum(total), tokens_generated=steps * B,
        memory_floor_s=total / bw, compute_floor_s=flops / peak_f,
        tokens_per_s_per_user=float(p.steps / cum_t[-1]), tokens_per_s_total=float(B * p.steps / cum_t[-1]),
        peak_flops_per_s=peak_f, peak_bandwidth_bytes_per_s=bw, calibration_note=cost.calibration.note)


# --------------------------------------------------------------------------------------------
# Figure ch02-phases
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class PhaseParams:
    """Controls of the two-phases figure."""

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    prompt_tokens: int = 1024
    output_tokens: int = 256
    batch: int = 1                      # conversations decoding together
    precision: Precision = Precision()
    cuda_graphs: bool = True            # decode steps replayed as graphs; prefill launches kernels

    def __post_init__(self) -> None:
        check_int("prompt_tokens", self.prompt_tokens, minimum=1)
        check_int("output_tokens", self.output_tokens, minimum=1)
        check_int("batch", self.batch, minimum=1)


@dataclass(frozen=True)
class PhaseResult:
    """Time of prefill and of decode for one request (or `batch` identical ones)."""

    prefill_time_s: float               # the whole prompt in one pass; it also yields output token 1
    decode_time_s: float                # output tokens 2..n, one step each
    total_time_s: float
    decode_step_time_s: np.ndarray      # (output_tokens - 1,)
    prefill_flops: float
    prefill_bytes: float
    prefill_intensity_flop_per_byte: float
    prefill_bound: str
    decode_flops_per_step: float        # first decode step
    decode_bytes_per_step: float        # first decode step
    decode_intensity_flop_per_byte: float
    decode_bound: str
    prefill_tokens_per_s: float         # prompt tokens processed per second
    decode_tokens_per_s_per_user: float
    time_per_prompt_token_s: float
    time_per_output_token_s: float      # mean decode step
    kv_equals_weights_context_tokens: float  # context at which a decode step reads as much cache as weights


def phase_times(params: PhaseParams = PhaseParams(), calibration: Optional[Calibration] = None) -> PhaseResult:
    """Prefill time (compute-bound: each weight reused across the prompt) vs decode time (memory-bound).

    Prefill processes all prompt tokens of all `batch` requests in one pass; its logits
    give the first output token (R1, R2). Decode then runs output_tokens - 1 steps, the
    cache growing by one token per step: each step reads the weights and the whole cache,
    so its time grows with the context, slowly while the cache is small next to the
    weights and in proportion once it passes `kv_equals_weights_context_tokens`.

    >>> r = phase_times()
    >>> r.prefill_bound, r.decode_bound
    ('compute', 'memory')
    """
    p = params
    m, g = resolve_model(p.model), resolve_gpu(p.gpu)
    pre = forward_pass(m, g, Batch.prefill(p.prompt_tokens, p.batch), p.precision, calibration, cuda_graphs=False)
    cost = StepCost(m, g, p.precision, calibration, p.cuda_graphs)
    ctx = p.prompt_tokens + np.arange(p.output_tokens - 1)
    steps = cost.decode_times_s(p.batch, ctx)
    dec = forward_pass(m, g, Batch.decode(p.batch, p.prompt_tokens), p.precision, cost.calibration, p.cuda_graphs)
    decode_time = float(steps.sum())
    total = pre.time_s + decode_time
    return PhaseResult(
        prefill_time_s=pre.time_s, decode_time_s=decode_time, total_time_s=total, decode_step_time_s=steps,
        prefill_flops=pre.flops, prefill_bytes=pre.bytes, prefill_intensity_flop_per_byte=pre.intensity_flop_per_byte,
        prefill_bound=pre.bound, decode_flops_per_step=dec.flops, decode_bytes_per_step=dec.bytes,
        decode_intensity_flop_per_byte=dec.intensity_flop_per_byte, decode_bound=dec.bound,
        prefill_tokens_per_s=p.prompt_tokens * p.batch / pre.time_s,
        decode_tokens_per_s_per_user=(len(steps) / decode_time) if len(steps) else math.nan,
        time_per_prompt_token_s=pre.time_s / (p.prompt_tokens * p.batch),
        time_per_output_token_s=float(steps.mean()) if len(steps) else math.nan,
        kv_equals_weights_context_tokens=context_where_kv_reads_equal_weights(m, p.batch, p.precision))


# --------------------------------------------------------------------------------------------
# Figure ch03-roofline
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class RooflineChartParams:
    """Controls of the roofline chart."""

    gpu: str = "H100-SXM"
    dtype: str = "bf16"                 # tensor-core dtype of the roof (and of the ops' weights/activations)
    model: str = "llama-3.1-8b"
    batch: int = 64                     # decode batch B for the "decode GEMM, batch B" points
    prompt_tokens: int = 2048           # prefill length for the prefill points
    context_tokens: int = 4096          # KV length for the decode attention point
    intensity_min: float = 0.1          # left end of the x axis, FLOP/byte
    intensity_max: float = 10_000.0     # right end of the x axis, FLOP/byte
    points: int = 200                   # samples along the roof

    def __post_init__(self) -> None:
        check_choice("dtype", self.dtype, MATH_DTYPES)
        check_int("batch", self.batch, minimum=1)
        check_int("prompt_tokens", self.prompt_tokens, minimum=1)
        check_int("context_tokens", self.context_tokens, minimum=0)
        check_positive("intensity_min", self.intensity_min)
        if not self.intensity_max > self.intensity_min:
            raise ValueError("intensity_max must exceed intensity_min")
        check_int("points", self.points, minimum=2)


@dataclass(frozen=True)
class RooflineChartResult:
    """A roofline (peak and effective) with the LLM's operations placed on it."""

    gpu: str
    dtype: str
    intensity_flop_per_byte: np.ndarray       # (points,) x axis
    peak_flops_per_s: np.ndarray              # (points,) min(peak FLOP/s, I x peak bandwidth)
    effective_flops_per_s: np.ndarray         # (points,) the same with the calibration's numbers
    ridge_flop_per_byte: float                # peak ridge
    effective_ridge_flop_per_byte: float
    peak_compute_flops_per_s: float
    peak_bandwidth_bytes_per_s: float
    op_labels: list                           # e.g. "gate_up_proj, prefill 2048"
    op_groups: list                           # "prefill GEMM" | "decode GEMM, batch 1" | "decode GEMM, batch B"
                                              # | "attention (decode)" | "elementwise"
    op_intensity_flop_per_byte: np.ndarray
    op_attainable_flops_per_s: np.ndarray     # effective roof at the op's intensity
    op_achieved_flops_per_s: np.ndarray       # FLOPs / modelled time (launch overhead included)
    op_bound: list                            # "memory" | "compute"
    calibration_source: str
    calibration_note: str


def roofline_chart(params: RooflineChartParams = RooflineChartParams(),
                   calibration: Optional[Calibration] = None) -> RooflineChartResult:
    """Attainable FLOP/s vs arithmetic intensity, with prefill, decode, attention and elementwise ops placed.

    Roof: min(peak FLOP/s, intensity x bandwidth), peak and effective. Op points: each
    GEMM of a prefill of `prompt_tokens`; each GEMM of a decode step at batch 1 and at
    batch B (B drags them right: intensity ~ B FLOP/byte in bf16); decode attention over a
    `context_tokens` cache (intensity 2 x query heads / (KV heads x KV bytes), the same at
    any batch); and the elementwise kernels (intensity below 2).

    >>> r = roofline_chart()
    >>> round(r.ridge_flop_per_byte)
    295
    """
    p = params
    m, g = resolve_model(p.model), resolve_gpu(p.gpu)
    cal = _calibration_for(g, calibration)
    prec = Precision(weight_dtype=p.dtype, act_dtype=p.dtype, kv_dtype="bf16", compute_dtype=p.dtype)
    grid = np.geomspace(p.intensity_min, p.intensity_max, p.points)
    peak_f, bw = g.peak_flops(p.dtype), g.hbm_bandwidth_bytes_per_s
    eff_f, eff_bw = cal.flops(p.dtype), cal.bandwidth_bytes_per_s
    labels, groups, inten, achieved, bound = [], [], [], [], []

    def place(ops: list, group: str, suffix: str, kinds: tuple) -> None:
        for o in ops:
            if o.kind in kinds:
                labels.append(f"{o.name}, {suffix}")
                groups.append(group)
                inten.append(o.intensity_flop_per_byte)
                achieved.append(o.flops / o.time_s if o.time_s > 0 else 0.0)
                bound.append(o.bound)

    place(layer_ops(m, g, Batch.prefill(p.prompt_tokens), prec, cal), "prefill GEMM",
          f"prefill {p.prompt_tokens}", ("gemm",))
    place(layer_ops(m, g, Batch.decode(1, p.context_tokens), prec, cal), "decode GEMM, batch 1",
          "decode, batch 1", ("gemm",))
    decode_b = layer_ops(m, g, Batch.decode(p.batch, p.context_tokens), prec, cal)
    place(decode_b, "decode GEMM, batch B", f"decode, batch {p.batch}", ("gemm",))
    place(decode_b, "attention (decode)", f"{p.context_tokens}-token cache, batch {p.batch}", ("attention",))
    place(decode_b, "elementwise", f"batch {p.batch}", ("elementwise",))
    inten_a = np.array(inten)
    return RooflineChartResult(
        gpu=g.display_name, dtype=p.dtype, intensity_flop_per_byte=grid,
        peak_flops_per_s=np.minimum(peak_f, grid * bw), effective_flops_per_s=np.minimum(eff_f, grid * eff_bw),
        ridge_flop_per_byte=peak_f / bw, effective_ridge_flop_per_byte=eff_f / eff_bw,
        peak_compute_flops_per_s=peak_f, peak_bandwidth_bytes_per_s=bw,
        op_labels=labels, op_groups=groups, op_intensity_flop_per_byte=inten_a,
        op_attainable_flops_per_s=np.minimum(eff_f, inten_a * eff_bw),
        op_achieved_flops_per_s=np.array(achieved), op_bound=bound,
        calibration_source=cal.source, calibration_note=cal.note)


# --------------------------------------------------------------------------------------------
# Figure ch03-roofline: measured kernels of a recorded device
# --------------------------------------------------------------------------------------------

MEASURED_FLOP_KINDS = ("big-gemm", "gemm", "attention-decode", "attention-prefill")  # kernels with FLOPs


@checked_params
@dataclass(frozen=True)
class MeasuredRooflineParams:
    """A recorded device (a slug of `sim.calibration.recorded_devices()`) and the dtype to show."""

    device: str                         # e.g. "cpu-amd-epyc-7b13-2-threads"
    dtype: str = "bf16"                 # kernels of this dtype, and the fitted FLOP/s of this dtype
    intensity_min: float = 0.1          # left end of the x axis, FLOP/byte
    intensity_max: float = 10_000.0     # right end of the x axis, FLOP/byte
    points: int = 200                   # samples along the roof

    def __post_init__(self) -> None:
        check_positive("intensity_min", self.intensity_min)
        if not self.intensity_max > self.intensity_min:
            raise ValueError("intensity_max must exceed intensity_min")
        check_int("points", self.points, minimum=2)


@dataclass(frozen=True)
class MeasuredRooflineResult:
    """The roof fitted to one recorded device, and its measured kernels placed on it."""

    device: str                         # as recorded, e.g. "AMD EPYC 7B13 (CPU, 2 threads)"
    device_type: str                    # "cuda" | "cpu"
    catalogue_key: Optional[str]        # the catalogue GPU it is (never for a CPU)
    dtype: str
    measured_dtypes: list               # dtypes the trace has a fitted FLOP/s for
    intensity_flop_per_byte: np.ndarray     # (points,) x axis
    fitted_flops_per_s: np.ndarray          # (points,) min(fitted FLOP/s, I x fitted bandwidth)
    ridge_flop_per_byte: float              # fitted FLOP/s / fitted bandwidth
    compute_flops_per_s: float              # fitted FLOP/s of `dtype` (largest square GEMMs)
    bandwidth_bytes_per_s: float            # fitted streaming bandwidth (copy sweep)
    point_labels: list                      # (n,) kernels of `dtype` that do FLOPs
    point_kinds: list                       # (n,) "gemm", "big-gemm", "attention-decode", ...
    point_splits: list                      # (n,) "train" (in the fit) | "heldout"
    point_intensity_flop_per_byte: np.ndarray   # (n,) FLOPs / minimal bytes
    point_measured_flops_per_s: np.ndarray      # (n,) FLOPs / measured median time
    point_model_flops_per_s: np.ndarray         # (n,) FLOPs / the calibrated model's time
    point_roofline_flops_per_s: np.ndarray      # (n,) FLOPs / the plain roofline's time
    memory_only_points: int             # copies and elementwise kernels: no FLOPs, so not on this chart
    caption: str                        # device, date, software, held-out errors


def measured_roofline(params: MeasuredRooflineParams, directory=None) -> MeasuredRooflineResult:
    """The roofline of a recorded device from its own fitted calibration, with its measured kernels.

    Roof: min(F, I x BW) with F the fitted FLOP/s of `dtype` and BW the fitted bandwidth,
    both measured on that device (no spec sheet is involved, so this works for a CPU).
    Points: every measured kernel of `dtype` that does FLOPs (GEMMs and attention), at
    intensity FLOPs / minimal bytes and FLOP/s = FLOPs / time, measured and as the calibrated
    model and the plain roofline predict it. ValueError lists the devices, or the dtypes the
    device was measured in.
    """
    p = params
    rec = _calibration.recorded_device(p.device, directory)
    cal = rec.calibration
    check_choice("dtype", p.dtype, cal.flops_per_s)
    f, bw = cal.flops(p.dtype), cal.bandwidth_bytes_per_s
    grid = np.geomspace(p.intensity_min, p.intensity_max, p.points)
    pts = [q for q in rec.points if q.kind in MEASURED_FLOP_KINDS and q.dtype == p.dtype and q.flops > 0]
    flops = np.array([q.flops for q in pts], dtype=float)
    return MeasuredRooflineResult(
        device=rec.name, device_type=rec.device_type, catalogue_key=rec.catalogue_key, dtype=p.dtype,
        measured_dtypes=sorted(cal.flops_per_s), intensity_flop_per_byte=grid,
        fitted_flops_per_s=np.minimum(f, grid * bw), ridge_flop_per_byte=f / bw,
        compute_flops_per_s=f, bandwidth_bytes_per_s=bw,
        point_labels=[q.label for q in pts], point_kinds=[q.kind for q in pts],
        point_splits=[q.split for q in pts],
        point_intensity_flop_per_byte=np.array([q.intensity for q in pts], dtype=float),
        point_measured_flops_per_s=flops / np.array([q.time_s for q in pts], dtype=float),
        point_model_flops_per_s=flops / np.array([q.model_s for q in pts], dtype=float),
        point_roofline_flops_per_s=flops / np.array([q.roofline_s for q in pts], dtype=float),
        memory_only_points=sum(q.kind in ("copy", "elementwise") for q in rec.points),
        caption=rec.provenance.caption())


# --------------------------------------------------------------------------------------------
# Figure ch04-batch-knee
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class BatchSweepParams:
    """Controls of the batch-knee figure."""

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    batch: int = 64                     # the batch the reader picked
    context_tokens: int = 256           # tokens each user already holds in the KV cache
    max_batch: int = 1024               # right end of the batch grid
    grid_points: int = 48               # about this many log-spaced batch sizes (1, 2, 4, ... included)
    precision: Precision = Precision()
    cuda_graphs: bool = True            # decode steps replayed as graphs (R2)

    def __post_init__(self) -> None:
        check_int("max_batch", self.max_batch, minimum=1)
        check_int("batch", self.batch, minimum=1, maximum=self.max_batch)
        check_int("context_tokens", self.context_tokens, minimum=0)
        check_int("grid_points", self.grid_points, minimum=2, maximum=4096)


@dataclass(frozen=True)
class BatchSweepResult:
    """Decode step time and throughput over a batch grid, plus the values at the chosen batch."""

    batch_grid: np.ndarray              # (n,) batch sizes, ascending
    step_time_s: np.ndarray             # (n,)
    tokens_per_s_total: np.ndarray      # (n,) batch / step time
    tokens_per_s_per_user: np.ndarray   # (n,) 1 / step time
    gemm_time_s: np.ndarray             # (n,) busy time of the GEMMs
    attention_time_s: np.ndarray        # (n,) busy time of attention
    other_time_s: np.ndarray            # (n,) elementwise ops and launch overhead
    weight_bytes: np.ndarray            # (n,) weights read per step
    kv_bytes: np.ndarray                # (n,) KV cache read and written per step
    gemm_compute_bound: np.ndarray      # (n,) bool: GEMM FLOPs outlast GEMM bytes
    fits_in_memory: np.ndarray          # (n,) bool: weights + KV cache fit in device memory
    knee_batch: float                   # batch_knee(): GEMMs turn compute-bound
    ridge_flop_per_byte: float          # peak ridge of the GEMM dtype
    effective_ridge_flop_per_byte: float
    batch: int                          # the chosen batch
    step_time_s_at_batch: float
    tokens_per_s_total_at_batch: float
    tokens_per_s_per_user_at_batch: float
    bound_at_batch: str                 # "memory" | "compute" (of the GEMMs)
    calibration_source: str
    calibration_note: str


def batch_grid(max_batch: int, points: int) -> np.ndarray:
    """Log-spaced integer batch sizes from 1 to `max_batch`, with every power of two included.

    >>> batch_grid(16, 4).tolist()
    [1, 2, 3, 4, 6, 8, 16]
    """
    g = np.geomspace(1, max_batch, points).round().astype(np.int64)
    pow2 = 2 ** np.arange(int(math.log2(max_batch)) + 1)
    return np.unique(np.concatenate([g, pow2, [max_batch]]))


def sweep_batch(params: BatchSweepParams = BatchSweepParams(),
                calibration: Optional[Calibration] = None) -> BatchSweepResult:
    """Decode step time, total tokens/s and per-user tokens/s for batch 1..max_batch.

    Step time stays nearly flat while the GEMMs are memory-bound (each step reads all
    weights whatever the batch), then rises once the batch passes the knee near the
    ridge point; total tokens/s = B / step time climbs and flattens, per-user tokens/s
    = 1 / step time falls. KV reads grow with B x context and bend the curve earlier for
    long contexts.

    >>> r = sweep_batch()
    >>> bool(r.step_time_s[list(r.batch_grid).index(8)] < 1.1 * r.step_time_s[0])   # flat well below the knee
    True
    """
    p = params
    m, g = resolve_model(p.model), resolve_gpu(p.gpu)
    cal = _calibration_for(g, calibration)
    grid = batch_grid(p.max_batch, p.grid_points)
    if p.batch not in grid:
        grid = np.unique(np.append(grid, p.batch))
    C = p.context_tokens
    sm = _summarise(m, p.precision, cal, grid, grid, grid * (C + 1), grid * (C + 1), p.cuda_graphs)
    step, gemm, attn = sm.time_s, sm.busy_s["gemm"], sm.busy_s["attention"]
    other = sm.busy_s["elementwise"] + sm.launch_s
    wb, kvb = sm.weight_bytes, sm.kv_bytes
    comp = sm.gemm_compute_s > sm.gemm_memory_s
    wtotal = stored_weight_bytes(m, p.precision)
    kv_per_token = 2.0 * m.num_layers * m.num_kv_heads * m.head_dim * p.precision.kv_bytes
    fits = wtotal + grid * (p.context_tokens + 1) * kv_per_token <= g.memory_bytes
    j = int(np.searchsorted(grid, p.batch))
    return BatchSweepResult(
        batch_grid=grid, step_time_s=step, tokens_per_s_total=grid / step, tokens_per_s_per_user=1.0 / step,
        gemm_time_s=gemm, attention_time_s=attn, other_time_s=other, weight_bytes=wb, kv_bytes=kvb,
        gemm_compute_bound=comp, fits_in_memory=fits, knee_batch=batch_knee(m, g, p.precision, cal),
        ridge_flop_per_byte=ridge_point(g, p.precision.math_dtype),
        effective_ridge_flop_per_byte=effective_ridge_point(g, p.precision.math_dtype, cal),
        batch=p.batch, step_time_s_at_batch=float(step[j]), tokens_per_s_total_at_batch=float(grid[j] / step[j]),
        tokens_per_s_per_user_at_batch=float(1.0 / step[j]), bound_at_batch="compute" if comp[j] else "memory",
        calibration_source=cal.source, calibration_note=cal.note)
