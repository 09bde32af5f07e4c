"""The per-batch-size K table as vLLM 0.33.0 reads it (``vllm/v1/spec_decode/dynamic/utils.py``).

Rows are inclusive ranges ``[start_bs, end_bs, K]``, sorted by their start; the first must start at batch
size 1 and none may overlap (vLLM refuses both); a batch size in a gap between rows, or past the last row,
takes the previous row's K; and the K scheduled is ``min(num_speculative_tokens, row K)``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["schedule_notices", "schedule_problems"]

FieldPath = tuple[str | int, ...]
_FIELD = "num_speculative_tokens_per_batch_size"


def schedule_problems(rows: Sequence[tuple[int, int, int]] | None) -> list[tuple[FieldPath, str]]:
    """What vLLM refuses in the K table: empty, bad ranges, K < 0, overlaps, no row starting at 1."""
    if rows is None:
        return []
    field = _FIELD
    if not rows:
        return [((field,), "must have at least one [start_bs, end_bs, K] row, got []")]
    problems: list[tuple[FieldPath, str]] = []
    for i, (start, end, k) in enumerate(rows):
        if start < 1:
            problems.append(((field, i, 0), f"start_bs must be >= 1, got {start}"))
        if end < start:
            problems.append(((field, i, 1), f"end_bs must be >= start_bs ({start}), got {end}"))
        if k < 0:
            problems.append(((field, i, 2), f"K must be >= 0 (0 = speculation off), got {k}"))
    if problems:
        return problems
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])  # vLLM sorts rows by start_bs
    previous: int | None = None
    for i in order:
        start = rows[i][0]
        if previous is not None and start <= rows[previous][1]:
            problems.append(
                (
                    (field, i, 0),
                    f"rows must not overlap: start_bs must be > {rows[previous][1]} (end_bs of row "
                    f"{previous}, [{rows[previous][0]}, {rows[previous][1]}]), got {start}",
                )
            )
        previous = i
    first = rows[order[0]]
    if first[0] != 1:
        problems.append(
            (
                (field, order[0], 0),
                "the first row must start at batch size 1 (vLLM refuses a table that leaves small "
                f"batches without a K), got {first[0]}",
            )
        )
    return problems


def schedule_notices(rows: Sequence[tuple[int, int, int]] | None, k_max: int | None) -> list[tuple[FieldPath, str]]:
    """Where vLLM serves something other than what the table says: clamped K, filled gaps."""
    notices: list[tuple[FieldPath, str]] = []
    if not rows or k_max is None:  # no K, no table (a study candidate refuses both)
        return notices
    field = _FIELD
    for i, (start, end, k) in enumerate(rows):
        if k > k_max:
            notices.append(
                (
                    (field, i, 2),
                    f"K {k} is above num_speculative_tokens ({k_max}); vLLM serves batch sizes "
                    f"{start}-{end} with min({k_max}, {k}) = {k_max}",
                )
            )
    ordered = sorted(rows)
    for (_, end, k), (start, _, _) in zip(ordered, ordered[1:]):
        if start > end + 1:
            notices.append(
                (
                    (field,),
                    f"batch sizes {end + 1}-{start - 1} fall between rows; vLLM serves them with the "
                    f"previous row's K, min({k_max}, {k}) = {min(k_max, k)}",
                )
            )
    return notices
