"""Spreading a model over GPUs: tensor (TP), pipeline (PP) and data (DP) parallelism.

- TP splits every weight matrix (and the KV heads) across the GPUs of one server: each
  GPU reads 1/TP of the weights per step, so bandwidth adds up, but every layer ends in
  two all-reduces of the activations (after attention and after the MLP, Megatron-LM,
  R33) over NVLink.
- PP gives each GPU a contiguous range of layers: it adds memory but a token still
  visits every stage in turn, so one user's step is not faster; stages talk over the
  network between servers (R32, R34).
- DP copies the whole deployment: more throughput, no more room per copy.
- EP (mixture-of-experts models) places whole experts on different GPUs instead of slicing
  every expert: each GPU holds experts / EP of them, and a step touches only the experts
  its tokens were routed to.

Memory per GPU follows the KV-budget convention of `sim.kv.kv_budget_bytes`: the engine
may use `memory_utilisation` of the driver-reported memory (vLLM's 0.9), less an assumed
activation reserve; weights and cache must fit in what is left.

Ring all-reduce of `m` bytes over `tp` GPUs: latency + 2 (tp - 1) / tp x m / link
bandwidth (one direction); where the GPU's calibration has a measured all-reduce (fitted
to NCCL all-reduce timings inside one server, `sim.calibration.AllReduceParams`), that
replaces the assumed latency and link rate.

>>> plan_parallel(ParallelParams(model="llama-3.1-405b", weight_dtype="fp8")).gpus
8
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from sim.batch import Batch, Precision
from sim.calibration import for_gpu
from sim.checks import check_int, check_non_negative, check_positive, check_range, checked_params
from sim.dtypes import bytes_per_elem
from sim.forward import forward_pass, launched_step_time_s, stored_weight_bytes
from sim.hardware import resolve as resolve_gpu
from sim.kernel_model import Calibration
from sim.kv import ACTIVATION_RESERVE_BYTES, VLLM_GPU_MEMORY_UTILIZATION, kv_cache_bytes
from sim.models import parameter_breakdown
from sim.models import resolve as resolve_model
from sim.ops import expected_experts_touched

PCIE_GEN4_X16_BYTES_PER_S = 32e9     # PCI-SIG PCIe 4.0: 16 GT/s x 16 lanes ~ 32 GB/s each way (no-NVLink GPUs)
PCIE_GEN5_X16_BYTES_PER_S = 32e9 * 16 / 8 * 128 / 130   # PCIe 5.0: 32 GT/s x 16 lanes, 128b/130b, each way
ALLREDUCE_LATENCY_S = 10e-6          # assumed fixed cost of one small all-reduce (launch + synchronisation)
INTERNODE_BYTES_PER_S = 50e9         # 400 Gb/s InfiniBand NDR per GPU (NVIDIA ConnectX-7), one way
INTERNODE_LATENCY_S = 10e-6          # assumed fixed cost of one stage-to-stage send


def allreduce_time_s(message_bytes: float, tp: int, link_bytes_per_s: float,
                     latency_s: float = ALLREDUCE_LATENCY_S) -> float:
    """Ring all-reduce: latency + 2 (tp - 1) / tp x bytes / one-way link bandwidth; 0 for tp = 1.

    >>> round(allreduce_time_s(450e6, 2, 450e9, 0.0), 6)
    0.001
    """
    check_non_negative("message_bytes", message_bytes)
    check_int("tp", tp, minimum=1)
    check_positive("link_bytes_per_s", link_bytes_per_s)
    if tp == 1:
        return 0.0
    return latency_s + 2.0 * (tp - 1) / tp * message_bytes / link_bytes_per_s


def _allreduce_s(cal: Calibration, message_bytes: float, tp: int, link_bytes_per_s: float) -> float:
    """One all-reduce: the GPU's calibrated collective model where it has one, else the ring model."""
    if cal.allreduce is not None:
        return cal.allreduce.time_s(message_bytes, tp)
    return allreduce_time_s(message_bytes, tp, link_bytes_per_s)


def _tp_busy_each_s(f, m, cal: Calibration, tp: int) -> list[float]:
    """Busy seconds of one instance of each op of forward pass `f` on one GPU of `tp`: GEMMs and
    attention split TP ways (KV heads replicated beyond num_kv_heads), elementwise ops replicated."""
    each = []
    for o in f.ops:
        t = o.time_s
        if o.kind != "elementwise" and tp > 1:
            # the op's own (shape-aware) time, scaled as the calibration scales its split share
            split = (o.act_bytes / tp + o.kv_bytes / min(tp, m.num_kv_heads) if o.kind == "attention"
                     else o.nbytes / tp)
            t *= cal.op_time_s(o.flops / tp, split, o.dtype) / cal.op_time_s(o.flops, o.nbytes, o.dtype)
        each.append(max(t - cal.launch_overhead_s, 0.0))
    return each


