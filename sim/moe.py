"""Mixture-of-experts models at decode (chapter 21): the weight bytes a step reads as the batch
grows, the batch where the experts' matmuls turn compute-bound, memory per GPU under expert
versus tensor parallelism, the all-to-all a token costs, and what routing skew does to the
busiest GPU.

A step of B tokens routes each token to k of a layer's E routed experts. With routing
probabilities p_e (sum k), the step reads expert e with probability 1 - (1 - p_e)^B; uniform
routing (p_e = k / E) gives sim.ops.expected_experts_touched's closed form, E(1 - (1 - k/E)^B).
Everything else a step reads (attention, the dense layers, shared experts, routers, norms, the
head) it reads once whatever B is. Skew: expert i (from 0) gets a weight (i + 1)^-s (Zipf's
law, s = 0 uniform); p_e is k times its share, capped at 1 (a token picks an expert once)
with the excess handed to the others in proportion.

The shapes are the models' published configurations (MOE_MODELS: each entry's source); the
counts they give match the totals the model cards state (tests/test_sim_moe.py).

>>> r = moe_decode()
>>> r.model, round(r.total_params / 1e9, 1), round(r.active_params / 1e9, 1)    # the embedding table counted
('DeepSeek-V3', 671.0, 37.6)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
import numpy as np

from sim import hardware, models
from sim.checks import check_choice, check_int, check_range, checked_params
from sim.dtypes import bytes_per_elem
from sim.ops import expected_experts_touched
from sim.parallel import INTERNODE_BYTES_PER_S
from sim.roofline import ridge_point


@dataclass(frozen=True)
class MoeModel:
    """Where a mixture-of-experts model's weights sit, in weights (not bytes)."""

    key: str
    display_name: str
    layers: int
    moe_layers: int                  # layers whose MLP is routed experts (the rest dense)
    hidden_size: int
    routed_experts: int              # E, per MoE layer
    experts_per_token: int           # k, routed experts per token
    shared_experts: int              # run for every token (DeepSeek-V3: 1)
    expert_params: int               # one expert's gate, up and down
    attention_params_per_layer: int
    dense_mlp_params_per_layer: int  # the MLP of a layer that is not MoE (0 if none)
    embedding_params: int            # the table (a decode step gathers rows of it)
    other_params: int                # head, norms, routers: read once per step
    stated_total: str                # the model card's totals, as stated
    source: str

    @property
    def routed_params(self) -> int:
        return self.moe_layers * self.routed_experts * self.expert_params

    @property
    def always_read_params(self) -> int:
        """Read by every decode step whatever the batch: all but the routed experts and the table."""
        return (self.layers * self.attention_params_per_layer
                + (self.layers - self.moe_layers) * self.dense_mlp_params_per_layer
                + self.moe_layers * self.shared_experts * self.expert_params + self.other_params)

    @property
    def total_params(self) -> int:
        return self.always_read_params + self.routed_params + self.embedding_params

    def spreads_over(self, gpus: int) -> bool:
        """Expert parallelism over `gpus` GPUs gives each the same number of routed experts, at least one."""
        return gpus <= self.routed_experts and self.routed_experts % gpus == 0

    @property
    def active_params(self) -> int:
        """Used by one token (its k routed experts per layer), the embedding table included."""
        return (self.always_read_params + self.embedding_params
                + self.moe_layers * self.experts_per_token * self.expert_params)


def _gated_mlp(hidden: int, intermediate: int) -> int:
    return 3 * hidden * intermediate


