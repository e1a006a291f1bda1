"""Prefix caching across requests, and where a cached prefix can wait (chapter 18).

A workload of chats and document questions runs through a cache of KV blocks. Every
request's prompt begins with the same system prompt; some conversations then carry a
document (one of a few, some far more asked about than others); each turn of a
conversation re-sends the conversation so far, so turn k's prompt is turn k-1's prompt,
its answer and a new message. A cache that kept everything would compute each of those
tokens once. A cache of a given size keeps what was used most recently.

The cache is chapter 07's (`sim.paging.BlockManager`): 16-token blocks named by chained
hashes (`sim.paging.block_hash`), so a block stands for its whole prefix; a request looks
its prompt's leading full blocks up, computes the rest, and when it ends leaves its full
blocks cached, its last block first, so a prefix's head is the last of it to be evicted;
eviction takes the least recently freed block. The simulation here is that cache run on a
workload at every size at once:

- Requests run one at a time, in arrival order (assumed: a running batch would pin some
  blocks; the capacity here is what is kept between requests). The last generated token's
  K and V are never computed (it is not fed back), and a request whose prompt is cached
  whole still computes its last token, as `BlockManager` counts them.
- A request touches a prefix whole, so a prefix's head is always at least as recent as its
  tail, and the blocks a cache of C blocks holds are the C most recently touched: the LRU
  stack of Mattson et al. [MATTSON70]. One pass keeps the order of recency of the
  workload's pieces (the system prompt, each document, each conversation's history); a
  piece that is x tokens deep in that order when it is looked up is found in a cache of C
  tokens up to C - x of its tokens. `tests/test_sim_prefix_cache.py` replays workloads
  through `BlockManager` itself and finds the same hits, request by request.
- A radix tree (SGLang's RadixAttention [SGLANG]) matches prefixes token by token rather
  than in full blocks: the same pass with one-token blocks. It finds the tail of each
  turn that a hash of full blocks cannot name (up to 15 tokens a turn).

Times are the calibrated step costs (`sim.forward`): time to first token = the prefill of
the tokens not found, after those found, on an otherwise idle GPU (queueing: chapter 05).

>>> r = prefix_cache(PrefixCacheParams())          # a cache of 32,768 tokens
>>> r.requests, f"{r.hit_rate:.1%}", f"{r.hit_rate_unbounded:.1%}"
(428, '57.5%', '93.0%')
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Optional

import numpy as np

from sim.batch import Precision
from sim.checks import check_choice, check_int, check_positive, check_range, checked_params
from sim.forward import step_cost
from sim.hardware import get as get_gpu
from sim.kernel_model import Calibration
from sim.kv import kv_budget_bytes, kv_bytes_per_token
from sim.kv_blocks import DEFAULT_BLOCK_SIZE
from sim.long_context import chunked_prefill_s, full_prefill_s
from sim.models import get as get_model
from sim.models import names as model_names
from sim.parallel import PCIE_GEN5_X16_BYTES_PER_S

CAPACITY_MIN, CAPACITY_MAX = 2 ** 12, 2 ** 24           # the sweep: 4K to 16M tokens of cache
MAX_TURNS = 64                                           # turns of one conversation at most
MAX_REQUESTS = 4000                                      # requests in a workload at most


@checked_params
@dataclass(frozen=True)
class PrefixCacheParams:
    """A seeded workload, a model on a GPU, and the cache's size."""

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    kv_dtype: str = "bf16"
    cache_tokens: int = 32768           # tokens of KV the cache keeps (its bytes: x the model's bytes a token)
    conversations: int = 100            # conversations that start during the run
    rate_per_s: float = 1.0             # new conversations a second (Poisson)
    turns: float = 4.0                  # turns per conversation, mean (geometric: 1, 2, ... with this mean)
    think_s: float = 30.0               # mean time from a turn's request to the next turn's (exponential)
    system_tokens: int = 1024           # the system prompt every request begins with
    user_tokens: int = 128              # a user message, mean (uniform from half to 1.5x)
    output_tokens: int = 256            # an answer, mean (uniform from half to 1.5x)
    document_share: float = 0.3         # share of conversations that open with a document
    documents: int = 10                 # distinct documents (the k-th asked about in proportion to 1/k)
    document_tokens: int = 8192         # tokens of each document
    block_tokens: int = DEFAULT_BLOCK_SIZE
    seed: int = 0
    points: int = 49                    # cache sizes on the sweep, log-spaced

    LIMITS = {"conversations": (1000, "conversations"), "rate_per_s": (1000.0, "conversations/s"),
              "turns": (16.0, "turns"), "think_s": (86400.0, "s"), "system_tokens": (65536, "tokens"),
              "user_tokens": (32768, "tokens"), "output_tokens": (32768, "tokens"),
              "documents": (1000, "documents"), "document_tokens": (262144, "tokens"),
              "block_tokens": (256, "tokens"), "cache_tokens": (2 ** 32, "tokens"), "points": (257, "points")}

    def __post_init__(self) -> None:
        check_choice("model", self.model, model_names())
        get_gpu(self.gpu)
        check_choice("kv_dtype", self.kv_dtype, ("bf16", "fp8"))
        check_int("cache_tokens", self.cache_tokens, minimum=1)
        check_int("conversations", self.conversations, minimum=1)
        check_positive("rate_per_s", self.rate_per_s)
        check_range("turns", self.turns, 1.0, 16.0)
        check_positive("think_s", self.think_s)
        check_int("system_tokens", self.system_tokens, minimum=0)
        check_int("user_tokens", self.user_tokens, minimum=2)
        check_int("output_tokens", self.output_tokens, minimum=2)
        check_range("document_share", self.document_share, 0.0, 1.0)
        check_int("documents", self.documents, minimum=1)
        check_int("document_tokens", self.document_tokens, minimum=1)
        check_int("block_tokens", self.block_tokens, minimum=1)
        check_int("seed", self.seed, minimum=0)
        check_int("points", self.points, minimum=2)


