"""Model catalogue: transformer shapes and where the parameters sit.

`head_dim` is a field of its own: it is never assumed to equal hidden / heads.

>>> m = get("llama-3.1-8b")
>>> m.linear_shapes()["gate_up_proj"]
(4096, 28672)
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    """Shapes of a decoder-only transformer (SwiGLU MLP, grouped-query attention)."""

    name: str                  # catalogue key, e.g. "llama-3.1-8b"
    display_name: str          # e.g. "Llama 3.1 8B"
    num_layers: int
    hidden_size: int
    num_heads: int             # query heads
    num_kv_heads: int          # key/value heads (GQA: fewer than num_heads)
    head_dim: int
    intermediate_size: int     # FFN width (each of gate, up; down maps it back)
    vocab_size: int
    tied_embeddings: bool      # output head shares the embedding matrix
    source: str                # citation for the shapes

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of each linear layer in one block, fused as engines run them."""
        q_out = self.num_heads * self.head_dim
        kv_out = self.num_kv_heads * self.head_dim
        return {
            "qkv_proj": (self.hidden_size, q_out + 2 * kv_out),
            "o_proj": (q_out, self.hidden_size),
            "gate_up_proj": (self.hidden_size, 2 * self.intermediate_size),
            "down_proj": (self.intermediate_size, self.hidden_size),
        }


CATALOGUE: dict[str, ModelConfig] = {
    "llama-3.1-8b": ModelConfig(
        name="llama-3.1-8b", display_name="Llama 3.1 8B", num_layers=32, hidden_size=4096,
        num_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336, vocab_size=128256,
        tied_embeddings=False, source="R5: Llama Team, The Llama 3 Herd of Models (Table 3)"),
    "llama-3.1-70b": ModelConfig(
        name="llama-3.1-70b", display_name="Llama 3.1 70B", num_layers=80, hidden_size=8192,
        num_heads=64, num_kv_heads=8, head_dim=128, intermediate_size=28672, vocab_size=128256,
        tied_embeddings=False, source="R5: Llama Team, The Llama 3 Herd of Models (Table 3)"),
    "llama-3.1-405b": ModelConfig(
        name="llama-3.1-405b", display_name="Llama 3.1 405B", num_layers=126, hidden_size=16384,
        num_heads=128, num_kv_heads=8, head_dim=128, intermediate_size=53248, vocab_size=128256,
        tied_embeddings=False, source="R5: Llama Team, The Llama 3 Herd of Models (Table 3)"),
    "llama-2-7b": ModelConfig(
        name="llama-2-7b", display_name="Llama 2 7B", num_layers=32, hidden_size=4096,
        num_heads=32, num_kv_heads=32, head_dim=128, intermediate_size=11008, vocab_size=32000,
        tied_embeddings=False, source="H. Touvron et al., Llama 2 (arXiv 2307.09288); config.json of meta-llama/Llama-2-7b-hf"),
}


def names() -> list[str]:
    """Catalogue keys, in display order."""
    return list(CATALOGUE)


def get(name: str) -> ModelConfig:
    """Look up a model by catalogue key; ValueError lists the valid names."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; valid names: {', '.join(CATALOGUE)}") from None
