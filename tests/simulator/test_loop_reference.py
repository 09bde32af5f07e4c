"""The serving loop and its KV pool against a plain reference: the loop as first written (one numpy
array per request quantity, every sum and fancy index spelled out, the KV pool's loops over requests),
before the fast path. Same requests, same counts, same step and prefill times: every trace field and
the pool's state equal, bit for bit, closed and open loop, with KV pressure (preemption of decoding
requests and of partial prefills), a K table, plain decoding and a truncated run; run alone and
through the lockstep engine's driver (whose verifier here only defines ``verify``)."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import fields

import numpy as np
import pytest
import torch
from loop_alone import run_alone

from spectune.errors import SpectuneError
from spectune.simulator._drive import EngineMember, drive
from spectune.simulator._kv import BLOCK_SIZE_TOKENS, KvCacheCapacity
from spectune.simulator._loop import LoopInputs, LoopTrace, serving_loop


class _ReferencePool:
    """``KvCacheCapacity`` as first written."""

    def __init__(self, num_blocks: int, num_requests: int) -> None:
        self.num_blocks = num_blocks
        self.held = np.zeros(num_requests, dtype=np.int64)
        self.free = num_blocks
        self.num_preemptions = 0
        self.peak_blocks_used = 0

    @staticmethod
    def blocks_for(tokens):
        return -(-np.asarray(tokens, dtype=np.int64) // BLOCK_SIZE_TOKENS)

    def try_grow(self, request, tokens):
        more = int(self.blocks_for(tokens)) - int(self.held[request])
        if more > self.free:
            return False
        if more > 0:
            self.held[request] += more
            self.free -= more
            self.peak_blocks_used = max(self.peak_blocks_used, self.num_blocks - self.free)
        return True

    def reserve_decode(self, running, tokens):
        need = np.maximum(self.blocks_for(tokens) - self.held[running], 0)
        kept = len(running)
        while kept > 0 and int(need[:kept].sum()) > self.free + int(self.held[running[kept:]].sum()):
            kept -= 1
        preempted = running[kept:][::-1].copy()
        if len(preempted):
            self.release(preempted)
            self.num_preemptions += len(preempted)
        grow = need[:kept]
        self.held[running[:kept]] += grow
        self.free -= int(grow.sum())
        self.peak_blocks_used = max(self.peak_blocks_used, self.num_blocks - self.free)
        return preempted

    def grow_prefill(self, request, done_tokens, wanted, behind):
        preempted = []
        holding = [other for other in behind if self.held[other] > 0]
        while self._room(request, done_tokens) < wanted and holding:
            other = holding.pop()
            self.release(np.asarray([other], dtype=np.int64))
            self.num_preemptions += 1
            preempted.append(other)
        granted = max(min(wanted, self._room(request, done_tokens)), 0)
        if granted:
            self.try_grow(request, done_tokens + granted)
        return granted, preempted

    def _room(self, request, done_tokens):
        return int(self.held[request] + self.free) * BLOCK_SIZE_TOKENS - done_tokens

    def release(self, requests):
        self.free += int(self.held[requests].sum())
        self.held[requests] = 0


def _reference_loop(inputs, *, k_for_batch, verify, step_time, prefill_time, max_steps, kv, lookahead_slots):
    """the serving loop as first written (``verify`` None: plain decoding)."""
    n = len(inputs.output_tokens)
    trace = LoopTrace(
        arrival_s=inputs.arrival_s.astype(np.float64).copy(),
        first_token_s=np.full(n, np.nan),
        finish_s=np.full(n, np.nan),
        output_tokens=inputs.output_tokens.astype(np.int64),
    )
    generated = np.zeros(n, dtype=np.int64)
    steps_done = np.zeros(n, dtype=np.int64)
    prefill_left = inputs.prompt_tokens.astype(np.int64).copy()
    prefill_target = prefill_left.copy()
    last_chunk_s = np.zeros(n)
    closed = inputs.closed_loop_concurrency
    cap = min(closed, inputs.max_running_requests) if closed is not None else inputs.max_running_requests
    next_request, prefilling, running, finished, clock = 0, [], np.zeros(0, dtype=np.int64), 0, 0.0
    while finished < n:
        if trace.simulated_steps >= max_steps:
            trace.truncated = True
            break
        while next_request < n and len(running) + len(prefilling) < cap:
            if closed is not None:
                trace.arrival_s[next_request] = clock
            elif inputs.arrival_s[next_request] > clock:
                break
            prefilling.append(next_request)
            next_request += 1
            if next_request == n:
                trace.last_admission_s = clock
        if not prefilling and len(running) == 0:
            clock = float(inputs.arrival_s[next_request])
            continue
        batch = len(running)
        k = k_for_batch(batch) if (batch and verify is not None) else 0
        preempted = np.zeros(0, dtype=np.int64)
        if kv is not None and batch:
            context_after = inputs.prompt_tokens[running] + generated[running] + k + lookahead_slots(k)
            preempted = kv.reserve_decode(running, context_after)
            if len(preempted):
                running = running[: batch - len(preempted)]
                prefill_target[preempted] = inputs.prompt_tokens[preempted] + generated[preempted]
                prefill_left[preempted] = prefill_target[preempted]
                prefilling = [int(r) for r in preempted[::-1]] + prefilling
                batch = len(running)
                k = k_for_batch(batch) if (batch and verify is not None) else 0
        if batch and k > 0:
            emitted = verify(running, steps_done[running], k)
            accepted = np.asarray(emitted, dtype=np.int64) - 1
            if len(trace.accepted_per_position) < k:
                trace.accepted_per_position = np.pad(
                    trace.accepted_per_position, (0, k - len(trace.accepted_per_position))
                )
            trace.accepted_per_position[:k] += (accepted[:, None] > np.arange(k)[None, :]).sum(axis=0)
            trace.num_drafts += len(accepted)
            trace.num_draft_tokens += len(accepted) * k
            steps_done[running] += 1
        else:
            emitted = np.ones(batch, dtype=np.int64)
        budget = max(inputs.max_num_batched_tokens - batch * (k + 1), 0) if not len(preempted) else 0
        chunk_tokens, chunk_prompts, completed, kv_blocked = 0, 0, [], False
        for position, request in enumerate(prefilling):
            if budget <= 0:
                break
            take = int(min(prefill_left[request], budget))
            if kv is not None:
                done_tokens = int(prefill_target[request] - prefill_left[request])
                take, restarted = kv.grow_prefill(request, done_tokens, take, prefilling[position + 1 :])
                prefill_left[restarted] = prefill_target[restarted]
                if take <= 0:
                    kv_blocked = True
                    break
            prefill_left[request] -= take
            budget -= take
            chunk_tokens += take
            chunk_prompts += 1
            if prefill_left[request] == 0:
                completed.append(request)
        if kv_blocked or len(preempted):
            trace.kv_bound_steps += 1
            if kv is not None and kv_blocked and batch == 0 and chunk_tokens == 0:
                raise SpectuneError(f"request {prefilling[0]} does not fit")
        prefill_s = prefill_time(chunk_tokens, chunk_prompts, batch > 0) if chunk_tokens else 0.0
        if batch:
            context = float(np.add.reduce(inputs.prompt_tokens[running] + generated[running], dtype=np.float64) / batch)
            drafting, verification, sampling, overhead = step_time(batch, k, context)
        else:
            drafting = verification = sampling = overhead = 0.0
        clock += drafting + verification + sampling + overhead + prefill_s
        trace.step_breakdown_s += (drafting, verification, sampling, overhead, prefill_s)
        tokens_this_step = 0
        if batch:
            emitted = np.minimum(emitted, trace.output_tokens[running] - generated[running])
            generated[running] += emitted
            trace.chunk_gaps_s.append(clock - last_chunk_s[running])
            last_chunk_s[running] = clock
            tokens_this_step += int(emitted.sum())
        if completed:
            ids = np.asarray(completed, dtype=np.int64)
            prefilling = prefilling[len(completed) :]
            fresh = ids[np.isnan(trace.first_token_s[ids])]
            trace.first_token_s[fresh] = clock
            last_chunk_s[ids] = clock
            generated[ids] += 1
            tokens_this_step += len(ids)
        decoding = np.concatenate([running, np.asarray(completed, dtype=np.int64)])
        done = generated[decoding] >= trace.output_tokens[decoding]
        if done.any() and finished == 0:
            trace.first_finish_s = clock
        trace.finish_s[decoding[done]] = clock
        if kv is not None:
            kv.release(decoding[done])
        finished += int(done.sum())
        running = decoding[~done]
        trace.step_end_s.append(clock)
        trace.step_tokens.append(tokens_this_step)
        trace.step_batch_size.append(batch)
    return trace


def _counts(request_ids: np.ndarray, steps_done: np.ndarray, k: int) -> np.ndarray:
    """Emitted tokens (1..K+1) drawn per (request, step): the same whoever asks, in whatever grouping."""
    draws = [np.random.default_rng([int(r), int(s)]).random(k) for r, s in zip(request_ids, steps_done)]
    return np.asarray([1 + int(np.cumprod(u < 0.75).sum()) for u in draws], dtype=np.int64)


def _inputs(case: str) -> LoopInputs:
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    n = 60
    prompts = np.clip(rng.lognormal(5.5, 0.8, n), 16, 1200).astype(np.int64)
    outputs = rng.integers(1, 90, n)
    closed = None if case.startswith("open") else 12
    arrivals = np.cumsum(rng.exponential(0.5 if case == "open-idle" else 0.01, n))
    return LoopInputs(arrivals, prompts, outputs, closed, 16, 512 if case == "kv-chunked" else 2048)


_BLOCKS = {"kv": 110, "kv-chunked": 130, "open-kv": 160}  # tight: both kinds of preemption happen


def _roofline_times() -> tuple[Callable[[int, int, float], tuple[float, float, float, float]], Callable]:
    from spectune.config import DrafterSpec, HardwareConfig, TargetModelSpec
    from spectune.cost import build_cost_model

    cost = build_cost_model(
        HardwareConfig.model_validate("h100-sxm"),
        TargetModelSpec.model_validate("llama-3.1-8b"),
        DrafterSpec.model_validate("eagle3-llama-3.1-8b"),
        num_speculative_tokens=4,
    )
    single = cost.prefill_time(1)

    def prefill_time(tokens: int, prompts: int, shares: bool) -> float:
        full = cost.prefill_time(tokens, num_prompts=prompts)
        return max(0.0, full - single) if shares else full

    return cost.step_timer(draft_probabilities=True), prefill_time


def _same(trace: LoopTrace, reference: LoopTrace) -> None:
    for field in fields(LoopTrace):
        got, want = getattr(trace, field.name), getattr(reference, field.name)
        if field.name == "chunk_gaps_s":  # per step in the reference, all steps at once in the loop
            got, want = np.concatenate(got), np.concatenate(want) if want else np.zeros(0)
            assert got.dtype == want.dtype and np.array_equal(got, want), field.name
        elif isinstance(want, np.ndarray):
            assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True), field.name
        else:
            assert got == want, field.name


class _CountsOnly:
    """A verifier (``spectune.simulator._drive.Verifier``) that emits ``_counts``."""

    def start(self, requests):
        self.requests = requests

    def finish(self):
        return {id(member): _counts(ids, steps, k) for member, (ids, steps, k) in self.requests.items()}

    def close(self):
        pass


@pytest.mark.parametrize(
    "case", ["closed", "open", "open-idle", "kv", "kv-chunked", "open-kv", "k-table", "plain", "truncated"]
)
def test_the_loop_matches_its_plain_reference_bit_for_bit(case):
    inputs = _inputs(case)
    step_time, prefill_time = _roofline_times()
    if case == "k-table":
        k_for_batch = lambda batch: 4 if batch <= 5 else (2 if batch <= 10 else 0)  # noqa: E731
    else:
        k_for_batch = lambda batch: 4  # noqa: E731
    blocks = _BLOCKS.get(case)
    common = dict(
        k_for_batch=k_for_batch,
        step_time=step_time,
        prefill_time=prefill_time,
        max_steps=40 if case == "truncated" else 100_000,
        lookahead_slots=lambda k: k,
    )
    verify = None if case == "plain" else _counts
    reference_pool = _ReferencePool(blocks, 60) if blocks else None
    reference = _reference_loop(inputs, verify=verify, kv=reference_pool, **common)
    pool = KvCacheCapacity(blocks, 60) if blocks else None
    alone = run_alone(inputs, verify=verify, kv=pool, **common)
    _same(alone, reference)
    if blocks:
        assert pool is not None and reference_pool is not None
        assert reference_pool.num_preemptions > 0  # the case exercises preemption
        assert (pool.num_preemptions, pool.peak_blocks_used, pool.free) == (
            reference_pool.num_preemptions,
            reference_pool.peak_blocks_used,
            reference_pool.free,
        )
        assert np.array_equal(pool.held, reference_pool.held)
    if verify is not None:  # the engine's driver: start, the member's host work, finish
        member = EngineMember(
            loop=serving_loop(inputs, verifies=True, kv=KvCacheCapacity(blocks, 60) if blocks else None, **common),
            synthesizer=None,
            temperature_index=torch.zeros(0, dtype=torch.int64),
            request_seeds=np.zeros(0, dtype=np.int64),
            generator=torch.Generator(),
            concurrency=16,
            num_drafts=4,
        )
        drive([member], _CountsOnly())
        assert member.trace is not None
        _same(member.trace, reference)
