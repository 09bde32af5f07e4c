"""KV-cache capacity: the blocks one replica holds, who holds them, and preemption when they run out.

vLLM V1 pages every request's KV cache in blocks of 16 tokens out of one pool sized by what
``gpu_memory_utilization`` leaves after the weights (``spectune.config.kv_cache_capacity_tokens``).
Each step, before running, a decoding request needs blocks for its context, the 1 + K tokens it
verifies and the K lookahead slots its drafter writes next (plus the method's extra drafting slots);
a prefill chunk needs blocks for its tokens. When the pool cannot cover the running requests, vLLM
preempts the most recently admitted one: frees its blocks and puts it back at the head of the waiting
queue, to recompute its prompt and the tokens it has generated (RECOMPUTE, V1's only mode). A step
that preempted admits no new prefill. ``KvCacheCapacity`` keeps that book for the serving loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np

__all__ = ["BLOCK_SIZE_TOKENS", "KvCacheCapacity", "drafting_slots"]

BLOCK_SIZE_TOKENS = 16  # vLLM's default --block-size on CUDA

_Tokens = TypeVar("_Tokens", int, np.ndarray)
_NOBODY = np.zeros(0, dtype=np.int64)  # no request preempted (shared: read-only)
_NOBODY.flags.writeable = False

# Slots a drafter writes beyond the K lookahead, per method: vLLM's max_num_new_slots_for_drafting.
_EXTRA_SLOTS_SEQUENTIAL: dict[str, Callable[[int], int]] = {
    "draft_model": lambda k: 1,
    "dflash": lambda k: k,
    "dspark": lambda k: k - 1,
}
_EXTRA_SLOTS_PARALLEL: dict[str, Callable[[int], int]] = {
    "draft_model": lambda k: k
}  # PARD; P-EAGLE and the rest: K - 1


def drafting_slots(method: str | None, num_speculative_tokens: int, *, parallel_drafting: bool = False) -> int:
    """KV slots a request needs each step beyond the 1 + K tokens it verifies (tokens): the K lookahead
    slots vLLM reserves for the next drafts, plus what the method adds (draft model 1, DFlash K, DSpark
    and P-EAGLE K - 1, PARD K); 0 for plain decoding."""
    k = num_speculative_tokens
    if k == 0 or method is None:
        return 0
    if parallel_drafting and method not in ("dflash", "dspark"):
        extra = _EXTRA_SLOTS_PARALLEL[method](k) if method in _EXTRA_SLOTS_PARALLEL else k - 1
    else:
        extra = _EXTRA_SLOTS_SEQUENTIAL[method](k) if method in _EXTRA_SLOTS_SEQUENTIAL else 0
    return k + extra


class KvCacheCapacity:
    """The block pool of one replica, and the blocks each request holds.

    ``num_blocks``: the pool (blocks of ``BLOCK_SIZE_TOKENS``); ``num_requests``: requests simulated.
    """

    def __init__(self, num_blocks: int, num_requests: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.held = np.zeros(num_requests, dtype=np.int64)
        self.free = num_blocks
        self.num_preemptions = 0
        self.peak_blocks_used = 0

    @staticmethod
    def blocks_for(tokens: _Tokens) -> _Tokens:
        """Blocks that hold ``tokens`` tokens (ceil division; an int, or int64 array elementwise)."""
        return (tokens + (BLOCK_SIZE_TOKENS - 1)) // BLOCK_SIZE_TOKENS

    def try_grow(self, request: int, tokens: int) -> bool:
        """Give ``request`` blocks for ``tokens`` tokens if the pool has them; False (and no change) if not."""
        held = int(self.held[request])
        more = self.blocks_for(tokens) - held
        if more > self.free:
            return False
        if more > 0:
            self.held[request] = held + more
            self.free -= more
            self.peak_blocks_used = max(self.peak_blocks_used, self.num_blocks - self.free)
        return True

    def reserve_decode(self, running: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Give every running request blocks for its ``tokens``; preempt from the back until they fit.

        ``running``: int64 [B] request ids, oldest first; ``tokens``: int64 [B] tokens each needs this
        step. Returns the preempted request ids (int64, most recent first; read-only when empty); their
        blocks are freed.
        """
        held = self.held[running]
        grown = np.maximum(self.blocks_for(tokens), held)
        total = int(np.add.reduce(grown)) - int(np.add.reduce(held))
        preempted = _NOBODY
        if total > self.free:
            need = grown - held
            # keep the most requests, oldest first, whose new blocks fit in the free ones plus those
            # of the requests after them (which are preempted): need_first[kept] <= free + freed[kept]
            need_first = np.concatenate(([0], np.cumsum(need)))
            freed = np.concatenate((np.cumsum(held[::-1])[::-1], [0]))
            kept = int(np.flatnonzero(need_first <= self.free + freed)[-1])
            preempted = running[kept:][::-1].copy()
            self.release(preempted)
            self.num_preemptions += len(preempted)
            running, grown = running[:kept], grown[:kept]
            total = int(need[:kept].sum())
        self.held[running] = grown
        self.free -= total
        self.peak_blocks_used = max(self.peak_blocks_used, self.num_blocks - self.free)
        return preempted

    def grow_prefill(self, request: int, done_tokens: int, wanted: int, behind: list[int]) -> tuple[int, list[int]]:
        """Blocks for the next prefill chunk of ``request`` (``done_tokens`` already cached, ``wanted`` more).

        If the pool is short, partial prefills queued ``behind`` it give their blocks back, the last
        first (vLLM preempts the lowest-priority request). Returns (tokens granted, possibly fewer than
        wanted or 0; the requests preempted, whose prefill restarts).
        """
        held = int(self.held[request])
        room = (held + self.free) * BLOCK_SIZE_TOKENS - done_tokens
        preempted: list[int] = []
        if room < wanted:
            holding = [other for other in behind if self.held[other] > 0]
            while room < wanted and holding:
                other = holding.pop()
                self.free += int(self.held[other])
                self.held[other] = 0
                self.num_preemptions += 1
                preempted.append(other)
                room = (held + self.free) * BLOCK_SIZE_TOKENS - done_tokens
        granted = max(min(wanted, room), 0)
        more = self.blocks_for(done_tokens + granted) - held  # room covers it
        if more > 0:
            self.held[request] = held + more
            self.free -= more
            self.peak_blocks_used = max(self.peak_blocks_used, self.num_blocks - self.free)
        return granted, preempted

    def release(self, requests: np.ndarray) -> None:
        """Free the blocks of ``requests`` (finished or preempted)."""
        self.free += int(self.held[requests].sum())
        self.held[requests] = 0
