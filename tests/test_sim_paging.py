"""Paged KV blocks: allocation, chained hashes, prefix sharing, eviction, and the replay figure."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import paging
from sim.paging import BlockManager, OutOfBlocks, block_hash


def test_chained_hash_names_the_whole_prefix():
    a = block_hash(block_hash(None, [1, 2]), [3, 4])
    b = block_hash(block_hash(None, [9, 9]), [3, 4])
    assert a != b                                    # same block, different prefix
    assert a == block_hash(block_hash(None, [1, 2]), [3, 4])


def test_block_hash_is_blake2b_of_the_previous_hash_and_the_tokens_as_int64():
    import hashlib

    import numpy as np

    def by_definition(prev, tokens):
        h = hashlib.blake2b(digest_size=8)
        h.update(b"root" if prev is None else prev.to_bytes(8, "little"))
        for t in tokens:
            h.update(int(t).to_bytes(8, "little", signed=True))
        return int.from_bytes(h.digest(), "little")

    first = block_hash(None, [1, 2, -3, 2**40])
    assert first == by_definition(None, [1, 2, -3, 2**40])
    assert block_hash(first, np.array([7, 30000], dtype=np.int64)) == by_definition(first, [7, 30000])
    assert block_hash(None, []) == by_definition(None, [])


def test_allocation_as_tokens_arrive():
    bm = BlockManager(num_blocks=4, block_size=4, prefix_caching=False)
    assert bm.add_request("A", [1, 2, 3]) == 0
    assert bm.tables["A"] == [0] and bm.fill[0] == 3 and bm.hashes[0] is None
    bm.append_token("A", 4)                          # fills block 0: it is hashed
    assert bm.hashes[0] is not None and bm.tables["A"] == [0]
    bm.append_token("A", 5)                          # needs a second block
    assert bm.tables["A"] == [0, 1] and bm.fill[1] == 1
    bm.free_request("A")
    assert bm.free_blocks == 4 and bm.used_blocks == 0
    bm.check_invariants()


def test_prefix_sharing_and_reference_counts():
    bm = BlockManager(num_blocks=10, block_size=4)
    bm.add_request("A", list(range(10)))              # blocks: [0..3] [4..7] [8 9]
    hit = bm.add_request("B", list(range(8)) + [50, 51, 52])
    assert hit == 8
    assert bm.tables["B"][:2] == bm.tables["A"][:2] and bm.tables["B"][2] != bm.tables["A"][2]
    assert [bm.ref_counts[b] for b in bm.tables["A"]] == [2, 2, 1]
    kinds = [e.kind for e in bm.events if e.request == "B"]
    assert kinds[:2] == ["hit", "hit"]
    bm.check_invariants()


def test_a_partial_block_is_never_shared():
    bm = BlockManager(num_blocks=10, block_size=4)
    bm.add_request("A", [1, 2, 3, 4, 5, 6])
    assert bm.add_request("B", [1, 2, 3, 4, 5, 6]) == 4   # only the full block is cached
    assert bm.tables["A"][1] != bm.tables["B"][1]


def test_fully_cached_prompt_still_computes_one_token():
    bm = BlockManager(num_blocks=10, block_size=4)
    bm.add_request("A", list(range(8)))
    assert bm.add_request("B", list(range(8))) == 7


def test_freed_blocks_stay_cached_and_are_reused_then_evicted_lru():
    bm = BlockManager(num_blocks=4, block_size=2)
    bm.add_request("A", [1, 2, 3, 4])                  # 2 full blocks, hashed
    bm.free_request("A")
    assert bm.evictable_blocks == 2 and bm.free_blocks == 2
    assert bm.add_request("B", [1, 2, 3, 4, 5]) == 4   # both found in the cache again
    assert [e.kind for e in bm.events if e.request == "B"][:2] == ["reuse", "reuse"]
    bm.free_request("B")
    # new unrelated requests need all 4 blocks: the evictable ones go, least recently freed first
    bm.add_request("C", [7, 7, 7, 7, 7, 7, 7, 7])
    evicted = [e.physical_block for e in bm.events if e.kind == "evict"]
    assert len(evicted) == 2
    bm.check_invariants()
    bm.free_request("C")
    assert bm.add_request("D", [1, 2, 3, 4]) == 0       # A's prefix is gone


def test_out_of_blocks_changes_nothing():
    bm = BlockManager(num_blocks=2, block_size=2)
    bm.add_request("A", [1, 2, 3])
    before = (list(bm.ref_counts), dict(bm.tables), len(bm.events))
    with pytest.raises(OutOfBlocks):
        bm.add_request("B", [5, 6, 7])
    assert (list(bm.ref_counts), dict(bm.tables), len(bm.events)) == before
    bm.append_token("A", 4)
    with pytest.raises(OutOfBlocks):
        bm.append_token("A", 5)
    bm.check_invariants()


# ---- property tests: no leaks, sharing only equal prefixes -----------------------------------

prompts = st.lists(st.integers(0, 3), min_size=1, max_size=20)   # a tiny vocabulary makes shared prefixes common
ops = st.lists(st.tuples(st.sampled_from(["add", "append", "free"]), st.integers(0, 5), prompts, st.integers(0, 3)),
               min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(ops, st.integers(2, 6), st.integers(4, 30), st.booleans())
def test_block_manager_invariants(operations, block_size, num_blocks, caching):
    bm = BlockManager(num_blocks=num_blocks, block_size=block_size, prefix_caching=caching)
    for kind, rid, prompt, tok in operations:
        name = f"r{rid}"
        try:
            if kind == "add" and name not in bm.tables:
                hit = bm.add_request(name, prompt)
                assert 0 <= hit < len(prompt) and (hit % block_size == 0 or hit == len(prompt) - 1)
            elif kind == "append" and name in bm.tables:
                bm.append_token(name, tok)
            elif kind == "free" and name in bm.tables:
                bm.free_request(name)
        except OutOfBlocks:
            pass
        bm.check_invariants()
        # any physical block two requests share sits at the same position over the same prefix
        seen = {}
        for req, table in bm.tables.items():
            for i, b in enumerate(table):
                end = min((i + 1) * block_size, len(bm.tokens[req]))
                prefix = tuple(bm.tokens[req][:end])
                if b in seen:
                    assert seen[b] == (i, prefix)
                    assert end == (i + 1) * block_size          # only full blocks are shared
                seen[b] = (i, prefix)
    for name in list(bm.tables):
        bm.free_request(name)
    bm.check_invariants()
    assert bm.used_blocks == 0 and bm.free_blocks + bm.evictable_blocks == num_blocks   # nothing leaked
    if not caching:
        assert bm.evictable_blocks == 0


# ---- the replay figure ----------------------------------------------------------------------

def test_replay_with_and_without_prefix_caching():
    c = paging.compare_prefix_caching()
    on, off = c.with_caching, c.without_caching
    sys_full_blocks = 40 // 16                            # 2 full blocks of system prompt
    for n in "BCD":
        assert on.cached_prompt_tokens[n] == 16 * sys_full_blocks
        assert off.cached_prompt_tokens[n] == 0
        assert off.prefill_tokens_computed[n] == off.prompt_tokens[n]   # D pays its full prefill again
    assert c.prefill_tokens_saved == 3 * 32
    # the system prompt's blocks are stored once instead of once per request
    assert c.blocks_saved == 3 * sys_full_blocks
    first = on.frames[1]
    assert first.block_tables["A"] == [0, 1, 2, 3] and first.fill_tokens[:4].tolist() == [16, 16, 16, 4]
    assert first.block_hashes[0] and first.block_hashes[1] and first.block_hashes[2] and not first.block_hashes[3]
    assert on.frames[-1].block_states.count("used") == 0


def test_replay_frames_are_consistent():
    r = paging.simulate_paging()
    assert r.frames[0].description == "empty cache"
    for f in r.frames:
        refs = [0] * len(f.ref_counts)
        for table in f.block_tables.values():
            for b in table:
                refs[b] += 1
        assert refs == f.ref_counts.tolist()
        assert all((s == "used") == (rc > 0) for s, rc in zip(f.block_states, f.ref_counts))


def test_replay_waits_when_blocks_are_short_and_rejects_impossible_sizes():
    r = paging.simulate_paging(paging.PagingParams(num_blocks=9, prefix_caching=False))
    assert any("waits" in f.description for f in r.frames)
    assert all(r.prefill_tokens_computed[n] == r.prompt_tokens[n] for n in r.requests)
    with pytest.raises(ValueError, match="too small"):
        paging.simulate_paging(paging.PagingParams(num_blocks=3))


def test_replay_preempts_and_recomputes_when_decode_runs_out_of_blocks():
    r = paging.simulate_paging(paging.PagingParams(num_blocks=12, output_tokens=(20, 30, 25, 20), block_size=8))
    assert sum(r.preemptions.values()) > 0
    assert any("preempted" in f.description for f in r.frames)
    victims = [n for n, k in r.preemptions.items() if k]
    # a preempted request computes more than its prompt: its output is recomputed on return
    assert any(r.prefill_tokens_computed[n] + r.cached_prompt_tokens[n] > r.prompt_tokens[n] for n in victims)
    assert r.frames[-1].block_states.count("used") == 0


@settings(max_examples=40, deadline=None)
@given(st.integers(3, 30), st.sampled_from([4, 8, 16]), st.booleans(),
       st.lists(st.integers(1, 40), min_size=4, max_size=4), st.integers(0, 48))
def test_replay_terminates_or_says_the_cache_is_too_small(num_blocks, block_size, caching, outputs, system):
    params = paging.PagingParams(system_prompt_tokens=system, output_tokens=tuple(outputs), block_size=block_size,
                                 num_blocks=num_blocks, prefix_caching=caching)
    try:
        r = paging.simulate_paging(params)
    except ValueError as e:
        assert "too small" in str(e)
        return
    last = r.frames[-1]
    assert last.block_tables == {} and last.block_states.count("used") == 0
    for n in r.requests:
        assert r.prefill_tokens_computed[n] + r.cached_prompt_tokens[n] >= r.prompt_tokens[n]
    assert max(int((f.ref_counts > 0).sum()) for f in r.frames) <= num_blocks


def test_replay_is_deterministic():
    a, b = paging.simulate_paging(), paging.simulate_paging()
    assert [f.description for f in a.frames] == [f.description for f in b.frames]
    assert [f.block_hashes for f in a.frames] == [f.block_hashes for f in b.frames]


def test_reservation_waste_arithmetic():
    r = paging.reservation_waste(paging.WasteParams(requests=200, seed=3))
    assert r.used_tokens == int(r.lengths_tokens.sum())
    assert r.contiguous_waste_fraction == pytest.approx(1 - r.used_tokens / (200 * 2048))
    assert all(p - n < 16 for p, n in zip(r.paged_reserved_tokens, r.lengths_tokens))
    assert r.paged_reserved_tokens.sum() == sum(math.ceil(n / 16) * 16 for n in r.lengths_tokens)


@pytest.mark.parametrize("call, match", [
    (lambda: BlockManager(0), "num_blocks must be >= 1"),
    (lambda: BlockManager(4).append_token("X", 1), "unknown request 'X'"),
    (lambda: BlockManager(4).add_request("A", []), "at least one token"),
    (lambda: paging.PagingParams(user_tokens=(1, 2), output_tokens=(1,), arrival_round=(0, 0)), "one entry per"),
    (lambda: paging.WasteParams(median_tokens=-5), "median_tokens must be > 0"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_comparison_carries_the_waste_panel_and_the_note():
    c = paging.compare_prefix_caching(paging.PagingParams(waste=paging.WasteParams(max_seq_len=1024, block_size=32)))
    assert repr(c.waste) == repr(paging.reservation_waste(paging.WasteParams(max_seq_len=1024, block_size=32)))
    assert repr(paging.compare_prefix_caching().waste) == repr(paging.reservation_waste())   # None: the defaults
    assert "D arrives after the first request finishes" in c.note and "Pool of 24 blocks of 16 tokens" in c.note
    assert "arrive" not in paging.compare_prefix_caching(paging.PagingParams(arrival_round=(0, 1, 2, 3))).note
    with pytest.raises(ValueError, match="waste must be a WasteParams"):
        paging.PagingParams(waste=2048)
