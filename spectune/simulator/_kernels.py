"""The kernel verifier: the Triton kernels verifying each lockstep step as the loops reach it.

The host stages each row's request and steps done, and each member's k and synthesizer tables (one
pinned buffer, one copy); the rows are drawn either from counter-based streams by the step writer
over every row of the call (``draws: counter``, CUDA's: then the whole step is one graph replay,
``KernelCall``), or from each simulation's generator over its batch (``draws: generator``, the twin's
draws on the CPU), so both backends give the same numbers. ``start`` launches the step and returns
without waiting; ``finish`` waits for the counts: the step's one host sync.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch

from spectune.kernels import RowTable, kernel_seeds_torch, seed_bases
from spectune.simulator._drive import BegunStep, EngineMember, split_counts
from spectune.simulator._kernel_call import KernelCall, call_inputs, give_back, host_buffer, slot_rows, step_tables
from spectune.simulator._loop import StepRows
from spectune.workload import LogitSynthesizer

__all__ = ["KernelVerifier", "RowLane", "SlotTables"]


class SlotTables(Protocol):
    """What a slice of a call's rows is made for: the most rows it holds (``concurrency``) and the
    request tables its rows' ids index (an ``EngineMember``'s, or every simulation's side by side)."""

    concurrency: int
    request_seeds: np.ndarray  # int64 [N]
    temperature_index: torch.Tensor  # int64 [N] on the device


RowLane = tuple[np.ndarray, np.ndarray, LogitSynthesizer, int]
"""The rows ``verify_rows`` stages in one slot: request ids (int64, into the slot's tables), steps
done (int64), the synthesizer they are drawn from and their k."""


def _padded_rows(rows: torch.Tensor, num_drafts: int) -> torch.Tensor:
    """Bank rows [R, k+1] -> [R, K+1]: the bonus row moves to column k and repeats after it (rows past
    a request's placeholders are read but play no part)."""
    k = rows.shape[1] - 1
    if k == num_drafts:
        return rows
    return torch.cat([rows, rows[:, k:].expand(-1, num_drafts - k)], dim=1)


def _padded_drafts(tokens: torch.Tensor, num_drafts: int) -> torch.Tensor:
    k = tokens.shape[1]
    if k == num_drafts:
        return tokens
    return torch.cat([tokens, tokens.new_full((tokens.shape[0], num_drafts - k), -1)], dim=1)


