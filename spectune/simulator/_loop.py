"""The iteration-level serving loop.

One iteration is one engine step, as in vLLM V1 with chunked prefill, in four stages:

1. requests that have arrived take free slots (up to max_num_seqs);
2. every request already decoding gets K draft tokens, which the rejection kernel verifies;
3. what is left of the step's token budget (max_num_batched_tokens minus the B·(K+1) decode tokens)
   goes to prefill chunks, first come first served, and the clock advances by the cost model's step
   time plus the prefill chunks' share;
4. each decoding request advances by the tokens the kernel emitted (accepted drafts + 1, cut at its
   output length), a request whose prefill completed gets its first token, and finished requests
   leave; in a closed loop a new request takes each freed slot at once.

K per step and the drafts each request verifies come from the runtime policy (``_policy``): a fixed K per
batch size verified whole, vLLM's adaptive verification (a budget sized in stage 3 and drafts admitted once
the counts are back) or SGLang's adaptive steps (K from a slot fed back by each verify).

Stage 3 needs none of the emitted counts, so an engine runs it while the step's verification is in
flight (``serving_loop`` yields twice a step). With a KV cache (``KvCacheCapacity``), blocks bound
the running batch as well: decoding requests reserve theirs first, preempting the newest when the
pool runs short (they recompute later), and prefill chunks take what is left.

The loop is plain and sequential on purpose (read it top to bottom). Per-request state is kept in
numpy arrays, so that a step is a few dozen vector operations whatever its batch, not Python work
per token or per request; ``tests/simulator/test_loop_reference.py`` keeps the loop as first
written, with every quantity recomputed, and this one must give its numbers bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from spectune.config import MAX_NUM_SPECULATIVE_TOKENS
from spectune.errors import SpectuneError
from spectune.simulator._kv import BLOCK_SIZE_TOKENS, KvCacheCapacity
from spectune.simulator._policy import StepPolicy

__all__ = ["LoopInputs", "LoopSteps", "LoopTrace", "StepRows", "serving_loop"]


@dataclass(frozen=True)
class LoopInputs:
    """The requests of one simulation, as arrays over request index (length N).

    arrival_s: float64 [N], arrival times (open loop; ignored in a closed loop)
    prompt_tokens, output_tokens: int64 [N]
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    closed_loop_concurrency: int | None
    max_running_requests: int
    max_num_batched_tokens: int


@dataclass
class LoopTrace:
    """What happened, per request and per step; ``spectune.simulator._metrics`` turns it into results."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    output_tokens: np.ndarray
    chunk_gaps_s: list[np.ndarray] = field(default_factory=list)  # gaps between the chunks a request receives
    step_end_s: list[float] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)
    step_batch_size: list[int] = field(default_factory=list)
    step_breakdown_s: np.ndarray = field(
        default_factory=lambda: np.zeros(5)
    )  # drafting, verify, sampling, overhead, prefill
    num_drafts: int = 0
    num_draft_tokens: int = 0
    accepted_per_position: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    truncated: bool = False
    kv_bound_steps: int = 0  # steps where KV blocks, not max_num_seqs, held requests back
    first_finish_s: float | None = None  # steady state runs from the first finish ...
    last_admission_s: float | None = None  # ... to the last admission (then the batch drains)

    @property
    def simulated_steps(self) -> int:
        return len(self.step_end_s)


class StepRows(NamedTuple):
    """One step's rows to verify: a row per decoding request of the loop."""

    ids: np.ndarray  # int64 [B], the loop's request ids
    steps_done: np.ndarray  # int64 [B], each request's verified steps before this one
    k: int  # drafts each row verifies


StepTimeFn = Callable[[int, int, float], tuple[float, float, float, float]]
PrefillTimeFn = Callable[[int, int, bool], float]  # (prompt tokens, prompts, shares a decode pass)
# A serving loop as its engine drives it: it yields a step's StepRows and is sent None once verification
# has started; it yields None after the step's host work that needs no counts and is sent the emitted tokens.
LoopSteps = Generator[StepRows | None, np.ndarray | None, LoopTrace]


