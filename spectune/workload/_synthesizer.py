"""Per-step target and draft logits whose acceptance reproduces an acceptance profile.

Modelling assumption: acceptance is driven by one family of (target, draft) pairs with a single knob
(``spectune.workload._pair_family``). A profile's rate at position i fixes the knob under the drafting
mode the profile was *measured with*; the simulated drafting mode then reads its acceptance off the
same pairs. So a profile measured with greedy (one-hot) drafts predicts what probabilistic drafting
would accept on the same target/draft pairs (in this family, somewhat more at T > 0 for mid-range
rates: a drafter whose distribution tracks the target's overlaps it by more than its argmax's
target probability), and the reverse; at T = 0 the two modes coincide. The prediction is only as
good as the family's resemblance to the real drafter; it lets a study compare the two modes on equal
terms, not replace a measurement of both.

Speed: at construction every (position, temperature) gets a bank of calibrated rows on ``device``;
each step only gathers random rows (one ``index_select`` per tensor) with the caller's seeded
generator. Positions and requests draw rows independently, so each position's acceptance is the
bank's mean -- the calibrated rate -- whatever the bank size.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from spectune.workload._calibration import (
    BANK_ROWS,
    BANK_SEED,
    DRAFT_SAMPLES_PER_ROW,
    KnobCalibration,
    cached_family_base,
    calibrate_knob,
)
from spectune.workload._pair_family import DraftSampleMethod, draft_samples, pair_rows

__all__ = ["BankStep", "LogitSynthesizer", "SpeculationInputs"]

_DRAFT_MODES = ("greedy", "probabilistic")


@dataclass(frozen=True)
class SpeculationInputs:
    """One step's inputs to ``spectune.kernels.rejection_sample`` for R requests at K draft positions.

    target_logits  float32 [R, K+1, V]  raw target logits; row K is the bonus row
    draft_tokens   int64   [R, K]       proposed tokens (never -1 here)
    draft_logits   float32 [R, K, V]    raw draft logits (probabilistic drafting), or None (one-hot)
    temperature    float32 [R]          each request's temperature (0 = greedy)
    """

    target_logits: torch.Tensor
    draft_tokens: torch.Tensor
    draft_logits: torch.Tensor | None
    temperature: torch.Tensor


@dataclass(frozen=True)
class BankStep:
    """One step as rows of the synthesizer's banks (see ``LogitSynthesizer.generate_rows``).

    rows           int64   [R, K+1]  bank row of each request's target row k (draft row k: the same index)
    draft_tokens   int64   [R, K]    proposed tokens
    temperature    float32 [R]
    """

    rows: torch.Tensor
    draft_tokens: torch.Tensor
    temperature: torch.Tensor


class LogitSynthesizer:
    """Banks of calibrated logit rows for a profile's conditional rates at a set of temperatures.

    Call order: construct once per (rates, temperatures, drafting) -- calibration is memoised per
    process, so rebuilding for the same rates is cheap -- then call ``generate`` every step.

    conditional_rates: P(draft i accepted | drafts before it accepted) for i = 0..K-1 (fractions),
        applied at every temperature; ``generate`` may use the first k <= K of them.
    temperatures: the distinct request temperatures (0 = greedy); requests refer to them by index.
    draft_sample_method: the drafting simulated ('greedy' = one-hot drafts at the drafter's argmax,
        no draft logits; 'probabilistic' = drafts sampled from q at the request's temperature).
    measured_with: the drafting under which ``conditional_rates`` were measured.
    bank_rows: rows per (position, temperature) bank; T = 0 rates are reproduced to 1/bank_rows.

    Memory on ``device``: bank_rows x V x 4 bytes per distinct (rate, temperature) pair, twice that
    with probabilistic drafting (16 MiB for 512 rows at V = 4096), plus the float64 base noise
    (2 x bank_rows x V x 8 bytes, memoised with the calibrations).
    """

    def __init__(
        self,
        conditional_rates: Sequence[float],
        temperatures: Sequence[float],
        *,
        vocab_size: int,
        draft_sample_method: DraftSampleMethod,
        measured_with: DraftSampleMethod = "greedy",
        device: str | torch.device = "cpu",
        bank_rows: int = BANK_ROWS,
        draft_samples_per_row: int = DRAFT_SAMPLES_PER_ROW,
        bank_seed: int = BANK_SEED,
    ) -> None:
        _check_rates_and_temperatures(conditional_rates, temperatures)
        if draft_sample_method not in _DRAFT_MODES:
            raise ValueError(f"draft_sample_method must be one of greedy, probabilistic, got {draft_sample_method!r}")
        # The canonical form ('cuda' -> 'cuda:0') so that comparisons with tensors' devices hold.
        self.device = torch.empty(0, device=device).device
        self.vocab_size = vocab_size
        self.bank_rows = bank_rows
        self.draft_sample_method: DraftSampleMethod = draft_sample_method
        self.measured_with: DraftSampleMethod = measured_with
        self.draft_samples_per_row, self.bank_seed = draft_samples_per_row, bank_seed
        self.conditional_rates = tuple(float(rate) for rate in conditional_rates)
        self.temperature_values = tuple(float(t) for t in temperatures)
        self.calibrations: dict[tuple[int, int], KnobCalibration] = {}
        for t_index, temperature in enumerate(self.temperature_values):
            for position, rate in enumerate(self.conditional_rates):
                self.calibrations[t_index, position] = calibrate_knob(
                    rate,
                    temperature=temperature,
                    measured_with=measured_with,
                    vocab_size=vocab_size,
                    bank_rows=bank_rows,
                    draft_samples_per_row=draft_samples_per_row,
                    bank_seed=bank_seed,
                    device=self.device,
                )
        self._build_banks(draft_samples_per_row, bank_seed)
        self.temperatures = torch.tensor(self.temperature_values, dtype=torch.float32, device=self.device)

    @property
    def num_speculative_tokens(self) -> int:
        """K: the number of positions the banks cover."""
        return len(self.conditional_rates)

    def expected_conditional_rates(self, temperature_index: int) -> list[float]:
        """Per-position expected acceptance (fractions) of the simulated drafting at one temperature.

        Equals ``conditional_rates`` when the simulated mode is the measured one (up to 1/bank_rows at
        T = 0, and except rates below the family's floor of about 1/V); otherwise it is the family's
        prediction for the other mode.
        """
        if not 0 <= temperature_index < len(self.temperature_values):
            raise ValueError(
                f"temperature_index must be in [0, {len(self.temperature_values) - 1}], got {temperature_index}"
            )
        return [
            self.calibrations[temperature_index, position].expected(self.draft_sample_method)
            for position in range(self.num_speculative_tokens)
        ]

    def _build_banks(self, samples_per_row: int, bank_seed: int) -> None:
        base = cached_family_base(self.vocab_size, self.bank_rows, samples_per_row, bank_seed, str(self.device))
        probabilistic = self.draft_sample_method == "probabilistic"
        slot_of_key: dict[tuple[float, float], int] = {}
        targets: list[torch.Tensor] = []
        drafts: list[torch.Tensor] = []
        tokens: list[torch.Tensor] = []
        num_t, k = len(self.temperature_values), self.num_speculative_tokens
        slot_of = torch.empty((num_t, k), dtype=torch.int64)
        slot_temperatures: list[float] = []
        for (t_index, position), calibration in self.calibrations.items():
            temperature = self.temperature_values[t_index]
            key = (calibration.knob, temperature)
            if key not in slot_of_key:
                slot_of_key[key] = len(targets)
                slot_temperatures.append(temperature)
                rows = pair_rows(base, calibration.knob)
                greedy_rule = temperature == 0.0
                # Logits are T times the tempered log-probs, so the kernel's division by T recovers them.
                scale = temperature if temperature > 0.0 else 1.0
                targets.append(rows.target_log_probs * scale)
                if probabilistic:
                    drafts.append(rows.draft_logits * scale)
                samples = _draft_samples(
                    self.vocab_size,
                    self.bank_rows,
                    samples_per_row,
                    bank_seed,
                    str(self.device),
                    calibration.knob,
                    greedy_rule,
                    self.draft_sample_method,
                )
                tokens.append(samples.expand(-1, samples_per_row if probabilistic else 1))
            slot_of[t_index, position] = slot_of_key[key]
        self._slot_of = slot_of.to(self.device)
        self._target_bank = torch.cat(targets).contiguous()
        self._draft_bank = torch.cat(drafts).contiguous() if probabilistic else None
        self._token_bank = torch.cat(tokens).contiguous()
        row_temperature = torch.tensor(slot_temperatures, dtype=torch.float32).repeat_interleave(self.bank_rows)
        self._row_temperature = row_temperature.to(self.device)

    def banks(self) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(target rows float32 [N, V], draft rows float32 [N, V] or None, each row's temperature
        float32 [N]): what ``generate_rows``'s indices point into. Draft row i pairs with target row i."""
        return self._target_bank, self._draft_bank, self._row_temperature

    def draw_tables(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What a step's draws read besides ``banks()``: each (temperature index, position)'s bank slot
        (int64 [T, K]; slot s is bank rows s * bank_rows ..), each bank row's draft-token samples (int64
        [N, S]; S = 1 with one-hot drafts) and each bank row's temperature (float32 [N])."""
        return self._slot_of, self._token_bank, self._row_temperature

    def generate(
        self,
        temperature_index: torch.Tensor,
        generator: torch.Generator,
        *,
        num_speculative_tokens: int | None = None,
        out: SpeculationInputs | None = None,
    ) -> SpeculationInputs:
        """Fresh rows for one step.

        temperature_index: int64 [R] on the synthesizer's device, each in [0, len(temperatures)).
        generator: a seeded ``torch.Generator`` on the same device (the only source of randomness).
        num_speculative_tokens: k <= K positions this step (default K); position i uses rate i.
        out: an earlier result of the same R and k whose logit tensors are overwritten instead of
            allocating new ones (on the CPU, fresh tens-of-MiB buffers cost more than the gather).
        """
        k = self._check_generate_arguments(temperature_index, generator, num_speculative_tokens)
        self._check_out(out, temperature_index.shape[0], k)
        step = self.generate_rows(temperature_index, generator, num_speculative_tokens=k, validate=False)
        num_requests = temperature_index.shape[0]
        target_logits = _gather_rows(self._target_bank, step.rows.view(-1), out.target_logits if out else None)
        draft_logits = None
        if self._draft_bank is not None:
            draft_rows = step.rows[:, :k].reshape(-1)
            draft_logits = _gather_rows(self._draft_bank, draft_rows, out.draft_logits if out else None)
            draft_logits = draft_logits.view(num_requests, k, self.vocab_size)
        return SpeculationInputs(
            target_logits=target_logits.view(num_requests, k + 1, self.vocab_size),
            draft_tokens=step.draft_tokens,
            draft_logits=draft_logits,
            temperature=step.temperature,
        )

    def generate_rows(
        self,
        temperature_index: torch.Tensor,
        generator: torch.Generator,
        *,
        num_speculative_tokens: int | None = None,
        validate: bool = True,
    ) -> BankStep:
        """One step as bank rows instead of logits: the draws of ``generate`` (same generator use, so
        the same step), for a backend that reads ``banks()`` itself. ``validate=False`` skips the
        argument checks (their range check reads the indices back from a GPU: a host sync).

        On CUDA a step over R requests begins with the step over its first m: torch's Philox draws
        element i from counter i and moves the generator on by the same amount for every draw that fits
        one pass of its launch grid (on an H200 about a million values, far more than a step draws), so
        a caller may draw a fixed R every step (one CUDA graph) and use the first m rows. Not so on the
        CPU, where a larger draw moves the generator further."""
        k = num_speculative_tokens or self.num_speculative_tokens
        if validate:
            k = self._check_generate_arguments(temperature_index, generator, num_speculative_tokens)
        num_requests, rows = temperature_index.shape[0], self.bank_rows
        slots = self._slot_of[temperature_index, :k]
        # The bonus row is a target row of the last position's bank (its acceptance plays no role).
        slots = torch.cat([slots, slots[:, k - 1 :]], dim=1)
        picks = torch.randint(rows, (num_requests, k + 1), generator=generator, device=self.device)
        bank_rows = slots * rows + picks
        draft_rows = bank_rows[:, :k].reshape(-1)
        samples = self._token_bank.shape[1]
        if samples == 1:
            draft_tokens = self._token_bank[draft_rows, 0]
        else:
            columns = torch.randint(samples, (draft_rows.shape[0],), generator=generator, device=self.device)
            draft_tokens = self._token_bank[draft_rows, columns]
        return BankStep(bank_rows, draft_tokens.view(num_requests, k), self.temperatures[temperature_index])

    def generate_host_rows(
        self, temperature_index: np.ndarray, generator: torch.Generator, num_speculative_tokens: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``generate_rows`` on the CPU as numpy arrays (rows int64 [R, k+1], draft tokens int64 [R, k],
        temperature float32 [R]): the same draws from ``generator``, the same step, without torch's
        per-operation cost on a step's small tensors. Arguments are not validated."""
        if self.device.type != "cpu":
            raise ValueError(f"generate_host_rows needs a synthesizer on the CPU, got one on {self.device}")
        k = num_speculative_tokens
        num_requests, rows = temperature_index.shape[0], self.bank_rows
        picks = torch.randint(rows, (num_requests, k + 1), generator=generator).numpy()
        slot_of, token_bank = self._slot_of.numpy(), self._token_bank.numpy()
        slots = slot_of[temperature_index, :k]
        bank_rows = np.empty((num_requests, k + 1), dtype=np.int64)
        bank_rows[:, :k] = slots
        bank_rows[:, k] = slots[:, k - 1]  # the bonus row: a target row of the last position's bank
        bank_rows *= rows
        bank_rows += picks
        draft_rows = bank_rows[:, :k].reshape(-1)
        if token_bank.shape[1] == 1:
            draft_tokens = token_bank[draft_rows, 0]
        else:
            columns = torch.randint(token_bank.shape[1], (draft_rows.shape[0],), generator=generator).numpy()
            draft_tokens = token_bank[draft_rows, columns]
        return bank_rows, draft_tokens.reshape(num_requests, k), self.temperatures.numpy()[temperature_index]

    def _check_out(self, out: SpeculationInputs | None, num_requests: int, k: int) -> None:
        if out is None:
            return
        expected = {"target_logits": (num_requests, k + 1, self.vocab_size)}
        if self._draft_bank is not None:
            expected["draft_logits"] = (num_requests, k, self.vocab_size)
        for name, shape in expected.items():
            tensor = getattr(out, name)
            fits = tensor is not None and tuple(tensor.shape) == shape and tensor.dtype == torch.float32
            if not fits or not tensor.is_contiguous() or tensor.device != self.device:
                got = "None" if tensor is None else f"{tensor.dtype} {list(tensor.shape)} on {tensor.device}"
                wanted = f"a contiguous float32 tensor {list(shape)} on {self.device}"
                raise ValueError(f"out.{name} must be {wanted}, got {got}")

    def _check_generate_arguments(
        self, temperature_index: torch.Tensor, generator: torch.Generator, num_speculative_tokens: int | None
    ) -> int:
        k = self.num_speculative_tokens if num_speculative_tokens is None else num_speculative_tokens
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.num_speculative_tokens:
            allowed = f"[1, {self.num_speculative_tokens}]"
            raise ValueError(f"num_speculative_tokens must be an integer in {allowed}, got {k!r}")
        if not isinstance(temperature_index, torch.Tensor):
            raise ValueError(f"temperature_index must be an int64 tensor [R], got {type(temperature_index).__name__}")
        if temperature_index.dtype != torch.int64 or temperature_index.dim() != 1:
            got = f"{temperature_index.dtype} {list(temperature_index.shape)}"
            raise ValueError(f"temperature_index must be an int64 tensor [R], got {got}")
        if temperature_index.device != self.device:
            raise ValueError(f"temperature_index must be on {self.device}, got {temperature_index.device}")
        if generator.device.type != self.device.type:
            raise ValueError(f"generator must be on {self.device.type}, got {generator.device.type}")
        if temperature_index.numel() > 0:
            low, high = int(temperature_index.min()), int(temperature_index.max())
            if low < 0 or high >= len(self.temperature_values):
                bad = low if low < 0 else high
                raise ValueError(f"temperature_index must be in [0, {len(self.temperature_values) - 1}], got {bad}")
        return k


@functools.lru_cache(maxsize=256)
def _draft_samples(
    vocab_size: int,
    bank_rows: int,
    samples_per_row: int,
    bank_seed: int,
    device: str,
    knob: float,
    greedy_rule: bool,
    draft_sample_method: DraftSampleMethod,
) -> torch.Tensor:
    """``draft_samples`` of the family's rows at ``knob`` (int64 [N, S], small whatever V): a sort of every
    row, the same for every simulation of a process that meets the same knob (a study's do)."""
    base = cached_family_base(vocab_size, bank_rows, samples_per_row, bank_seed, device)
    rows = pair_rows(base, knob)
    return draft_samples(rows, base, greedy_rule=greedy_rule, draft_sample_method=draft_sample_method)


def _gather_rows(bank: torch.Tensor, rows: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """bank[rows] as a new [len(rows), V] tensor, or written into ``out`` (any shape of that size)."""
    if out is None:
        return bank.index_select(0, rows)
    return torch.index_select(bank, 0, rows, out=out.view(-1, bank.shape[1]))


def _check_rates_and_temperatures(conditional_rates: Sequence[float], temperatures: Sequence[float]) -> None:
    if len(conditional_rates) == 0:
        raise ValueError("conditional_rates must have at least one rate (one per draft position), got []")
    for i, rate in enumerate(conditional_rates):
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 <= rate <= 1.0 or math.isnan(rate):
            raise ValueError(f"conditional_rates[{i}] must be in [0, 1], got {rate!r}")
    if len(temperatures) == 0:
        raise ValueError("temperatures must list at least one temperature, got []")
    for i, temperature in enumerate(temperatures):
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, int | float)
            or not 0.0 <= temperature < math.inf
        ):
            raise ValueError(f"temperatures[{i}] must be a finite number >= 0, got {temperature!r}")
    if len(set(temperatures)) != len(temperatures):
        raise ValueError(f"temperatures must be distinct, got {list(temperatures)}")
