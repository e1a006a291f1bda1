"""Long context: what a decode step, a prefill and the KV cache cost from 1K to 1M tokens of
context, and what each way of attending to less of it saves (chapter 17).

Every layer of a decoder keeps K and V for every token it attends to, so at long contexts
the cache, not the weights, sets a decode step's bytes; and a prompt's attention scores
grow with the square of its length. The ways compared here change only which cached
tokens a layer keeps and scores:

- full: every token (the model as trained);
- window: the last W tokens (sliding-window attention, as Mistral 7B [MISTRAL7B]);
- sinks: the first S tokens and the last W (StreamingLLM [STREAMINGLLM]);
- evict: a budget of B tokens per layer chosen by attention scores, after a full prefill
  (H2O [H2O] drops tokens while decoding; SnapKV [SNAPKV] compresses the prompt's cache
  once after its prefill);
- fp8: every token, its K and V stored in 8 bits (half the bytes of bf16);
- hybrid: one layer in N keeps full attention, the others a window of W (Gemma 3 keeps
  five local layers of a 1,024-token window per global layer [GEMMA3]).

The step costs are the calibrated model's (`sim.forward.StepCost`): the same kernels as
chapters 2-5, with each layer's attention costed for the tokens it keeps. Cached tokens
a method drops are never read again, whatever a later token would have needed from them:
what that costs in quality is measured by the papers, not computed here.

>>> r = long_context(LongContextParams(context_tokens=131_072))
>>> r.kv_bytes_per_seq["full"] / 2 ** 30                     # 128 KiB a token, Llama 3.1 8B, bf16
16.0
>>> r.kv_bytes_per_seq["fp8"] / 2 ** 30, r.kv_bytes_per_seq["window"] / 2 ** 30
(8.0, 0.5)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from sim.batch import Precision
from sim.checks import CONTEXT_MAX as CHECKS_CONTEXT_MAX
from sim.checks import check_choice, check_int, checked_params
from sim.forward import StepCost, context_where_kv_reads_equal_weights, decode_weight_bytes, step_cost
from sim.hardware import get as get_gpu
from sim.kernel_model import Calibration
from sim.kv import kv_budget_bytes
from sim.models import get as get_model
from sim.models import names as model_names

METHODS = ("full", "window", "sinks", "evict", "fp8", "hybrid")
LABELS = {
    "full": "full attention",
    "window": "sliding window",
    "sinks": "window + attention sinks",
    "evict": "KV eviction to a budget",
    "fp8": "full, fp8 KV cache",
    "hybrid": "hybrid: 1 global layer in N",
}
CONTEXT_MIN, CONTEXT_MAX = 1024, 2 ** 20          # the figure's range: 1K to 1M tokens
PREFILL_CHUNK_TOKENS = 8192                       # prefill runs in chunks of this many tokens (assumed;
                                                  # engines chunk long prompts: chapter 4)


@checked_params
@dataclass(frozen=True)
class LongContextParams:
    """One model on one GPU at one context, and the sizes the methods keep."""

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    context_tokens: int = 131_072     # tokens in the cache when the decode step runs (prompt + output so far)
    batch: int = 1                    # sequences decoding together, each at context_tokens
    window_tokens: int = 4096         # W: the window of "window", "sinks" and the local layers of "hybrid"
    sink_tokens: int = 4              # S: the first tokens "sinks" keeps (StreamingLLM keeps 4)
    kv_budget_tokens: int = 4096      # B: tokens per layer "evict" keeps
    global_every: int = 6             # N: "hybrid" keeps full attention in one layer of N
    points: int = 41                  # contexts on the sweep, CONTEXT_MIN to CONTEXT_MAX, log-spaced

    LIMITS = {"window_tokens": (CONTEXT_MAX, "tokens"), "sink_tokens": (1024, "tokens"),
              "kv_budget_tokens": (CONTEXT_MAX, "tokens"), "global_every": (64, "layers"),
              "context_tokens": (CONTEXT_MAX, "tokens"), "batch": (1024, "sequences"),
              "points": (257, "points")}

    def __post_init__(self) -> None:
        check_choice("model", self.model, model_names())
        get_gpu(self.gpu)
        check_int("context_tokens", self.context_tokens, minimum=1)
        check_int("batch", self.batch, minimum=1)
        check_int("window_tokens", self.window_tokens, minimum=1)
        check_int("sink_tokens", self.sink_tokens, minimum=0)
        check_int("kv_budget_tokens", self.kv_budget_tokens, minimum=1)
        check_int("points", self.points, minimum=2)
        layers = get_model(self.model).num_layers
        check_int("global_every", self.global_every, minimum=1, maximum=layers)
        if self.window_tokens > self.context_tokens:
            raise ValueError(f"window_tokens ({self.window_tokens:,}) is longer than the context "
                             f"({self.context_tokens:,} tokens): a window keeps part of the context")


@dataclass(frozen=True)
class LongContextResult:
    """Per method (keys of METHODS): the cache, a decode step and a prefill, at the chosen
    context and along the sweep of contexts."""

    params: LongContextParams
    contexts: np.ndarray                      # the sweep's contexts (tokens)
    kv_bytes_per_seq: dict                    # method -> bytes of one sequence's cache at params.context_tokens
    kv_bytes_curve: dict                      # method -> (contexts,) bytes per sequence
    decode_step_s: dict                       # method -> one decode step of the batch at params.context_tokens
    decode_attention_s: dict                  # method -> the attention kernels' share of that step (all layers)
    decode_curve_s: dict                      # method -> (contexts,) decode step
    prefill_s: dict                           # method -> prefill of a params.context_tokens prompt
    prefill_attention_s: dict                 # method -> the attention kernels' share of that prefill
    prefill_curve_s: dict                     # method -> (contexts,) prefill of a prompt that long
    weight_bytes: float                       # bytes of weights one decode step reads
    kv_room_bytes: float                      # room for the cache on the GPU (sim.kv.kv_budget_bytes)
    context_kv_equals_weights: float          # context where full attention's KV reads equal the weights
    roofline_s: dict                          # decode step at params.context_tokens, at peak rates, full attention:
                                              # "weights", "kv" (bytes / bandwidth), "math" (attention FLOPs / peak)
    longest_fit: dict                         # method -> the longest context (whole tokens) whose caches fit in
                                              # kv_room_bytes: inf if bounded and fitting at any length, 0 if none
    model: str                                # display names, for the figure's notes
    gpu: str
    num_layers: int
    global_layers: int                        # layers "hybrid" keeps at full attention
    calibration_note: str

    def fits(self, method: str, context_tokens: Optional[float] = None) -> bool:
        """Whether the batch's caches fit in the room left on the GPU."""
        c = self.params.context_tokens if context_tokens is None else context_tokens
        per = self.kv_bytes_per_seq[method] if context_tokens is None else \
            float(np.interp(c, self.contexts, self.kv_bytes_curve[method]))
        return per * self.params.batch <= self.kv_room_bytes


