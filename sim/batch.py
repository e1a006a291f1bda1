"""The inputs of one forward step: the number formats of a deployment and the batch shape.

One *step* (forward pass) processes a `Batch`: sequence i brings `new_tokens[i]` new
tokens and already holds `context_tokens[i]` tokens in its KV cache. A prefill of N
tokens is `Batch.prefill(N)`; a decode step at batch B and context C is
`Batch.decode(B, C)`; the scheduler mixes both in one step. `Precision` names the
storage and arithmetic formats (weights, activations, KV cache, tensor-core math).

>>> b = Batch.decode(4, 100)
>>> b.tokens, b.attention_pairs()
(4, 404)
>>> Precision(weight_dtype="fp8").math_dtype
'bf16'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sim.checks import check_choice, check_int, check_positive, checked_params
from sim.dtypes import DTYPE_BYTES, arithmetic_dtype

MATH_DTYPES = ("bf16", "fp16", "fp8", "int8", "fp4")   # tensor-core arithmetic the figures offer


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


def _counts(name: str, values, minimum: int) -> tuple:
    """`values` as a tuple of ints >= minimum, each checked as check_int does (the same
    errors). Plain ints need only the bound: a decode batch of 1,024 users is 2,048 of them."""
    values = tuple(values)
    if all(type(v) is int for v in values):
        lowest = min(values, default=minimum)
        if lowest < minimum:
            check_int(name, lowest, minimum=minimum)
        return values
    return tuple(check_int(name, v, minimum=minimum) for v in values)


@dataclass(frozen=True)
class Batch:
    """The sequences one forward step processes."""

    new_tokens: tuple                   # (seqs,) tokens each sequence processes in this step
    context_tokens: tuple               # (seqs,) tokens each sequence already holds in its KV cache
    logits_seqs: Optional[int] = None   # rows of logits the step computes; None: one per sequence

    def __post_init__(self) -> None:
        new = _counts("new_tokens", self.new_tokens, 1)
        ctx = _counts("context_tokens", self.context_tokens, 0)
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
