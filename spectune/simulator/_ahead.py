"""Verifying ahead: the kernels verify each request's next steps in large calls, before its loop gets there.

What a request emits at a step depends only on the request (its seed and temperature), how many steps
it has verified before (steps done), the step's k and the logit synthesizer of its acceptance bin:
the step writer draws a row from the request's own counter-based stream (``spectune.kernels.write_step``), and the
kernels draw from the same key (``spectune.kernels.kernel_seeds``). It does not depend on the batch the step
runs in, the clock or the other requests. So on CUDA an engine need not meet the GPU every step:
``AheadVerifier`` verifies, for each request that needs it, every step until the request's output is
complete (its emitted counts summed reach its output length), in calls of two sizes over many
requests and steps, and keeps the counts in a table per (simulation, synthesizer, k). A step then
reads its counts from the table, host work only. The counts are those the step would have got
verified alone, bit for bit (``tests/simulator/test_ahead.py``); only the kernels' work moves, from
many small calls (a host sync each, rows past a batch padded up to 16) into few full ones.

When a step finds a request's count missing (a request just admitted; a step of another acceptance
bin or k than the table holds), the verifier refills: that request's steps from there to its end,
and with them, once the batch is full, the next requests the loop will admit, so a closed loop meets
the GPU about once per two batches of requests. A refill runs in rounds: the first verifies the
fewest steps the output can take (k + 1 tokens a step) where the table has seen no count yet, later
ones the remaining tokens at the mean count seen, plus a tenth; a request's last round is its only
overshoot, steps past its end that no loop reads.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from spectune.simulator._drive import EngineMember
from spectune.simulator._kernels import KernelVerifier, RowLane
from spectune.simulator._loop import StepRows
from spectune.workload import LogitSynthesizer

__all__ = ["AHEAD_LANES", "AheadVerifier", "ahead_call_rows"]

AHEAD_LANES = 8  # (synthesizer, k) pairs one call can verify at once: a lockstep group's members
UPCOMING_BATCHES = 2  # a full batch's refill also verifies the next this many batches of requests
_LATER_MARGIN = 1.1  # later rounds verify the remaining tokens at the mean count, plus this share


def ahead_call_rows(device: torch.device) -> tuple[int, int]:
    """R of the two calls an engine verifying ahead on ``device`` makes (what the warm-up compiles):
    a small one for a refill round's last few rows, a large one while rows remain to fill half of it.
    On CUDA 512 and 4096 rows. A call costs about its R whatever rows it holds (the rows past its
    pieces still run, if greedily and on a cached bank row), so at a large vocabulary a call of 4096
    rows for a round of a few rows (a request admitted alone) costs several of 512; at a small
    vocabulary, each call's fixed costs favour the large. Elsewhere, where only the tests verify
    ahead (the kernels under Triton's interpreter), 32 and 128."""
    return (512, 4096) if device.type == "cuda" else (32, 128)


@dataclass(eq=False)
class _CountTable:
    """The counts of one simulation's requests under one (synthesizer, k): ``counts[g, s]`` is what
    request g emits at its step s, known for lo[g] <= s < hi[g] (int8; 0 where unknown)."""

    synthesizer: LogitSynthesizer
    k: int
    counts: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    emitted: int = 0  # the counts verified so far, summed, and how many: their mean sizes later rounds
    rows: int = 0

    def covered(self, gids: np.ndarray, steps: np.ndarray) -> np.ndarray:
        return (self.lo[gids] <= steps) & (steps < self.hi[gids])

    def steps_for(self, tokens: np.ndarray, first_round: bool) -> np.ndarray:
        """Steps to verify for ``tokens`` still to come: the fewest they can take while no count is
        known (k + 1 a step), else at the mean count seen, plus a tenth."""
        if first_round and self.rows == 0:
            return np.maximum(-(-tokens // (self.k + 1)), 1)
        mean = self.emitted / self.rows if self.rows else float(self.k + 1)
        return np.maximum(np.ceil(tokens * _LATER_MARGIN / mean).astype(np.int64), 1)

    def store(self, gids: np.ndarray, starts: np.ndarray, lengths: np.ndarray, counts: np.ndarray) -> None:
        """Keep counts of steps starts..starts+lengths of each request (``counts`` flat, request by request)."""
        ends = starts + lengths
        if ends.max() > self.counts.shape[1]:
            wider = np.zeros((self.counts.shape[0], 1 << int(ends.max() - 1).bit_length()), dtype=np.int8)
            wider[:, : self.counts.shape[1]] = self.counts
            self.counts = wider
        rows = np.repeat(gids, lengths)
        self.counts[rows, _ranges(starts, lengths)] = counts
        extends = (self.lo[gids] <= starts) & (starts <= self.hi[gids]) & (self.hi[gids] > 0)
        self.lo[gids] = np.where(extends, self.lo[gids], starts)
        self.hi[gids] = ends
        self.emitted += int(counts.sum())
        self.rows += len(counts)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """starts[i], starts[i] + 1, ..., starts[i] + lengths[i] - 1 for each i, concatenated."""
    offsets = np.cumsum(lengths) - lengths
    return np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(offsets - starts, lengths)


@dataclass(eq=False)  # slots are told apart by identity
class _LaneSlot:
    """One lane's slice of a call: ``concurrency`` rows over the engine's request tables (``SlotTables``)."""

    concurrency: int
    request_seeds: np.ndarray
    temperature_index: torch.Tensor


class _CallSize:
    """One call size: ``AHEAD_LANES`` lanes of ``lane_rows`` rows through a ``KernelVerifier`` (one
    graph), each lane one (synthesizer, k) over every simulation's request tables."""

    def __init__(
        self,
        rows: int,
        tables: tuple[np.ndarray, torch.Tensor],
        verifier_args: tuple[torch.device, int, str, torch.Tensor | None, int, bool, bool],
    ) -> None:
        self.lane_rows = rows // AHEAD_LANES
        self.rows = rows
        slots = [_LaneSlot(self.lane_rows, *tables) for _ in range(AHEAD_LANES)]
        self.verifier = KernelVerifier(slots, *verifier_args)


@dataclass
class _PendingSteps:
    """Requests of one table to verify from ``starts`` on, with ``tokens`` still to come each."""

    member: EngineMember
    table: _CountTable
    gids: np.ndarray
    starts: np.ndarray
    tokens: np.ndarray


class AheadVerifier:
    """The kernels (``KernelVerifier`` with counter draws) verifying ahead, through ``AHEAD_LANES``
    lanes in calls of two sizes (``ahead_call_rows``): each lane is one (synthesizer, k) of a call,
    over the requests of every member (their request tables side by side)."""

    def __init__(
        self,
        members: Sequence[EngineMember],
        device: torch.device,
        num_drafts: int,
        method: str,
        synthetic_rates: torch.Tensor | None,
        vocab: int,
        has_draft: bool,
    ) -> None:
        firsts: dict[int, int] = {}  # id(request seeds) -> the first index of that simulation's requests
        seeds: list[np.ndarray] = []
        temperatures: list[torch.Tensor] = []
        for member in members:
            if id(member.request_seeds) not in firsts:  # a simulation's replicas share its tables
                firsts[id(member.request_seeds)] = sum(map(len, seeds))
                seeds.append(member.request_seeds)
                temperatures.append(member.temperature_index)
        self.first = {id(m): firsts[id(m.request_seeds)] for m in members}
        tables = (np.concatenate(seeds), torch.cat(temperatures))
        arguments = (device, num_drafts, method, synthetic_rates, vocab, has_draft, True)  # counter draws
        self.small, self.large = (_CallSize(rows, tables, arguments) for rows in ahead_call_rows(device))
        self.tables: dict[tuple[int, int, int], _CountTable] = {}  # (id(member), id(synthesizer), k) -> counts
        self.produced = {id(m): np.zeros(len(m.request_seeds), dtype=np.int64) for m in members}
        self.admitted = {id(m): 0 for m in members}  # local request ids below this have been verified for
        self.result: dict[int, np.ndarray] | None = None
        self.refills = self.calls = 0

    def _table(self, member: EngineMember, synthesizer: LogitSynthesizer, k: int) -> _CountTable:
        key = (id(member), id(synthesizer), k)
        table = self.tables.get(key)
        if table is None:
            n = len(member.request_seeds)
            table = self.tables[key] = _CountTable(
                synthesizer, k, np.zeros((n, 64), dtype=np.int8), np.zeros(n, np.int64), np.zeros(n, np.int64)
            )
        return table

    def start(self, step_rows: dict[EngineMember, StepRows]) -> None:
        steps = []
        pending_steps: list[_PendingSteps] = []
        for member, (ids, steps_done, k) in step_rows.items():
            assert member.synthesizer is not None
            gids = member.global_ids[ids] if member.global_ids is not None else ids
            table = self._table(member, member.synthesizer(len(ids)), k)
            steps.append((member, gids, steps_done, table))
            missing = ~table.covered(gids, steps_done)
            if missing.any():
                pending_steps.extend(self._steps_to_verify(member, table, ids, gids, steps_done, missing))
        if pending_steps:
            self._refill(pending_steps)
            assert all(table.covered(gids, steps_done).all() for _, gids, steps_done, table in steps)
        result = {}
        for member, gids, steps_done, table in steps:
            emitted = table.counts[gids, steps_done].astype(np.int64)
            self.produced[id(member)][gids] += emitted
            member.rows_verified += len(gids)
            result[id(member)] = emitted
        self.result = result

    def finish(self) -> dict[int, np.ndarray]:
        result, self.result = self.result, None
        assert result is not None, "finish() without start()"
        return result

    def close(self) -> None:
        self.small.verifier.close()
        self.large.verifier.close()

    def _steps_to_verify(
        self,
        member: EngineMember,
        table: _CountTable,
        ids: np.ndarray,
        gids: np.ndarray,
        steps_done: np.ndarray,
        missing: np.ndarray,
    ) -> list[_PendingSteps]:
        """The missing requests' steps to their end; with a full batch, the next requests' too."""
        outputs = member.output_tokens
        assert outputs is not None  # an engine verifying ahead gets its members' output lengths
        missed = gids[missing]
        # Tokens to come: the output less the prefill's first token and what the steps so far emitted
        # (preemptions take one more each, so this never falls short).
        tokens = np.maximum(outputs[missed] - 1 - self.produced[id(member)][missed], 1)
        pending_steps = [_PendingSteps(member, table, missed, steps_done[missing], tokens)]
        local_count = len(member.global_ids) if member.global_ids is not None else len(member.request_seeds)
        admitted = max(self.admitted[id(member)], int(ids.max()) + 1)
        if len(ids) >= member.concurrency and admitted < local_count:
            upcoming = np.arange(admitted, min(local_count, admitted + UPCOMING_BATCHES * member.concurrency))
            upcoming_gids = member.global_ids[upcoming] if member.global_ids is not None else upcoming
            upcoming_gids = upcoming_gids[(table.hi[upcoming_gids] == 0) & (outputs[upcoming_gids] > 1)]
            if len(upcoming_gids):
                starts = np.zeros(len(upcoming_gids), dtype=np.int64)
                pending_steps.append(_PendingSteps(member, table, upcoming_gids, starts, outputs[upcoming_gids] - 1))
            admitted = int(upcoming[-1]) + 1
        self.admitted[id(member)] = admitted
        return pending_steps

    def _refill(self, pending_steps: list[_PendingSteps]) -> None:
        """Verify each part's steps in rounds until its tokens are covered."""
        started = time.perf_counter()
        self.refills += 1
        rows_by_member: dict[int, int] = {}
        pending, first_round = pending_steps, True
        while pending:
            lengths = [part.table.steps_for(part.tokens, first_round) for part in pending]
            counts = self._verify(pending, lengths)
            later = []
            for part, length, got in zip(pending, lengths, counts):
                part.table.store(part.gids, part.starts, length, got)
                rows_by_member[id(part.member)] = rows_by_member.get(id(part.member), 0) + len(got)
                offsets = np.cumsum(length) - length
                tokens = part.tokens - np.add.reduceat(got.astype(np.int64), offsets)
                short = tokens > 0
                if short.any():
                    later.append(
                        _PendingSteps(
                            part.member, part.table, part.gids[short], (part.starts + length)[short], tokens[short]
                        )
                    )
            pending, first_round = later, False
        spent = time.perf_counter() - started
        total = max(sum(rows_by_member.values()), 1)
        for member in {id(w.member): w.member for w in pending_steps}.values():
            member.kernel_s += spent * rows_by_member.get(id(member), 0) / total

    def _verify(self, pending_steps: list[_PendingSteps], lengths: list[np.ndarray]) -> list[np.ndarray]:
        """Counts (int8, flat per part: request by request, step by step) of each part's steps
        starts..starts+lengths, in calls of ``AHEAD_LANES`` lanes of one (synthesizer, k) each: large
        calls while the rows left fill half of one, then small ones."""
        rows = []  # per part: the rows' requests in the calls' tables, and their steps
        for part, length in zip(pending_steps, lengths):
            rows.append((np.repeat(part.gids + self.first[id(part.member)], length), _ranges(part.starts, length)))
        out = [np.zeros(int(length.sum()), dtype=np.int8) for length in lengths]
        left, index, begin = sum(len(requests) for requests, _ in rows), 0, 0
        while left:
            call = self.large if left >= self.large.rows // 2 else self.small
            lanes: list[RowLane | None] = []
            taken = []  # (lane, part index, first flat row, rows)
            for number in range(AHEAD_LANES):
                if index == len(rows):
                    lanes.append(None)
                    continue
                (requests, steps), table = rows[index], pending_steps[index].table
                end = min(begin + call.lane_rows, len(requests))
                lanes.append((requests[begin:end], steps[begin:end], table.synthesizer, table.k))
                taken.append((number, index, begin, end - begin))
                left -= end - begin
                index, begin = (index + 1, 0) if end == len(requests) else (index, end)
            counts = call.verifier.verify_rows(lanes)
            self.calls += 1
            for number, part_index, first, size in taken:
                out[part_index][first : first + size] = counts[number]
        return out
