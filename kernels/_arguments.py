"""What the launcher hands the kernels: a call's tensors and sizes as named tuples.

Triton passes a named tuple as one argument whose fields the kernel reads by name (``logits.target``,
``work.tile_max``); it flattens the fields into the kernel's parameters, so grouping them changes no
generated instruction. Every kernel takes the same groups, and a kernel that needs one field of a
group still takes the whole group: one layout to learn.

R requests, K drafts each (K+1 rows with the bonus row), V vocabulary, T = cdiv(V, tile) tiles a row.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = [
    "Inputs",
    "Logits",
    "Outputs",
    "RowTable",
    "Sizes",
    "StepTables",
    "VocabSizes",
    "Workspace",
    "allocate_workspace",
]


class Logits(NamedTuple):
    """The logits, read in place (last dimension contiguous; element strides).

    With ``row_table`` (the simulator's banks, ``RowTable``) each row is found through the tables
    instead of the strides: ``target`` and ``draft`` are then base tensors, and request r's target row
    k starts ``target_rows[r * (K+1) + k]`` elements past ``target``'s first (draft row k:
    ``draft_rows[r * K + k]`` past ``draft``'s), so a step reads rows where they lie, gathering none.
    """

    target: torch.Tensor  # float32|bfloat16|float16 [R, K+1, V]
    draft: torch.Tensor  # same dtype family [R, K, V]; without draft logits the target again (never read)
    target_stride_r: int
    target_stride_k: int
    draft_stride_r: int  # 0 without draft logits
    draft_stride_k: int
    target_rows: torch.Tensor  # int64 [R*(K+1)] with a row table; otherwise any int64 tensor (never read)
    draft_rows: torch.Tensor  # int64 [R*K] with a row table and draft logits; otherwise never read
    row_table: object  # tl.constexpr: True, rows through the tables; False, through the strides


class RowTable(NamedTuple):
    """Where each row of a call lies (``launch(..., rows=)``): int64 element offsets of the rows' first
    logits from the first element of the call's ``target_logits`` (``draft_logits``), any sign. The
    logits tensors passed then only carry the call's shape and dtype and say which storage the
    offsets start from (a zero-stride view of one row of a bank will do)."""

    target: torch.Tensor  # int64 [R, K+1], contiguous
    draft: torch.Tensor | None  # int64 [R, K], contiguous (with draft logits)


class Inputs(NamedTuple):
    """Per-request inputs (contiguous)."""

    draft_tokens: torch.Tensor  # int64 [R, K]; ids outside [0, V) are placeholders
    temperature: torch.Tensor  # float32 [R], 0 = greedy
    seed: torch.Tensor  # int64 [R]
    rates: torch.Tensor  # float32 [K] for method "synthetic"; otherwise the temperature again (never read)


class Sizes(NamedTuple):
    """A call's sizes as the kernels' helpers read them; a kernel builds it from its arguments
    ``num_requests``, ``num_drafts`` (plain runtime values) and ``VocabSizes``."""

    num_requests: int  # R
    num_drafts: int  # K
    vocab: int  # V
    num_tiles: int  # T


class VocabSizes(NamedTuple):
    """The sizes a kernel is compiled for. Triton specialises an integer argument on 1 and on
    divisibility by 16, which lets a tile's masked loads be vectorised; R and K do not need that, so
    they are passed apart with ``do_not_specialize`` and compile no variant of their own."""

    vocab: int  # V
    num_tiles: int  # T


class Outputs(NamedTuple):
    tokens: torch.Tensor  # int64 [R, K+1]: accepted drafts, the emitted token, -1 after it
    num_tokens: torch.Tensor  # int32 [R]: accepted drafts + 1


class Workspace(NamedTuple):
    """Scratch of one call: views of one float32 and one int32 allocation, contents undefined.

    Pass A (or the small-grid kernel) writes the statistics, the decision the plan, pass B the
    residual masses. Indexed per row as request * (K+1) + row (target rows) or request * K + row
    (draft rows), per tile as row index * T + tile.
    """

    tile_max: torch.Tensor  # float32 [R*(K+1)*T]: a tile's max logit (raw, sanitised if NaN/+inf)
    tile_sum: torch.Tensor  # float32 [R*(K+1)*T]: sum of 2**((l - tile max) * log2(e) / temperature)
    draft_tile_max: torch.Tensor  # float32 [R*K*T]: the same of the draft rows
    draft_tile_sum: torch.Tensor  # float32 [R*K*T]
    at_draft: torch.Tensor  # float32 [R*(K+1)]: the target logit of the row's draft token
    excluded_sum: torch.Tensor  # float32 [R*(K+1)]: the draft token's tile mass without the draft token
    draft_at_draft: torch.Tensor  # float32 [R*K]: the draft logit of the row's draft token
    row_info: torch.Tensor  # float32 [R*K*5]: per draft row for pass B (see _decision._store_row_info)
    residual_mass: torch.Tensor  # float32 [R*K*T]: a tile's residual max(s p - q, 0) mass
    draft_first_max: torch.Tensor  # int32 [R*(K+1)]: greedy, where the draft's tile first reaches its max
    plan: torch.Tensor  # int32 [R*2]: pass B's first and last row of a request (-1 = none), or tau
    tile_token: torch.Tensor  # int32 [R*(K+1)*T]: small grid, the token a tile draws (greedy: its argmax)
    excluded_token: torch.Tensor  # int32 [R*(K+1)]: small grid, the draft's tile's draw without the draft
    residual_token: torch.Tensor  # int32 [R*K*T]: small grid, a tile's residual draw


# Each view starts on a 16-byte boundary: Triton specialises a pointer on that alignment, so views
# whose starts moved with R would each compile a variant of their own.
_ALIGN_ELEMENTS = 4  # float32 and int32


def allocate_workspace(num_requests: int, num_drafts: int, num_tiles: int, device: torch.device) -> Workspace:
    rows = num_requests * (num_drafts + 1)
    drafts = num_requests * num_drafts
    float_sizes = [rows * num_tiles, rows * num_tiles, drafts * num_tiles, drafts * num_tiles, rows, rows, drafts]
    float_sizes += [drafts * 5, drafts * num_tiles]
    int_sizes = [rows, 2 * num_requests, rows * num_tiles, rows, drafts * num_tiles]
    floats = torch.empty(sum(map(_aligned, float_sizes)), dtype=torch.float32, device=device)
    ints = torch.empty(sum(map(_aligned, int_sizes)), dtype=torch.int32, device=device)
    return Workspace(*_split(floats, float_sizes), *_split(ints, int_sizes))


def _aligned(size: int) -> int:
    """Elements a view of ``size`` takes (at least one), rounded up to the next 16-byte boundary."""
    return -(-max(size, 1) // _ALIGN_ELEMENTS) * _ALIGN_ELEMENTS


def _split(buffer: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    views, start = [], 0
    for size in sizes:
        views.append(buffer[start : start + max(size, 1)])
        start += _aligned(size)
    return views


class StepTables(NamedTuple):
    """A synthesizer's tables the step's draws read (all on its device, contiguous).

    slot_of        int64 [T, K]  each (temperature, position)'s bank slot
    token_bank     int64 [N, S]  each bank row's draft-token samples (S = 1: one-hot drafts)
    row_temperature float32 [N]  each bank row's temperature
    bank_rows      rows a slot
    """

    slot_of: torch.Tensor
    token_bank: torch.Tensor
    row_temperature: torch.Tensor
    bank_rows: int