class KernelVerifier:
    """The Triton kernels reading each step's rows where they lie in the members' banks.

    Member m owns rows offset..offset+slot of the call. A step writes only the row tables (each row's
    element offset from the first bank met: ``RowTable``), the draft tokens, temperatures and seeds
    into persistent buffers; the kernels read every logit once, in place (no gathered copy of the
    rows). The host stages each row's request and steps done, and each member's k and synthesizer
    tables (one pinned buffer, one copy); the draws, tables and kernel seeds are made on the device.

    On CUDA one Triton kernel writes the whole step from counter-based draws (``spectune.kernels.write_step``), so
    the staging copy, that kernel, the rejection-sampling launches and the copy of the emitted counts
    are one CUDA graph (``_KernelCall``), replayed every step; ``start`` returns without waiting for
    it, and ``finish`` waits for the counts: the step's one host sync. On the CPU each member's step is
    drawn from its generator over its batch (the twin's draws, so both backends give the same
    numbers) and written eagerly.
    """

    def __init__(
        self,
        members: Sequence[SlotTables],
        device: torch.device,
        num_drafts: int,
        method: str,
        synthetic_rates: torch.Tensor | None,
        vocab: int,
        has_draft: bool,
        counter_draws: bool,
    ) -> None:
        self.device, self.num_drafts, self.method, self.vocab, self.has_draft = (
            device,
            num_drafts,
            method,
            vocab,
            has_draft,
        )
        self.rates = synthetic_rates[:num_drafts].contiguous() if synthetic_rates is not None else None
        self.members = list(members)
        self.member_index = {id(member): i for i, member in enumerate(members)}
        self.slots: dict[int, tuple[int, int]] = {}  # id(member) -> (its first row in the call, its rows)
        total = 0
        for member in members:
            self.slots[id(member)] = (total, slot_rows(member.concurrency, device))
            total += self.slots[id(member)][1]
        self.total = total
        # Row tables start at the first bank's row 0: valid rows before a member's first step.
        self.target_rows = torch.zeros((total, num_drafts + 1), dtype=torch.int64, device=device)
        self.draft_rows = torch.zeros((total, num_drafts), dtype=torch.int64, device=device) if has_draft else None
        self.tokens = torch.full((total, num_drafts), -1, dtype=torch.int64, device=device)
        self.temperature = torch.zeros(total, dtype=torch.float32, device=device)
        self.seeds = torch.zeros(total, dtype=torch.int64, device=device)
        cuda, self.counter_draws = device.type == "cuda", counter_draws
        # By row: request (ids; with counter draws plus the member's first index in the request
        # tables), steps done, 1 in the batch (0 past it, where earlier requests stay: valid indices);
        # with counter draws then by member: ``spectune.kernels.MEMBER_FIELDS``.
        size = 3 * total + (9 * len(members) if self.counter_draws else 0)
        self.host = host_buffer(size, torch.int64, cuda)
        self.staged = torch.zeros(size, dtype=torch.int64, device=device)
        self.host_rows = self.host.numpy()[: 3 * total].reshape(3, total)
        self.host_members = self.host.numpy()[3 * total :].reshape(-1, len(members)) if self.counter_draws else None
        self.staged_rows = self.staged[: 3 * total].view(3, total)
        self.counts = host_buffer(total, torch.int32, cuda)  # the call's emitted counts
        self.read = torch.cuda.Event() if cuda else None  # set when ``counts`` has landed
        # The stream the steps run on, looked up once: ``Event.record()`` without one asks torch for the
        # current stream every step (a device query in Python, a sizeable share of a step's host time).
        self.stream = torch.cuda.current_stream(device) if cuda else None
        self.bank_offsets: dict[int, tuple[int, int]] = {}  # id(synthesizer) -> its banks' element offsets
        self.keep: list[LogitSynthesizer] = []  # the synthesizers whose ids key ``bank_offsets`` (and their banks)
        self.call: KernelCall | None = None
        self.target_base: torch.Tensor | None = None
        self.draft_base: torch.Tensor | None = None
        self.begun: BegunStep | None = None
        bases = [seed_bases(member.request_seeds) for member in members]
        if self.counter_draws:
            self.request_base = dict(zip(map(id, members), np.cumsum([0] + [len(b) for b in bases[:-1]]).tolist()))
            self.seed_bases = torch.from_numpy(np.concatenate(bases)).to(device)
            self.temperature_index = torch.cat([member.temperature_index for member in members])
            member_of_row = [np.full(self.slots[id(m)][1], i, dtype=np.int64) for i, m in enumerate(members)]
            self.row_member = torch.from_numpy(np.concatenate(member_of_row)).to(device)
            self.member_fields: dict[tuple[int, int], np.ndarray] = {}  # (id(synthesizer), k) -> MEMBER_FIELDS
            self.int_base: torch.Tensor | None = None
        else:
            self.member_seed_bases = {id(m): torch.from_numpy(b).to(device) for m, b in zip(members, bases)}

    def _bank_offsets(self, synthesizer: LogitSynthesizer) -> tuple[int, int]:
        """Element offsets of the synthesizer's target and draft banks from the first banks met."""
        key = id(synthesizer)
        if key not in self.bank_offsets:
            target, draft, _ = synthesizer.banks()
            if self.call is None:
                self.target_base, self.draft_base = target, draft  # the first banks met: offsets count from them
                writer = self._write_all if self.counter_draws else None
                inputs = call_inputs(
                    target,
                    draft if self.has_draft else None,
                    self.tokens,
                    self.temperature,
                    self.seeds,
                    self.method,
                    self.rates,
                    self.vocab,
                )
                rows = RowTable(self.target_rows, self.draft_rows)
                self.call = KernelCall(inputs, rows, self.counts, writer)
            self.bank_offsets[key] = (
                self.call.offset_of(target, self.target_base),
                self.call.offset_of(draft, self.draft_base) if self.has_draft else 0,
            )
            self.keep.append(synthesizer)
        return self.bank_offsets[key]

    def _member_fields(self, synthesizer: LogitSynthesizer, k: int) -> np.ndarray:
        """``spectune.kernels.MEMBER_FIELDS`` of a step at k drafts drawn from ``synthesizer`` (counter draws)."""
        key = (id(synthesizer), k)
        if key not in self.member_fields:
            target_offset, draft_offset = self._bank_offsets(synthesizer)
            assert self.call is not None
            tables = step_tables(synthesizer)
            if self.int_base is None:
                self.int_base = tables.slot_of
            offset_of = self.call.offset_of
            self.member_fields[key] = np.array(
                [
                    k,
                    tables.bank_rows,
                    offset_of(tables.slot_of, self.int_base),
                    tables.slot_of.shape[1],
                    offset_of(tables.token_bank, self.int_base),
                    tables.token_bank.shape[1],
                    target_offset,
                    draft_offset,
                    offset_of(tables.row_temperature, self.target_base),
                ],
                dtype=np.int64,
            )
        return self.member_fields[key]

    def start(self, step_rows: dict[EngineMember, StepRows]) -> None:
        """Stage the step and launch it: on CUDA one graph replay (the writes and the kernel call),
        nothing waited for; on the CPU each member's writes, then the call."""
        started = time.perf_counter()
        host = self.host_rows
        sizes, offsets, synthesizers = [], [], []
        for member, (ids, steps_done, k) in step_rows.items():
            assert member.synthesizer is not None
            (offset, slot), size = self.slots[id(member)], len(ids)
            host[0, offset : offset + size] = member.request_ids(ids)
            host[1, offset : offset + size] = steps_done
            host[2, offset : offset + size] = 1
            host[2, offset + size : offset + slot] = 0
            synthesizer = member.synthesizer(size)
            if self.host_members is not None:
                host[0, offset : offset + size] += self.request_base[id(member)]
                self.host_members[:, self.member_index[id(member)]] = self._member_fields(synthesizer, k)
            sizes.append(size)
            offsets.append(offset)
            synthesizers.append(synthesizer)
        if self.host_members is not None:
            for idle in self.members:  # a member without a step this time reads no logits for it
                if idle not in step_rows:
                    offset, slot = self.slots[id(idle)]
                    host[2, offset : offset + slot] = 0
        else:
            self.staged.copy_(self.host)
            for (member, (_, _, k)), synthesizer, offset, size in zip(step_rows.items(), synthesizers, offsets, sizes):
                self._write_step(member, synthesizer, self._bank_offsets(synthesizer), offset, size, k)
        generated = time.perf_counter()
        assert self.call is not None
        self.call.run()
        if self.read is not None:
            self.read.record(self.stream)
        self.begun = BegunStep(step_rows, sizes, offsets, started, generated, time.perf_counter())

    def verify_rows(self, lanes: Sequence[RowLane | None]) -> list[np.ndarray]:
        """Verify rows of any requests and steps, lane i in slot i (at most its ``concurrency`` rows;
        None: the slot verifies nothing, with lane 0's tables), and wait: each lane's emitted counts
        (int64). Counter draws only, as a step's draws must then depend on the row alone."""
        assert self.host_members is not None, "verify_rows draws from counter-based streams"
        host, empty = self.host_rows, np.zeros(0, dtype=np.int64)
        first = next(lane for lane in lanes if lane is not None)
        sizes = []
        for index, (slot, lane) in enumerate(zip(self.members, lanes, strict=True)):
            ids, steps_done, synthesizer, k = lane if lane is not None else (empty, empty, first[2], first[3])
            (offset, rows), size = self.slots[id(slot)], len(ids)
            host[0, offset : offset + size] = ids + self.request_base[id(slot)]
            host[1, offset : offset + size] = steps_done
            host[2, offset : offset + size] = 1
            host[2, offset + size : offset + rows] = 0
            self.host_members[:, index] = self._member_fields(synthesizer, k)
            sizes.append(size)
        assert self.call is not None
        self.call.run()
        if self.read is not None:
            self.read.record(self.stream)
            self.read.synchronize()
        counts = self.counts.numpy()
        return [
            counts[offset : offset + size].astype(np.int64)
            for (offset, _), size in zip((self.slots[id(slot)] for slot in self.members), sizes)
        ]

    def finish(self) -> dict[int, np.ndarray]:
        """The emitted counts of the step begun by ``start``, keyed by id(member)."""
        assert self.begun is not None, "finish() without start()"
        step, self.begun = self.begun, None
        waiting = time.perf_counter()
        if self.read is not None:
            self.read.synchronize()  # the step's one host sync
        emitted = self.counts.numpy().astype(np.int64)  # a copy: the next step refills ``counts``
        between = waiting - step.launched
        return split_counts(
            step.step_rows, emitted, step.sizes, step.started, step.generated, step.offsets, between=between
        )

    def close(self) -> None:
        if self.read is not None:
            self.read.synchronize()  # the last step has landed before its buffers serve another engine
        if self.call is not None:
            self.call.release()
        if self.device.type == "cuda":
            give_back(self.host, self.counts)

    def _write_all(self) -> None:
        """CUDA: the staging copy and the step writer over every row of the call (in the call's graph)."""
        from spectune.kernels import write_step  # Triton: loaded where counter draws are written

        assert self.call is not None and self.int_base is not None and self.target_base is not None
        self.staged.copy_(self.host, non_blocking=True)
        out = (self.target_rows, self.draft_rows, self.tokens, self.temperature, self.seeds)
        write_step(
            self.staged,
            self.total,
            self.row_member,
            self.seed_bases,
            self.temperature_index,
            self.target_base,
            self.int_base,
            out,
            self.vocab,
        )

    def _write_step(
        self,
        member: EngineMember,
        synthesizer: LogitSynthesizer,
        bank_offsets: tuple[int, int],
        offset: int,
        rows: int,
        k: int,
    ) -> None:
        """CPU: draw the member's step over its batch (its generator: the twin's draws) and write it
        into its slice of the call's buffers, with its kernel seeds."""
        num_drafts = self.num_drafts
        staged = self.staged_rows
        ids, steps_done = staged[0, offset : offset + rows], staged[1, offset : offset + rows]
        index = member.temperature_index.index_select(0, ids)
        step = synthesizer.generate_rows(index, member.generator, num_speculative_tokens=k, validate=False)
        target_offset, draft_offset = bank_offsets
        target_rows = self.target_rows[offset : offset + rows]
        torch.mul(_padded_rows(step.rows, num_drafts), self.vocab, out=target_rows)
        if target_offset:
            target_rows.add_(target_offset)
        if self.draft_rows is not None:
            torch.add(
                target_rows[:, :num_drafts], draft_offset - target_offset, out=self.draft_rows[offset : offset + rows]
            )
        self.tokens[offset : offset + rows].copy_(_padded_drafts(step.draft_tokens, num_drafts))
        self.temperature[offset : offset + rows].copy_(step.temperature)
        kernel_seeds_torch(self.member_seed_bases[id(member)], ids, steps_done, self.seeds[offset : offset + rows])