def tensor_parallel_prefill_s(model, gpu, prompt_tokens: int, tp: int, precision: Optional[Precision] = None,
                              calibration: Optional[Calibration] = None) -> float:
    """Time of one prompt's prefill split over `tp` GPUs of one server (tensor parallelism).

    Each GPU does 1/TP of every GEMM and attention head (elementwise ops are replicated),
    launches every kernel eagerly, and every layer ends in two all-reduces of the prompt's
    activations (prompt x hidden x activation bytes) over NVLink (R33).

    >>> from sim.forward import prefill_pass
    >>> tensor_parallel_prefill_s("llama-3.1-8b", "H100-SXM", 4096, 1) == prefill_pass(
    ...     "llama-3.1-8b", "H100-SXM", 4096).time_s
    True
    """
    check_int("prompt_tokens", prompt_tokens, minimum=1)
    check_int("tp", tp, minimum=1)
    m, g = resolve_model(model), resolve_gpu(gpu)
    if tp > m.num_heads:
        raise ValueError(f"tp ({tp}) must be <= the model's {m.num_heads} query heads")
    cal = calibration if calibration is not None else for_gpu(g)
    prec = precision or Precision()
    f = forward_pass(m, g, Batch.prefill(prompt_tokens, 1), prec, cal, cuda_graphs=False)
    if tp == 1:
        return f.time_s
    link = g.nvlink_bytes_per_s_per_direction or PCIE_GEN4_X16_BYTES_PER_S
    msg = prompt_tokens * m.hidden_size * bytes_per_elem(prec.act_dtype)
    compute = launched_step_time_s(_tp_busy_each_s(f, m, cal, tp), f.ops, m.num_layers,
                                   cal.launch_overhead_s, cuda_graphs=False)
    return compute + m.num_layers * 2 * _allreduce_s(cal, msg, tp, link)


@checked_params
@dataclass(frozen=True)
class ParallelParams:
    """Controls of the multi-GPU figure."""

    model: str = "llama-3.1-70b"
    gpu: str = "H100-SXM"
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    users: int = 16                     # sequences decoding together
    context_tokens: int = 8192          # tokens each user holds in the cache
    gpus_per_node: int = 8              # TP stays inside one server
    memory_utilisation: float = VLLM_GPU_MEMORY_UTILIZATION  # share of each GPU's memory the engine may use
    reserve_bytes: float = ACTIVATION_RESERVE_BYTES  # per GPU, for activations and workspaces (assumed, as sim.kv)
    data_parallel: int = 1              # copies of the whole deployment
    max_gpus: int = 64
    cuda_graphs: bool = True
    moe_max_tokens: int = 4096          # the experts-touched curve runs over 1 .. this many tokens per step

    LIMITS = {"moe_max_tokens": (2 ** 16, "tokens")}   # a curve of at most 17 points

    def __post_init__(self) -> None:
        bytes_per_elem(self.weight_dtype)
        bytes_per_elem(self.kv_dtype)
        check_int("users", self.users, minimum=1)
        check_int("context_tokens", self.context_tokens, minimum=0)
        check_int("gpus_per_node", self.gpus_per_node, minimum=1)
        check_range("memory_utilisation", self.memory_utilisation, 0.05, 1.0)
        check_non_negative("reserve_bytes", self.reserve_bytes)
        check_int("data_parallel", self.data_parallel, minimum=1)
        check_int("max_gpus", self.max_gpus, minimum=1)
        check_int("moe_max_tokens", self.moe_max_tokens, minimum=1)


@dataclass(frozen=True)
class ParallelLayout:
    """One TP x PP layout and what it costs."""

    tp: int
    pp: int
    gpus: int                           # tp x pp (one copy)
    weight_bytes_per_gpu: float
    kv_bytes_per_gpu: float
    reserve_bytes_per_gpu: float        # the activation reserve
    used_bytes_per_gpu: float           # weights + KV + reserve
    fits: bool                          # used <= memory_utilisation x device memory
    step_time_s: float                  # one decode step for all users
    comm_time_s: float                  # all-reduces and stage hand-offs in that step
    tokens_per_s_per_user: float
    tokens_per_s_total: float           # one copy


