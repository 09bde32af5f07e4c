"""Data-parallel replicas: split the load over them, run each, and merge what they served.

``hardware.num_gpus`` over the target's tensor parallelism is the number of replicas (vLLM's
``--data-parallel-size``, or that many servers behind a load balancer). Requests go round-robin in
arrival order; a closed loop's clients are split as evenly as they go (the first replicas take one
more when they do not divide). Each replica is its own engine with its own ``max_num_seqs`` and KV
cache. The merged trace interleaves the replicas' steps in time, so throughput is the deployment's
total; per-step numbers (batch size, step time) stay per replica.
"""

from __future__ import annotations

import numpy as np

from spectune.simulator._loop import LoopInputs, LoopTrace

__all__ = ["closed_share", "merge_traces", "split_load"]


def closed_share(closed: int, replicas: int, replica: int) -> int:
    """The clients of a closed loop of ``closed`` that replica ``replica`` of ``replicas`` serves: split as
    evenly as they go, the first replicas taking one more."""
    return closed // replicas + (1 if replica < closed % replicas else 0)


def split_load(inputs: LoopInputs, replicas: int) -> list[tuple[np.ndarray, LoopInputs]]:
    """(global request ids, that replica's inputs) for each replica that gets any load."""
    closed = inputs.closed_loop_concurrency
    parts = []
    for replica in range(replicas):
        ids = np.arange(replica, len(inputs.output_tokens), replicas, dtype=np.int64)
        concurrency = None
        if closed is not None:
            concurrency = closed_share(closed, replicas, replica)
            if concurrency == 0:
                continue
            ids = np.arange(replica, len(inputs.output_tokens), min(replicas, closed), dtype=np.int64)
        if len(ids) == 0:
            continue
        parts.append(
            (
                ids,
                LoopInputs(
                    arrival_s=inputs.arrival_s[ids],
                    prompt_tokens=inputs.prompt_tokens[ids],
                    output_tokens=inputs.output_tokens[ids],
                    closed_loop_concurrency=concurrency,
                    max_running_requests=inputs.max_running_requests,
                    max_num_batched_tokens=inputs.max_num_batched_tokens,
                ),
            )
        )
    return parts


def merge_traces(traces: list[tuple[np.ndarray, LoopTrace]], num_requests: int) -> LoopTrace:
    """One trace for the deployment: per-request arrays by global id, steps interleaved by end time."""
    merged = LoopTrace(
        arrival_s=np.full(num_requests, np.nan),
        first_token_s=np.full(num_requests, np.nan),
        finish_s=np.full(num_requests, np.nan),
        output_tokens=np.zeros(num_requests, dtype=np.int64),
    )
    ends, tokens, batches, gaps = [], [], [], []
    for ids, trace in traces:
        merged.arrival_s[ids] = trace.arrival_s
        merged.first_token_s[ids] = trace.first_token_s
        merged.finish_s[ids] = trace.finish_s
        merged.output_tokens[ids] = trace.output_tokens
        ends += trace.step_end_s
        tokens += trace.step_tokens
        batches += trace.step_batch_size
        gaps += trace.chunk_gaps_s
        merged.step_breakdown_s = merged.step_breakdown_s + trace.step_breakdown_s
        merged.num_drafts += trace.num_drafts
        merged.num_draft_tokens += trace.num_draft_tokens
        width = max(len(merged.accepted_per_position), len(trace.accepted_per_position))
        merged.accepted_per_position = np.pad(
            merged.accepted_per_position, (0, width - len(merged.accepted_per_position))
        ) + (np.pad(trace.accepted_per_position, (0, width - len(trace.accepted_per_position))))
        merged.truncated |= trace.truncated
        merged.kv_bound_steps += trace.kv_bound_steps
    order = np.argsort(np.asarray(ends), kind="stable")
    merged.step_end_s = [ends[i] for i in order]
    merged.step_tokens = [tokens[i] for i in order]
    merged.step_batch_size = [batches[i] for i in order]
    merged.chunk_gaps_s = gaps  # pooled per request gap; their order does not matter
    # steady state: every replica has filled (latest first finish) and none has begun to drain
    finishes = [t.first_finish_s for _, t in traces if t.first_finish_s is not None]
    admissions = [t.last_admission_s for _, t in traces if t.last_admission_s is not None]
    merged.first_finish_s = max(finishes) if finishes else None
    merged.last_admission_s = min(admissions) if admissions else None
    return merged
