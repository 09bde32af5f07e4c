"""Which verifier an engine runs: one choice, from ``simulation.engine`` and the draw kind.

- the twin (``kernel_backend: reference``; the default on the CPU), ``TwinVerifier``;
- the kernels step by step (``engine: step``), ``KernelVerifier``: a call a step over every member's rows;
- the kernels ahead (``engine: ahead``; ``auto`` on CUDA), ``AheadVerifier``: calls that verify
  requests' steps before their loops reach them, possible because counter-based draws make a step's
  counts independent of the batch it runs in.

Draws: ``generator`` (each simulation's torch generator, over its batch: the CPU's default) or
``counter`` (each request's Philox stream keyed by its seed and steps done: CUDA's default, and what
verifying ahead needs). Every choice gives the same numbers for the same draws, bit for bit
(``tests/simulator/test_lockstep.py``, ``test_ahead.py``); the draw kind changes the numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from spectune.errors import SpectuneError
from spectune.simulator._ahead import AheadVerifier
from spectune.simulator._drive import EngineMember, NoVerifier, Verifier
from spectune.simulator._kernels import KernelVerifier
from spectune.simulator._twin import TwinVerifier

__all__ = ["Draws", "Engine", "draws_for", "make_verifier"]

Engine = Literal["auto", "step", "ahead"]
Draws = Literal["counter", "generator"]


def draws_for(device: torch.device, draws: Draws | None) -> Draws:
    """The draw kind an engine on ``device`` uses: ``draws`` if given, else counter-based on CUDA only."""
    if draws is not None:
        return draws
    return "counter" if device.type == "cuda" else "generator"


def make_verifier(
    members: Sequence[EngineMember],
    *,
    engine: Engine,
    draws: Draws,
    backend: str,
    device: torch.device,
    method: str,
    synthetic_rates: torch.Tensor | None,
    vocab_size: int,
    draft_logits: bool,
) -> Verifier:
    """The verifier of an engine over ``members`` (only those that verify are given to it).

    ``backend``: 'reference' (the twin) or 'triton' (the kernels), already resolved for ``device``.
    """
    verifying = [m for m in members if m.synthesizer is not None]
    if not verifying:
        return NoVerifier()
    num_drafts = max(m.num_drafts for m in verifying)
    counter = draws == "counter"
    if engine == "ahead" and (backend == "reference" or not counter):
        why = (
            f"kernel_backend resolves to 'reference' on {device.type}"
            if backend == "reference"
            else f"the simulation draws from generators on {device.type} (counter-based draws are CUDA's)"
        )
        raise SpectuneError(
            "simulation.engine: 'ahead' verifies with the Triton kernels from counter-based draws, but "
            f"{why}: use engine: auto or step"
        )
    if backend == "reference":
        return TwinVerifier(device, num_drafts, method, synthetic_rates, counter)
    ahead = engine == "ahead" or (engine == "auto" and counter)
    if ahead and all(m.output_tokens is not None for m in verifying):
        return AheadVerifier(verifying, device, num_drafts, method, synthetic_rates, vocab_size, draft_logits)
    return KernelVerifier(verifying, device, num_drafts, method, synthetic_rates, vocab_size, draft_logits, counter)