def layer_groups(method: str, num_layers: int, p: LongContextParams) -> list[tuple[int, Optional[int]]]:
    """(layers, tokens each keeps; None: all) of each group of layers that attend alike.

    >>> layer_groups("hybrid", 32, LongContextParams(global_every=6, window_tokens=1024))
    [(5, None), (27, 1024)]
    """
    check_choice("method", method, METHODS)
    if method in ("full", "fp8"):
        return [(num_layers, None)]
    if method == "window":
        return [(num_layers, p.window_tokens)]
    if method == "sinks":
        return [(num_layers, p.window_tokens + p.sink_tokens)]
    if method == "evict":
        return [(num_layers, p.kv_budget_tokens)]
    globals_ = num_layers // p.global_every           # layers N, 2N, ...: full attention
    return [(globals_, None), (num_layers - globals_, p.window_tokens)]


def kept(context, keep: Optional[int]):
    """Tokens a layer keeps (and reads) at `context` tokens: all, or at most `keep`."""
    return context if keep is None else np.minimum(context, keep)


def pairs_up_to(position, keep: Optional[int]):
    """(query, key) pairs scored by the first `position` tokens of a prompt when each
    attends to itself and to at most `keep` tokens in all (None: every earlier token):
    sum over i = 1..position of min(i, keep).

    >>> int(pairs_up_to(4, None)), int(pairs_up_to(4, 2))          # 1+2+3+4, 1+2+2+2
    (10, 7)
    """
    x = np.asarray(position, dtype=np.float64)
    full = x * (x + 1) / 2
    if keep is None:
        return full
    w = float(keep)
    return np.where(x <= w, full, w * (w + 1) / 2 + (x - w) * w)


