"""KV blocks: the cache as a pool of fixed-size blocks, the one model of KV room.

Paged serving engines store the KV cache in blocks of `block_size` tokens (16 by default
in vLLM, R6). A sequence of n cached tokens occupies ceil(n / block_size) blocks: every
block but its last is full. The pool hands out free blocks lowest id first and takes
them back when a holder lets go; it knows which blocks are free, not who holds them or
what they contain.

Both users count KV room the same way: `sim.scheduler` with `BlockCounts` (how many
blocks each running request holds, when a request fits, when one must be preempted: which
blocks they are never matters to it) and `sim.paging.BlockManager` with `BlockPool`, the
same counts with the blocks named (which physical blocks a block table maps to, with
prefix sharing on top).

>>> blocks_for(16, 16), blocks_for(17, 16)
(1, 2)
>>> pool = BlockPool(num_blocks=4, block_size=16)
>>> pool.allocate(2), pool.free_blocks, pool.used_tokens
([0, 1], 2, 32)
>>> pool.release([0]); pool.allocate(1)
[0]
>>> counts = BlockCounts(num_blocks=4, block_size=16)
>>> counts.allocate(2), counts.free_blocks, counts.used_tokens
(2, 2, 32)
"""
from __future__ import annotations

import heapq
from typing import Iterable

from sim.checks import check_int

DEFAULT_BLOCK_SIZE = 16   # R6: vLLM's default block size


class OutOfBlocks(RuntimeError):
    """No free (or evictable) block is left for an allocation."""


def blocks_for(tokens, block_size: int):
    """Blocks that hold `tokens` tokens: ceil(tokens / block_size), exact for any integer
    (no float division) and elementwise on integer arrays.

    >>> blocks_for(0, 16), blocks_for(1, 16), blocks_for(32, 16)
    (0, 1, 2)
    """
    return -(-tokens // block_size)


class _Blocks:
    """What `BlockCounts` and `BlockPool` share: the sizes, and the counts from `used_blocks`."""

    def __init__(self, num_blocks: int, block_size: int = DEFAULT_BLOCK_SIZE):
        check_int("num_blocks", num_blocks, minimum=1)
        check_int("block_size", block_size, minimum=1)
        self.num_blocks = int(num_blocks)
        self.block_size = int(block_size)

    @classmethod
    def for_tokens(cls, capacity_tokens: int, block_size: int = DEFAULT_BLOCK_SIZE):
        """The whole blocks that fit in `capacity_tokens` tokens (ValueError if not even one).

        >>> BlockPool.for_tokens(100, 16).capacity_tokens
        96
        """
        check_int("kv_capacity_tokens", capacity_tokens, minimum=1)
        check_int("block_size", block_size, minimum=1)
        if capacity_tokens < block_size:
            raise ValueError(f"kv_capacity_tokens ({capacity_tokens}) is smaller than one block of {block_size}")
        return cls(capacity_tokens // block_size, block_size)

    # -- sizes ---------------------------------------------------------------------------------
    def blocks_for(self, tokens: int) -> int:
        """Blocks a sequence of `tokens` cached tokens occupies."""
        return blocks_for(tokens, self.block_size)

    def tokens_in(self, blocks: int) -> int:
        """Token slots in `blocks` blocks."""
        return blocks * self.block_size

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def free_blocks(self) -> int:
        return self.num_blocks - self.used_blocks

    @property
    def used_blocks(self) -> int:
        raise NotImplementedError

    @property
    def used_tokens(self) -> int:
        """Token slots in blocks in use (a partly filled last block counts whole)."""
        return self.tokens_in(self.used_blocks)


class BlockCounts(_Blocks):
    """`num_blocks` KV blocks of `block_size` tokens, counted: how many are free, how many in use.

    `allocate` takes whole blocks or raises `OutOfBlocks` and takes none; `release` gives
    them back, and refuses more than are in use. `BlockPool` counts the same way and
    names every block.
    """

    def __init__(self, num_blocks: int, block_size: int = DEFAULT_BLOCK_SIZE):
        super().__init__(num_blocks, block_size)
        self._used = 0

    @property
    def used_blocks(self) -> int:
        return self._used

    def allocate(self, n: int = 1) -> int:
        """Take `n` free blocks (returns n); `OutOfBlocks` (and nothing taken) if fewer are free."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks")
        if n > self.num_blocks - self._used:
            raise OutOfBlocks(f"{n} blocks needed, {self.free_blocks} of {self.num_blocks} free")
        self._used += n
        return n

    def release(self, n: int) -> None:
        """Give back `n` blocks (ValueError, and none given back, if fewer are in use)."""
        if not 0 <= n <= self._used:
            raise ValueError(f"cannot release {n} blocks: {self._used} in use")
        self._used -= n


class BlockPool(_Blocks):
    """`num_blocks` KV blocks of `block_size` tokens: which are free, how many are in use.

    Blocks never handed out are free implicitly (ids from `_next` up), so a pool the size
    of a whole GPU's cache costs nothing until it is used. Returned blocks wait in a
    min-heap; they all have ids below `_next`, so the lowest free id is always the heap's
    top if there is one. `allocate` either meets the whole request or raises `OutOfBlocks`
    and changes nothing; `release` refuses a block that is not in use.
    """

    def __init__(self, num_blocks: int, block_size: int = DEFAULT_BLOCK_SIZE):
        super().__init__(num_blocks, block_size)
        self._next = 0               # lowest id never handed out
        self._returned: list = []    # min-heap of released ids (all < _next)
        self._held: set = set()      # ids in use

    @property
    def used_blocks(self) -> int:
        return len(self._held)

    def is_free(self, block: int) -> bool:
        return 0 <= block < self.num_blocks and block not in self._held

    # -- allocation ----------------------------------------------------------------------------
    def allocate(self, n: int = 1) -> list:
        """`n` free blocks, lowest ids first; `OutOfBlocks` (and nothing taken) if fewer are free."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks")
        if n > self.free_blocks:
            raise OutOfBlocks(f"{n} blocks needed, {self.free_blocks} of {self.num_blocks} free")
        returned = self._returned
        if n >= len(returned):           # every released id (ascending), then new ones
            out = sorted(returned)
            returned.clear()
        else:
            out = [heapq.heappop(returned) for _ in range(n)]
        fresh = n - len(out)
        if fresh:
            out.extend(range(self._next, self._next + fresh))
            self._next += fresh
        self._held.update(out)
        return out

    def release(self, blocks: Iterable[int]) -> None:
        """Return `blocks` to the pool (ValueError, before any is returned, if one is not in use)."""
        blocks = list(blocks)
        if not self._held.issuperset(blocks):
            raise ValueError(f"block {next(b for b in blocks if b not in self._held)} is not in use")
        if len(set(blocks)) != len(blocks):
            raise ValueError("a block is released twice")
        self._held.difference_update(blocks)
        returned = self._returned
        if 8 * len(blocks) < len(returned):
            for b in blocks:
                heapq.heappush(returned, b)
        else:       # a heap again at once (ids are unique, so they still come back lowest first)
            returned.extend(blocks)
            heapq.heapify(returned)

    def check_invariants(self) -> None:
        """Raise AssertionError if the bookkeeping is inconsistent (used by the tests)."""
        returned = set(self._returned)
        assert len(returned) == len(self._returned), "a block is on the free list twice"
        assert not returned & self._held, "a block is both free and in use"
        assert all(0 <= b < self._next for b in returned | self._held), "a block id out of range"
        assert len(returned) + len(self._held) == self._next <= self.num_blocks, "blocks lost or invented"
