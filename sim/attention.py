"""Attention's HBM traffic: naive (materialised score matrix) vs tiled (FlashAttention), and split-KV decode.

For one head with N queries and keys of head dimension d, at `b` bytes per element:

- naive attention writes S = Q K^T (N x N) to HBM, reads it back for the softmax, writes
  P, and reads P again for P V (R27, Algorithm 0):
      bytes = b x (4 N d + 4 N^2)           (read Q, K, V, write O; S and P written and read)
- tiled attention (FlashAttention, R27) keeps S and P on chip and computes an exact
  online softmax; with query tiles of `tile` rows, each tile streams all of K and V:
      bytes = b x (2 N d + 2 N d x ceil(N / tile))   (Q in, O out, K and V once per query tile)
  so a bigger tile re-reads K and V fewer times. This counts every re-read as HBM
  traffic; when the K and V being re-read stay in L2 the traffic falls to its floor,
      bytes_min = b x 4 N d                            (Q, K, V read once, O written once)
  and the two bound what a real kernel moves.

Both do 4 N^2 d FLOPs (QK^T and PV, no causal mask). At N = 32,768 one head's score
matrix alone is 2 x 32,768^2 bytes ~ 2.1 GB.

FlashDecoding (Dao et al. 2023) splits a decode step's KV sequence into chunks handled
by different SMs, so a single sequence still uses the whole GPU; a small reduction
combines the chunks' partial results.

>>> score_matrix_bytes(32768) / 1e9
2.147483648
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from sim.calibration import for_gpu
from sim.checks import check_choice, check_int, check_positive, checked_params
from sim.hardware import resolve as resolve_gpu
from sim.kernel_model import Calibration
from sim.models import resolve as resolve_model
from sim.dtypes import bytes_per_elem


BLOCKS_PER = ("kv_head", "query_head")   # how a decode attention kernel assigns heads to thread blocks


def score_matrix_bytes(seq_len: int, bytes_per_elem: float = 2.0, heads: int = 1, batch: int = 1) -> float:
    """Bytes of the N x N attention scores: N^2 x bytes x heads x batch.

    >>> score_matrix_bytes(4096, heads=32) / 2 ** 30      # one layer of Llama 3.1 8B at 4K tokens
    1.0
    """
    check_int("seq_len", seq_len, minimum=1)
    check_positive("bytes_per_elem", bytes_per_elem)
    check_int("heads", heads, minimum=1)
    check_int("batch", batch, minimum=1)
    return float(seq_len) ** 2 * bytes_per_elem * heads * batch


def naive_attention_bytes(seq_len, head_dim: int, bytes_per_elem: float = 2.0):
    """HBM bytes of one head of naive attention: b (4 N d + 4 N^2). Works on arrays of N.

    >>> float(naive_attention_bytes(1024, 64))
    8912896.0
    """
    n = np.asarray(seq_len, dtype=np.float64)
    return bytes_per_elem * (4.0 * n * head_dim + 4.0 * n * n)


def tiled_attention_bytes(seq_len, head_dim: int, tile: int = 128, bytes_per_elem: float = 2.0):
    """HBM bytes of one head of tiled attention: b (2 N d + 2 N d ceil(N / tile)). Works on arrays of N.

    >>> float(tiled_attention_bytes(1024, 64, tile=128))     # K and V streamed 8 times
    2359296.0
    """
    check_int("tile", tile, minimum=1)
    n = np.asarray(seq_len, dtype=np.float64)
    return bytes_per_elem * (2.0 * n * head_dim + 2.0 * n * head_dim * np.ceil(n / tile))


def tiled_attention_min_bytes(seq_len, head_dim: int, bytes_per_elem: float = 2.0):
    """HBM bytes of one head when every K/V re-read hits on-chip memory or L2: b x 4 N d.

    >>> float(tiled_attention_min_bytes(1024, 64))
    524288.0
    """
    n = np.asarray(seq_len, dtype=np.float64)
    return bytes_per_elem * 4.0 * n * head_dim


def attention_flops(seq_len, head_dim: int):
    """FLOPs of one head without causal masking: 4 N^2 d (QK^T and PV).

    >>> float(attention_flops(1024, 64))
    268435456.0
    """
    n = np.asarray(seq_len, dtype=np.float64)
    return 4.0 * n * n * head_dim


@checked_params
@dataclass(frozen=True)
class FlashParams:
    """Controls of the FlashAttention figure."""

    gpu: str = "H100-SXM"
    seq_len: int = 8192                 # the reader's chosen N
    tile: int = 128                     # query rows per tile
    head_dim: int = 128
    heads: int = 1                      # heads (x layers, x batch) to total over
    dtype: str = "bf16"
    min_seq_len: int = 256
    max_seq_len: int = 131072
    grid_points: int = 64

    def __post_init__(self) -> None:
        check_int("seq_len", self.seq_len, minimum=1)
        check_int("tile", self.tile, minimum=1)
        check_int("head_dim", self.head_dim, minimum=1)
        check_int("heads", self.heads, minimum=1)
        bytes_per_elem(self.dtype)
        check_int("min_seq_len", self.min_seq_len, minimum=1)
        check_int("max_seq_len", self.max_seq_len, minimum=self.min_seq_len)
        check_int("grid_points", self.grid_points, minimum=2)


@dataclass(frozen=True)
class FlashResult:
    """HBM traffic and time of naive vs tiled attention over sequence lengths."""

    seq_len_grid: np.ndarray            # (n,) N
    naive_bytes: np.ndarray             # (n,)
    tiled_bytes: np.ndarray             # (n,) every K/V re-read from HBM
    tiled_min_bytes: np.ndarray         # (n,) floor: Q, K, V, O once (re-reads served from L2)
    score_matrix_bytes: np.ndarray      # (n,) the N x N matrix naive attention writes
    flops: np.ndarray                   # (n,) same for both
    naive_time_s: np.ndarray            # (n,) max(bytes / BW, FLOPs / FLOP/s)
    tiled_time_s: np.ndarray            # (n,)
    tiled_min_time_s: np.ndarray        # (n,)
    seq_len: int                        # the chosen N
    naive_bytes_at: float
    tiled_bytes_at: float
    score_matrix_bytes_at: float
    naive_time_s_at: float
    tiled_time_s_at: float
    traffic_ratio_at: float             # naive / tiled bytes
    traffic_ratio_min_at: float         # naive / tiled floor bytes
    bandwidth_bytes_per_s: float        # effective bandwidth used
    calibration_note: str
    tiled_min_bytes_at: float           # the floor at the chosen N
    tiled_min_time_s_at: float
    note: str                           # what is modelled, and the calibration


def compare_flash_attention(params: FlashParams = FlashParams(),
                            calibration: Optional[Calibration] = None) -> FlashResult:
    """HBM bytes and time of naive vs tiled attention for a grid of N and the chosen N.

    Time = max(bytes / effective bandwidth, FLOPs / effective FLOP/s) on `gpu`.

    >>> r = compare_flash_attention()         # N = 8,192, d = 128, 128-row tiles
    >>> round(r.traffic_ratio_at, 2), round(r.traffic_ratio_min_at, 1)
    (2.0, 65.0)
    """
    p = params
    g = resolve_gpu(p.gpu)
    cal = calibration if calibration is not None else for_gpu(g)
    b = bytes_per_elem(p.dtype)
    grid = np.unique(np.concatenate([np.geomspace(p.min_seq_len, p.max_seq_len, p.grid_points).round(),
                                     [p.seq_len]]).astype(np.int64))
    h = p.heads
    naive = naive_attention_bytes(grid, p.head_dim, b) * h
    tiled = tiled_attention_bytes(grid, p.head_dim, p.tile, b) * h
    floor = tiled_attention_min_bytes(grid, p.head_dim, b) * h
    scores = grid.astype(np.float64) ** 2 * b * h
    fl = attention_flops(grid, p.head_dim) * h
    bw = cal.bandwidth_bytes_per_s
    F = cal.flops("bf16")
    t_naive = np.maximum(naive / bw, fl / F)
    t_tiled = np.maximum(tiled / bw, fl / F)
    t_floor = np.maximum(floor / bw, fl / F)
    i = int(np.searchsorted(grid, p.seq_len))
    return FlashResult(
        seq_len_grid=grid, naive_bytes=naive, tiled_bytes=tiled, tiled_min_bytes=floor, score_matrix_bytes=scores,
        flops=fl, naive_time_s=t_naive, tiled_time_s=t_tiled, tiled_min_time_s=t_floor, seq_len=p.seq_len, naive_bytes_at=float(naive[i]),
        tiled_bytes_at=float(tiled[i]), score_matrix_bytes_at=float(scores[i]), naive_time_s_at=float(t_naive[i]),
        tiled_time_s_at=float(t_tiled[i]), traffic_ratio_at=float(naive[i] / tiled[i]),
        traffic_ratio_min_at=float(naive[i] / floor[i]), bandwidth_bytes_per_s=bw,
        calibration_note=cal.note, tiled_min_bytes_at=float(floor[i]), tiled_min_time_s_at=float(t_floor[i]),
        note=(f"{'One attention head' if h == 1 else f'{h} attention heads'}, head dim {p.head_dim}, {p.dtype} "
              f"({b:g} bytes per score), no causal mask; both variants do the same FLOPs. "
              f"Time = max(bytes / bandwidth, FLOPs / FLOP/s). {cal.note}"))


# --------------------------------------------------------------------------------------------
# The computation itself: naive softmax attention vs tiled online softmax
# --------------------------------------------------------------------------------------------

def _qkv(q, k, v) -> tuple:
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    if q.ndim != 2 or k.ndim != 2 or v.ndim != 2 or k.shape[0] != v.shape[0] or q.shape[1] != k.shape[1]:
        raise ValueError("need q (Nq, d), k (Nk, d), v (Nk, dv)")
    return q, k, v


def attention_naive(q, k, v) -> np.ndarray:
    """softmax(Q K^T / sqrt(d)) V with the whole (Nq, Nk) score matrix materialised.

    >>> attention_naive([[1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]], [[2.0], [4.0]]).tolist()   # equal scores: the mean
    [[3.0]]
    """
    q, k, v = _qkv(q, k, v)
    s = q @ k.T / math.sqrt(q.shape[1])               # (Nq, Nk): the matrix naive attention writes to HBM
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v


def attention_tiled(q, k, v, tile: int = 64) -> np.ndarray:
    """The same result computed over K/V tiles of `tile` keys with an online softmax (R27).

    For each tile the running row maximum m, normaliser l and output o are updated:
    m' = max(m, rowmax(S_tile)); l' = l e^(m - m') + rowsum(e^(S_tile - m'));
    o' = o e^(m - m') + e^(S_tile - m') V_tile; the answer is o / l. No (Nq, Nk) matrix
    is ever formed, yet the result equals `attention_naive` up to rounding.

    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(5, 8)), rng.normal(size=(37, 8)), rng.normal(size=(37, 8))
    >>> bool(np.allclose(attention_tiled(q, k, v, tile=4), attention_naive(q, k, v)))
    True
    """
    q, k, v = _qkv(q, k, v)
    check_int("tile", tile, minimum=1)
    scale = 1.0 / math.sqrt(q.shape[1])
    m = np.full((q.shape[0], 1), -np.inf)
    l = np.zeros((q.shape[0], 1))
    o = np.zeros((q.shape[0], v.shape[1]))
    for start in range(0, k.shape[0], tile):
        s = q @ k[start:start + tile].T * scale       # (Nq, tile) only
        m_new = np.maximum(m, s.max(axis=1, keepdims=True))
        corr = np.exp(m - m_new)
        p = np.exp(s - m_new)
        l = l * corr + p.sum(axis=1, keepdims=True)
        o = o * corr + p @ v[start:start + tile]
        m = m_new
    return o / l


# --------------------------------------------------------------------------------------------
# FlashDecoding: split the KV sequence across SMs
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class SplitKVParams:
    """A decode step's attention for one layer, split over the KV length."""

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    context_tokens: int = 32768
    batch: int = 1
    kv_dtype: str = "bf16"
    max_splits: int = 128
    blocks_per: str = "kv_head"         # "kv_head": the query heads sharing a KV head in one thread block
                                        # (GQA-packed decode kernels); "query_head": one per query head, as
                                        # FlashAttention-2 launches them

    def __post_init__(self) -> None:
        check_int("context_tokens", self.context_tokens, minimum=1)
        check_int("batch", self.batch, minimum=1)
        bytes_per_elem(self.kv_dtype)
        check_int("max_splits", self.max_splits, minimum=1)
        check_choice("blocks_per", self.blocks_per, BLOCKS_PER, "values")


