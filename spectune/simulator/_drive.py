"""The lockstep driver: several simulations side by side, one verification a step over all their rows.

Each simulation keeps its own serving loop (a generator, ``serving_loop``), clock, requests, logit
bank and random streams; the driver only gathers the steps that need verifying, hands them to one
``Verifier`` and gives each loop back its own rows' counts. A request's counts depend only on that
request's inputs, seed and steps done, so a simulation's numbers are the same alone or beside others,
bit for bit (``tests/simulator/test_lockstep.py``). Which verifier runs is chosen once, by
``simulation.engine`` and the draw kind (``_verifiers.make_verifier``).

Words used in one sense each across ``spectune.simulator``: a *request* is a serving request (a
prompt and its output, with its own seed); a step's *rows* (``StepRows``) are one per decoding request
of a loop, each verifying k drafts; a *call* is one rejection-sampling call of the kernels over many
rows (on CUDA one graph replay, ``_kernel_call.KernelCall``); a *slot* is a member's fixed slice of a
call's rows, and a *lane* is the rows of one (synthesizer, k) staged in one slot (``_kernels.RowLane``,
when verifying ahead).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from spectune.simulator._loop import LoopSteps, LoopTrace, StepRows
from spectune.workload import LogitSynthesizer

__all__ = ["BegunStep", "EngineMember", "NoVerifier", "Verifier", "drive", "split_counts"]


@dataclass(eq=False)  # members are told apart by identity
class EngineMember:
    """One simulation in an engine: its loop and what its steps are drawn from.

    loop: the simulation's ``serving_loop`` (not started; one per data-parallel replica, whose request
    ids ``global_ids`` maps to the document's). synthesizer(batch size): the logit synthesizer of the
    acceptance bin a running batch falls in (None: the loop never verifies). temperature_index (int64
    [N] on the device), request_seeds (int64 [N]) and generator are the simulation's own (shared by
    its replicas); ``concurrency`` bounds the decode batch and ``num_drafts`` its K; ``output_tokens``
    (int64 [N], by global id; None: not known) the requests' output lengths.
    """

    loop: LoopSteps
    synthesizer: Callable[[int], LogitSynthesizer] | None
    temperature_index: torch.Tensor
    request_seeds: np.ndarray
    generator: torch.Generator
    concurrency: int
    num_drafts: int
    global_ids: np.ndarray | None = None
    output_tokens: np.ndarray | None = None  # by global request id: lets an engine verify ahead
    trace: LoopTrace | None = None
    kernel_s: float = 0.0
    synthesis_s: float = 0.0
    rows_verified: int = field(default=0)

    def request_ids(self, ids: np.ndarray) -> np.ndarray:
        """The simulation's request ids of this member's loop's ids ``ids`` (int64 [B])."""
        return self.global_ids[ids] if self.global_ids is not None else ids


class Verifier(Protocol):
    """Verifies one lockstep step of an engine's members, in two halves so that the members' host work
    runs between them. ``drive`` calls, every step:

    1. ``start(step_rows)`` with each member's step that needs verifying (``StepRows``):
       begin verifying it (on CUDA everything up to and including the kernel launch, asynchronously);
    2. each member's host work that needs no counts (``serving_loop``'s stage 3);
    3. ``finish()``: the emitted counts of the step begun by ``start``, int64 [B] per member (accepted
       drafts + 1), keyed by ``id(member)`` (on CUDA the step's one host sync).

    and ``close()`` once, when the engine ends (pinned buffers and graphs go back to the process).
    """

    def start(self, step_rows: dict[EngineMember, StepRows]) -> None: ...

    def finish(self) -> dict[int, np.ndarray]: ...

    def close(self) -> None: ...


class NoVerifier:
    """The verifier of an engine whose members never verify (plain decoding)."""

    def start(self, step_rows: dict[EngineMember, StepRows]) -> None:
        raise AssertionError("a member without a synthesizer asked for verification")

    def finish(self) -> dict[int, np.ndarray]:
        raise AssertionError("finish() without start()")

    def close(self) -> None:
        pass


def drive(members: Sequence[EngineMember], verifier: Verifier) -> None:
    """Run every member's loop to its end, each step's rows verified by ``verifier`` in one call
    (the order of ``Verifier``'s docstring)."""
    step_rows: dict[EngineMember, StepRows] = {}
    for member in members:
        _advance(member, step_rows, None)
    while step_rows:
        step, step_rows = step_rows, {}
        verifier.start(step)
        for member in step:
            member.loop.send(None)
        emitted = verifier.finish()
        for member in step:
            _advance(member, step_rows, emitted[id(member)])


def _advance(member: EngineMember, step_rows: dict[EngineMember, StepRows], emitted: np.ndarray | None) -> None:
    """Run the member's loop on to its next step to verify (into ``step_rows``) or its end (``member.trace``)."""
    try:
        rows = next(member.loop) if emitted is None else member.loop.send(emitted)
    except StopIteration as done:
        member.trace = done.value
        return
    assert rows is not None
    step_rows[member] = rows


@dataclass
class BegunStep:
    """What a verifier's ``start`` leaves for ``finish``: the step's rows, each member's batch size and
    first row in the call (None: members' rows back to back), and the host clock at the start, after
    the writes and after the launch."""

    step_rows: dict[EngineMember, StepRows]
    sizes: list[int]
    offsets: list[int] | None
    started: float
    generated: float
    launched: float


def split_counts(
    step_rows: dict[EngineMember, StepRows],
    emitted: np.ndarray,
    sizes: list[int],
    started: float,
    generated: float,
    offsets: list[int] | None = None,
    *,
    between: float = 0.0,
) -> dict[int, np.ndarray]:
    """Each member's slice of the emitted counts; the call's wall time shared out by rows, less
    ``between``: the members' own host work done between the verifier's ``start`` and ``finish``."""
    done = time.perf_counter() - between
    total = max(sum(sizes), 1)
    out: dict[int, np.ndarray] = {}
    start = 0
    for i, (member, size) in enumerate(zip(step_rows, sizes)):
        begin = offsets[i] if offsets is not None else start
        out[id(member)] = emitted[begin : begin + size]
        start += size
        member.synthesis_s += (generated - started) * size / total
        member.kernel_s += (done - generated) * size / total
        member.rows_verified += size
    return out
