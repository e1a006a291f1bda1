"""Chapter 18's sims: the prefix cache over a workload (checked against chapter 07's block
manager, request by request, and against closed forms) and the offload tiers."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from sim import prefix_cache as pc
from sim.kv import kv_bytes_per_token
from sim.paging import BlockManager


def replay(p: pc.PrefixCacheParams, blocks: int) -> tuple[pc.Workload, np.ndarray]:
    """The workload of `p` through sim.paging.BlockManager with `blocks` blocks, one request
    at a time: each request's prompt added (the tokens it reports found), its answer stored
    less the last token, then freed. Tokens: the system prompt 1..S, every document and every
    message and answer fresh numbers of their own."""
    w = pc.make_workload(p)
    bm = BlockManager(num_blocks=blocks, block_size=p.block_tokens)
    system = list(range(1, p.system_tokens + 1))
    documents: dict = {}
    history: dict = {}
    counter = [10 ** 7]

    def fresh(n: int) -> list:
        counter[0] += n
        return list(range(counter[0] - n, counter[0]))
    found = []
    for i in range(w.arrival_s.size):
        c, d = int(w.conversation[i]), int(w.document[i])
        if d >= 0 and d not in documents:
            documents[d] = fresh(p.document_tokens)
        h = history.setdefault(c, [])
        user, answer = fresh(int(w.user_tokens[i])), fresh(int(w.output_tokens[i]))
        prompt = system + documents.get(d, []) + h + user
        assert len(prompt) == w.prompt_tokens[i]
        found.append(bm.add_request(f"r{i}", prompt))
        for t in answer[:-1]:
            bm.append_token(f"r{i}", t)
        bm.free_request(f"r{i}")
        bm.check_invariants()
        h.extend(user + answer)
    return w, np.array(found)


def smallest_blocks(p: pc.PrefixCacheParams) -> int:
    w = pc.make_workload(p)
    return -(-int((w.prompt_tokens + w.output_tokens).max()) // p.block_tokens)


SMALL = dict(conversations=20, rate_per_s=2.0, think_s=5.0, system_tokens=100, user_tokens=40, output_tokens=60,
             document_share=0.5, documents=3, document_tokens=500)


@pytest.mark.parametrize("extra", [0, 1, 7, 40, 10_000])
def test_the_lru_stack_finds_what_the_block_manager_finds_request_by_request(extra):
    p = pc.PrefixCacheParams(**SMALL)
    blocks = smallest_blocks(p) + extra
    w, got = replay(p, blocks)
    (lk,) = pc.lookups(w, p.system_tokens, p.document_tokens, (p.block_tokens,))
    want = pc.hit_tokens(lk, w, [blocks * p.block_tokens])[:, 0]
    assert got.tolist() == want.astype(int).tolist()
    assert 0 < got.sum() < w.prompt_tokens.sum()


@pytest.mark.parametrize("seed", range(12))
def test_random_small_workloads_agree_with_the_block_manager(seed):
    """Odd sizes (prompts ending mid-block, a system prompt shorter than a block, blocks of
    1 and 4 tokens, caches from just large enough to ten times that)."""
    rng = np.random.default_rng(seed)
    p = pc.PrefixCacheParams(
        conversations=int(rng.integers(2, 16)), rate_per_s=float(rng.choice([0.1, 1.0, 10.0])),
        turns=float(rng.uniform(1, 5)), think_s=float(rng.choice([0.5, 5.0, 50.0])),
        system_tokens=int(rng.choice([0, 5, 16, 37])), user_tokens=int(rng.integers(2, 30)),
        output_tokens=int(rng.integers(2, 30)), document_share=float(rng.choice([0.0, 0.5, 1.0])),
        documents=int(rng.integers(1, 4)), document_tokens=int(rng.integers(1, 80)),
        block_tokens=int(rng.choice([1, 4, 16])), seed=seed)
    need = smallest_blocks(p)
    for blocks in (need, need + 3, 3 * need, 10 * need):
        w, got = replay(p, blocks)
        (lk,) = pc.lookups(w, p.system_tokens, p.document_tokens, (p.block_tokens,))
        want = pc.hit_tokens(lk, w, [blocks * p.block_tokens])[:, 0]
        assert got.tolist() == want.astype(int).tolist(), (blocks, np.flatnonzero(got != want)[:5])


def test_a_shared_system_prompt_alone_is_found_by_every_request_but_the_first():
    """One turn each, no documents: request i > 0 finds the system prompt's full blocks and
    nothing else (its message is new), with room for everything."""
    p = pc.PrefixCacheParams(conversations=50, turns=1.0, system_tokens=1000, document_share=0.0,
                             cache_tokens=2 ** 20)
    r = pc.prefix_cache(p)
    w = pc.make_workload(p)
    assert (w.turn == 1).all() and r.requests == 50
    found = 49 * (1000 // 16 * 16)
    assert r.tokens_saved == found
    assert r.hit_rate == pytest.approx(found / w.prompt_tokens.sum(), rel=1e-12)
    assert r.hit_rate_unbounded == r.hit_rate
    assert r.hit_rate_unbounded_radix == pytest.approx(49 * 1000 / w.prompt_tokens.sum(), rel=1e-12)


def test_each_turn_finds_the_conversation_so_far_less_its_unfinished_block():
    """One conversation, no system prompt or document, a cache with room for everything:
    turn k finds the whole blocks of turn k-1's prompt and answer less the last token."""
    p = pc.PrefixCacheParams(conversations=1, turns=8.0, system_tokens=0, document_share=0.0, seed=5)
    w = pc.make_workload(p)
    (lk,) = pc.lookups(w, 0, p.document_tokens, (16,))
    found = pc.hit_tokens(lk, w, [np.inf])[:, 0]
    assert w.arrival_s.size >= 3
    want = [0] + [(int(w.prompt_tokens[k - 1] + w.output_tokens[k - 1]) - 1) // 16 * 16
                  for k in range(1, w.arrival_s.size)]
    assert found.tolist() == want


