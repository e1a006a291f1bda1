"""Model catalogue: transformer shapes and where the parameters sit.

`head_dim` is a field of its own: it is never assumed to equal hidden / heads (Gemma 7B
has 16 heads of 256 on a hidden size of 3,072).

>>> m = get("llama-3.1-8b")
>>> m.linear_shapes()["gate_up_proj"]
(4096, 28672)
>>> round(parameter_breakdown(m).total / 1e9, 2)
8.03
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from sim.checks import check_int
from sim.dtypes import bytes_per_elem


@dataclass(frozen=True)
class ModelConfig:
    """Shapes of a decoder-only transformer (gated MLP with 3 matrices, grouped-query attention)."""

    name: str                  # catalogue key, e.g. "llama-3.1-8b"
    display_name: str          # e.g. "Llama 3.1 8B"
    num_layers: int
    hidden_size: int
    num_heads: int             # query heads
    num_kv_heads: int          # key/value heads (GQA: fewer than num_heads)
    head_dim: int
    intermediate_size: int     # FFN width (each of gate, up; down maps it back); per expert for MoE
    vocab_size: int
    tied_embeddings: bool      # output head shares the embedding matrix
    source: str                # citation for the shapes
    num_experts: int = 1       # MLP experts per layer (1 = dense model)
    experts_per_token: int = 1  # experts each token is routed to (top-k)
    max_context_tokens: int = 0  # longest context the model was trained for (0 = not stated)

    def __post_init__(self) -> None:
        for f in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                  "intermediate_size", "vocab_size", "num_experts", "experts_per_token"):
            check_int(f, getattr(self, f), minimum=1)
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of "
                             f"num_kv_heads ({self.num_kv_heads})")
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) exceeds "
                             f"num_experts ({self.num_experts})")

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model (more than one MLP expert per layer)."""
        return self.num_experts > 1

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of each linear layer in one block, fused as engines run them.

        For a mixture-of-experts model the MLP shapes are those of one expert.
        """
        q_out = self.num_heads * self.head_dim
        kv_out = self.num_kv_heads * self.head_dim
        return {
            "qkv_proj": (self.hidden_size, q_out + 2 * kv_out),
            "o_proj": (q_out, self.hidden_size),
            "gate_up_proj": (self.hidden_size, 2 * self.intermediate_size),
            "down_proj": (self.intermediate_size, self.hidden_size),
        }


@dataclass(frozen=True)
class ParameterBreakdown:
    """Parameter counts by part of the model; every count is a number of weights."""

    model: str                 # display name
    embedding: int             # token embedding table (vocab x hidden)
    attention: int             # q, k, v, o projections of all layers
    mlp: int                   # gate, up, down of all layers (all experts)
    router: int                # MoE routers of all layers (0 for dense models)
    norms: int                 # RMSNorm gains: two per layer and one final
    head: int                  # output head (0 when tied to the embedding)
    total: int                 # everything stored
    active: int                # used by one token (MoE: only the routed experts' MLPs)
    attention_per_layer: int
    mlp_per_layer: int         # all experts
    mlp_active_per_layer: int  # experts one token uses

    @property
    def mlp_share(self) -> float:
        """MLP weights as a share of all stored weights."""
        return self.mlp / self.total

    def parts(self) -> dict[str, int]:
        """Parts in pipeline order, ready for a bar chart (norms and router folded where tiny)."""
        return {"embedding": self.embedding, "attention": self.attention, "mlp": self.mlp + self.router,
                "norms": self.norms, "head": self.head}


_LLAMA3 = "R5: Llama Team, The Llama 3 Herd of Models (Table 3)"

CATALOGUE: dict[str, ModelConfig] = {
    "llama-3.1-8b": ModelConfig(
        name="llama-3.1-8b", display_name="Llama 3.1 8B", num_layers=32, hidden_size=4096,
        num_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336, vocab_size=128256,
        tied_embeddings=False, source=_LLAMA3, max_context_tokens=131072),
    "llama-3.1-70b": ModelConfig(
        name="llama-3.1-70b", display_name="Llama 3.1 70B", num_layers=80, hidden_size=8192,
        num_heads=64, num_kv_heads=8, head_dim=128, intermediate_size=28672, vocab_size=128256,
        tied_embeddings=False, source=_LLAMA3, max_context_tokens=131072),
    "llama-3.1-405b": ModelConfig(
        name="llama-3.1-405b", display_name="Llama 3.1 405B", num_layers=126, hidden_size=16384,
        num_heads=128, num_kv_heads=8, head_dim=128, intermediate_size=53248, vocab_size=128256,
        tied_embeddings=False, source=_LLAMA3, max_context_tokens=131072),
    "llama-2-7b": ModelConfig(
        name="llama-2-7b", display_name="Llama 2 7B", num_layers=32, hidden_size=4096,
        num_heads=32, num_kv_heads=32, head_dim=128, intermediate_size=11008, vocab_size=32000,
        tied_embeddings=False, max_context_tokens=4096,
        source="H. Touvron et al., Llama 2 (arXiv 2307.09288); config.json of meta-llama/Llama-2-7b-hf"),
    "llama-3.2-1b": ModelConfig(
        name="llama-3.2-1b", display_name="Llama 3.2 1B", num_layers=16, hidden_size=2048,
        num_heads=32, num_kv_heads=8, head_dim=64, intermediate_size=8192, vocab_size=128256,
        tied_embeddings=True, max_context_tokens=131072,
        source="Meta, Llama 3.2 model card; config.json of meta-llama/Llama-3.2-1B"),
    "gemma-7b": ModelConfig(
        name="gemma-7b", display_name="Gemma 7B", num_layers=28, hidden_size=3072,
        num_heads=16, num_kv_heads=16, head_dim=256, intermediate_size=24576, vocab_size=256000,
        tied_embeddings=True, max_context_tokens=8192,
        source="Gemma Team, Gemma (arXiv 2403.08295, Table 1); config.json of google/gemma-7b"),
    "mixtral-8x7b": ModelConfig(
        name="mixtral-8x7b", display_name="Mixtral 8x7B", num_layers=32, hidden_size=4096,
        num_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336, vocab_size=32000,
        tied_embeddings=False, num_experts=8, experts_per_token=2, max_context_tokens=32768,
        source="A. Jiang et al., Mixtral of Experts (arXiv 2401.04088, Table 1)"),
}


def names() -> list[str]:
    """Catalogue keys, in display order."""
    return list(CATALOGUE)


def get(name: str) -> ModelConfig:
    """Look up a model by catalogue key; ValueError lists the valid names."""
    try:
        return CATALOGUE[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown model {name!r}; valid names: {', '.join(CATALOGUE)}") from None


def resolve(model: Union[str, ModelConfig]) -> ModelConfig:
    """A model given either as a catalogue key or as a ModelConfig."""
    return model if isinstance(model, ModelConfig) else get(model)


def measured_model_name(label: str) -> str:
    """A display name for the model label of measured points: the catalogue's name when the
    label is a catalogue model (an imported "-hf" checkpoint name included), else the label.

    >>> measured_model_name("llama-2-7b-hf")
    'Llama 2 7B'
    >>> measured_model_name("qwen-72b")
    'qwen-72b'
    """
    key = label.removesuffix("-hf")
    return CATALOGUE[key].display_name if key in CATALOGUE else label


def parameter_breakdown(model: Union[str, ModelConfig]) -> ParameterBreakdown:
    """Count the weights of each part of `model`.

    Per layer: attention = hidden x (q + 2 kv + q) outputs as `linear_shapes` gives them,
    MLP = 3 x hidden x intermediate per expert, router = hidden x experts (MoE only),
    norms = 2 x hidden. Plus the embedding (vocab x hidden), the final norm, and the head
    (vocab x hidden unless tied to the embedding).

    Llama 3.1 8B: 32 x 41.9 M attention + 32 x 176.2 M MLP + 2 x 525.3 M embedding/head
    = 8.03 B, of which the MLPs are 70% (counted from the architecture in R5).

    >>> b = parameter_breakdown("llama-3.1-8b")
    >>> b.mlp_per_layer, b.attention_per_layer
    (176160768, 41943040)
    """
    m = resolve(model)
    shapes = m.linear_shapes()
    attn_layer = sum(shapes[k][0] * shapes[k][1] for k in ("qkv_proj", "o_proj"))
    expert = sum(shapes[k][0] * shapes[k][1] for k in ("gate_up_proj", "down_proj"))
    mlp_layer = expert * m.num_experts
    mlp_active_layer = expert * m.experts_per_token
    router_layer = m.hidden_size * m.num_experts if m.is_moe else 0
    norms = (2 * m.num_layers + 1) * m.hidden_size
    embedding = m.vocab_size * m.hidden_size
    head = 0 if m.tied_embeddings else embedding
    L = m.num_layers
    total = embedding + L * (attn_layer + mlp_layer + router_layer) + norms + head
    active = embedding + L * (attn_layer + mlp_active_layer + router_layer) + norms + head
    return ParameterBreakdown(
        model=m.display_name, embedding=embedding, attention=L * attn_layer, mlp=L * mlp_layer,
        router=L * router_layer, norms=norms, head=head, total=total, active=active,
        attention_per_layer=attn_layer, mlp_per_layer=mlp_layer, mlp_active_per_layer=mlp_active_layer)


def weight_bytes(model: Union[str, ModelConfig], dtype: str = "bf16") -> float:
    """Bytes of all stored weights at `dtype` (scales of quantised formats included in the dtype width).

    >>> round(weight_bytes("llama-3.1-70b") / 1e9)     # 70.55 B parameters (R5's architecture) x 2 bytes
    141
    """
    return parameter_breakdown(model).total * bytes_per_elem(dtype)