def _prefill_s(cost: StepCost, groups: list, num_layers: int, prompts: np.ndarray,
               evict_after_prefill: bool) -> tuple[np.ndarray, np.ndarray]:
    """(prefill seconds, attention seconds) of each prompt length (`chunked_prefill_s`)."""
    if evict_after_prefill:                  # the prompt is attended whole; its cache is cut after
        groups = [(num_layers, None)]
    return chunked_prefill_s(cost, groups, prompts)


def chunked_prefill_s(cost: StepCost, groups: list, new_tokens, cached_tokens=0,
                      chunk_tokens: int = PREFILL_CHUNK_TOKENS,
                      cuda_graphs: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(prefill seconds, attention seconds) of `new_tokens` prompt tokens of one sequence
    that come after `cached_tokens` already in its cache (arrays of requests, element by
    element), run alone in chunks of `chunk_tokens` tokens, each chunk attending to the
    cache before it, the output head on the last token only; `groups` as `layer_groups`
    gives them ([(layers, None)]: full attention). `cuda_graphs` charges each step one
    launch instead of one per kernel.

    >>> c = step_cost("llama-3.1-8b", "H100-SXM", Precision())
    >>> t, _ = chunked_prefill_s(c, [(32, None)], [512, 512], [0, 4096])
    >>> bool(t[1] > t[0]), float(t[0]) == c.uniform_time_s(1, 512, 0, cuda_graphs=False)
    (True, True)
    """
    num_layers = sum(layers for layers, _ in groups)
    chunk = chunk_tokens
    prompts = np.asarray(new_tokens, dtype=np.int64).reshape(-1)
    cached = np.broadcast_to(np.asarray(cached_tokens, dtype=np.int64), prompts.shape)
    full_chunks = (prompts - 1) // chunk           # chunks before the last one (each `chunk` tokens)
    last = prompts - full_chunks * chunk           # the last chunk's tokens (1..chunk)
    # every chunk of every prompt: its start position and size
    counts = (full_chunks + 1).astype(np.intp)    # (repeat counts in the platform's index type: 32 bits in the browser)
    owner = np.repeat(np.arange(prompts.size), counts)
    index = np.arange(owner.size) - np.repeat(np.cumsum(counts) - counts, counts)
    start = cached[owner] + index * chunk
    size = np.where(index < full_chunks[owner], chunk, last[owner])
    attn = np.zeros(owner.size)
    for layers, keep in groups:
        pairs = pairs_up_to(start + size, keep) - pairs_up_to(start, keep)
        attn += layers * cost.attention_layer_s(size, pairs, size + kept(start, keep))
    attention = np.bincount(owner, weights=attn, minlength=prompts.size)
    is_last = index == full_chunks[owner]
    steps = np.zeros(owner.size)
    for logits, on in ((0, ~is_last), (1, is_last)):     # the output head runs on the last chunk only
        if on.any():                                       # (each layer's attention: the mean layer's)
            steps[on] = cost.step_with_attention_s(size[on], logits, attn[on] / num_layers, cuda_graphs=cuda_graphs)
    total = np.bincount(owner, weights=steps, minlength=prompts.size)
    return total, attention


def full_prefill_s(cost: StepCost, num_layers: int, prompt_tokens) -> np.ndarray:
    """Prefill seconds of whole prompts (an array, element by element) of a model with full
    attention in all `num_layers` layers, nothing cached: `chunked_prefill_s`'s first part.

    >>> c = step_cost("llama-3.1-8b", "H100-SXM", Precision())
    >>> float(full_prefill_s(c, 32, [512])[0]) == c.uniform_time_s(1, 512, 0, cuda_graphs=False)
    True
    """
    return chunked_prefill_s(cost, [(num_layers, None)], prompt_tokens)[0]


def _decode_s(cost: StepCost, groups: list, num_layers: int, batch: int,
              contexts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(step seconds, attention seconds) of one decode step of `batch` sequences at each
    context (CUDA graphs replayed, as engines decode)."""
    contexts = np.asarray(contexts, dtype=np.int64)
    attn = np.zeros(contexts.size)
    for layers, keep in groups:
        k = kept(contexts, keep)
        attn += layers * cost.attention_layer_s(batch, batch * (k + 1), batch * (k + 1))
    return cost.step_with_attention_s(batch, batch, attn / num_layers, cuda_graphs=True), attn


def longest_fitting_context(groups: list, row_bytes: float, batch: int, room_bytes: float) -> float:
    """The longest whole context whose caches (`batch` sequences, layer `groups` as
    `layer_groups` gives them, `row_bytes` per token per layer) fit in `room_bytes`.

    >>> longest_fitting_context([(32, None)], 2 ** 17 / 32, 1, 2 ** 30)       # 1 GiB at 128 KiB a token
    8192.0
    >>> longest_fitting_context([(32, 4096)], 2 ** 17 / 32, 1, 2 ** 30)       # a window: any length fits
    inf
    """
    def need(c: int) -> float:
        return batch * row_bytes * sum(layers * (c if keep is None else min(c, keep)) for layers, keep in groups)

    if need(1) > room_bytes:
        return 0.0
    far = 2 ** 62
    if need(far) <= room_bytes:
        return float("inf")
    lo, hi = 1, far              # need(lo) fits, need(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if need(mid) <= room_bytes else (lo, mid)
    return float(lo)


@dataclass(frozen=True)
class ParallelPrefill:
    """One prompt's prefill over `gpus` GPUs of one server, two ways."""

    gpus: int
    context_parallel_s: float        # ring attention: each GPU a balanced piece of the prompt
    tensor_parallel_s: float         # sim.parallel.tensor_parallel_prefill_s
    exchange_bytes_per_layer: float  # K and V each GPU receives per layer around the ring
    exchange_s_per_layer: float      # their time over the GPU's link, one way
    attention_s_per_layer: float     # one GPU's attention per layer, which the exchange overlaps


def parallel_prefill(model: str, gpu: str, prompt_tokens: int, gpus: int,
                     calibration: Optional[Calibration] = None) -> ParallelPrefill:
    """A prompt's prefill split over `gpus` GPUs by context (ring) parallelism and by tensor
    parallelism.

    Context parallelism (Ring Attention [RINGATTN]): each GPU holds 1/N of the prompt's
    tokens and runs every layer's linear layers on them; for attention, the K and V blocks
    travel around a ring of the N GPUs, each GPU scoring its queries against every block
    as it passes, the transfer of the next block overlapped with the scoring of this one.
    A layer takes the longer of its attention and its exchange. The causal work is assumed
    balanced across the GPUs (each holds pieces from both ends of the prompt), 1/N of the
    pairs each. Tensor parallelism: `sim.parallel.tensor_parallel_prefill_s` (heads and
    matrices split, two all-reduces of the activations per layer). Both launch eagerly.

    >>> r = parallel_prefill("llama-3.1-8b", "H100-SXM", 131072, 1)
    >>> r.context_parallel_s == r.tensor_parallel_s, r.exchange_bytes_per_layer
    (True, 0.0)
    """
    from sim.parallel import ALLREDUCE_LATENCY_S, PCIE_GEN4_X16_BYTES_PER_S, tensor_parallel_prefill_s

    check_int("prompt_tokens", prompt_tokens, minimum=1, maximum=CHECKS_CONTEXT_MAX)
    check_int("gpus", gpus, minimum=1, maximum=64)
    cost = step_cost(model, gpu, Precision(), calibration)
    if gpus == 1:
        t = tensor_parallel_prefill_s(model, gpu, prompt_tokens, 1, calibration=calibration)
        attn = float(cost.attention_layer_s(prompt_tokens, int(pairs_up_to(prompt_tokens, None)), prompt_tokens))
        return ParallelPrefill(1, t, t, 0.0, 0.0, attn)
    m, g = cost.model, cost.gpu
    shard = -(-prompt_tokens // gpus)
    attn = float(cost.attention_layer_s(shard, int(round(float(pairs_up_to(prompt_tokens, None)) / gpus)),
                                        prompt_tokens))
    row = 2.0 * m.num_kv_heads * m.head_dim * cost.precision.kv_bytes
    exchange = (gpus - 1) * shard * row
    link = g.nvlink_bytes_per_s_per_direction or PCIE_GEN4_X16_BYTES_PER_S
    exchange_s = exchange / link + (gpus - 1) * ALLREDUCE_LATENCY_S
    cp = float(cost.step_with_attention_s(shard, 1, max(attn, exchange_s), cuda_graphs=False))
    tp = tensor_parallel_prefill_s(model, gpu, prompt_tokens, gpus, calibration=calibration)
    return ParallelPrefill(gpus, cp, tp, exchange, exchange_s, attn)


def sweep_contexts(points: int) -> np.ndarray:
    """`points` contexts from CONTEXT_MIN to CONTEXT_MAX, log-spaced, whole tokens."""
    return np.unique(np.round(np.geomspace(CONTEXT_MIN, CONTEXT_MAX, points)).astype(np.int64))


def long_context(params: LongContextParams = LongContextParams(),
                 calibration: Optional[Calibration] = None) -> LongContextResult:
    """Cache bytes, decode step and prefill per method, at the chosen context and along 1K-1M."""
    p = params
    m = get_model(p.model)
    gpu = get_gpu(p.gpu)
    L = m.num_layers
    contexts = sweep_contexts(p.points)
    chosen = np.array([p.context_tokens])
    costs = {dtype: step_cost(p.model, p.gpu, Precision(kv_dtype=dtype), calibration) for dtype in ("bf16", "fp8")}
    row = {dtype: 2.0 * m.num_kv_heads * m.head_dim * c.precision.kv_bytes for dtype, c in costs.items()}
    out = {k: {} for k in ("kv", "kv_curve", "dec", "dec_attn", "dec_curve", "pre", "pre_attn", "pre_curve")}
    for method in METHODS:
        dtype = "fp8" if method == "fp8" else "bf16"
        cost, groups = costs[dtype], layer_groups(method, L, p)
        kv = lambda c: sum(layers * kept(c, keep) for layers, keep in groups) * row[dtype]   # noqa: E731
        out["kv"][method] = float(kv(p.context_tokens))
        out["kv_curve"][method] = kv(contexts).astype(float)
        steps, attn = _decode_s(cost, groups, L, p.batch, np.concatenate([chosen, contexts]))
        out["dec"][method], out["dec_attn"][method], out["dec_curve"][method] = float(steps[0]), float(attn[0]), steps[1:]
        pre, pre_attn = _prefill_s(cost, groups, L, np.concatenate([chosen, contexts]), method == "evict")
        out["pre"][method], out["pre_attn"][method], out["pre_curve"][method] = float(pre[0]), float(pre_attn[0]), pre[1:]
    precision = Precision()
    room = float(kv_budget_bytes(m, gpu, precision))
    longest = {method: longest_fitting_context(layer_groups(method, L, p), row["fp8" if method == "fp8" else "bf16"],
                                               p.batch, room) for method in METHODS}
    w = decode_weight_bytes(m, precision, p.batch)
    kv_read = p.batch * p.context_tokens * L * row["bf16"]
    attention_flops = 4.0 * m.num_heads * m.head_dim * p.batch * (p.context_tokens + 1) * L
    roofline = {"weights": w / gpu.hbm_bandwidth_bytes_per_s, "kv": kv_read / gpu.hbm_bandwidth_bytes_per_s,
                "math": attention_flops / gpu.peak_flops("bf16")}
    return LongContextResult(p, contexts, out["kv"], out["kv_curve"], out["dec"], out["dec_attn"], out["dec_curve"],
                             out["pre"], out["pre_attn"], out["pre_curve"], w, room,
                             context_where_kv_reads_equal_weights(m, p.batch, precision), roofline, longest,
                             m.display_name, gpu.display_name, L, layer_groups("hybrid", L, p)[0][0],
                             costs["bf16"].calibration.note)