@dataclass(frozen=True)
class ParallelResult:
    """The chosen layout, the alternatives, and the memory picture."""

    model: str
    gpu: str
    device_bytes: float                 # one GPU's memory as the driver reports it
    limit_bytes_per_gpu: float          # memory_utilisation x device_bytes: what weights, KV and reserve may use
    weight_bytes: float                 # whole model at weight_dtype
    kv_bytes: float                     # all users' caches
    min_gpus_by_memory: int             # ceil((weights + KV) / (limit - reserve))
    chosen: Optional[ParallelLayout]    # fewest GPUs that fit (then the largest TP); None if nothing fits
    gpus: int                           # chosen GPUs x data_parallel (0 if nothing fits)
    tokens_per_s_total: float           # chosen throughput x data_parallel
    candidates: list                    # [ParallelLayout] considered, by GPUs then TP
    candidate_gpus: np.ndarray          # (n,)
    candidate_tp: np.ndarray            # (n,)
    candidate_pp: np.ndarray            # (n,)
    candidate_used_bytes_per_gpu: np.ndarray  # (n,)
    candidate_fits: np.ndarray          # (n,) bool
    candidate_step_time_s: np.ndarray   # (n,)
    candidate_comm_time_s: np.ndarray   # (n,)
    candidate_weight_bytes_per_gpu: np.ndarray  # (n,)
    candidate_kv_bytes_per_gpu: np.ndarray      # (n,)
    # mixture of experts (a dense model: 1 expert, always touched)
    total_params: int                   # every stored weight
    active_params: int                  # weights one token uses (MoE: only its routed experts)
    num_experts: int                    # MLP experts per layer
    experts_per_token: int              # top-k
    expert_bytes: float                 # one expert of one layer at weight_dtype
    experts_touched: float              # expected distinct experts per layer in one step of `users` tokens
    expert_parallel: int                # EP degree if the chosen TP group held whole experts (gcd(experts, TP))
    experts_per_gpu: float              # experts / EP
    experts_touched_per_gpu: float      # expected experts one GPU of the EP group reads per layer and step
    moe_tokens: np.ndarray              # (n,) tokens in one step: 1, 2, 4, ... moe_max_tokens
    moe_experts_touched: np.ndarray     # (n,) expected distinct experts per layer at each
    moe_expert_bytes_read: np.ndarray   # (n,) expert weight bytes one step reads, all layers
    calibration_note: str
    routing_note: str                   # the assumption behind the experts-touched numbers


