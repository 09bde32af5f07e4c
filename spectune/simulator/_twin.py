"""The twin verifier: the kernels' PyTorch/numpy twin over the members' banks, counts only.

On the CPU the twin takes each step's bank rows and returns only the emitted counts
(``count_emitted_banked``, on numpy arrays: no token is sampled); on CUDA it samples on the device
(``rejection_sample_banked``). Its rows come from the same draws as the kernel verifier's: each
simulation's generator (``draws: generator``) or each request's counter-based stream, made on the
host by the step writer's twin (``draws: counter``, ``spectune.kernels.host_step``), so both
backends give the same numbers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from spectune.kernels import StepTables, kernel_seeds
from spectune.kernels.reference import RowBank, count_emitted_banked, host_step, rejection_sample_banked
from spectune.simulator._drive import BegunStep, EngineMember, split_counts
from spectune.simulator._kernel_call import step_tables
from spectune.simulator._loop import StepRows
from spectune.workload import LogitSynthesizer

__all__ = ["TwinVerifier"]


class TwinVerifier:
    """The twin over one bank made of the members' synthesizers' banks (row offsets per synthesizer; a
    synthesizer met for the first time, such as another acceptance bin's, joins it)."""

    def __init__(
        self,
        device: torch.device,
        num_drafts: int,
        method: str,
        synthetic_rates: torch.Tensor | None,
        counter_draws: bool,
    ) -> None:
        self.device, self.num_drafts, self.method, self.synthetic_rates = device, num_drafts, method, synthetic_rates
        self.counter_draws = counter_draws
        self.offsets: dict[int, int] = {}
        self.banks: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]] = []
        self.keep: list[LogitSynthesizer] = []  # the synthesizers whose ids key ``offsets``
        self.bank: RowBank | None = None
        self.host_tables: dict[int, Any] = {}  # id(synthesizer) -> its StepTables on the host (counter draws)
        self.host_temperature_index: dict[int, np.ndarray] = {}  # id(member) -> its temperature indices
        self.begun: BegunStep | None = None
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
        self, step_rows: dict[EngineMember, StepRows], padded_step: Callable[..., tuple[Any, Any, Any]]
    ) -> tuple[list[Any], list[Any], list[Any], list[np.ndarray], list[int]]:
        """Each member's padded step -- bank rows (offset into the shared bank), draft tokens,
        temperatures -- from ``padded_step(member, synthesizer, ids, k, kernel_seeds)``, with its kernel
        seeds and size."""
        rows, tokens, temperature, seeds, sizes = [], [], [], [], []
        for member, (ids, steps_done, k) in step_rows.items():
            assert member.synthesizer is not None
            synthesizer = member.synthesizer(len(ids))
            ids = member.request_ids(ids)
            seeds.append(kernel_seeds(member.request_seeds[ids], steps_done))
            bank_rows, step_tokens, step_temperature = padded_step(member, synthesizer, ids, k, seeds[-1])
            offset = self._offset(synthesizer)
            rows.append(bank_rows + offset if offset else bank_rows)  # padding repeats rows: offsets commute
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
        if self.counter_draws:  # the kernel verifier's draws (the step writer's), made on the host
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

    def start(self, step_rows: dict[EngineMember, StepRows]) -> None:
        """On CUDA: draw the step's rows and launch the twin; on the CPU: keep the requests (the twin is
        host work there, like the members' own, and runs in ``finish``)."""
        started = time.perf_counter()
        if self.device.type == "cpu":
            self.begun = BegunStep(step_rows, [], None, started, started, started)
            return
        rows, tokens, temperature, seeds, sizes = self._members(step_rows, self._cuda_step)
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
        self.begun = BegunStep(step_rows, sizes, None, started, generated, time.perf_counter())

    def finish(self) -> dict[int, np.ndarray]:
        assert self.begun is not None, "finish() without start()"
        step, self.begun = self.begun, None
        if self.device.type == "cpu":
            return self._verify_host(step.step_rows)
        between = time.perf_counter() - step.launched
        emitted = self.num_tokens.to("cpu", torch.int64).numpy()
        return split_counts(step.step_rows, emitted, step.sizes, step.started, step.generated, between=between)

    def _verify_host(self, step_rows: dict[EngineMember, StepRows]) -> dict[int, np.ndarray]:
        """The CPU step on numpy arrays, counts only (the tokens themselves are never read): the same
        draws and numbers as the torch path, without torch's per-operation cost on small tensors."""
        started = time.perf_counter()
        rows, tokens, temperature, seeds, sizes = self._members(step_rows, self._host_step)
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
        return split_counts(step_rows, emitted.astype(np.int64), sizes, started, generated)

    def close(self) -> None:
        pass
