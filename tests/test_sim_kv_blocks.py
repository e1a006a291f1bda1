"""The KV block model the scheduler and the paged block manager share: block counts, the free pool."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import calibration, hardware, scheduler
from sim.kv_blocks import BlockCounts, BlockPool, OutOfBlocks, blocks_for
from sim.paging import BlockManager
from sim.scheduler import RequestSpec, SchedulerParams

SPEC = calibration.spec_sheet(hardware.get("H100-SXM"))


@pytest.mark.parametrize("tokens, block_size, blocks", [
    (0, 16, 0), (1, 16, 1), (15, 16, 1), (16, 16, 1), (17, 16, 2), (8192, 16, 512), (8193, 16, 513),
    (131_072, 16, 8192), (7, 1, 7), (2 ** 60 + 1, 2 ** 4, 2 ** 56 + 1),    # exact beyond float precision
])
def test_blocks_for_is_the_ceiling(tokens, block_size, blocks):
    assert blocks_for(tokens, block_size) == blocks


def test_blocks_for_works_on_arrays():
    lengths = np.array([1, 16, 17, 400, 2048])
    assert blocks_for(lengths, 16).tolist() == [1, 1, 2, 25, 128]


def test_pool_hands_out_lowest_free_ids_first():
    pool = BlockPool(num_blocks=6, block_size=16)
    assert pool.allocate(3) == [0, 1, 2]
    pool.release([1, 0])
    assert pool.allocate(1) == [0]
    assert pool.allocate(3) == [1, 3, 4]
    assert (pool.free_blocks, pool.used_blocks, pool.used_tokens) == (1, 5, 80)
    assert pool.is_free(5) and not pool.is_free(3) and not pool.is_free(6)


def test_pool_failures_change_nothing():
    pool = BlockPool(num_blocks=4, block_size=8)
    held = pool.allocate(3)
    with pytest.raises(OutOfBlocks, match="2 blocks needed, 1 of 4 free"):
        pool.allocate(2)
    with pytest.raises(ValueError, match="block 3 is not in use"):
        pool.release([0, 3])
    with pytest.raises(ValueError, match="released twice"):
        pool.release([1, 1])
    with pytest.raises(ValueError, match="cannot allocate -1"):
        pool.allocate(-1)
    assert pool.free_blocks == 1 and all(not pool.is_free(b) for b in held)
    pool.check_invariants()


def test_pool_sized_in_tokens_keeps_whole_blocks():
    pool = BlockPool.for_tokens(448_308, 16)          # the default scheduler's KV room, 28,019 blocks
    assert (pool.num_blocks, pool.capacity_tokens) == (28_019, 448_304)
    with pytest.raises(ValueError, match=r"kv_capacity_tokens \(15\) is smaller than one block of 16"):
        BlockPool.for_tokens(15, 16)
    with pytest.raises(ValueError, match="num_blocks must be >= 1"):
        BlockPool(0)
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        BlockPool(4, 0)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 40), st.lists(st.tuples(st.booleans(), st.integers(0, 12)), max_size=60))
def test_pool_matches_a_plain_set_of_free_ids(num_blocks, operations):
    pool = BlockPool(num_blocks, 16)
    free = set(range(num_blocks))
    held: list = []
    for take, n in operations:
        if take:
            if n > len(free):
                with pytest.raises(OutOfBlocks):
                    pool.allocate(n)
            else:
                got = pool.allocate(n)
                assert got == sorted(free)[:n]
                free -= set(got)
                held += got
        else:
            back, held = held[:n], held[n:]
            pool.release(back)
            free |= set(back)
        pool.check_invariants()
        assert pool.free_blocks == len(free) and pool.used_tokens == 16 * (num_blocks - len(free))


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 40), st.lists(st.tuples(st.booleans(), st.integers(0, 12)), max_size=60))
def test_counts_count_what_the_pool_names(num_blocks, operations):
    # the scheduler's count of blocks: under the same takes and returns, the pool's numbers
    pool, counts = BlockPool(num_blocks, 16), BlockCounts(num_blocks, 16)
    held: list = []
    for take, n in operations:
        if take:
            if n > pool.free_blocks:
                for p in (pool, counts):
                    with pytest.raises(OutOfBlocks, match=f"{n} blocks needed, {pool.free_blocks} of"):
                        p.allocate(n)
            else:
                held += pool.allocate(n)
                assert counts.allocate(n) == n
        else:
            back, held = held[:n], held[n:]
            pool.release(back)
            counts.release(len(back))
        assert (counts.free_blocks, counts.used_blocks, counts.used_tokens) == (
            pool.free_blocks, pool.used_blocks, pool.used_tokens)


def test_counts_refuse_what_they_cannot_do_and_change_nothing():
    counts = BlockCounts.for_tokens(100, 16)           # 6 whole blocks
    assert (counts.num_blocks, counts.capacity_tokens, counts.allocate(4)) == (6, 96, 4)
    with pytest.raises(OutOfBlocks, match="3 blocks needed, 2 of 6 free"):
        counts.allocate(3)
    with pytest.raises(ValueError, match="cannot release 5 blocks: 4 in use"):
        counts.release(5)
    with pytest.raises(ValueError, match="cannot release -1 blocks"):
        counts.release(-1)
    with pytest.raises(ValueError, match="cannot allocate -1"):
        counts.allocate(-1)
    assert (counts.free_blocks, counts.used_tokens) == (2, 64)
    with pytest.raises(ValueError, match="num_blocks must be >= 1"):
        BlockCounts(0)


@pytest.mark.parametrize("prompt", [1, 15, 16, 17, 100, 1000])
def test_scheduler_and_block_manager_count_the_same_blocks(prompt):
    # a prompt's prefill holds ceil(prompt / 16) blocks in both models
    r = scheduler.simulate_schedule(SchedulerParams(requests=(RequestSpec("x", 0.0, prompt, 3),),
                                                    kv_capacity_tokens=4096), calibration=SPEC)
    bm = BlockManager(num_blocks=256, block_size=16, prefix_caching=False)
    bm.add_request("x", range(prompt))
    assert r.step_kv_tokens[0] == 16 * len(bm.tables["x"]) == 16 * blocks_for(prompt, 16)
    # each decode step caches the previous token; a new block is taken when the last one is full
    for step, token in enumerate((7, 8), start=1):
        bm.append_token("x", token)
        assert r.step_kv_tokens[step] == 16 * len(bm.tables["x"]) == 16 * blocks_for(prompt + step, 16)
