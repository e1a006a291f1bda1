"""One whole forward step: the sum of its kernels, how their launches add up, and fast step times.

`forward_pass` costs every op of `sim.ops` for one `Batch` and adds what the launches
cost. Launches are asynchronous. Eagerly, the host issues one kernel every
`HOST_DISPATCH_S_PER_KERNEL` (Python, framework dispatch, the launch call) while the GPU
works through the queue; a kernel starts when it has been issued and the one before it
has finished. Kernels longer than the dispatch hide the host's work; runs of shorter ones
leave the GPU waiting (`eager_step_time_s`). With `cuda_graphs=True` the host launches the
whole step once and the kernels run back to back: one launch plus the busy time (R2).
`StepCost` gives the same step times for many batches quickly (schedulers, sweeps).

>>> f = decode_step("llama-3.1-8b", "H100-SXM", 1, 1024)
>>> f.bound, f.kernels      # 32 layers x 9 kernels + embed, final norm, head, sampler
('memory', 292)
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Sequence

import numpy as np

from sim.batch import Batch, Precision
from sim.checks import check_int
from sim.hardware import GPU
from sim.hardware import resolve as resolve_gpu
from sim.kernel_model import Calibration
from sim.models import ModelConfig, parameter_breakdown
from sim.models import resolve as resolve_model
from sim.ops import (MODEL_LEVEL_OPS, NORM_WEIGHT_BYTES, GpuLike, ModelLike, attention_spec, calibration_for,
                     fixed_specs, logit_specs, spec_time_s, to_op, token_specs)

HOST_DISPATCH_S_PER_KERNEL = 10e-6   # assumed: host time to issue one kernel in an eager forward pass
                                     # (Python, framework dispatch and cudaLaunchKernel); not from a trace
SHORT_RUN_STEPS = 12   # StepCost.decode_run_s costs a run up to this long step by step (quicker than numpy there)


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
    vector = any(isinstance(b, np.ndarray) for part in (pre, layer, post) for b in part)
    top = np.maximum if vector else max     # plain numbers: the same arithmetic, without numpy's cost per call
    lag = 0.0                     # how far the GPU's finish trails the host's latest issue
    for b in pre:
        lag = top(lag - d, 0.0) + b
    done = 0
    while done < layers:
        start, kept_up = lag, True
        for b in layer:
            kept_up = kept_up & (lag >= d)       # the GPU has not idled before a kernel of this layer
            lag = top(lag - d, 0.0) + b
        done += 1
        # a layer that ended where it began repeats forever; one in which the GPU never waited
        # and that ended later repeats its growth; either way the rest follows in closed form
        repeats = (lag == start) | (kept_up & (lag >= start))
        if np.all(repeats) if vector else repeats:
            lag = lag + (layers - done) * (lag - start)
            break
    for b in post:
        lag = top(lag - d, 0.0) + b
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
    cal = calibration_for(g, calibration)
    specs = fixed_specs(m, p, batch.tokens, batch.logits)
    specs.insert(3, attention_spec(m, p, batch.tokens, batch.attention_pairs(), batch.kv_tokens_read()))
    ops = [to_op(cal, s, p.act_bytes) for s in specs]
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
class StepSummary:
    """Totals of a step (arrays when the step sizes are arrays)."""

    time_s: np.ndarray
    launch_s: np.ndarray       # time beyond the kernels' busy time (graph launch or exposed dispatch)
    busy_s: dict               # kind -> busy seconds
    weight_bytes: np.ndarray
    kv_bytes: np.ndarray
    gemm_compute_s: np.ndarray
    gemm_memory_s: np.ndarray


def summarise(m: ModelConfig, p: Precision, cal: Calibration, tokens, logits, pairs, kv_read,
               cuda_graphs: bool) -> StepSummary:
    """Step totals without building `Op` objects, vectorised over arrays of step sizes (logits >= 1)."""
    specs = token_specs(m, p, tokens)
    specs = specs[:3] + [attention_spec(m, p, tokens, pairs, kv_read)] + specs[3:] + logit_specs(m, p, logits)
    launch = cal.launch_overhead_s
    zero = np.zeros(np.shape(tokens))
    busy = {"gemm": zero.copy(), "attention": zero.copy(), "elementwise": zero.copy()}
    wbytes, kvbytes, g_comp, g_mem = zero.copy(), zero.copy(), zero.copy(), zero.copy()
    bw = cal.bandwidth_bytes_per_s
    each = []
    for sp in specs:
        each.append(np.maximum(np.asarray(spec_time_s(cal, sp, p.act_bytes)) - launch, 0.0))
        busy[sp.kind] = busy[sp.kind] + sp.count * each[-1]
        wbytes = wbytes + sp.count * sp.weight_bytes
        kvbytes = kvbytes + sp.count * sp.kv_bytes
        if sp.kind == "gemm":
            g_comp = g_comp + sp.count * sp.flops / cal.flops(sp.dtype)
            g_mem = g_mem + sp.count * (sp.weight_bytes + sp.act_bytes) / bw
    busy_total = busy["gemm"] + busy["attention"] + busy["elementwise"]
    time_s = launched_step_time_s(each, specs, m.num_layers, launch, cuda_graphs) + zero
    return StepSummary(time_s, time_s - busy_total, busy, wbytes, kvbytes, g_comp, g_mem)


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
    cal = calibration_for(g, calibration)
    n = np.asarray(prompt_tokens, dtype=np.int64)
    if n.ndim != 1 or n.size == 0 or np.any(n < 1):
        raise ValueError("prompt_tokens must be a non-empty 1-D array of lengths >= 1")
    sm = summarise(m, p, cal, n, np.ones_like(n), n * (n + 1) // 2, n, cuda_graphs=False)
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
        self.calibration = calibration_for(self.gpu, calibration)
        self.cuda_graphs = cuda_graphs
        # memoised per step size: (busy seconds of all instances, busy seconds of one instance of each op)
        self._tokens: dict = {}   # tokens -> the token-dependent ops
        self._logits: dict = {0: (0.0, ())}   # logits rows -> head + sampler
        per_token = token_specs(self.model, self.precision, 1)
        # kernel order of a step, for eager timing: attention is the fourth op of each layer
        self._order = per_token[:3] + [attention_spec(self.model, self.precision, 1, 1, 1)] + per_token[3:]
        self._logit_order = logit_specs(self.model, self.precision, 1)

    def _busy(self, specs: list, n: int) -> tuple:
        """(total busy seconds (n,), per-instance busy seconds of each spec (specs, n)) for n step sizes."""
        launch = self.calibration.launch_overhead_s
        each = np.array([np.broadcast_to(np.maximum(np.asarray(
            spec_time_s(self.calibration, s, self.precision.act_bytes)) - launch, 0.0), (n,)) for s in specs])
        # summed spec by spec, so that a step size's total is the same number whichever other
        # sizes were costed with it (a matrix product's rounding depends on its shape, and the
        # memo keeps these totals from call to call: `step_cost`)
        total = np.zeros(n)
        for s, row in zip(specs, each):
            total += s.count * row
        return total, each

    def _memo(self, memo: dict, sizes, make) -> None:
        # (membership in the dict itself: np.isin against its keys made a list of thousands
        # of them on every call, most of the cost of a call that finds them all there)
        n = np.array([k for k in np.unique(np.asarray(sizes, dtype=np.int64)).tolist() if k >= 1 and k not in memo],
                     dtype=np.int64)
        if n.size:
            total, each = self._busy(make(n), n.size)
            for j, k in enumerate(n.tolist()):
                memo[k] = (float(total[j]), tuple(each[:, j].tolist()))

    def prime(self, tokens=(), logits=()) -> None:
        """Cost these token counts and logits row counts in one vectorised pass each."""
        self._memo(self._tokens, tokens, lambda n: token_specs(self.model, self.precision, n))
        self._memo(self._logits, logits, lambda n: logit_specs(self.model, self.precision, n))

    def _token_entry(self, tokens: int) -> tuple:
        if tokens not in self._tokens:
            self._memo(self._tokens, [tokens], lambda n: token_specs(self.model, self.precision, n))
        return self._tokens[tokens]

    def _logit_entry(self, logits: int) -> tuple:
        if logits not in self._logits:
            self._memo(self._logits, [logits], lambda n: logit_specs(self.model, self.precision, n))
        return self._logits[logits]

    def _attention_busy_s(self, tokens: int, pairs: int, kv_read: int) -> float:
        """Busy seconds of ONE layer's attention kernel."""
        s = attention_spec(self.model, self.precision, tokens, pairs, kv_read)
        cal = self.calibration
        return max(cal.attention_time_s(s.flops, s.act_bytes + s.kv_bytes, s.dtype) - cal.launch_overhead_s, 0.0)

    def _attention_busy_each_s(self, tokens: int, pairs: np.ndarray, kv_read: np.ndarray) -> np.ndarray:
        """`_attention_busy_s` for arrays of step sizes, element by element the same numbers."""
        s = attention_spec(self.model, self.precision, tokens, pairs, kv_read)
        cal = self.calibration
        return np.maximum(cal.attention_times_s(s.flops, s.act_bytes + s.kv_bytes, s.dtype) - cal.launch_overhead_s,
                          0.0)

    def _graph_step_s(self, tok_total: float, log_total: float, attn):
        """A graph-replayed step: one launch, then every kernel's busy time back to back
        (`attn`: one layer's attention, a float or an array of them)."""
        return tok_total + log_total + self.model.num_layers * attn + self.calibration.launch_overhead_s

    def attention_layer_s(self, tokens, pairs, kv_read):
        """Busy seconds of one layer's attention kernel for a step of `tokens` new tokens that
        scores `pairs` (query, key) pairs and reads `kv_read` cached-plus-new tokens' K and V
        (numbers, or arrays of them element by element): the part of a step that a
        sliding window, an evicted cache or a hybrid of local and global layers changes."""
        if np.ndim(tokens) == 0 and np.ndim(pairs) == 0 and np.ndim(kv_read) == 0:
            return self._attention_busy_s(int(tokens), int(pairs), int(kv_read))
        return self._attention_busy_each_s(np.asarray(tokens), np.asarray(pairs), np.asarray(kv_read))

    def step_with_attention_s(self, tokens, logits: int, attention_s, cuda_graphs: Optional[bool] = None):
        """Step time of `tokens` new tokens (`logits` output rows) whose layers' attention
        kernels take `attention_s` busy seconds each on average (`attention_layer_s`, averaged
        over layers that attend differently). `tokens` and `attention_s` may be arrays of
        steps, element by element. Equals `time_s` when every layer attends alike; launched
        eagerly, a layer whose attention is shorter than a launch is counted as the launch
        (exact when every layer's attention is longer, as at long contexts)."""
        if np.ndim(tokens) == 0 and np.ndim(attention_s) == 0:
            return self._step_s(int(tokens), logits, float(attention_s), cuda_graphs)
        tokens, attn = np.broadcast_arrays(np.asarray(tokens, dtype=np.int64), np.asarray(attention_s, dtype=float))
        sizes, at = np.unique(tokens, return_inverse=True)
        self.prime(tokens=sizes, logits=[logits])
        entries = [self._tokens[n] for n in sizes.tolist()]
        tok_total = np.array([e[0] for e in entries])[at].reshape(tokens.shape)
        tok_each = np.array([e[1] for e in entries]).T[:, at].reshape((-1, *tokens.shape))   # (ops, *steps)
        return np.broadcast_to(self._assembled_s(tok_total, tok_each, logits, attn, cuda_graphs), attn.shape).astype(float)

    def _total(self, tokens: int, logits: int, pairs: int, kv_read: int, cuda_graphs: Optional[bool]) -> float:
        return self._step_s(tokens, logits, self._attention_busy_s(tokens, pairs, kv_read), cuda_graphs)

    def _step_s(self, tokens: int, logits: int, attn: float, cuda_graphs: Optional[bool]) -> float:
        tok_total, tok_each = self._token_entry(tokens)
        return float(self._assembled_s(tok_total, tok_each, logits, attn, cuda_graphs))

    def _assembled_s(self, tok_total, tok_each, logits: int, attn, cuda_graphs: Optional[bool]):
        """A step's time from its token-sized kernels (`tok_total`, and `tok_each` one busy
        time per op) and one layer's attention `attn`: floats, or arrays of steps element by
        element (`tok_each` then has the ops first)."""
        log_total, log_each = self._logit_entry(logits)
        if self.cuda_graphs if cuda_graphs is None else cuda_graphs:
            return self._graph_step_s(tok_total, log_total, attn)
        each = list(tok_each[:3]) + [attn] + list(tok_each[3:]) + list(log_each)
        specs = self._order + (self._logit_order if logits else [])
        return launched_step_time_s(each, specs, self.model.num_layers, 0.0, cuda_graphs=False)

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
        if self.cuda_graphs:     # one launch per step: every context at once, as _total adds it up
            if batch < 1 or pts.min() < 0:
                raise ValueError(f"need seqs >= 1, new_tokens >= 1, context_tokens >= 0; got "
                                 f"{batch}, 1, {int(pts.min())}")
            tok_total, _ = self._token_entry(batch)
            log_total, _ = self._logit_entry(batch)
            vals = self._graph_step_s(tok_total, log_total,
                                      self._attention_busy_each_s(batch, batch * (pts + 1), batch * (pts + 1)))
        else:
            vals = np.array([self.uniform_time_s(batch, 1, int(c)) for c in pts])
        if pts is ctx:
            return vals
        return np.interp(ctx, pts, vals)

    def decode_run_s(self, seqs: int, context_total: int, steps: int, cuda_graphs: Optional[bool] = None,
                     grows: Optional[int] = None) -> np.ndarray:
        """Times of `steps` consecutive decode steps of the same `seqs` sequences, which hold
        `context_total` cached tokens together at the first step and `grows` more (default
        `seqs`: one each) per step (a static batch's finished members pad without growing).

        Step j is `time_s([1] * seqs, contexts + j)` to the last bit: a decode step's cost
        depends on the contexts only through their sum (the attention kernel's pairs and
        KV reads), so graph-replayed steps are costed in one vectorised pass (a run of up to
        `SHORT_RUN_STEPS` step by step, where numpy's per-call cost outweighs the loop).

        >>> cost = StepCost("llama-3.1-8b", "H100-SXM", cuda_graphs=True)
        >>> run = cost.decode_run_s(2, 300, 3)
        >>> [float(t) for t in run] == [cost.time_s([1, 1], [100 + j, 200 + j]) for j in range(3)]
        True
        """
        grows = seqs if grows is None else grows
        if seqs < 1 or context_total < 0 or steps < 0 or not 0 <= grows <= seqs:
            raise ValueError(f"need seqs >= 1, context_total >= 0, steps >= 0, 0 <= grows <= seqs; got {seqs}, "
                             f"{context_total}, {steps}, {grows}")
        reads = context_total + seqs + grows * np.arange(steps, dtype=np.int64)  # pairs = KV tokens read = sum(c + 1)
        if (self.cuda_graphs if cuda_graphs is None else cuda_graphs) and steps > SHORT_RUN_STEPS:
            tok_total, _ = self._token_entry(seqs)
            log_total, _ = self._logit_entry(seqs)
            return self._graph_step_s(tok_total, log_total, self._attention_busy_each_s(seqs, reads, reads))
        return np.array([self._total(seqs, seqs, k, k, cuda_graphs) for k in reads.tolist()])


@lru_cache(maxsize=32)
def _shipped_step_cost(model: str, gpu: str, precision: Precision, cuda_graphs: bool) -> StepCost:
    return StepCost(model, gpu, precision, None, cuda_graphs)


def step_cost(model: ModelLike, gpu: GpuLike, precision: Optional[Precision] = None,
              calibration: Optional[Calibration] = None, cuda_graphs: bool = False) -> StepCost:
    """A `StepCost`, the same one on every call that costs a shipped calibration (model and GPU
    given by name, `calibration` None): its memo of step sizes then carries over from call to
    call, as a figure recomputes the same model on the same GPU on every control move.

    >>> step_cost("llama-3.1-8b", "H100-SXM") is step_cost("llama-3.1-8b", "H100-SXM")
    True
    """
    precision = precision or Precision()
    if calibration is None and isinstance(model, str) and isinstance(gpu, str):
        return _shipped_step_cost(model, gpu, precision, bool(cuda_graphs))
    return StepCost(model, gpu, precision, calibration, cuda_graphs)


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
    return float(sum(s.count * s.weight_bytes for s in fixed_specs(m, precision or Precision(), seqs, seqs)))


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
