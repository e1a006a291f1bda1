"""What one forward call computes: the stages from text to the next token, and which weights each uses.

tokenize -> embed (one table row per token) -> num_layers x (attention, MLP) -> final
norm and output head (logits over the vocabulary) -> sample -> append the token and
repeat. During generation every new token's query attends to the keys and values of all
earlier tokens, while its own query is used once: keys and values are cached, queries
are not (R5, R35, R36).

>>> r = describe_pipeline()
>>> r.stages
['tokenize', 'embed', 'attention', 'mlp', 'head', 'sample']
>>> round(float(r.part_share[r.parts.index("mlp")]), 2)
0.7
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.checks import check_int, checked_params
from sim.dtypes import bytes_per_elem
from sim.models import parameter_breakdown
from sim.models import resolve as resolve_model


@checked_params
@dataclass(frozen=True)
class PipelineParams:
    """Controls of the pipeline stepper."""

    model: str = "llama-3.1-8b"
    weight_dtype: str = "bf16"
    tokens: int = 8                     # tokens in the toy prompt (for the K/V reuse count)

    def __post_init__(self) -> None:
        resolve_model(self.model)
        bytes_per_elem(self.weight_dtype)
        check_int("tokens", self.tokens, minimum=1, maximum=100_000)


@dataclass(frozen=True)
class PipelineResult:
    """Stages of one decode step and where the model's weights live."""

    model: str
    stages: list                        # ["tokenize", "embed", "attention", "mlp", "head", "sample"]
    stage_repeats: list                 # how many times each stage runs per token (num_layers for blocks)
    stage_part: list                    # weight part each stage reads ("" for none)
    stage_weights_read: np.ndarray      # (stages,) weights read for one new token (all repeats)
    stage_flops: np.ndarray             # (stages,) ~2 FLOPs per weight read (R3); 0 for the lookup
    parts: list                         # ["embedding", "attention", "mlp", "norms", "head"]
    part_params: np.ndarray             # (parts,) stored weights
    part_bytes: np.ndarray              # (parts,) at weight_dtype
    part_share: np.ndarray              # (parts,) of all stored weights
    tied_embeddings: bool               # head shares the embedding table (then "head" stores nothing)
    total_params: int
    active_params: int                  # per token (MoE: routed experts only)
    kv_reads_per_token: np.ndarray      # (tokens,) how many queries read token i's K and V: tokens - i
    q_reads_per_token: np.ndarray       # (tokens,) each query is used once


def describe_pipeline(params: PipelineParams = PipelineParams()) -> PipelineResult:
    """Stages, the weights each reads for one generated token, and the parameter breakdown.

    The embedding stage reads one row (hidden weights); the blocks read all attention and
    MLP weights (routed experts only for MoE); the head reads vocab x hidden (the shared
    embedding table when tied).

    >>> r = describe_pipeline(PipelineParams(model="llama-3.2-1b"))
    >>> r.tied_embeddings, r.stage_part[r.stages.index("head")]
    (True, 'embedding')
    """
    p = params
    m = resolve_model(p.model)
    b = parameter_breakdown(m)
    L = m.num_layers
    head_read = m.vocab_size * m.hidden_size
    stages = ["tokenize", "embed", "attention", "mlp", "head", "sample"]
    repeats = [1, 1, L, L, 1, 1]
    part_of = ["", "embedding", "attention", "mlp", "embedding" if m.tied_embeddings else "head", ""]
    mlp_active = L * (b.mlp_active_per_layer + (b.router // L))
    read = np.array([0, m.hidden_size, b.attention, mlp_active, head_read + m.hidden_size, 0], dtype=np.float64)
    flops = 2.0 * read
    flops[1] = 0.0
    parts = ["embedding", "attention", "mlp", "norms", "head"]
    counts = np.array([b.embedding, b.attention, b.mlp + b.router, b.norms, b.head], dtype=np.float64)
    n = p.tokens
    return PipelineResult(
        model=m.display_name, stages=stages, stage_repeats=repeats, stage_part=part_of, stage_weights_read=read,
        stage_flops=flops, parts=parts, part_params=counts, part_bytes=counts * bytes_per_elem(p.weight_dtype),
        part_share=counts / b.total, tied_embeddings=m.tied_embeddings, total_params=b.total,
        active_params=b.active, kv_reads_per_token=np.arange(n, 0, -1), q_reads_per_token=np.ones(n, dtype=np.int64))