def plan_parallel(params: ParallelParams = ParallelParams(),
                  calibration: Optional[Calibration] = None) -> ParallelResult:
    """Choose TP x PP for a model, dtype, users and context on a GPU type; estimate decode speed.

    Layouts: TP = 1, 2, 4, ... up to a server's GPUs; PP > 1 only with a full server of TP.
    The chosen layout is the one with the fewest GPUs that fits, then the largest TP.
    Memory per GPU = weights / (TP x PP) + KV / (PP x min(TP, KV heads)) + reserve, which
    must stay within memory_utilisation x the device's memory (KV heads are split by TP and
    replicated once TP exceeds them). Step time per GPU:
    every op's FLOPs and bytes split TP ways (elementwise ops replicated), summed over
    all layers (PP does not shorten one token's path), plus 2 all-reduces per layer and
    PP - 1 stage hand-offs.

    For a mixture-of-experts model, the experts one step reads follow from uniform top-k
    routing (an assumption: real routers are not uniform): B tokens touch on average
    E x (1 - (1 - k / E) ** B) distinct experts per layer (`expected_experts_touched`).

    >>> r = plan_parallel()                  # Llama 3.1 70B, bf16, 16 users x 8K on H100
    >>> (r.chosen.tp, r.chosen.pp)
    (4, 1)
    """
    p = params
    m, g = resolve_model(p.model), resolve_gpu(p.gpu)
    cal = calibration if calibration is not None else for_gpu(g)
    prec = Precision(weight_dtype=p.weight_dtype, kv_dtype=p.kv_dtype)
    weights = stored_weight_bytes(m, prec)
    kv_total = float(kv_cache_bytes(m.num_layers, m.num_kv_heads, m.head_dim, p.context_tokens, p.users,
                                    bytes_per_elem(p.kv_dtype)))
    reserve = p.reserve_bytes
    limit = p.memory_utilisation * g.memory_bytes
    if limit <= reserve:
        raise ValueError(f"reserve_bytes ({reserve:.3g}) leaves nothing of memory_utilisation x the "
                         f"{g.display_name}'s memory ({limit:.3g} bytes)")
    f = forward_pass(m, g, Batch.decode(p.users, p.context_tokens), prec, cal, p.cuda_graphs)
    link = g.nvlink_bytes_per_s_per_direction or PCIE_GEN4_X16_BYTES_PER_S
    msg = p.users * m.hidden_size * bytes_per_elem(prec.act_dtype)
    launch = cal.launch_overhead_s
    tps = [t for t in (2 ** i for i in range(int(math.log2(p.gpus_per_node)) + 1)) if t <= m.num_heads]
    layouts = []
    max_tp = tps[-1]
    for tp in tps:
        # PP only once TP fills a server: TP inside a node, PP across nodes (R34)
        for pp in range(1, (m.num_layers if tp == max_tp else 1) + 1):
            if tp * pp > p.max_gpus:
                break
            w_gpu = weights / (tp * pp)
            kv_gpu = kv_total / (pp * min(tp, m.num_kv_heads))
            used = w_gpu + kv_gpu + reserve
            each = _tp_busy_each_s(f, m, cal, tp)
            # one graph launch per stage, or the eager launch queue (launches hide behind longer kernels)
            compute = launched_step_time_s(each, f.ops, m.num_layers, launch * pp, p.cuda_graphs)
            comm = m.num_layers * 2 * _allreduce_s(cal, msg, tp, link) + (pp - 1) * (
                INTERNODE_LATENCY_S + msg / INTERNODE_BYTES_PER_S)
            step = compute + comm
            layouts.append(ParallelLayout(tp=tp, pp=pp, gpus=tp * pp, weight_bytes_per_gpu=w_gpu,
                                          kv_bytes_per_gpu=kv_gpu, reserve_bytes_per_gpu=reserve,
                                          used_bytes_per_gpu=used, fits=used <= limit, step_time_s=step,
                                          comm_time_s=comm, tokens_per_s_per_user=1.0 / step,
                                          tokens_per_s_total=p.users / step))
            if used <= limit:
                break              # more stages would only add hand-offs
    layouts.sort(key=lambda l: (l.gpus, -l.tp))
    fitting = [l for l in layouts if l.fits]
    chosen = fitting[0] if fitting else None
    counts = parameter_breakdown(m)
    E, k = m.num_experts, m.experts_per_token
    expert_bytes = counts.mlp_per_layer / E * bytes_per_elem(p.weight_dtype)
    ep = math.gcd(E, chosen.tp if chosen else 1)
    touched = expected_experts_touched(E, k, p.users) if m.is_moe else 1.0
    tokens = np.unique(np.append(2 ** np.arange(int(math.log2(p.moe_max_tokens)) + 1), p.users))
    curve = (E * (1.0 - (1.0 - k / E) ** tokens.astype(float))) if m.is_moe else np.ones(len(tokens))
    return ParallelResult(
        model=m.display_name, gpu=g.display_name, device_bytes=g.memory_bytes, limit_bytes_per_gpu=limit,
        weight_bytes=weights, kv_bytes=kv_total,
        min_gpus_by_memory=int(math.ceil((weights + kv_total) / (limit - reserve))),
        chosen=chosen, gpus=(chosen.gpus * p.data_parallel) if chosen else 0,
        tokens_per_s_total=(chosen.tokens_per_s_total * p.data_parallel) if chosen else 0.0,
        candidates=layouts, candidate_gpus=np.array([l.gpus for l in layouts]),
        candidate_tp=np.array([l.tp for l in layouts]), candidate_pp=np.array([l.pp for l in layouts]),
        candidate_used_bytes_per_gpu=np.array([l.used_bytes_per_gpu for l in layouts]),
        candidate_fits=np.array([l.fits for l in layouts]),
        candidate_step_time_s=np.array([l.step_time_s for l in layouts]),
        candidate_comm_time_s=np.array([l.comm_time_s for l in layouts]),
        candidate_weight_bytes_per_gpu=np.array([l.weight_bytes_per_gpu for l in layouts]),
        candidate_kv_bytes_per_gpu=np.array([l.kv_bytes_per_gpu for l in layouts]),
        total_params=counts.total, active_params=counts.active, num_experts=E, experts_per_token=k,
        expert_bytes=expert_bytes, experts_touched=touched, expert_parallel=ep, experts_per_gpu=E / ep,
        experts_touched_per_gpu=touched / ep, moe_tokens=tokens, moe_experts_touched=curve,
        moe_expert_bytes_read=curve * expert_bytes * m.num_layers, calibration_note=cal.note,
        routing_note=(f"Experts touched assume uniform top-{k} routing over {E} experts: B tokens touch "
                      f"{E} x (1 - (1 - {k}/{E})^B) distinct experts per layer on average; real routers "
                      "favour some experts, so fewer distinct experts and a busier busiest GPU."
                      if m.is_moe else f"{m.display_name} is dense: every token uses every weight."))
