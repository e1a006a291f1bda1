"""Multi-head latent attention against MHA, GQA and MQA (chapter 21): KV bytes per token, the
KV a deployment holds, and the attention of one decode step at a context.

On DeepSeek-V3's attention shapes (61 layers, 128 query heads, keys of 128 + 64 RoPE dims,
values of 128; DeepSeek-V3 report, section 2.1), per layer and token the cache holds
- MHA: every head's key and value, 128 x (192 + 128) elements;
- GQA: 8 groups' keys and values; MQA: one;
- MLA: the 512-element latent c_KV and the 64-element decoupled RoPE key, 576 elements
  whatever the number of heads (DeepSeek-V2, section 2.1).

At decode, MLA can attend in the latent space: the key up-projection W_UK is folded into the
query and W_UV into the output ("absorbed"), so each head scores q . c over 512 + 64 elements
and sums the 512-element latents; 2 x (576 + 512) FLOPs per head per context token. Without
the fold, each step rebuilds every cached token's keys and values from the latent,
2 x 512 x 128 x (128 + 128) FLOPs per context token and layer, then attends as MHA.

Time of a step's attention for one sequence: the roofline bound at the GPU's spec-sheet rates,
max(cache bytes / bandwidth, FLOPs / bf16 tensor rate), over all layers (no kernel timings
of these kernels are in the guide: an assumption, stated).

>>> r = mla_attention()
>>> [round(v.kv_bytes_per_token) for v in r.variants]
[4997120, 312320, 39040, 70272, 70272]
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim import hardware, models
from sim.checks import check_choice, check_int, checked_params
from sim.dtypes import bytes_per_elem
from sim.kv import GQA_KV_HEADS, deployment_kv_budget_bytes, kv_bytes_per_token, kv_cache_bytes
from sim.moe import QWEN3, DSV3, GPUS, MOE_MODELS
from sim.roofline import ridge_point

LAYERS, HEADS = DSV3["layers"], DSV3["heads"]
K_DIM, V_DIM = DSV3["nope"] + DSV3["rope"], DSV3["v_dim"]
LATENT = DSV3["kv_rank"] + DSV3["rope"]          # 576 elements cached per token and layer
ABSORBED_FLOPS = 2 * (LATENT + DSV3["kv_rank"])  # per head per context token
EXPAND_FLOPS = 2 * DSV3["kv_rank"] * HEADS * (DSV3["nope"] + V_DIM)   # per context token, rebuilding K and V
VARIANTS = (  # key, label, cached elements per token and layer, FLOPs per context token and layer
    ("mha", "MHA (128 KV heads)", HEADS * (K_DIM + V_DIM), HEADS * 2 * (K_DIM + V_DIM)),
    ("gqa", f"GQA ({GQA_KV_HEADS} groups)", GQA_KV_HEADS * (K_DIM + V_DIM), HEADS * 2 * (K_DIM + V_DIM)),
    ("mqa", "MQA (1 KV head)", K_DIM + V_DIM, HEADS * 2 * (K_DIM + V_DIM)),
    ("mla", "MLA, absorbed", LATENT, HEADS * ABSORBED_FLOPS),
    ("mla-expand", "MLA, K and V rebuilt", LATENT, EXPAND_FLOPS + HEADS * 2 * (K_DIM + V_DIM)),
)
MODELS = ("llama-2-7b", "llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b")   # catalogue models, as trained
DEPLOY_GPUS = (8, 16, 32)
CONTEXT_MIN = 1024


@checked_params
@dataclass(frozen=True)
class MlaParams:
    """A context, the cache's format, and a deployment of DeepSeek-V3 (fp8 weights) on n GPUs."""

    context_tokens: int = 32768
    kv_dtype: str = "bf16"
    gpu: str = "H200"
    gpus: int = 8

    def __post_init__(self) -> None:
        check_int("context_tokens", self.context_tokens, minimum=1)
        check_choice("kv_dtype", self.kv_dtype, ("bf16", "fp8"), "KV dtypes")
        check_choice("gpu", self.gpu, GPUS, "GPUs")
        check_int("gpus", self.gpus, minimum=1, maximum=1024)


@dataclass(frozen=True)
class Variant:
    key: str
    label: str
    kv_bytes_per_token: float        # all layers
    flops_per_context_token: float   # all layers, one decode step
    intensity: float                 # FLOP per cache byte
    tokens_that_fit: int             # in the deployment's KV budget (0 if the weights do not fit)
    sequences_that_fit: int          # of context_tokens
    step_s: float                    # attention of one sequence at context_tokens (roofline bound)
    bound: str                       # "memory" or "compute" at that context


@dataclass(frozen=True)
class MlaResult:
    variants: list
    model_kv: dict                   # model display name -> KV bytes per token as trained
    contexts: np.ndarray
    step_s: dict                     # variant key -> attention time per sequence at each context
    ridge: float                     # the GPU's bf16 FLOP per byte
    weight_bytes: float              # DeepSeek-V3 in fp8, all GPUs together
    kv_budget_bytes: float           # all GPUs together (0 if the weights do not fit)
    note: str


def mla_attention(params: MlaParams = MlaParams()) -> MlaResult:
    """KV per token, what fits, and a decode step's attention for each variant on DeepSeek-V3's shapes."""
    g, b = hardware.get(params.gpu), bytes_per_elem(params.kv_dtype)
    bw, peak = g.hbm_bandwidth_bytes_per_s, g.peak_flops("bf16")
    dsv3 = MOE_MODELS["deepseek-v3"]
    weights = float(dsv3.total_params)                      # fp8: a byte per weight (block scales left out)
    budget = deployment_kv_budget_bytes(g, weights, params.gpus)
    contexts = np.unique(np.round(np.geomspace(CONTEXT_MIN, 2 ** 20, 61)))
    variants, curves = [], {}
    for key, label, elems, flops in VARIANTS:
        per_token, step_flops = LAYERS * elems * b, LAYERS * flops
        curves[key] = np.maximum(contexts * per_token / bw, contexts * step_flops / peak)
        c = params.context_tokens
        mem_s, math_s = c * per_token / bw, c * step_flops / peak
        tokens = int(budget // per_token)
        variants.append(Variant(key, label, per_token, step_flops, step_flops / per_token, tokens, tokens // c,
                                max(mem_s, math_s), "memory" if mem_s >= math_s else "compute"))
    model_kv = {models.get(k).display_name: kv_bytes_per_token(k, params.kv_dtype) for k in MODELS}
    model_kv["Qwen3-235B-A22B"] = float(kv_cache_bytes(QWEN3["layers"], QWEN3["kv_heads"], QWEN3["head_dim"], 1, 1, b))
    model_kv["DeepSeek-V3 (MLA)"] = float(LAYERS * LATENT * b)
    return MlaResult(
        variants=variants, model_kv=model_kv, contexts=contexts, step_s=curves,
        ridge=ridge_point(g, "bf16"), weight_bytes=weights, kv_budget_bytes=budget,
        note=(f"DeepSeek-V3's attention shapes ({dsv3.source}); KV cache in {params.kv_dtype}; weights in fp8 "
              f"on {params.gpus} x {g.display_name}, vLLM's accounting per GPU (90% of memory, a 2 GiB reserve), "
              f"the cache spread evenly over the GPUs (data-parallel attention). Step times: roofline bounds at "
              f"the spec sheet's rates, bf16 math."))
