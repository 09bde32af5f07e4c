"""One serving loop driven alone by the engine's driver, its counts from a function (the tests' stand-in
for a verifier)."""

from collections.abc import Callable

import numpy as np
import torch

from spectune.simulator._drive import EngineMember, drive
from spectune.simulator._loop import LoopInputs, LoopTrace, serving_loop

Counts = Callable[[np.ndarray, np.ndarray, int], np.ndarray]  # (request ids, steps done, K) -> emitted


class FunctionVerifier:
    """A ``Verifier`` whose counts come from ``counts(request ids, steps done, K)``."""

    def __init__(self, counts: Counts) -> None:
        self.counts, self.requests = counts, {}

    def start(self, requests):
        self.requests = requests

    def finish(self):
        return {id(member): self.counts(*request) for member, request in self.requests.items()}

    def close(self):
        pass


def run_alone(inputs: LoopInputs, *, verify: Counts | None, **loop_arguments) -> LoopTrace:
    """``serving_loop(inputs, **loop_arguments)`` run to its end; ``verify`` None: plain decoding."""
    member = EngineMember(
        loop=serving_loop(inputs, verifies=verify is not None, **loop_arguments),
        synthesizer=None,
        temperature_index=torch.zeros(0, dtype=torch.int64),
        request_seeds=np.zeros(0, dtype=np.int64),
        generator=torch.Generator(),
        concurrency=inputs.max_running_requests,
        num_drafts=0,
    )
    drive([member], FunctionVerifier(verify) if verify is not None else FunctionVerifier(lambda *_: None))
    assert member.trace is not None
    return member.trace
