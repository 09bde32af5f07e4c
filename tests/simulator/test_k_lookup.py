"""The optional K-table lookup that counts prefilling requests as batch size (vLLM before PR #51466)."""

from __future__ import annotations

import numpy as np
from loop_alone import run_alone

from spectune.simulator._loop import LoopInputs


def _lookups(counts_prefills: bool) -> list[int]:
    n = 12
    inputs = LoopInputs(
        arrival_s=np.zeros(n), prompt_tokens=np.full(n, 300, dtype=np.int64), output_tokens=np.full(n, 6, dtype=np.int64),
        closed_loop_concurrency=4, max_running_requests=4, max_num_batched_tokens=320,
    )  # fmt: skip
    seen: list[int] = []

    def k_for_batch(batch: int) -> int:
        seen.append(batch)
        return 0 if batch > 3 else 2  # a threshold between 3 and 4

    run_alone(
        inputs, k_for_batch=k_for_batch, verify=lambda ids, steps, k: np.ones(len(ids), dtype=np.int64) + 1,
        step_time=lambda b, k, c: (0.0, 1e-3, 0.0, 0.0), prefill_time=lambda t, p, s: 1e-3, max_steps=10_000,
        lookup_counts_prefills=counts_prefills,
    )  # fmt: skip
    return seen


def test_lookup_counts_prefilling_requests_only_when_asked() -> None:
    decoding_only, with_prefills = _lookups(False), _lookups(True)
    # prompts of 300 tokens against a 320-token budget: one request always prefills while three decode
    assert max(decoding_only) == 3  # never past the table's threshold: K = 2 in every step
    assert sum(lookup > 3 for lookup in with_prefills) > len(with_prefills) // 2  # past it: K collapses to 0
