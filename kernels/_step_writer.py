"""A lockstep step's kernel inputs on CUDA, written by one Triton kernel from counter-based draws.

A step's inputs to the rejection-sampling call -- each row's bank rows (as element offsets), draft
tokens, temperature and kernel seed -- are drawn from the request's own random stream: Philox4x32-10
keyed by the request's kernel seed for the step (``_seeds.kernel_seeds``: its seed and steps done),
counter (position, 0, 0, 1). The kernels draw from the same key with the last counter word 0, so
the two never share a number. Position j of a step at k drafts takes the bank row
``slot_of[t, min(j, k - 1)] * bank_rows + w0 % bank_rows`` (counter min(j, k): every column from k on
is the bonus row, drawn once) and, below k, the draft token in column ``w1 % samples`` of that row's
token samples (-1 from k on: placeholders).

Why counter-based draws: a step is then a function of what the host stages (each row's request,
steps done and whether it is in the batch; each member's synthesizer tables and k) and nothing
else, so the whole step -- the staging copy, this kernel, the rejection-sampling launches and the
copy of the emitted counts -- is one CUDA graph, captured once per engine and replayed every step
whatever its members' batch sizes, acceptance bins and k. A torch generator in a graph would need
its state refilled before every replay, and a graph per (member, acceptance bin, k). The draws of a
request depend on its seed and steps done alone, so a simulation's numbers are the same alone or
beside others. ``reference.host_step`` is the same step in numpy: the twin's draws on CUDA, and the tests'
reference for the kernel.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ._launcher import start_kernel
from ._seeds import STEP_MIX_INT64

__all__ = ["MEMBER_FIELDS", "ROW_FIELDS", "write_step"]

# What the host stages a step, int64: per row of the call, and per member (its step's synthesizer
# tables as element offsets from the engine's bases, and its k; a member that never verified has k 0).
ROW_FIELDS = ("request", "steps_done", "in_batch")
MEMBER_FIELDS = (
    "k",
    "bank_rows",
    "slot_offset",
    "slot_stride",
    "token_offset",
    "token_stride",
    "target_offset",
    "draft_offset",
    "temperature_offset",
)


class StepOutputs(NamedTuple):
    """What the step writer writes: the rejection-sampling call's inputs."""

    target_rows: torch.Tensor  # int64 [R, K+1]: element offsets
    draft_rows: torch.Tensor  # int64 [R, K] (HAS_DRAFT; otherwise target_rows again, never written)
    tokens: torch.Tensor  # int64 [R, K]
    temperature: torch.Tensor  # float32 [R]
    seeds: torch.Tensor  # int64 [R]: the kernels' seeds


_STEP_MIX = tl.constexpr(STEP_MIX_INT64)
_BLOCK = 128


