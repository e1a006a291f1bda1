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
from sim.sampling import SamplingParams, SamplingResult, apply_sampling


@checked_params
@dataclass(frozen=True)
class PipelineParams:
    """Controls of the pipeline stepper."""

    model: str = "llama-3.1-8b"
    weight_dtype: str = "bf16"
    tokens: int = 8                     # tokens in the toy prompt (for the K/V reuse count)
    sampling: SamplingParams = SamplingParams()   # the sample stage: temperature and top-p on toy logits

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
    stage_weights_text: list            # (stages,) weights read as text: "4,096", "525 M", "none"
    stage_notes: dict                   # stage -> what it does, in numbers of this model; "repeat" too
    sampling: SamplingResult            # the sample stage at params.sampling
    note: str                           # where the numbers come from


def weight_count(n: float) -> str:
    """A weight count as text: 4,096 / 525 M / 1.34 B (none for 0).

    >>> weight_count(4096), weight_count(525e6), weight_count(1.34e9), weight_count(0)
    ('4,096', '525 M', '1.34 B', 'none')
    """
    if n <= 0:
        return "none"
    if n >= 1e9:
        return f"{n / 1e9:.3g} B"
    if n >= 1e6:
        return f"{n / 1e6:.3g} M"
    return f"{n:,.0f}"


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
    share = counts / b.total
    notes = {
        "tokenize": f"The text is cut into tokens: ids in a vocabulary of {m.vocab_size:,} entries. "
                    f"No weights, no GPU math.",
        "embed": f"Each token id selects one row of the embedding table: {m.hidden_size:,} numbers out of a "
                 f"table of {weight_count(b.embedding)} weights. A lookup, not a matrix multiply.",
        "attention": f"Repeated in all {L} layers. Projections make a query (Q), a key (K) and a value (V) for "
                     f"the token; Q is scored against the K of every earlier token and mixes their V. The new "
                     f"K and V are stored in the KV cache.",
        "mlp": f"Repeated in all {L} layers. A gated MLP widens each token to {m.intermediate_size:,} features "
               f"and back with three matrices: {share[parts.index('mlp')] * 100:.0f}% of the stored weights."
               + (f" Here each token is routed to {m.experts_per_token} of {m.num_experts} expert MLPs, so it "
                  f"reads only theirs." if m.is_moe else ""),
        "head": f"A final norm, then the output head turns the hidden vector into one logit per vocabulary "
                f"entry ({m.vocab_size:,} logits)."
                + (" This model reuses its embedding table as the head." if m.tied_embeddings else ""),
        "sample": "Temperature and top-p turn the logits into probabilities and one token is drawn: "
                  "the chart at the bottom left. No weights are read.",
        "repeat": f"The new token is appended and the next pass processes only it. Its K and V join the "
                  f"cache; earlier tokens' K and V are read back, never recomputed. Its Q is used once, so "
                  f"there is nothing to cache. A prompt of {n} tokens: the first token's K and V "
                  f"are read {n} times, every Q once.",
    }
    note = (f"{m.display_name}: {weight_count(b.total)} weights stored, {weight_count(b.active)} used per token. "
            f"Weight counts are exact from the model's published shapes; FLOPs are 2 per weight read. The logits "
            f"of the sampler are an illustrative {len(p.sampling.logits)}-word vocabulary, not the model's.")
    return PipelineResult(
        model=m.display_name, stages=stages, stage_repeats=repeats, stage_part=part_of, stage_weights_read=read,
        stage_flops=flops, parts=parts, part_params=counts, part_bytes=counts * bytes_per_elem(p.weight_dtype),
        part_share=share, tied_embeddings=m.tied_embeddings, total_params=b.total,
        active_params=b.active, kv_reads_per_token=np.arange(n, 0, -1), q_reads_per_token=np.ones(n, dtype=np.int64),
        stage_weights_text=[weight_count(w) for w in read], stage_notes=notes, sampling=apply_sampling(p.sampling),
        note=note)