@dataclass(frozen=True)
class Workload:
    """The requests of a run, in arrival order (arrays of one entry per request)."""

    arrival_s: np.ndarray          # when it arrives
    conversation: np.ndarray       # which conversation (0..)
    turn: np.ndarray               # its turn in the conversation (1..)
    document: np.ndarray           # the document it carries, -1 for none
    prefix_tokens: np.ndarray      # system prompt + document
    history_tokens: np.ndarray     # the conversation's earlier messages and answers, re-sent
    user_tokens: np.ndarray        # the new message
    output_tokens: np.ndarray      # the answer it gets

    @property
    def prompt_tokens(self) -> np.ndarray:
        return self.prefix_tokens + self.history_tokens + self.user_tokens


def make_workload(p: PrefixCacheParams) -> Workload:
    """The seeded workload of `p`: conversations start as a Poisson stream; each has a
    geometric number of turns, exponential think times, and with probability
    `document_share` a document, drawn with probability 1/k for the k-th."""
    rng = np.random.default_rng(p.seed)
    n = p.conversations
    starts = np.cumsum(rng.exponential(1.0 / p.rate_per_s, n))
    turns = np.minimum(rng.geometric(1.0 / p.turns, n), MAX_TURNS)
    weights = 1.0 / np.arange(1, p.documents + 1)
    has_doc = rng.random(n) < p.document_share
    doc = np.where(has_doc, rng.choice(p.documents, size=n, p=weights / weights.sum()), -1)
    total = int(turns.sum())
    if total > MAX_REQUESTS:
        raise ValueError(f"the workload has {total:,} requests (conversations x turns); the simulation "
                         f"takes at most {MAX_REQUESTS:,}: fewer conversations or turns")
    conv = np.repeat(np.arange(n), turns.astype(np.intp))
    first = np.cumsum(turns) - turns                          # each conversation's first request
    turn = np.arange(total) - np.repeat(first, turns.astype(np.intp)) + 1
    gaps = np.where(turn > 1, rng.exponential(p.think_s, total), 0.0)
    arrival = starts[conv] + _cumsum_within(gaps, first, turns)

    def around(mean: int) -> np.ndarray:
        return rng.integers(mean // 2, mean + mean // 2 + 1, total)
    user, out = around(p.user_tokens), around(p.output_tokens)
    history = _cumsum_within(user + out, first, turns) - (user + out)     # earlier turns' messages and answers
    prefix = p.system_tokens + np.where(doc[conv] >= 0, p.document_tokens, 0)
    order = np.argsort(arrival, kind="stable")
    return Workload(arrival[order], conv[order], turn[order], doc[conv][order], prefix[order],
                    history[order], user[order], out[order])


def _cumsum_within(x: np.ndarray, first: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Running sums of `x` restarting at each group (groups of `counts` entries from `first`)."""
    c = np.cumsum(x)
    before = np.where(first > 0, c[np.maximum(first - 1, 0)], 0)
    return c - np.repeat(before, counts.astype(np.intp))


@dataclass(frozen=True)
class Lookups:
    """What each request finds, as pieces: one row per (request, piece it looks up) with
    its depth in the order of recency and its size, both in tokens of whole blocks."""

    request: np.ndarray            # which request
    depth_tokens: np.ndarray       # tokens touched more recently than the piece
    size_tokens: np.ndarray        # the piece's tokens a cache could hold (whole blocks)

    @cached_property
    def corners(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Corners of sum clip(C - d, 0, s) = sum relu(C - d) - relu(C - d - s): the sorted
        corners, and the running sums of the slopes and of slope x corner up to each (sorted
        once per Lookups, which `workload_lookups` keeps)."""
        corners = np.concatenate([self.depth_tokens, self.depth_tokens + self.size_tokens])
        slopes = np.concatenate([np.ones(self.depth_tokens.size), -np.ones(self.depth_tokens.size)])
        order = np.argsort(corners, kind="stable")
        corners, slopes = corners[order], slopes[order]
        return corners, np.cumsum(slopes), np.cumsum(slopes * corners)


def lookups(w: Workload, system_tokens: int, document_tokens: int, blocks: tuple) -> list:
    """One pass of the LRU stack over the workload's pieces, at each of `blocks` (tokens a
    block; 1: token by token): a `Lookups` for each.

    The pieces: the system prompt's full blocks; a document's blocks from the first that
    holds any of it (a block across the boundary is named by both, so it belongs to the
    later piece) to its last full one; a conversation's blocks after its prefix, up to the
    last full block of what its last turn left cached (prompt and answer, less the last
    token, whose K and V are never computed). The order of recency is the same at every
    block size; the pieces' sizes are not.

    While a request runs, its last block, not yet full, takes a block of the cache too: the
    cache then keeps one block fewer of the others, and what it evicts for that is gone.
    So a piece's depth is the deepest it has been, since it was last touched, counting
    that block at each request that had one (`BlockManager` does the same; a radix tree,
    `block` 1, has no such block)."""
    nb = len(blocks)
    kept = w.prompt_tokens + w.output_tokens - 1                   # tokens with K and V, per request
    sys_size, doc_size, left, partial = [], [], [], []
    for block in blocks:
        sys_size.append(int(system_tokens // block * block))
        doc_size.append(int((system_tokens + document_tokens) // block * block) - sys_size[-1])
        # a conversation's piece after each request: its whole blocks past the prefix
        left.append((kept // block * block - w.prefix_tokens // block * block).tolist())
        partial.append((kept % block != 0).tolist() if block > 1 else [False] * kept.size)
    convs, docs = w.conversation.tolist(), w.document.tolist()
    order: list = []                       # pieces, most recent first
    sizes: list = [[] for _ in blocks]     # their tokens at each block size, in the same order
    size: dict = {}                        # piece -> its tokens at each block size now
    touched: dict = {}                     # piece -> the last request that touched it
    snap: list = [None] * nb               # per block size: (order, sizes, request) after the last
                                           # request with a partial block
    out = [([], [], []) for _ in blocks]   # per block size: request, depth, size of each lookup
    find = order.index
    for i in range(len(convs)):
        conv, doc = ("c", convs[i]), docs[i]
        path = [("s",), ("d", doc), conv] if doc >= 0 else [("s",), conv]
        present = []                       # where the path's pieces are in the order
        for piece in path:
            held = size.get(piece)
            if held is None:
                continue
            at = find(piece)
            present.append(at)
            for k in range(nb):
                if not held[k]:
                    continue
                req, depth, held_sizes = out[k]
                if partial[k][i - 1]:
                    deepest = sum(sizes[k][:at]) + blocks[k]
                else:
                    deepest = sum(sizes[k][:at])
                    s = snap[k]
                    if s is not None and s[2] >= touched[piece]:
                        deepest = max(deepest, sum(s[1][:s[0].index(piece)]) + blocks[k])
                req.append(i)
                depth.append(deepest)
                held_sizes.append(held[k])
        for at in sorted(present, reverse=True):      # touched: to the front, the head first
            del order[at]
            for k in range(nb):
                del sizes[k][at]
        size[("s",)] = sys_size
        if doc >= 0:
            size[("d", doc)] = doc_size
        size[conv] = [left[k][i] for k in range(nb)]
        order[:0] = path
        for k in range(nb):
            sizes[k][:0] = [size[piece][k] for piece in path]
            if partial[k][i] and i + 1 < len(convs) and not partial[k][i + 1]:    # (the only ones read)
                snap[k] = (order[:], sizes[k][:], i)
        for piece in path:
            touched[piece] = i
    return [Lookups(np.array(r, dtype=np.int64), np.array(d, dtype=np.float64), np.array(h, dtype=np.float64))
            for r, d, h in out]


def hit_tokens(lk: Lookups, w: Workload, capacity_tokens) -> np.ndarray:
    """(requests, capacities) prompt tokens found in a cache of each of `capacity_tokens`:
    each piece up to what fits above it, at most the prompt less its last token."""
    cap = np.atleast_1d(np.asarray(capacity_tokens, dtype=np.float64))
    found = np.clip(cap[None, :] - lk.depth_tokens[:, None], 0.0, lk.size_tokens[:, None])
    per_request = np.zeros((w.arrival_s.size, cap.size))
    if lk.request.size:                    # (lookups come in request order)
        rows, first = np.unique(lk.request, return_index=True)
        per_request[rows] = np.add.reduceat(found, first, axis=0)
    return np.minimum(per_request, (w.prompt_tokens - 1)[:, None])


# the fields that do not change the workload or what its requests find, set to one value
# so that `workload_lookups` reuses one pass for every model, GPU and cache size
WORKLOAD_FREE = {"model": "llama-3.1-8b", "gpu": "H100-SXM", "kv_dtype": "bf16", "cache_tokens": 1, "points": 2}


@lru_cache(maxsize=16)
def workload_lookups(p: PrefixCacheParams) -> tuple[Workload, list]:
    """`p`'s workload and its `Lookups` in blocks of `p.block_tokens` and token by token
    (kept: moving the cache size, the model or the GPU does not make them again)."""
    w = make_workload(p)
    return w, lookups(w, p.system_tokens, p.document_tokens, (p.block_tokens, 1))


def found_in_all(lk: Lookups, capacity_tokens) -> np.ndarray:
    """The prompt tokens a cache of each of `capacity_tokens` finds over the whole workload:
    sum over lookups of clip(C - depth, 0, size), a piecewise-linear function of C summed at
    its sorted corners (numpy, no table of lookups by sizes). Equal to
    `hit_tokens(...).sum(axis=0)`: the cap there never binds, as every prompt ends with a new
    message of at least one token that no cache holds."""
    c = np.asarray(capacity_tokens, dtype=np.float64)
    if not lk.depth_tokens.size:
        return np.zeros(c.shape)
    corners, slope_sum, offset_sum = lk.corners
    finite = np.where(np.isinf(c), 0.0, c)
    n = np.searchsorted(corners, finite, side="right")
    at = np.where(n > 0, finite * slope_sum[np.maximum(n - 1, 0)] - offset_sum[np.maximum(n - 1, 0)], 0.0)
    # (whole tokens at whole-token capacities: rounded, so no last-bit error of the sums remains)
    return np.where(np.isinf(c), lk.size_tokens.sum(), np.round(at))


def smallest_cache_for(lk: Lookups, tokens: float, block: int, at_least: int) -> int:
    """The smallest cache, in whole blocks of `block` tokens and at least `at_least` tokens,
    that finds `tokens` prompt tokens in all (`found_in_all` is piecewise linear and never
    falls: the corner past which it reaches `tokens`, then along the segment before it)."""
    least = -(-at_least // block) * block
    if tokens <= 0 or not lk.depth_tokens.size:
        return least
    corners, slope_sum, offset_sum = lk.corners
    values = corners * slope_sum - offset_sum                    # found_in_all at each corner
    k = int(np.searchsorted(values, tokens, side="left"))      # the first corner that reaches it
    if k == 0:
        return least
    if k >= corners.size:
        raise ValueError(f"no cache finds {tokens:,.0f} tokens: the workload repeats {values[-1]:,.0f}")
    c = corners[k - 1] + (tokens - values[k - 1]) / slope_sum[k - 1] if slope_sum[k - 1] > 0 else corners[k]
    return max(int(-(-np.ceil(c - 1e-9) // block)) * block, least)


@lru_cache(maxsize=16)
def uncached_prefill_s(wp: PrefixCacheParams, model: str, gpu: str, kv_dtype: str) -> np.ndarray:
    """(requests,) every request's prefill with no cache, with the shipped calibration
    (kept: it does not change with the cache's size). Read-only."""
    w, _ = workload_lookups(wp)
    cost = step_cost(model, gpu, Precision(kv_dtype=kv_dtype))
    t = full_prefill_s(cost, get_model(model).num_layers, w.prompt_tokens)
    t.flags.writeable = False
    return t


@dataclass(frozen=True)
class PrefixCacheResult:
    """The workload through caches of every size on the sweep, and at the chosen one."""

    params: PrefixCacheParams
    requests: int
    prompt_tokens: int                      # all prompts' tokens, summed
    capacities_tokens: np.ndarray           # the sweep of cache sizes (tokens)
    hit_rate_curve: np.ndarray              # share of prompt tokens found, blocks of block_tokens (NaN below
                                            # the largest request)
    hit_rate_curve_radix: np.ndarray        # the same, token by token (a radix tree)
    hit_rate: float                         # at cache_tokens, in blocks
    hit_rate_radix: float                   # at cache_tokens, token by token
    hit_rate_unbounded: float               # with room for everything, in blocks
    hit_rate_unbounded_radix: float
    tokens_saved: int                       # prompt tokens not computed, at cache_tokens, in blocks
    capacity_for_most_tokens: int           # the smallest cache (whole blocks, holding the largest request)
                                            # that finds 90% of what the unbounded one finds
    prefill_s: float                        # every request's prefill, summed, at cache_tokens
    prefill_s_uncached: float               # the same with no cache
    ttft_s: np.ndarray                      # (requests,) prefill at cache_tokens (time to first token, idle GPU)
    ttft_s_uncached: np.ndarray             # (requests,) with no cache
    ttft_percentiles_s: dict                # "p50", "p99" -> (at cache_tokens, no cache); numpy's linear percentiles
    largest_request_tokens: int             # prompt + answer of the largest request
    kv_bytes_per_token: float
    kv_room_tokens: float                   # the GPU's room for KV (sim.kv.kv_budget_bytes), in tokens
    model: str
    gpu: str
    calibration_note: str


def prefix_cache(params: PrefixCacheParams = PrefixCacheParams(),
                 calibration: Optional[Calibration] = None) -> PrefixCacheResult:
    """The workload of `params` through caches from CAPACITY_MIN to CAPACITY_MAX tokens and
    at `cache_tokens`: hit rates in blocks and token by token, and the prefill times."""
    p = params
    m, gpu = get_model(p.model), get_gpu(p.gpu)
    per_token = kv_bytes_per_token(m, p.kv_dtype)
    wp = dataclasses.replace(p, **WORKLOAD_FREE)
    w, lks = workload_lookups(wp)
    largest = int((w.prompt_tokens + w.output_tokens).max())
    if p.cache_tokens < largest:
        raise ValueError(f"a cache of {p.cache_tokens:,} tokens cannot hold the largest request ({largest:,} "
                         f"tokens, prompt and answer): a larger cache, or a shorter document or fewer turns")
    sweep = np.geomspace(CAPACITY_MIN, CAPACITY_MAX, p.points)
    caps = np.concatenate([sweep, [np.inf]])
    total = float(w.prompt_tokens.sum())
    rates = {}
    for (name, block), lk in zip((("blocks", p.block_tokens), ("radix", 1)), lks):
        # a cache of whole blocks: the capacity's tokens rounded down to blocks
        rates[name] = found_in_all(lk, np.floor(caps / block) * block) / total
    found = hit_tokens(lks[0], w, [p.cache_tokens // p.block_tokens * p.block_tokens])[:, 0].astype(np.int64)
    radix_found = float(found_in_all(lks[1], p.cache_tokens))
    too_small = sweep < largest
    curve = np.where(too_small, np.nan, rates["blocks"][:-1])
    curve_radix = np.where(too_small, np.nan, rates["radix"][:-1])
    most = smallest_cache_for(lks[0], 0.9 * rates["blocks"][-1] * total, p.block_tokens, largest)
    cost = step_cost(p.model, p.gpu, Precision(kv_dtype=p.kv_dtype), calibration)
    groups = [(m.num_layers, None)]
    ttft, _ = chunked_prefill_s(cost, groups, w.prompt_tokens - found, found)
    ttft0 = uncached_prefill_s(wp, p.model, p.gpu, p.kv_dtype) if calibration is None else \
        chunked_prefill_s(cost, groups, w.prompt_tokens, 0)[0]
    return PrefixCacheResult(
        p, int(w.arrival_s.size), int(total), sweep, curve, curve_radix,
        float(found.sum() / total), radix_found / total, float(rates["blocks"][-1]), float(rates["radix"][-1]),
        int(found.sum()), int(most),
        float(ttft.sum()), float(ttft0.sum()), ttft, ttft0,
        {f"p{q}": (float(np.percentile(ttft, q)), float(np.percentile(ttft0, q))) for q in (50, 99)},
        largest, per_token,
        float(kv_budget_bytes(m, gpu, Precision(kv_dtype=p.kv_dtype))) / per_token,
        m.display_name, gpu.display_name, cost.calibration.note)


# --------------------------------------------------------------------------------------------
# Where an evicted prefix can wait: bring its KV back, or compute it again
# --------------------------------------------------------------------------------------------

# (name, label, bytes/s one way, source): each link's rate as its specification gives it;
# no protocol, file-system or software overhead, so each bring-back time is a lower bound
TIERS = (
    ("c2c", "CPU memory over NVLink-C2C (GH200)", 450e9,
     "GH200 datasheet: NVLink-C2C 900 GB/s between Grace and Hopper, both ways together"),
    ("pcie5", "CPU memory over PCIe Gen5 x16", PCIE_GEN5_X16_BYTES_PER_S,
     "PCIe 5.0: 32 GT/s per lane, 16 lanes, 128b/130b encoding"),
    ("rdma", "another server's memory, 400 Gb/s RDMA", 400e9 / 8,
     "one 400 Gb/s InfiniBand NDR or RoCE port"),
    ("nvme", "local NVMe SSD (PCIe Gen5 x4)", 32e9 * 4 / 8 * 128 / 130,
     "the drive's link: 4 lanes of PCIe 5.0"),
    ("net100", "remote storage over 100 Gb/s Ethernet", 100e9 / 8,
     "one 100 Gb/s port"),
)
PREFIX_MIN, PREFIX_MAX = 256, 2 ** 20          # the sweep of prefix lengths


@checked_params
@dataclass(frozen=True)
class OffloadParams:
    """A model on a GPU, its KV format, and the prefix to bring back."""

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    kv_dtype: str = "bf16"
    prefix_tokens: int = 32768          # the prefix whose KV is elsewhere
    link_share: float = 1.0             # share of each link's rate a transfer achieves (assumed; 1: the spec's)
    points: int = 49                    # prefix lengths on the sweep, log-spaced

    LIMITS = {"prefix_tokens": (PREFIX_MAX, "tokens"), "points": (257, "points")}

    def __post_init__(self) -> None:
        check_choice("model", self.model, model_names())
        get_gpu(self.gpu)
        check_choice("kv_dtype", self.kv_dtype, ("bf16", "fp8"))
        check_int("prefix_tokens", self.prefix_tokens, minimum=1)
        check_range("link_share", self.link_share, 0.01, 1.0)
        check_int("points", self.points, minimum=2)


@dataclass(frozen=True)
class OffloadResult:
    """Per tier (keys of TIERS' names): the time to bring a prefix's KV back into HBM, and
    the prefill that would compute it again, at the chosen length and along the sweep."""

    params: OffloadParams
    lengths: np.ndarray                 # the sweep's prefix lengths (tokens)
    recompute_curve_s: np.ndarray       # (lengths,) prefill of a prefix that long, from nothing
    load_curve_s: dict                  # tier -> (lengths,) its bytes over the tier's link
    recompute_s: float                  # at prefix_tokens
    load_s: dict                        # tier -> at prefix_tokens
    break_even_tokens: dict             # tier -> the shortest prefix whose load is quicker than its prefill
                                        # (on the sweep, interpolated; 0: at every length; inf: at none)
    kv_bytes: float                     # bytes of the chosen prefix's KV
    kv_bytes_per_token: float
    model: str
    gpu: str
    calibration_note: str


def offload(params: OffloadParams = OffloadParams(), calibration: Optional[Calibration] = None) -> OffloadResult:
    """Bring-back time per tier against the prefill that recomputes the same KV.

    A prefix's KV is `kv_bytes_per_token` x tokens bytes: over a link of B bytes/s, of which
    the transfer achieves `link_share`, it takes that / (B x link_share), growing in step with the length; its prefill takes the calibrated model's
    chunked prefill (`sim.long_context.chunked_prefill_s`), whose attention grows with the
    square of the length. Bringing back wins from the length where the two cross.

    >>> r = offload(OffloadParams(prefix_tokens=4096))
    >>> r.kv_bytes / 2 ** 20                     # 128 KiB a token, Llama 3.1 8B, bf16
    512.0
    >>> r.load_s["pcie5"] < r.recompute_s < r.load_s["net100"] * 10
    True
    """
    p = params
    m, gpu = get_model(p.model), get_gpu(p.gpu)
    per_token = kv_bytes_per_token(m, p.kv_dtype)
    lengths = np.unique(np.round(np.geomspace(PREFIX_MIN, PREFIX_MAX, p.points)).astype(np.int64))
    cost = step_cost(p.model, p.gpu, Precision(kv_dtype=p.kv_dtype), calibration)
    pre = full_prefill_s(cost, m.num_layers, np.concatenate([[p.prefix_tokens], lengths]))
    curve = {}
    chosen = {}
    even = {}
    for name, _, rate, _ in TIERS:
        t = np.concatenate([[p.prefix_tokens], lengths]) * per_token / (rate * p.link_share)
        chosen[name], curve[name] = float(t[0]), t[1:]
        even[name] = crossing(lengths, t[1:], pre[1:])
    return OffloadResult(p, lengths, pre[1:], curve, float(pre[0]), chosen, even, p.prefix_tokens * per_token,
                         per_token, m.display_name, gpu.display_name, cost.calibration.note)


def crossing(x: np.ndarray, load: np.ndarray, recompute: np.ndarray) -> float:
    """The smallest x (log-interpolated between sweep points) from which `load` stays below
    `recompute` to the end of the sweep: 0 if it is below everywhere, inf if it never ends
    below.

    >>> round(crossing(np.array([1.0, 10.0, 100.0]), np.array([1.0, 10.0, 100.0]), np.array([0.1, 10.0, 1000.0])), 9)
    10.0
    """
    quicker = load < recompute
    if quicker.all():
        return 0.0
    if not quicker[-1]:
        return float("inf")
    i = int(np.flatnonzero(~quicker)[-1])          # the last point where loading is not quicker
    d0, d1 = np.log(load[i] / recompute[i]), np.log(load[i + 1] / recompute[i + 1])
    f = d0 / (d0 - d1) if d0 != d1 else 0.0
    return float(np.exp(np.log(x[i]) + f * (np.log(x[i + 1]) - np.log(x[i]))))