def test_the_sum_over_the_workload_is_the_sum_of_every_request():
    """found_in_all (corners of a piecewise-linear sum) equals hit_tokens summed over requests."""
    p = pc.PrefixCacheParams(turns=6.0, document_share=0.5)
    w, lks = pc.workload_lookups(dataclasses.replace(p, **pc.WORKLOAD_FREE))
    caps = np.concatenate([np.floor(np.geomspace(4096, 2 ** 24, 37)), [12_345.0, 16_000.0, 0.0, np.inf]])
    for lk in lks:
        assert pc.found_in_all(lk, caps).tolist() == pc.hit_tokens(lk, w, caps).sum(axis=0).tolist()


def test_hit_rates_grow_with_the_cache_and_reach_the_unbounded_one():
    r = pc.prefix_cache()
    drawn = r.hit_rate_curve[~np.isnan(r.hit_rate_curve)]
    assert (np.diff(drawn) >= 0).all() and drawn[-1] == pytest.approx(r.hit_rate_unbounded)
    assert np.isnan(r.hit_rate_curve[r.capacities_tokens < r.largest_request_tokens]).all()
    assert r.hit_rate < r.hit_rate_unbounded
    # the smallest cache that finds 90% of the unbounded cache's tokens, to the block
    at = pc.prefix_cache(dataclasses.replace(r.params, cache_tokens=r.capacity_for_most_tokens))
    below = pc.prefix_cache(dataclasses.replace(r.params, cache_tokens=r.capacity_for_most_tokens - 16))
    target = 0.9 * r.hit_rate_unbounded * r.prompt_tokens
    assert below.tokens_saved < target <= at.tokens_saved


def test_the_time_to_first_token_is_the_prefill_of_what_is_not_found():
    r = pc.prefix_cache()
    assert (r.ttft_s <= r.ttft_s_uncached + 1e-15).all() and r.prefill_s < r.prefill_s_uncached
    assert r.prefill_s == pytest.approx(r.ttft_s.sum()) and r.ttft_percentiles_s["p50"] == (
        pytest.approx(float(np.percentile(r.ttft_s, 50))), pytest.approx(float(np.percentile(r.ttft_s_uncached, 50))))
    # nothing to find: one turn each, no system prompt, no documents
    none = pc.prefix_cache(pc.PrefixCacheParams(turns=1.0, system_tokens=0, document_share=0.0))
    assert none.tokens_saved == 0 and np.array_equal(none.ttft_s, none.ttft_s_uncached)


