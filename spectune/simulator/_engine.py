"""Lockstep: several simulations side by side, one rejection-sampling call a step over all their rows.

Each simulation keeps its own serving loop (a generator, ``serving_loop``), clock, requests, logit
bank and random streams; the engine only gathers the steps that need verifying, verifies them in one
call and hands each loop back its own rows' results. The call comes in two halves (``_Verifier``:
``start``, ``finish``), and between them every simulation does the host work of its step that needs
no emitted counts (chunked prefill, the step's time), so that on CUDA the host works while the GPU
verifies. The kernels' and the twin's tokens for a request depend only on that request's inputs and
seed, so a simulation's numbers are the same alone or beside others, bit for bit
(``tests/simulator/test_lockstep.py``).

Rows: a call verifies [R, K+1] rows. The engine's K is the largest of its simulations'; a step at a
smaller k fills drafts k..K-1 with placeholders (-1: never accepted, and the token emitted at row k
comes from the plain target there, where the engine puts the bonus row), which is what verifying k
drafts does. Neither backend gathers logits: each reads a step's rows where they lie in the
simulations' banks. On the CPU the twin takes the bank rows and returns only the emitted counts
(``count_emitted_banked``, on numpy arrays: no token is sampled). The kernels take row tables (each
row's offset in the banks): every simulation owns a fixed slice of R (on CUDA its concurrency rounded
up to a multiple of 16; so R = 1 takes the large-grid launches, not the small-grid kernel), the rows
past its current batch are valid rows whose results are dropped, and the buffers persist. R and K
never change within a run, so the kernels compile once per engine shape (Triton specialises on an
integer argument's divisibility by 16, and the launch policy on the grid), and a step allocates
nothing. On CUDA a step's rows come from counter-based draws (each request's own Philox stream,
keyed by its seed and steps done: ``_step_writer``), written by one Triton kernel over every row of
the call; the rows past a batch, and those of a simulation without a step, read row 0 of a bank, one
row that stays in the GPU's cache. So the host stages only request ids, steps done and each
simulation's k and acceptance bin, and a whole step (staging copy, writes, kernels, the copy of the
emitted counts) is one CUDA graph, captured at the second step and replayed from then on; reading
the counts back is the step's one host sync (in ``finish``: ``start`` launches the step and returns,
so the serving loops' own host work can run while the GPU verifies). The CPU draws from each
simulation's generator instead, the twin's stream, so the kernels under the interpreter and the twin
give the same numbers there, as the CUDA twin (the same counter-based draws, made on the host) and
the CUDA kernels do on a GPU.

With counter-based draws a request's counts do not depend on the step it is verified in, so on CUDA
the kernel verifier is not met every step: ``_ahead.AheadVerifier`` drives a ``_KernelVerifier`` of
its own, whose calls verify requests' steps before their loops reach them (``VERIFY_AHEAD``).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from spectune.kernels._contract import VerifyInputs, validate_inputs
from spectune.kernels._launcher import RowTable, launch, plan_for
from spectune.kernels.reference import RowBank, count_emitted_banked, rejection_sample_banked
from spectune.simulator._loop import LoopSteps, LoopTrace, VerifyRequest
from spectune.workload import LogitSynthesizer

__all__ = ["EngineMember", "call_inputs", "drive", "slot_rows"]

# Whether engines with counter-based draws (CUDA's) verify ahead (``_ahead``) rather than step by step;
# the two give the same numbers (off: ``benchmarks/simulator.py --step-by-step`` and the tests).
VERIFY_AHEAD = True

# On CUDA a member's slice of R is its concurrency rounded up to this (Triton specialises integer
# arguments on divisibility by 16; the launch policy changes with the grid only at such steps).
_ROW_QUANTUM = 16


def slot_rows(concurrency: int, device: torch.device) -> int:
    """Rows a member holds in the engine's call: its concurrency, on CUDA rounded up to a multiple of
    16 (at least 16: batch sizes 1-16 share one compiled variant; 15 placeholder rows cost far less
    than a step's launches)."""
    if device.type != "cuda":
        return concurrency
    return max(1, -(-concurrency // _ROW_QUANTUM)) * _ROW_QUANTUM


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


def drive(members: Sequence[EngineMember], verifier: _Verifier) -> None:
    """Run every member's loop to its end, each step's requests verified by ``verifier`` in one call.

    A step: ``verifier.start`` on every pending member's request; each of those members does its
    step's host work that needs no emitted counts (``serving_loop``'s stage 3) while the verifier runs;
    ``verifier.finish`` once; each member takes its counts and runs on to its next request.
    """
    requests: dict[EngineMember, VerifyRequest] = {}
    for member in members:
        _advance(member, requests, None)
    while requests:
        step, requests = requests, {}
        verifier.start(step)
        for member in step:
            member.loop.send(None)
        emitted = verifier.finish()
        for member in step:
            _advance(member, requests, emitted[id(member)])


def _advance(member: EngineMember, requests: dict[EngineMember, VerifyRequest], emitted: np.ndarray | None) -> None:
    """Run the member's loop on to its next request (into ``requests``) or its end (``member.trace``)."""
    try:
        request = next(member.loop) if emitted is None else member.loop.send(emitted)
    except StopIteration as done:
        member.trace = done.value
        return
    assert request is not None
    requests[member] = request


class _Verifier:
    """Verifies one lockstep step of its members, in two halves so that the members' host work runs
    between them:

    1. ``start(requests)``: begin verifying the step (CUDA: everything up to and including the kernel
       launch, asynchronously; no host sync);
    2. ``finish()``: the emitted counts of the step begun by ``start``, int64 [B] per member, keyed by
       ``id(member)`` (CUDA: the step's one host sync).

    ``verify(requests)`` is both in one. A subclass overrides ``start`` and ``finish``, or only ``verify``
    (then ``start`` keeps the requests and ``finish`` verifies them). This base, which overrides
    neither, is the verifier of an engine whose members never verify.
    """

    _started: dict[EngineMember, VerifyRequest] | None = None

    def start(self, requests: dict[EngineMember, VerifyRequest]) -> None:
        self._started = requests

    def finish(self) -> dict[int, np.ndarray]:
        requests, self._started = self._started, None
        assert requests is not None, "finish() without start()"
        return self.verify(requests)

    def close(self) -> None:
        """Give back what the verifier holds for the process's later engines (its pinned buffers)."""

    def verify(self, requests: dict[EngineMember, VerifyRequest]) -> dict[int, np.ndarray]:
        if type(self).finish is _Verifier.finish:  # finish() would come back here
            raise AssertionError("a member without a synthesizer asked for verification")
        self.start(requests)
        return self.finish()


_SEED_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(31), np.uint64(1))


def _kernel_seeds(request_seeds: np.ndarray, steps_done: np.ndarray) -> np.ndarray:
    """int64 [B]: a distinct kernel seed per (request, step), mixed so nearby steps share no stream.

    ``request_seeds``, ``steps_done``: int64 [B]. Arithmetic modulo 2**64 (uint64 views of the int64
    inputs; arrays wrap silently, only numpy scalars warn); the result's top bit is clear.
    """
    by_request, by_step, shift, last = _SEED_MIX
    mixed = np.asarray(request_seeds, dtype=np.int64).view(np.uint64) * by_request
    mixed += np.asarray(steps_done, dtype=np.int64).view(np.uint64) * by_step
    mixed ^= mixed >> shift
    mixed >>= last
    return mixed.view(np.int64)


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


class _TwinVerifier(_Verifier):
    """The twin over one bank made of the members' synthesizers' banks (row offsets per synthesizer; a
    synthesizer met for the first time, such as another acceptance bin's, joins it)."""

    def __init__(
        self, device: torch.device, num_drafts: int, method: str, synthetic_rates: torch.Tensor | None
    ) -> None:
        self.device, self.num_drafts, self.method, self.synthetic_rates = device, num_drafts, method, synthetic_rates
        self.counter_draws = _counter_draws(device)
        self.offsets: dict[int, int] = {}
        self.banks: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]] = []
        self.keep: list[LogitSynthesizer] = []  # the synthesizers whose ids key ``offsets``
        self.bank: RowBank | None = None
        self.host_tables: dict[int, Any] = {}  # id(synthesizer) -> its StepTables on the host (counter draws)
        self.host_temperature_index: dict[int, np.ndarray] = {}  # id(member) -> its temperature indices
        self.begun: _BegunStep | None = None
        self.num_tokens = torch.zeros(0, dtype=torch.int32)  # on CUDA, the begun step's counts (on the device)

    def _offset(self, synthesizer: LogitSynthesizer) -> int:
        key = id(synthesizer)
        if key not in self.offsets:
            self.offsets[key] = sum(bank[0].shape[0] for bank in self.banks)
            self.banks.append(synthesizer.banks())
            self.keep.append(synthesizer)
            targets, drafts, temperatures = zip(*self.banks)
            self.bank = RowBank(
                torch.cat(targets) if len(targets) > 1 else targets[0],
                (torch.cat(drafts) if len(drafts) > 1 else drafts[0]) if drafts[0] is not None else None,
                torch.cat(temperatures) if len(temperatures) > 1 else temperatures[0],
            )
        return self.offsets[key]

    def _members(
        self, requests: dict[EngineMember, VerifyRequest], padded_step: Callable[..., tuple[Any, Any, Any]]
    ) -> tuple[list[Any], list[Any], list[Any], list[np.ndarray], list[int]]:
        """Each member's padded step -- bank rows (offset into the shared bank), draft tokens,
        temperatures -- from ``padded_step(member, synthesizer, ids, k, kernel_seeds)``, with its kernel
        seeds and size."""
        rows, tokens, temperature, seeds, sizes = [], [], [], [], []
        for member, (ids, steps_done, k) in requests.items():
            assert member.synthesizer is not None
            synthesizer = member.synthesizer(len(ids))
            ids = member.global_ids[ids] if member.global_ids is not None else ids
            seeds.append(_kernel_seeds(member.request_seeds[ids], steps_done))
            step_rows, step_tokens, step_temperature = padded_step(member, synthesizer, ids, k, seeds[-1])
            offset = self._offset(synthesizer)
            rows.append(step_rows + offset if offset else step_rows)  # padding repeats rows: offsets commute
            tokens.append(step_tokens)
            temperature.append(step_temperature)
            sizes.append(len(ids))
        return rows, tokens, temperature, seeds, sizes

    def _cuda_step(
        self, member: EngineMember, synthesizer: LogitSynthesizer, ids: np.ndarray, k: int, seeds: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        step = self._host_step(member, synthesizer, ids, k, seeds)
        return tuple(torch.from_numpy(part).to(self.device) for part in step)  # type: ignore[return-value]

    def _host_step(
        self, member: EngineMember, synthesizer: LogitSynthesizer, ids: np.ndarray, k: int, seeds: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.counter_draws:  # the kernel verifier's draws (``_step_writer``), made on the host
            from spectune.simulator._step_writer import StepTables, host_step, step_tables

            key = id(synthesizer)
            if key not in self.host_tables:
                tables = step_tables(synthesizer)
                self.host_tables[key] = StepTables(
                    tables.slot_of.cpu(), tables.token_bank.cpu(), tables.row_temperature.cpu(), tables.bank_rows
                )
            if id(member) not in self.host_temperature_index:
                self.host_temperature_index[id(member)] = member.temperature_index.cpu().numpy()
            temperature_index = self.host_temperature_index[id(member)][ids]
            return host_step(seeds, temperature_index, k, self.num_drafts, self.host_tables[key])
        rows, tokens, temperature = synthesizer.generate_host_rows(
            member.temperature_index.numpy()[ids], member.generator, k
        )
        if k < self.num_drafts:  # the bonus row moves to column k and repeats; placeholder drafts
            rows = np.concatenate([rows, np.repeat(rows[:, k:], self.num_drafts - k, axis=1)], axis=1)
            tokens = np.concatenate([tokens, np.full((len(ids), self.num_drafts - k), -1, dtype=np.int64)], axis=1)
        return rows, tokens, temperature

    def start(self, requests: dict[EngineMember, VerifyRequest]) -> None:
        """On CUDA: draw the step's rows and launch the twin; on the CPU: keep the requests (the twin is
        host work there, like the members' own, and runs in ``finish``)."""
        started = time.perf_counter()
        if self.device.type == "cpu":
            self.begun = _BegunStep(requests, [], None, started, started, started)
            return
        rows, tokens, temperature, seeds, sizes = self._members(requests, self._cuda_step)
        single = len(rows) == 1
        generated = time.perf_counter()
        assert self.bank is not None
        rates = self.synthetic_rates[: self.num_drafts] if self.synthetic_rates is not None else None
        _, self.num_tokens = rejection_sample_banked(
            self.bank,
            rows[0] if single else torch.cat(rows),
            tokens[0] if single else torch.cat(tokens),
            temperature=temperature[0] if single else torch.cat(temperature),
            seed=torch.from_numpy(seeds[0] if single else np.concatenate(seeds)).to(self.device),
            method=self.method,
            synthetic_conditional_rates=rates,
        )
        self.begun = _BegunStep(requests, sizes, None, started, generated, time.perf_counter())

    def finish(self) -> dict[int, np.ndarray]:
        assert self.begun is not None, "finish() without start()"
        step, self.begun = self.begun, None
        if self.device.type == "cpu":
            return self._verify_host(step.requests)
        between = time.perf_counter() - step.launched
        emitted = self.num_tokens.to("cpu", torch.int64).numpy()
        return _split(step.requests, emitted, step.sizes, step.started, step.generated, between=between)

    def _verify_host(self, requests: dict[EngineMember, VerifyRequest]) -> dict[int, np.ndarray]:
        """The CPU step on numpy arrays, counts only (the tokens themselves are never read): the same
        draws and numbers as the torch path, without torch's per-operation cost on small tensors."""
        started = time.perf_counter()
        rows, tokens, temperature, seeds, sizes = self._members(requests, self._host_step)
        single = len(rows) == 1
        generated = time.perf_counter()
        assert self.bank is not None
        rates = self.synthetic_rates[: self.num_drafts].numpy() if self.synthetic_rates is not None else None
        emitted = count_emitted_banked(
            self.bank,
            rows[0] if single else np.concatenate(rows),
            tokens[0] if single else np.concatenate(tokens),
            temperature=temperature[0] if single else np.concatenate(temperature),
            seed=seeds[0] if single else np.concatenate(seeds),
            method=self.method,
            synthetic_conditional_rates=rates,
        )
        return _split(requests, emitted.astype(np.int64), sizes, started, generated)


def _split(
    requests: dict[EngineMember, VerifyRequest],
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
    for i, (member, size) in enumerate(zip(requests, sizes)):
        begin = offsets[i] if offsets is not None else start
        out[id(member)] = emitted[begin : begin + size]
        start += size
        member.synthesis_s += (generated - started) * size / total
        member.kernel_s += (done - generated) * size / total
        member.rows_verified += size
    return out


class _KernelVerifier(_Verifier):
    """The Triton kernels reading each step's rows where they lie in the members' banks.

    Member m owns rows offset..offset+slot of the call. A step writes only the row tables (each row's
    element offset from the first bank met: ``RowTable``), the draft tokens, temperatures and seeds
    into persistent buffers; the kernels read every logit once, in place (no gathered copy of the
    rows). The host stages each row's request and steps done, and each member's k and synthesizer
    tables (one pinned buffer, one copy); the draws, tables and kernel seeds are made on the device.

    On CUDA one Triton kernel writes the whole step from counter-based draws (``_step_writer``), so
    the staging copy, that kernel, the rejection-sampling launches and the copy of the emitted counts
    are one CUDA graph (``_KernelCall``), replayed every step; ``start`` returns without waiting for
    it, and ``finish`` waits for the counts: the step's one host sync. On the CPU each member's step is
    drawn from its generator over its batch (the twin's draws, so both backends give the same
    numbers) and written eagerly.
    """

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
        cuda, self.counter_draws = device.type == "cuda", _counter_draws(device)
        # By row: request (ids; with counter draws plus the member's first index in the request
        # tables), steps done, 1 in the batch (0 past it, where earlier requests stay: valid indices);
        # with counter draws then by member: ``_step_writer.MEMBER_FIELDS``.
        size = 3 * total + (9 * len(members) if self.counter_draws else 0)
        self.host = _host_buffer(size, torch.int64, cuda)
        self.staged = torch.zeros(size, dtype=torch.int64, device=device)
        self.host_rows = self.host.numpy()[: 3 * total].reshape(3, total)
        self.host_members = self.host.numpy()[3 * total :].reshape(-1, len(members)) if self.counter_draws else None
        self.staged_rows = self.staged[: 3 * total].view(3, total)
        self.counts = _host_buffer(total, torch.int32, cuda)  # the call's emitted counts
        self.read = torch.cuda.Event() if cuda else None  # set when ``counts`` has landed
        # The stream the steps run on, looked up once: ``Event.record()`` without one asks torch for the
        # current stream every step (a device query in Python, a sizeable share of a step's host time).
        self.stream = torch.cuda.current_stream(device) if cuda else None
        self.bank_offsets: dict[int, tuple[int, int]] = {}  # id(synthesizer) -> its banks' element offsets
        self.keep: list[LogitSynthesizer] = []  # the synthesizers whose ids key ``bank_offsets`` (and their banks)
        self.call: _KernelCall | None = None
        self.begun: _BegunStep | None = None
        bases = [_seed_bases(member.request_seeds) for member in members]
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
                writer = self._write_all if self.counter_draws else None
                self.call = _KernelCall(self, target, draft, writer)
            self.bank_offsets[key] = (
                self.call.offset_of(target, self.call.target_base),
                self.call.offset_of(draft, self.call.draft_base) if self.has_draft else 0,
            )
            self.keep.append(synthesizer)
        return self.bank_offsets[key]

    def _member_fields(self, synthesizer: LogitSynthesizer, k: int) -> np.ndarray:
        """``_step_writer.MEMBER_FIELDS`` of a step at k drafts drawn from ``synthesizer`` (CUDA)."""
        key = (id(synthesizer), k)
        if key not in self.member_fields:
            from spectune.simulator._step_writer import step_tables

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
                    offset_of(tables.row_temperature, self.call.target_base),
                ],
                dtype=np.int64,
            )
        return self.member_fields[key]

    def start(self, requests: dict[EngineMember, VerifyRequest]) -> None:
        """Stage the step and launch it: on CUDA one graph replay (the writes and the kernel call),
        nothing waited for; on the CPU each member's writes, then the call."""
        started = time.perf_counter()
        host = self.host_rows
        sizes, offsets, synthesizers = [], [], []
        for member, (ids, steps_done, k) in requests.items():
            assert member.synthesizer is not None
            (offset, slot), size = self.slots[id(member)], len(ids)
            host[0, offset : offset + size] = member.global_ids[ids] if member.global_ids is not None else ids
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
            for member in self.members:  # a member without a step this time reads no logits for it
                if member not in requests:
                    offset, slot = self.slots[id(member)]
                    host[2, offset : offset + slot] = 0
        else:
            self.staged.copy_(self.host)
            for (member, (_, _, k)), synthesizer, offset, size in zip(requests.items(), synthesizers, offsets, sizes):
                self._write_step(member, synthesizer, self._bank_offsets(synthesizer), offset, size, k)
        generated = time.perf_counter()
        assert self.call is not None
        self.call.run()
        if self.read is not None:
            self.read.record(self.stream)
        self.begun = _BegunStep(requests, sizes, offsets, started, generated, time.perf_counter())

    def finish(self) -> dict[int, np.ndarray]:
        """The emitted counts of the step begun by ``start``, keyed by id(member)."""
        assert self.begun is not None, "finish() without start()"
        step, self.begun = self.begun, None
        waiting = time.perf_counter()
        if self.read is not None:
            self.read.synchronize()  # the step's one host sync
        emitted = self.counts.numpy().astype(np.int64)  # a copy: the next step refills ``counts``
        between = waiting - step.launched
        return _split(step.requests, emitted, step.sizes, step.started, step.generated, step.offsets, between=between)

    def close(self) -> None:
        if self.read is not None:
            self.read.synchronize()  # the last step has landed before its buffers serve another engine
        if self.call is not None:
            self.call.release()
        if self.device.type == "cuda":
            with _pinned_lock:
                _pinned_free.extend(
                    buffer._base if buffer._base is not None else buffer for buffer in (self.host, self.counts)
                )

    def _write_all(self) -> None:
        """CUDA: the staging copy and the step writer over every row of the call (in the call's graph)."""
        from spectune.simulator._step_writer import write_step

        assert self.call is not None and self.int_base is not None
        self.staged.copy_(self.host, non_blocking=True)
        out = (self.target_rows, self.draft_rows, self.tokens, self.temperature, self.seeds)
        write_step(
            self.staged,
            self.total,
            self.row_member,
            self.seed_bases,
            self.temperature_index,
            self.call.target_base,
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
        _device_kernel_seeds(self.member_seed_bases[id(member)], ids, steps_done, self.seeds[offset : offset + rows])


@dataclass
class _BegunStep:
    """What a verifier's ``start`` leaves for ``finish``: the requests, each member's batch size and
    first row in the call (None: members' rows back to back), and the host clock at the start, after
    the writes and after the launch."""

    requests: dict[EngineMember, VerifyRequest]
    sizes: list[int]
    offsets: list[int] | None
    started: float
    generated: float
    launched: float


# Pinned buffers of engines that ended, for later engines of the process, never handed back to
# torch's pinned-memory cache: on an H200, after engines had freed pinned buffers their graphs copied
# from and to (torch records such a use during the capture), a later pinned allocation failed with
# "invalid argument". Reusing them also spares a pinned allocation per engine.
_pinned_free: list[torch.Tensor] = []
_pinned_lock = threading.Lock()


def _host_buffer(numel: int, dtype: torch.dtype, pinned: bool) -> torch.Tensor:
    """A zeroed host buffer of ``numel`` elements: on CUDA pinned, from ``_pinned_free`` when one there
    is large enough (a view of its start), else newly pinned with room to spare (a power of two)."""
    if not pinned:
        return torch.zeros(numel, dtype=dtype)
    with _pinned_lock:
        for i, buffer in enumerate(_pinned_free):
            if buffer.dtype == dtype and buffer.numel() >= numel:
                del _pinned_free[i]
                view = buffer[:numel]
                view.zero_()
                return view
    capacity = 1 << max(numel - 1, 0).bit_length()
    return torch.zeros(capacity, dtype=dtype, pin_memory=True)[:numel]


def _counter_draws(device: torch.device) -> bool:
    """Whether an engine on ``device`` draws its steps' rows from counter-based streams
    (``_step_writer``) rather than its simulations' generators: on CUDA (the tests also try it on the
    CPU, under the interpreter)."""
    return device.type == "cuda"


# ``_kernel_seeds``'s step multiplier as int64 (two's complement: int64 products wrap as uint64 ones do).
_STEP_MIX = int(_SEED_MIX[1]) - 2**64


def _seed_bases(request_seeds: np.ndarray) -> np.ndarray:
    """int64 [N]: each request's seed times ``_kernel_seeds``'s request multiplier (mod 2**64)."""
    return (np.atleast_1d(request_seeds).astype(np.uint64) * _SEED_MIX[0]).view(np.int64)


def _device_kernel_seeds(
    seed_bases: torch.Tensor, ids: torch.Tensor, steps_done: torch.Tensor, out: torch.Tensor
) -> None:
    """``_kernel_seeds`` on the device, into ``out`` (int64 [B]): ``seed_bases`` from ``_seed_bases``,
    ``ids`` and ``steps_done`` int64 [B]. The shifts are logical, as on uint64."""
    torch.index_select(seed_bases, 0, ids, out=out)
    out.add_(steps_done, alpha=_STEP_MIX)
    out.bitwise_xor_(out.bitwise_right_shift(31).bitwise_and_(2**33 - 1))
    out.bitwise_right_shift_(1).bitwise_and_(2**63 - 1)


def call_inputs(
    target_base: torch.Tensor,
    draft_base: torch.Tensor | None,
    tokens: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    method: str,
    rates: torch.Tensor | None,
    vocab: int,
) -> VerifyInputs:
    """The validated inputs of an engine's call of ``tokens``' shape [R, K]: its logits carry the call's
    shape over the first bank's row 0 (zero strides), and the row tables say where each row is."""
    total, num_drafts = tokens.shape
    target = target_base[0].as_strided((total, num_drafts + 1, vocab), (0, 0, 1))
    draft = draft_base[0].as_strided((total, num_drafts, vocab), (0, 0, 1)) if draft_base is not None else None
    return validate_inputs(target, tokens, draft, temperature, seeds, method, rates)


class _KernelCall:
    """The engine's one kernel call over its persistent buffers, after ``writer`` (the step's writes, or
    None where they are made before ``run``) and with the copy of its emitted counts into the
    verifier's pinned ``counts``: validated and planned once; on CUDA captured in a graph at its second
    run (the first compiles) and replayed after that."""

    def __init__(
        self,
        verifier: _KernelVerifier,
        target_base: torch.Tensor,
        draft_base: torch.Tensor | None,
        writer: Callable[[], None] | None,
    ) -> None:
        self.target_base, self.draft_base, self.writer = target_base, draft_base, writer
        self.inputs = call_inputs(
            target_base,
            draft_base if verifier.has_draft else None,
            verifier.tokens,
            verifier.temperature,
            verifier.seeds,
            verifier.method,
            verifier.rates,
            verifier.vocab,
        )
        self.rows = RowTable(verifier.target_rows, verifier.draft_rows)
        self.plan = plan_for(self.inputs, row_table=True)
        self.counts = verifier.counts
        self.graphs = verifier.device.type == "cuda"
        self.runs = 0
        self.graph: torch.cuda.CUDAGraph | None = None

    @staticmethod
    def offset_of(bank: torch.Tensor | None, base: torch.Tensor | None) -> int:
        """Element offset of ``bank``'s first element from ``base``'s (any sign; one dtype)."""
        assert bank is not None and base is not None and bank.dtype == base.dtype
        difference = bank.data_ptr() - base.data_ptr()
        assert difference % bank.element_size() == 0
        return difference // bank.element_size()

    def run(self) -> None:
        """Launch the call and the copy of its counts (on CUDA asynchronous: wait on the stream)."""
        self.runs += 1
        if self.graph is not None:
            self.graph.replay()
        elif not self.graphs or self.runs == 1 or self.inputs.num_requests == 0:
            self._launch()
        else:
            # No cyclic garbage collection inside the capture: freeing another engine's graph there
            # (its memory pool's cudaFree) would invalidate it.
            collecting = gc.isenabled()
            gc.disable()
            try:
                self.graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                    self._launch()
            finally:
                if collecting:
                    gc.enable()
            self.graph.replay()

    def release(self) -> None:
        """Drop the graph now (outside any other engine's capture) and the writer (a bound method of the
        verifier, which holds this call: no cycle left for the garbage collector)."""
        self.graph, self.writer = None, None

    def _launch(self) -> None:
        if self.writer is not None:
            self.writer()
        num_tokens = launch(self.inputs, self.plan, rows=self.rows)[1]
        self.counts.copy_(num_tokens, non_blocking=True)