# The sizes are plain runtime arguments (no specialisation on 1 or on divisibility by 16), and K a
# loop bound rather than a constexpr: one compiled variant with draft rows and one without, where a
# constexpr K and specialised sizes made up to 32, each compiled (about a second) by the first process
# of a machine to meet it, often inside a study's critical path.
@triton.jit(do_not_specialize=["num_rows", "num_members", "vocab", "num_drafts"])
def _write_step_kernel(
    rows,  # int64 [3, R]: ROW_FIELDS
    members,  # int64 [9, M]: MEMBER_FIELDS
    row_member,  # int64 [R]: each row's member
    seed_bases,  # int64 [N]: each request's seed, premixed (``_seeds.seed_bases``), members back to back
    temperature_index,  # int64 [N]
    float_base,  # float32: target, draft and temperature offsets count from here
    int_base,  # int64: slot and token offsets count from here
    out,  # StepOutputs
    num_rows,
    num_members,
    vocab,
    num_drafts,  # K: columns of tokens
    HAS_DRAFT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = r < num_rows
    request = tl.load(rows + r, mask=live, other=0)
    steps_done = tl.load(rows + num_rows + r, mask=live, other=0)
    in_batch = tl.load(rows + 2 * num_rows + r, mask=live, other=0)
    m = tl.load(row_member + r, mask=live, other=0)
    k = tl.load(members + m, mask=live, other=0)
    valid = live & (k > 0)
    bank_rows = tl.load(members + num_members + m, mask=valid, other=1)
    slot_offset = tl.load(members + 2 * num_members + m, mask=valid, other=0)
    slot_stride = tl.load(members + 3 * num_members + m, mask=valid, other=0)
    token_offset = tl.load(members + 4 * num_members + m, mask=valid, other=0)
    token_stride = tl.load(members + 5 * num_members + m, mask=valid, other=1)
    target_offset = tl.load(members + 6 * num_members + m, mask=valid, other=0)
    draft_offset = tl.load(members + 7 * num_members + m, mask=valid, other=0)
    temperature_offset = tl.load(members + 8 * num_members + m, mask=valid, other=0)

    seed = _mix_seed(tl.load(seed_bases + request, mask=live, other=0), steps_done)
    tl.store(out.seeds + r, seed, mask=live)

    # A row past the batch may hold a stale request of another simulation, whose temperature could
    # index past this member's tables: it reads temperature 0.
    t = tl.load(temperature_index + request, mask=valid & (in_batch != 0), other=0)
    zero = (r * 0).to(tl.uint32)
    picks_of = bank_rows.to(tl.uint32)
    samples_of = token_stride.to(tl.uint32)
    for j in range(num_drafts + 1):
        position = tl.minimum(k, j)
        w0, w1, _, _ = tl.philox(seed, position.to(tl.uint32), zero, zero, zero + 1)
        slot = tl.load(int_base + slot_offset + t * slot_stride + tl.minimum(position, k - 1), mask=valid, other=0)
        bank_row = slot * bank_rows + (w0 % picks_of).to(tl.int64)
        # Rows past the batch read the bank's row 0, which stays in the GPU's cache, greedily and
        # with placeholder drafts: the kernels then skip their draft rows and sample nothing.
        element = bank_row * vocab * in_batch
        tl.store(out.target_rows + r * (num_drafts + 1) + j, element + target_offset, mask=live)
        if j == 0:
            row_t = tl.load(float_base + temperature_offset + bank_row, mask=valid & (in_batch != 0), other=0.0)
            tl.store(out.temperature + r, row_t, mask=live)
        if j < num_drafts:
            if HAS_DRAFT:
                tl.store(out.draft_rows + r * num_drafts + j, element + draft_offset, mask=live)
            column = (w1 % samples_of).to(tl.int64)
            drafted = valid & (j < k) & (in_batch != 0)
            token = tl.load(int_base + token_offset + bank_row * token_stride + column, mask=drafted, other=-1)
            tl.store(out.tokens + r * num_drafts + j, token, mask=live)


@triton.jit
def _mix_seed(seed_base, steps_done):
    """``_seeds.kernel_seeds`` in Triton: ``seed_base`` from ``_seeds.seed_bases``; the shifts logical, as on uint64."""
    mixed = (seed_base + steps_done * _STEP_MIX).to(tl.uint64, bitcast=True)
    mixed = (mixed ^ (mixed >> 31)) >> 1
    return mixed.to(tl.int64, bitcast=True)


def write_step(
    staged: torch.Tensor,
    num_rows: int,
    row_member: torch.Tensor,
    seed_bases: torch.Tensor,
    temperature_index: torch.Tensor,
    float_base: torch.Tensor,
    int_base: torch.Tensor,
    out: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor],
    vocab: int,
    *,
    compile_only: bool = False,
) -> None:
    """Launch the step writer: ``staged`` int64 [3 R + 9 M] (ROW_FIELDS by row, then MEMBER_FIELDS
    by member), ``out`` (target rows [R, K+1], draft rows [R, K] or None, tokens [R, K], temperature
    [R], seeds [R]). Asynchronous; no host synchronisation, so it can be captured in a CUDA graph.
    ``compile_only``: compile the variant these arguments select into Triton's cache, write nothing."""
    target_rows, draft_rows, tokens, temperature, seeds = out
    num_members = (staged.numel() - len(ROW_FIELDS) * num_rows) // len(MEMBER_FIELDS)
    members = staged[len(ROW_FIELDS) * num_rows :]
    start_kernel(_write_step_kernel, (triton.cdiv(num_rows, _BLOCK),), compile_only)(
        staged,
        members,
        row_member,
        seed_bases,
        temperature_index,
        float_base,
        int_base,
        StepOutputs(target_rows, draft_rows if draft_rows is not None else target_rows, tokens, temperature, seeds),
        num_rows,
        num_members,
        vocab,
        tokens.shape[1],
        HAS_DRAFT=draft_rows is not None,
        BLOCK=_BLOCK,
    )
