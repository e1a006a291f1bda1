"""FLOPs and bytes of every kernel the recorder times, from its shape (pure Python).

The recorder writes these numbers into each trace and the validator recomputes them, so
a trace whose counts disagree with its shapes is rejected. Bytes are the minimal traffic:
each input read once and each output written once; what a kernel really moves on top of
that (an unfused op's intermediates, the score matrix of unfused attention) is exactly
what the calibration's efficiencies absorb.
"""
from __future__ import annotations

from typing import Mapping

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}   # bytes per element


def gemm_counts(shape: Mapping) -> tuple[float, float]:
    """(FLOPs, bytes) of out(m x n) = x(m x k) @ W(n x k)^T.

    FLOPs = 2 m n k; bytes = W + x + out at their element widths.

    >>> gemm_counts({"m": 2, "n": 3, "k": 4, "weight_bytes_per_elem": 2,
    ...              "act_bytes_per_elem": 2, "out_bytes_per_elem": 2})
    (48.0, 52.0)
    """
    m, n, k = shape["m"], shape["n"], shape["k"]
    flops = 2.0 * m * n * k
    nbytes = (shape["weight_bytes_per_elem"] * k * n + shape["act_bytes_per_elem"] * m * k
              + shape["out_bytes_per_elem"] * m * n)
    return flops, float(nbytes)


def attention_counts(shape: Mapping) -> tuple[float, float]:
    """(FLOPs, bytes) of softmax(Q K^T) V for one batch of sequences.

    FLOPs = 4 x batch x heads x head_dim x (query-key pairs): QK^T and PV, 2 FLOPs per
    multiply-add each. With a causal mask over q_len == kv_len only s (s + 1) / 2 pairs
    count. Bytes = Q and O for every query head, K and V for the KV heads the kernel reads
    (all query heads when K/V were expanded for a backend without grouped-query support).

    >>> attention_counts({"batch": 1, "heads": 2, "kv_heads": 1, "kv_heads_read": 1,
    ...                   "head_dim": 4, "q_len": 1, "kv_len": 8, "causal": False,
    ...                   "bytes_per_elem": 2})
    (256.0, 160.0)
    """
    b, h, d = shape["batch"], shape["heads"], shape["head_dim"]
    q, kv = shape["q_len"], shape["kv_len"]
    pairs = q * (q + 1) / 2 if shape["causal"] else q * kv
    flops = 4.0 * b * h * d * pairs
    e = shape["bytes_per_elem"]
    nbytes = e * b * d * (2 * h * q + 2 * shape["kv_heads_read"] * kv)
    return flops, float(nbytes)


def elementwise_counts(shape: Mapping) -> tuple[float, float]:
    """(FLOPs, bytes) of the elementwise ops of a transformer block; FLOPs are not modelled (0).

    rms_norm: read x (tokens x hidden) and the weight (hidden), write out (tokens x hidden).
    silu_mul: read gate and up (tokens x 2 hidden), write out (tokens x hidden).
    residual_add: read two (tokens x hidden), write one.

    >>> elementwise_counts({"op": "residual_add", "tokens": 2, "hidden": 4, "bytes_per_elem": 2})
    (0.0, 48.0)
    """
    t, h, e = shape["tokens"], shape["hidden"], shape["bytes_per_elem"]
    op = shape["op"]
    if op == "rms_norm":
        elems = 2 * t * h + h
    elif op == "silu_mul":
        elems = 3 * t * h
    elif op == "residual_add":
        elems = 3 * t * h
    else:
        raise ValueError(f"unknown elementwise op {op!r}; valid: rms_norm, silu_mul, residual_add")
    return 0.0, float(e * elems)


def copy_counts(shape: Mapping) -> tuple[float, float]:
    """(FLOPs, bytes) of dst.copy_(src): read and write every element once.

    >>> copy_counts({"elements": 1024, "bytes_per_elem": 4})
    (0.0, 8192.0)
    """
    return 0.0, 2.0 * shape["elements"] * shape["bytes_per_elem"]


def collective_counts(shape: Mapping) -> tuple[float, float]:
    """(FLOPs, bytes) of a collective: the message each GPU contributes; FLOPs not modelled (0).

    >>> collective_counts({"op": "all_reduce", "elements": 1024, "bytes_per_elem": 2,
    ...                    "gpus": 8, "gpus_per_node": 8})
    (0.0, 2048.0)
    """
    return 0.0, float(shape["elements"] * shape["bytes_per_elem"])


def counts(kind: str, shape: Mapping) -> tuple[float, float]:
    """(FLOPs, bytes) of a kernel of `kind` with `shape`."""
    if kind in ("gemm", "big-gemm"):
        return gemm_counts(shape)
    if kind in ("attention-decode", "attention-prefill"):
        return attention_counts(shape)
    if kind == "elementwise":
        return elementwise_counts(shape)
    if kind == "copy":
        return copy_counts(shape)
    if kind == "collective":
        return collective_counts(shape)
    raise ValueError(f"unknown kernel kind {kind!r}")