@dataclass(frozen=True)
class SplitKVResult:
    """Attention time of one decode step (one layer) for each number of KV splits."""

    splits: np.ndarray                  # (n,) 1, 2, 4, ...
    work_units: np.ndarray              # (n,) batch x (KV or query) heads x splits thread blocks
    sm_occupancy: np.ndarray            # (n,) min(1, work units / SMs)
    kv_bytes: float                     # K and V read (same for every split)
    combine_bytes: np.ndarray           # (n,) partial outputs written and re-read by the reduction
    time_s: np.ndarray                  # (n,)
    best_splits: int
    speedup_best_vs_unsplit: float
    calibration_note: str


def split_kv_decode(params: SplitKVParams = SplitKVParams(),
                    calibration: Optional[Calibration] = None) -> SplitKVResult:
    """Decode attention time vs the number of KV splits (FlashDecoding, Dao et al. 2023).

    Simple model: the kernel launches batch x heads x splits thread blocks, with one block
    per KV head (kernels that pack the query heads of a KV group together) or per query
    head (FlashAttention-2; each block then reads its KV head's cache, the others of its
    group hitting L2); with fewer blocks than SMs only that share of the GPU pulls from HBM, so
    time = launch + KV bytes / (BW x min(1, blocks / SMs)) + a second launch and the
    partial outputs (fp32, head_dim + 2 numbers per query head and split) when split.

    >>> r = split_kv_decode()                    # one sequence, 8 KV heads, 132 SMs
    >>> int(r.best_splits) >= 16 and r.speedup_best_vs_unsplit > 5
    True
    """
    p = params
    m, g = resolve_model(p.model), resolve_gpu(p.gpu)
    cal = calibration if calibration is not None else for_gpu(g)
    splits = 2 ** np.arange(int(math.log2(p.max_splits)) + 1)
    units = p.batch * (m.num_kv_heads if p.blocks_per == "kv_head" else m.num_heads) * splits
    occ = np.minimum(1.0, units / g.sm_count)
    kv = 2.0 * m.num_kv_heads * m.head_dim * p.context_tokens * p.batch * bytes_per_elem(p.kv_dtype)
    combine = np.where(splits > 1, 2.0 * p.batch * m.num_heads * splits * (m.head_dim + 2) * 4.0, 0.0)
    bw = cal.bandwidth_bytes_per_s
    launch = cal.launch_overhead_s
    t = launch + kv / (bw * occ) + np.where(splits > 1, launch + combine / bw, 0.0)
    best = int(np.argmin(t))
    return SplitKVResult(splits=splits, work_units=units, sm_occupancy=occ, kv_bytes=kv, combine_bytes=combine,
                         time_s=t, best_splits=int(splits[best]), speedup_best_vs_unsplit=float(t[0] / t[best]),
                         calibration_note=cal.note)