def serving_loop(
    inputs: LoopInputs,
    *,
    k_for_batch: Callable[[int], int],
    verifies: bool,
    step_time: StepTimeFn,
    prefill_time: PrefillTimeFn,
    max_steps: int,
    on_step: Callable[[int, int], None] | None = None,
    kv: KvCacheCapacity | None = None,
    lookahead_slots: Callable[[int], int] = lambda k: 0,
    lookup_counts_prefills: bool = False,
    policy: StepPolicy | None = None,
) -> LoopSteps:
    """Simulate serving ``inputs``; K per step comes from ``k_for_batch(decode batch size)``.

    ``policy``: a runtime policy (``spectune.simulator._policy``) that sets K per step and may verify fewer
    drafts than it drafts; None: ``StepPolicy(k_for_batch)``, every drafted token verified.

    ``kv``: the replica's KV block pool (None: unbounded); ``lookahead_slots(K)``: KV slots a decoding
    request reserves beyond its 1 + K verified tokens (``spectune.simulator._kv.drafting_slots``).
    ``lookup_counts_prefills``: look K up at the decoding plus the still-prefilling requests, as vLLM's
    K-table lookup does before PR #51466 (a table threshold near the batch size then makes K thrash).
    ``step_time(batch, K, mean_context_tokens)`` -> (drafting_s, verification_s, sampling_s, overhead_s).
    ``prefill_time(prompt tokens, prompts, shares_pass)`` -> seconds this step's prefill chunks add.
    ``on_step(finished requests, total requests)`` is called after every step (progress bars).

    A generator, so that an engine (``_drive.drive``) can verify many simulations' steps in one call
    (lockstep) and do their host work while it verifies. A step that verifies meets the engine twice:

    1. it yields its ``StepRows``; the engine starts verifying and sends None;
    2. it does the work of stage 3 (chunked prefill, the step's time), which needs no emitted counts, and
       yields None; the engine sends the emitted tokens per request (int64 [B]) once verification is done.

    Returns the trace. ``verifies`` False: plain decoding, nothing is yielded.
    """
    n = len(inputs.output_tokens)
    if policy is None:
        policy = StepPolicy(k_for_batch)
    k_for_batch = policy.k_for_batch
    trace = LoopTrace(
        arrival_s=inputs.arrival_s.astype(np.float64).copy(),
        first_token_s=np.full(n, np.nan),
        finish_s=np.full(n, np.nan),
        output_tokens=inputs.output_tokens.astype(np.int64),
    )
    context = inputs.prompt_tokens.astype(np.int64)  # tokens in each request's context: prompt and output so far
    left = trace.output_tokens.copy()  # output tokens each request has still to generate
    steps_done = np.zeros(n, dtype=np.int64)  # verification steps each request has taken (RNG stream index)
    prefill_left = context.tolist()  # per request: tokens its current prefill has still to compute ...
    prefill_target = context.tolist()  # ... of all it computes (the prompt, or all so far after a preemption)
    emitted_counts = np.zeros(MAX_NUM_SPECULATIVE_TOKENS + 2, dtype=np.int64)  # verified requests by tokens emitted
    positions = 0  # the largest K verified
    drafting_s = verification_s = sampling_s = overhead_s = prefill_total_s = 0.0  # summed over the steps
    reserved: dict[int, int] = {}  # K -> KV slots a decoding request takes beyond its context
    closed = inputs.closed_loop_concurrency
    cap = min(closed, inputs.max_running_requests) if closed is not None else inputs.max_running_requests
    next_request = 0
    prefilling: list[int] = []  # admitted, prompt not fully processed (FCFS)
    running = np.zeros(0, dtype=np.int64)  # decoding, oldest first
    running_context = running  # context[running], taken each step
    finished = 0
    clock = 0.0
    while finished < n:
        if len(trace.step_end_s) >= max_steps:
            trace.truncated = True
            break
        # 1. Admit arrived requests into free slots.
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
            clock = float(inputs.arrival_s[next_request])  # idle until the next arrival
            continue

        # 2. Draft and verify for the requests already decoding (with a KV cache: those that fit).
        batch = len(running)
        lookup = batch + len(prefilling) if lookup_counts_prefills else batch
        k = k_for_batch(lookup) if (batch and verifies) else 0
        preempted = 0
        if batch:
            running_context = context[running]
        if kv is not None and batch:
            if k not in reserved:
                reserved[k] = k + lookahead_slots(k)
            preempted_ids = kv.reserve_decode(running, running_context + reserved[k])
            preempted = len(preempted_ids)
            if preempted:  # recompute: back to the head of the queue, prompt and output so far
                batch -= preempted
                running, running_context = running[:batch], running_context[:batch]
                for request in preempted_ids.tolist():
                    prefill_target[request] = prefill_left[request] = int(context[request])
                prefilling = preempted_ids[::-1].tolist() + prefilling
                lookup = batch + len(prefilling) if lookup_counts_prefills else batch
                k = k_for_batch(lookup) if (batch and verifies) else 0
        verified = batch > 0 and k > 0
        if verified:
            steps = steps_done[running]
            started = yield StepRows(running, steps, k)  # the engine starts verifying ...
            assert started is None
            steps_done[running] = steps + 1

        # 3. Chunked prefill fills what the token budget leaves after the decode tokens (... while the
        # engine verifies: none of this needs the emitted counts).
        budget = max(inputs.max_num_batched_tokens - batch * (k + 1), 0) if not preempted else 0
        chunk_tokens, chunk_prompts, completed, kv_blocked = 0, 0, [], False
        for position, request in enumerate(prefilling):
            if budget <= 0:
                break
            take = min(prefill_left[request], budget)
            if kv is not None:
                done_tokens = prefill_target[request] - prefill_left[request]
                take, restarted = kv.grow_prefill(request, done_tokens, take, prefilling[position + 1 :])
                for other in restarted:
                    prefill_left[other] = prefill_target[other]
                if take <= 0:
                    kv_blocked = True
                    break
            prefill_left[request] -= take
            budget -= take
            chunk_tokens += take
            chunk_prompts += 1
            if prefill_left[request] == 0:
                completed.append(request)
        if kv_blocked or preempted:
            trace.kv_bound_steps += 1
            if kv is not None and kv_blocked and batch == 0 and chunk_tokens == 0:
                stuck = prefilling[0]
                raise SpectuneError(
                    f"request {stuck} needs {prefill_target[stuck]} tokens of KV cache, more than the "
                    f"{kv.num_blocks * BLOCK_SIZE_TOKENS} one replica holds; shorten the prompts or give the "
                    "KV cache more memory (gpu_memory_utilization, tensor_parallel_size)"
                )
        prefill_s = prefill_time(chunk_tokens, chunk_prompts, batch > 0) if chunk_tokens else 0.0
        if verified:  # a request whose prefill completes this step samples too
            policy.plan(running, k, batch + len(completed), batch + chunk_tokens)
        if batch:
            mean_context = float(np.add.reduce(running_context, dtype=np.float64) / batch)
            drafting, verification, sampling, overhead = policy.step_phases(step_time, batch, k, mean_context)
        else:
            drafting = verification = sampling = overhead = 0.0
        clock += drafting + verification + sampling + overhead + prefill_s
        drafting_s += drafting
        verification_s += verification
        sampling_s += sampling
        overhead_s += overhead
        prefill_total_s += prefill_s

        # 4. Advance every request by what it emitted, cut at its output length.
        tokens_this_step = 0
        decoding, done = running, np.zeros(0, dtype=bool)
        if batch:
            if verified:
                emitted = yield None  # ... and hands back the emitted tokens once it is done
                assert emitted is not None
                emitted = policy.settle(running, k, emitted, batch)
                emitted_counts += np.bincount(emitted, minlength=len(emitted_counts))
                positions = max(positions, k)
                trace.num_drafts += batch
                trace.num_draft_tokens += policy.verified_drafts
            else:
                if verifies:
                    policy.unverified(batch)
                emitted = np.ones(batch, dtype=np.int64)
            remaining = left[running]
            emitted = np.minimum(emitted, remaining)
            left[running] = left_running = remaining - emitted
            done = left_running <= 0
            context[running] = running_context + emitted
            tokens_this_step += int(np.add.reduce(emitted))
        if completed:
            ids = np.asarray(completed, dtype=np.int64)
            prefilling = prefilling[len(completed) :]  # FCFS: the completed ones are the head of the queue
            fresh = ids[np.isnan(trace.first_token_s[ids])]
            trace.first_token_s[fresh] = clock  # the prefill's last chunk samples the first token
            context[ids] += 1  # a recomputed request samples its next token the same way
            left[ids] -= 1
            tokens_this_step += len(ids)
            decoding = np.concatenate((running, ids))
            done = left[decoding] <= 0
        leaving = int(np.count_nonzero(done))
        if leaving:
            if finished == 0:
                trace.first_finish_s = clock
            ids = decoding[done]
            trace.finish_s[ids] = clock
            if kv is not None:
                kv.release(ids)
            finished += leaving
            decoding = decoding[~done]
        running = decoding
        trace.step_end_s.append(clock)
        trace.step_tokens.append(tokens_this_step)
        trace.step_batch_size.append(batch)
        if on_step is not None:
            on_step(finished, n)
    trace.step_breakdown_s = np.array([drafting_s, verification_s, sampling_s, overhead_s, prefill_total_s])
    # A decoding request receives a chunk every step, and the step before it decoded or completed its
    # prefill (which samples a token): each gap is a step's duration, once per request it served.
    trace.chunk_gaps_s = [np.repeat(np.diff(np.asarray(trace.step_end_s)), trace.step_batch_size[1:])]
    # vLLM's per-position counter: position i's draft was accepted where a request emitted more than i + 1 tokens
    trace.accepted_per_position = np.cumsum(emitted_counts[::-1])[::-1][2 : 2 + positions].copy()
    return trace
