"""The lockstep driver's order: verification starts, every member does its step's host work that needs
no counts (chunked prefill, the step's time), then verification finishes, once a step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from loop_alone import run_alone

from spectune.simulator._drive import EngineMember, NoVerifier, drive
from spectune.simulator._loop import LoopInputs, serving_loop


def _counts(request_ids: np.ndarray, steps_done: np.ndarray, k: int) -> np.ndarray:
    """Emitted tokens (1..K+1) per (request, step), whoever asks."""
    draws = [np.random.default_rng([int(r), int(s)]).random(k) for r, s in zip(request_ids, steps_done)]
    return np.asarray([1 + int(np.cumprod(u < 0.7).sum()) for u in draws], dtype=np.int64)


def _inputs(requests: int, concurrency: int, seed: int) -> LoopInputs:
    rng = np.random.default_rng(seed)
    return LoopInputs(
        arrival_s=np.zeros(requests),
        prompt_tokens=rng.integers(16, 400, requests),
        output_tokens=rng.integers(1, 40, requests),
        closed_loop_concurrency=concurrency,
        max_running_requests=concurrency,
        max_num_batched_tokens=512,
    )


class _Recorder:
    """A member's step time function that counts its calls (the last thing its stage 3 does)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, batch: int, k: int, context: float) -> tuple[float, float, float, float]:
        self.calls += 1
        return 1e-3 * k, 2e-3 + 1e-6 * context, 1e-4 * batch, 1e-3


def _member(inputs: LoopInputs, k: int, step_time: _Recorder, verifies: bool = True) -> EngineMember:
    loop = serving_loop(
        inputs, k_for_batch=lambda batch: k, verifies=verifies, step_time=step_time,
        prefill_time=lambda tokens, prompts, shares: 1e-5 * tokens, max_steps=10_000,
    )  # fmt: skip
    return EngineMember(
        loop=loop, synthesizer=None, temperature_index=torch.zeros(0, dtype=torch.int64),
        request_seeds=np.zeros(0, dtype=np.int64), generator=torch.Generator(), concurrency=8, num_drafts=k,
    )  # fmt: skip


class _OrderChecking:
    """Checks at ``finish`` that every member of the step has timed that step since ``start``, and
    that ``start`` and ``finish`` alternate."""

    def __init__(self, recorders: dict[int, _Recorder]) -> None:
        self.recorders = recorders
        self.requests: dict | None = None
        self.steps = 0

    def start(self, requests):
        assert self.requests is None, "start() twice without finish()"
        self.requests = requests
        self.calls_at_start = {id(m): self.recorders[id(m)].calls for m in requests}

    def finish(self):
        assert self.requests is not None, "finish() without start()"
        for member in self.requests:
            assert self.recorders[id(member)].calls == self.calls_at_start[id(member)] + 1
        requests, self.requests = self.requests, None
        self.steps += 1
        return {id(m): _counts(ids, steps, k) for m, (ids, steps, k) in requests.items()}

    def close(self):
        pass


def test_members_time_their_step_between_start_and_finish_and_keep_their_numbers():
    shapes = [(40, 8, 3, True), (12, 2, 5, True), (20, 4, 0, False), (30, 6, 2, True)]  # the third never verifies
    recorders = [_Recorder() for _ in shapes]
    members = [
        _member(_inputs(n, c, seed), k, recorder, verifies)
        for seed, ((n, c, k, verifies), recorder) in enumerate(zip(shapes, recorders))
    ]
    verifier = _OrderChecking({id(m): r for m, r in zip(members, recorders)})
    drive(members, verifier)
    assert verifier.steps > 0 and verifier.requests is None
    for seed, ((n, c, k, verifies), member) in enumerate(zip(shapes, members)):
        alone = run_alone(
            _inputs(n, c, seed), k_for_batch=lambda batch, k=k: k, verify=_counts if verifies else None,
            step_time=_Recorder(), prefill_time=lambda tokens, prompts, shares: 1e-5 * tokens, max_steps=10_000,
        )  # fmt: skip
        assert member.trace is not None
        assert member.trace.step_end_s == alone.step_end_s
        assert np.array_equal(member.trace.finish_s, alone.finish_s)
        assert np.array_equal(member.trace.accepted_per_position, alone.accepted_per_position)
        assert (member.trace.num_drafts > 0) == verifies


def test_an_engine_whose_members_never_verify_refuses_a_step():
    requests = {"member": (np.arange(3), np.zeros(3, dtype=np.int64), 2)}
    with pytest.raises(AssertionError, match="without a synthesizer"):
        NoVerifier().start(requests)