def _gqa(hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
    return hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden


def _mla(hidden: int, heads: int, q_rank: int, kv_rank: int, nope: int, rope: int, v_dim: int) -> int:
    """DeepSeek-V2/V3 multi-head latent attention: q down/up, kv down (latent + decoupled RoPE key), kv up, o."""
    return (hidden * q_rank + q_rank * heads * (nope + rope) + hidden * (kv_rank + rope)
            + kv_rank * heads * (nope + v_dim) + heads * v_dim * hidden)


def _from_catalogue(key: str, stated: str) -> MoeModel:
    m = models.get(key)
    b = models.parameter_breakdown(m)
    return MoeModel(key, m.display_name, m.num_layers, m.num_layers, m.hidden_size, m.num_experts,
                    m.experts_per_token, 0, b.mlp_per_layer // m.num_experts, b.attention_per_layer, 0,
                    b.embedding, b.head + b.norms + b.router, stated, m.source)


DSV3 = dict(hidden=7168, heads=128, q_rank=1536, kv_rank=512, nope=128, rope=64, v_dim=128, layers=61,
            dense_layers=3, vocab=129280)
QWEN3 = dict(hidden=4096, heads=64, kv_heads=4, head_dim=128, layers=94, vocab=151936)

MOE_MODELS: dict[str, MoeModel] = {
    "mixtral-8x7b": _from_catalogue("mixtral-8x7b", "46.7B total, 12.9B active"),
    "qwen3-235b-a22b": MoeModel(
        "qwen3-235b-a22b", "Qwen3-235B-A22B", QWEN3["layers"], QWEN3["layers"], QWEN3["hidden"], 128, 8, 0,
        _gated_mlp(QWEN3["hidden"], 1536),
        _gqa(*(QWEN3[k] for k in ("hidden", "heads", "kv_heads", "head_dim"))), 0, QWEN3["vocab"] * QWEN3["hidden"],
        QWEN3["vocab"] * QWEN3["hidden"] + QWEN3["hidden"]
        + QWEN3["layers"] * (QWEN3["hidden"] * 128 + 2 * QWEN3["hidden"] + 2 * QWEN3["head_dim"]),
        "235B total, 22B active",
        "Qwen Team, Qwen3 Technical Report (arXiv 2505.09388, Table 2); config.json of Qwen/Qwen3-235B-A22B"),
    "deepseek-v3": MoeModel(
        "deepseek-v3", "DeepSeek-V3", DSV3["layers"], DSV3["layers"] - DSV3["dense_layers"], DSV3["hidden"], 256, 8,
        1, _gated_mlp(DSV3["hidden"], 2048),
        _mla(*(DSV3[k] for k in ("hidden", "heads", "q_rank", "kv_rank", "nope", "rope", "v_dim"))),
        _gated_mlp(DSV3["hidden"], 18432), DSV3["vocab"] * DSV3["hidden"],
        DSV3["vocab"] * DSV3["hidden"] + (DSV3["layers"] - DSV3["dense_layers"]) * DSV3["hidden"] * 256
        + DSV3["layers"] * (2 * DSV3["hidden"] + DSV3["q_rank"] + DSV3["kv_rank"]) + DSV3["hidden"],
        "671B total, 37B active (the multi-token-prediction module's 14B not counted)",
        "DeepSeek-AI, DeepSeek-V3 Technical Report (arXiv 2412.19437, sections 2 and 4.2); "
        "config.json of deepseek-ai/DeepSeek-V3"),
}
WEIGHT_FORMATS = {"bf16": "bf16", "fp8": "fp8"}     # weights and activations, as chapter 10 deploys them
COMBINE_BYTES = 2            # the combine all-to-all returns expert outputs in bf16 (as DeepSeek-V3 does)
EP_GPUS = (8, 16, 32, 64, 128, 256)
SKEW_MAX = 3.0
BATCH_MIN, BATCH_MAX = 1, 2 ** 17
GPUS = ("H100-SXM", "H200", "B200")     # the catalogue's GPUs with fp8 tensor cores and NVLink


def routing_probabilities(num_experts: int, experts_per_token: int, skew: float) -> np.ndarray:
    """p_e, the chance one token is routed to expert e (sum k, each at most 1), hottest first.

    >>> routing_probabilities(4, 2, 0.0).tolist()
    [0.5, 0.5, 0.5, 0.5]
    """
    w = (np.arange(num_experts) + 1.0) ** -float(skew)
    p = np.empty(num_experts)
    for capped in range(experts_per_token + 1):        # water-filling: the hottest `capped` at 1
        rest = w[capped:]
        p[:capped] = 1.0
        p[capped:] = (experts_per_token - capped) * rest / rest.sum()
        if capped == num_experts or p[capped] <= 1.0:
            return p
    raise AssertionError("unreachable: k experts at 1 always fit")


def experts_touched(p: np.ndarray, tokens) -> np.ndarray:
    """Expected distinct experts a step of `tokens` tokens reads (tokens may be an array): the
    closed form of sim.ops when routing is uniform, else the sum over experts."""
    t = np.asarray(tokens, dtype=float)
    if np.all(p == p[0]):
        return expected_experts_touched(len(p), float(p.sum()), t)
    return (1.0 - (1.0 - p) ** t[..., None]).sum(axis=-1)


@checked_params
@dataclass(frozen=True)
class MoeParams:
    """A model and its format on a GPU, the routing skew, an EP deployment and a step's batch."""

    model: str = "deepseek-v3"
    gpu: str = "H100-SXM"
    weights: str = "fp8"             # weights and activations: "bf16" or "fp8"
    skew: float = 0.0                # Zipf exponent of expert popularity (0 = uniform)
    ep_gpus: int = 64                # GPUs the routed experts are spread over (expert parallelism)
    batch: int = 4096                # tokens in one decode step across the deployment

    def __post_init__(self) -> None:
        check_choice("model", self.model, MOE_MODELS, "MoE models")
        check_choice("gpu", self.gpu, GPUS, "GPUs")
        check_choice("weights", self.weights, WEIGHT_FORMATS, "formats")
        check_range("skew", self.skew, 0.0, SKEW_MAX)
        check_int("ep_gpus", self.ep_gpus, minimum=1, maximum=EP_GPUS[-1])
        check_int("batch", self.batch, minimum=BATCH_MIN, maximum=BATCH_MAX)
        m = MOE_MODELS[self.model]
        if not m.spreads_over(self.ep_gpus):
            if self.ep_gpus > m.routed_experts:
                raise ValueError(f"{m.display_name} has {m.routed_experts} routed experts a layer: "
                                 f"expert parallelism over {self.ep_gpus} GPUs would leave GPUs with none")
            raise ValueError(f"ep_gpus ({self.ep_gpus}) must divide the {m.routed_experts} routed experts a layer")


@dataclass(frozen=True)
class MoeResult:
    model: str
    total_params: int
    active_params: int
    bytes_per_weight: float
    batches: np.ndarray              # tokens per step, the sweep (log-spaced)
    touched: np.ndarray              # routed experts read per MoE layer, at each batch (expected)
    moe_step_bytes: np.ndarray       # weight bytes a decode step reads, at each batch
    dense_step_bytes: float          # a dense model of the same active parameters
    all_weight_bytes: float          # every weight but the embedding table (the most a step reads)
    moe_intensity: np.ndarray        # FLOP per byte of the routed experts' matmuls, at each batch
    dense_intensity: np.ndarray      # FLOP per byte of a dense matmul, at each batch
    ridge: float                     # the GPU's FLOP per byte in this format
    compute_bound_batch_moe: float   # smallest batch whose routed-expert matmuls reach the ridge (NaN: none)
    compute_bound_batch_dense: float
    touched_at_batch: float          # at params.batch
    step_bytes_at_batch: float
    gpu_memory_bytes: int
    tp_bytes_per_gpu: float          # stored weights over ep_gpus GPUs, split evenly (tensor parallelism)
    ep_bytes_per_gpu: float          # all but the routed experts on each GPU, and its share of the experts
    gpu_load: np.ndarray             # per GPU, routed assignments relative to the mean (EP, round-robin)
    busiest_gpu_load: float
    dispatch_bytes_per_token_layer: float   # leaving a GPU per token per MoE layer (to other GPUs)
    combine_bytes_per_token_layer: float
    a2a_step_s: dict                 # link -> both all-to-alls of one step at params.batch, all MoE layers
    note: str


def _smallest_batch(intensity, ridge: float) -> float:
    """Smallest whole batch whose intensity(batch) reaches the ridge; NaN past BATCH_MAX (intensity rises with batch)."""
    lo, hi = BATCH_MIN, BATCH_MAX
    if intensity(hi) < ridge:
        return math.nan
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if intensity(mid) < ridge else (lo, mid)
    return float(lo)


def moe_decode(params: MoeParams = MoeParams()) -> MoeResult:
    """Weight bytes, intensity, memory per GPU, all-to-all and skew of one MoE decode step."""
    m, g = MOE_MODELS[params.model], hardware.get(params.gpu)
    b = bytes_per_elem(WEIGHT_FORMATS[params.weights])
    p = routing_probabilities(m.routed_experts, m.experts_per_token, params.skew)
    k = m.experts_per_token
    batches = np.unique(np.round(np.geomspace(BATCH_MIN, BATCH_MAX, 121)))
    touched = experts_touched(p, batches)
    always = m.always_read_params * b
    expert_bytes = m.expert_params * b
    moe_bytes = always + m.moe_layers * touched * expert_bytes
    dense = (m.active_params - m.embedding_params) * b
    ridge = ridge_point(g, params.weights)          # fp8 weights and activations on fp8 tensor cores

    def moe_intensity(t):          # 2 FLOP per weight per token routed to it, over the experts' bytes read
        return 2.0 * t * k / (experts_touched(p, t) * b)

    def dense_intensity(t):
        return 2.0 * np.asarray(t, dtype=float) / b

    n = params.ep_gpus
    load = np.array([p[gpu::n].sum() for gpu in range(n)]) / (k / n)     # expert e on GPU e mod n
    stored = m.total_params * b
    dispatch = k * m.hidden_size * b * (n - 1) / n          # a token's k copies, those bound for other GPUs
    combine = k * m.hidden_size * COMBINE_BYTES * (n - 1) / n
    per_gpu_tokens = params.batch / n
    links = {"NVLink": g.nvlink_bytes_per_s_per_direction, "InfiniBand NDR 400 Gb/s": INTERNODE_BYTES_PER_S}
    a2a = {name: per_gpu_tokens * (dispatch + combine) * m.moe_layers / rate for name, rate in links.items()}
    t_at = float(experts_touched(p, params.batch))
    return MoeResult(
        model=m.display_name, total_params=m.total_params, active_params=m.active_params, bytes_per_weight=b,
        batches=batches, touched=touched, moe_step_bytes=moe_bytes, dense_step_bytes=dense,
        all_weight_bytes=(m.total_params - m.embedding_params) * b,
        moe_intensity=moe_intensity(batches), dense_intensity=dense_intensity(batches), ridge=ridge,
        compute_bound_batch_moe=_smallest_batch(lambda t: float(moe_intensity(t)), ridge),
        compute_bound_batch_dense=_smallest_batch(lambda t: float(dense_intensity(t)), ridge),
        touched_at_batch=t_at, step_bytes_at_batch=always + m.moe_layers * t_at * expert_bytes,
        gpu_memory_bytes=g.memory_bytes, tp_bytes_per_gpu=stored / n,
        ep_bytes_per_gpu=stored - m.routed_params * b * (n - 1) / n,
        gpu_load=load, busiest_gpu_load=float(load.max()),
        dispatch_bytes_per_token_layer=dispatch, combine_bytes_per_token_layer=combine, a2a_step_s=a2a,
        note=(f"{m.display_name}: {m.source}. Weights and activations in {params.weights}; weight bytes only (no KV "
              f"cache). Uniform routing is sim.ops.expected_experts_touched's closed form."))