def test_the_cache_size_model_and_gpu_reuse_one_pass_over_the_workload():
    pc.workload_lookups.cache_clear()
    pc.prefix_cache(pc.PrefixCacheParams(cache_tokens=65536))
    pc.prefix_cache(pc.PrefixCacheParams(cache_tokens=131072, model="llama-3.1-70b", gpu="H200"))
    assert pc.workload_lookups.cache_info().misses == 1
    pc.prefix_cache(pc.PrefixCacheParams(think_s=5.0))
    assert pc.workload_lookups.cache_info().misses == 2


@pytest.mark.parametrize("kwargs, message", [
    (dict(cache_tokens=4096), "cannot hold the largest request"),
    (dict(rate_per_s=0.0), "rate_per_s must be > 0"),
    (dict(turns=0.5), "turns must be in"),
    (dict(cache_tokens=0), "cache_tokens must be >= 1"),
    (dict(conversations=1000, turns=16.0), "at most 4,000"),
    (dict(document_tokens=10 ** 9), "document_tokens"),
    (dict(model="gpt-9"), "unknown model"),
])
def test_bad_workloads_get_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        pc.prefix_cache(pc.PrefixCacheParams(**kwargs))


def test_bringing_back_is_bytes_over_the_link():
    r = pc.offload(pc.OffloadParams(prefix_tokens=8192, link_share=0.5))
    per = kv_bytes_per_token("llama-3.1-8b")
    assert r.kv_bytes == 8192 * per == 8192 * 128 * 1024
    for name, _, rate, _ in pc.TIERS:
        assert r.load_s[name] == pytest.approx(8192 * per / (0.5 * rate), rel=1e-12)
    assert pc.TIERS[1][2] == pytest.approx(63.0e9, rel=1e-3)      # PCIe 5.0 x16, one way
    assert pc.TIERS[0][2] == 450e9                                 # NVLink-C2C: 900 GB/s both ways


def test_the_break_even_length_is_where_the_two_times_meet():
    """Llama 2 7B (no grouped-query attention) from NVMe: quicker only past a length, where
    bringing back and computing again take the same time (to the sweep's interpolation)."""
    r = pc.offload(pc.OffloadParams(model="llama-2-7b"))
    x = r.break_even_tokens["nvme"]
    assert r.lengths[0] < x < r.lengths[-1]
    load = np.interp(np.log(x), np.log(r.lengths), np.log(r.load_curve_s["nvme"]))
    again = np.interp(np.log(x), np.log(r.lengths), np.log(r.recompute_curve_s))
    assert load == pytest.approx(again, abs=1e-9)
    exact = pc.offload(pc.OffloadParams(model="llama-2-7b", prefix_tokens=int(round(x))))
    assert exact.load_s["nvme"] == pytest.approx(exact.recompute_s, rel=0.02)
    assert (r.load_curve_s["nvme"] < r.recompute_curve_s)[r.lengths > x].all()
    assert (r.load_curve_s["nvme"] >= r.recompute_curve_s)[r.lengths < x].all()


def test_for_llama_3_8b_every_tier_is_quicker_at_every_length():
    """Chapter 18 says so for the default model in bf16 at the links' rates."""
    r = pc.offload()
    assert all(v == 0.0 for v in r.break_even_tokens.values())
    assert pc.crossing(np.array([1.0, 2.0]), np.array([5.0, 5.0]), np.array([1.0, 2.0])) == math.inf


@pytest.mark.parametrize("kwargs, message", [
    (dict(prefix_tokens=2 ** 21), "prefix_tokens"),
    (dict(prefix_tokens=0), "prefix_tokens must be >= 1"),
    (dict(link_share=0.0), "link_share must be in"),
    (dict(kv_dtype="fp4"), "unknown kv_dtype"),
])
def test_bad_offload_inputs_get_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        pc.offload(pc.OffloadParams(**kwargs))
