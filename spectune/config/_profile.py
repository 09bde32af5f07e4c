"""Acceptance profiles: how often a drafter's tokens are accepted, per draft position.

A profile states per-position *conditional* rates (what a rejection kernel applies at each step) or
vLLM's *unconditional* per-position rates (what vLLM logs; converted on load). ``spectune calibrate``
writes profiles from real deployments, with the counts behind each rate; simulation and study
documents reference them. Positions past the profile's last one follow an extrapolation rule
(``spectune.config._extrapolation``): by default they repeat its last conditional rate.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, model_validator

from spectune.config._base import SpectuneModel, check_rules, notify
from spectune.config._extrapolation import ExtrapolationRule, extend_conditional
from spectune.config._rates import conditional_to_unconditional, mean_acceptance_length, unconditional_to_conditional
from spectune.config._speculative import MAX_NUM_SPECULATIVE_TOKENS

__all__ = [
    "DEFAULT_CONFIDENCE_AUC",
    "AcceptanceCounts",
    "AcceptanceProfile",
    "AcceptanceRates",
    "BatchSizeBin",
    "MeasuredAcceptance",
]

# Where nothing sets ``confidence_auc`` the estimate learns from the synthesized rows' own feature, except
# under synthetic acceptance: its rates, not its rows, decide what is accepted, so no row carries the signal
# and the features are drawn at this value (as every simulation drew them before the rows' feature was
# used: a study stored then says so). docs/policies.md says why 0.75.
DEFAULT_CONFIDENCE_AUC = 0.75

_Rate = float
_Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
# Measured unconditional rates are written rounded; the product of written conditional rates may differ by this.
_MEASURED_RATE_TOLERANCE = 1e-4


class AcceptanceCounts(SpectuneModel):
    """The evidence behind measured rates, in vLLM's counter units."""

    num_drafts: int = Field(ge=0, description="Verification steps with drafts (vLLM spec_decode_num_drafts).")
    num_draft_tokens: int = Field(ge=0, description="Draft tokens proposed (tokens).")
    num_accepted_tokens: int = Field(ge=0, description="Draft tokens accepted (tokens).")
    accepted_per_position: list[int] | None = Field(
        default=None, description="Steps whose draft at position i was accepted (unconditional counts)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> AcceptanceCounts:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if self.num_accepted_tokens > self.num_draft_tokens:
            problems.append(
                (
                    ("num_accepted_tokens",),
                    f"must be <= num_draft_tokens ({self.num_draft_tokens}), got {self.num_accepted_tokens}",
                )
            )
        per_position = self.accepted_per_position
        if per_position is not None:
            for i, count in enumerate(per_position):
                if count < 0 or count > self.num_drafts:
                    problems.append(
                        (("accepted_per_position", i), f"must be in [0, num_drafts={self.num_drafts}], got {count}")
                    )
                if i > 0 and count > per_position[i - 1]:
                    problems.append(
                        (
                            ("accepted_per_position", i),
                            f"must be non-increasing, got {count} after {per_position[i - 1]}",
                        )
                    )
            if sum(per_position) != self.num_accepted_tokens:
                problems.append(
                    (
                        ("accepted_per_position",),
                        f"must sum to num_accepted_tokens ({self.num_accepted_tokens}), got {sum(per_position)}",
                    )
                )
        check_rules(problems)
        return self


class AcceptanceRates(SpectuneModel):
    """Per-position acceptance, as conditional or as unconditional rates (exactly one of the two)."""

    conditional_rates: list[_Rate] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_NUM_SPECULATIVE_TOKENS,
        description="P(draft i accepted | drafts before it accepted), per position (fractions in [0, 1]).",
    )
    unconditional_rates: list[_Rate] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_NUM_SPECULATIVE_TOKENS,
        description="P(drafts 0..i all accepted), per position, as vLLM logs 'Per-position acceptance rate' "
        "(fractions in [0, 1], non-increasing).",
    )
    extrapolation: ExtrapolationRule = Field(
        default="repeat_last",
        description="Conditional rates past the last given position: 'repeat_last' repeats it; 'geometric_decay' "
        "multiplies it by a per-position ratio fitted to the given rates (capped at 1).",
    )
    confidence_auc: float | None = Field(
        default=None,
        ge=0.5,
        le=1.0,
        description="How well the drafter's confidence ranks accepted drafts above rejected ones (ROC AUC: "
        "0.5 chance, 1 perfect): what an acceptance estimate (vLLM's adaptive verification) can know. Null: the "
        "estimate learns from vLLM's feature on the synthesized draft logits, whose AUC is the pair family's "
        "(0.75 under synthetic acceptance, which no logits decide; docs/policies.md).",
    )

    @model_validator(mode="after")
    def _one_form(self, info: ValidationInfo) -> AcceptanceRates:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        given = [name for name in ("conditional_rates", "unconditional_rates") if getattr(self, name) is not None]
        if len(given) != 1:
            got = " and ".join(given) if given else "neither"
            problems.append(
                (
                    (given[-1] if given else "conditional_rates",),
                    f"give exactly one of conditional_rates, unconditional_rates; got {got}",
                )
            )
        for name in given:
            rates = getattr(self, name)
            for i, rate in enumerate(rates):
                if not 0.0 <= rate <= 1.0:
                    problems.append(((name, i), f"must be in [0, 1], got {rate}"))
            if name == "unconditional_rates":
                for i in range(1, len(rates)):
                    if rates[i] > rates[i - 1] + 1e-9:
                        problems.append(
                            (
                                (name, i),
                                f"unconditional rates must be non-increasing, got {rates[i]} after {rates[i - 1]}",
                            )
                        )
        check_rules(problems)
        return self

    def conditional(self, num_positions: int | None = None) -> list[float]:
        """Conditional rates, extended to ``num_positions`` by the extrapolation rule (or cut to it)."""
        rates = (
            self.conditional_rates
            if self.conditional_rates is not None
            else unconditional_to_conditional(self.unconditional_rates or [])
        )
        if num_positions is None:
            return list(rates)
        return extend_conditional(rates, num_positions, self.extrapolation)

    @property
    def num_positions_measured(self) -> int:
        """How many positions the rates give (the rest are extrapolated)."""
        return len(self.conditional_rates if self.conditional_rates is not None else self.unconditional_rates or [])

    def unconditional(self, num_positions: int | None = None) -> list[float]:
        return conditional_to_unconditional(self.conditional(num_positions))

    def mean_acceptance_length(self, num_positions: int | None = None) -> float:
        """Mean tokens per step (bonus included) at K = ``num_positions`` (default: the profile's length)."""
        return mean_acceptance_length(self.unconditional(num_positions))


class MeasuredAcceptance(AcceptanceRates):
    """Rates plus what a measurement says about them: counts, standard errors, rounding, windows.

    Every field beyond the rates is optional; ``spectune calibrate`` fills them. Per-position lists have
    one entry per rate. Uncertainty is stated twice: ``*_stderr`` (sampling: the larger of the binomial
    and the between-window estimate) and ``*_rounding_error`` (worst case from the source's rounding of
    the numbers it printed; absent when the source gave exact counts).
    """

    counts: AcceptanceCounts | None = Field(default=None, description="The counts behind the rates.")
    num_windows: int | None = Field(
        default=None, ge=1, description="Measurement windows aggregated: log intervals, scrape intervals or requests."
    )
    conditional_rates_stderr: list[_Fraction] | None = Field(
        default=None, description="Standard error of each conditional rate (fractions)."
    )
    conditional_rates_rounding_error: list[_Fraction] | None = Field(
        default=None, description="Worst-case error of each conditional rate from the source's rounding (fractions)."
    )
    unconditional_rates_measured: list[_Fraction] | None = Field(
        default=None,
        description="Unconditional per-position rates the counts give, as vLLM logs them (fractions); "
        "for reading -- simulations use the rates above.",
    )
    unconditional_rates_stderr: list[_Fraction] | None = Field(
        default=None, description="Standard error of each measured unconditional rate (fractions)."
    )
    unconditional_rates_rounding_error: list[_Fraction] | None = Field(
        default=None,
        description="Worst-case error of each measured unconditional rate from the source's rounding (fractions).",
    )
    mean_acceptance_length_measured: float | None = Field(
        default=None,
        ge=1.0,
        description="Mean acceptance length the source reported (tokens per step, bonus included).",
    )
    mean_acceptance_length_stderr: float | None = Field(
        default=None, ge=0.0, description="Standard error of the measured mean acceptance length (tokens per step)."
    )

    @model_validator(mode="after")
    def _per_position_lengths(self, info: ValidationInfo) -> MeasuredAcceptance:
        rates = self.conditional_rates if self.conditional_rates is not None else self.unconditional_rates
        num_positions = len(rates or [])
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for name in (
            "conditional_rates_stderr",
            "conditional_rates_rounding_error",
            "unconditional_rates_measured",
            "unconditional_rates_stderr",
            "unconditional_rates_rounding_error",
        ):
            values = getattr(self, name)
            if values is not None and len(values) != num_positions:
                problems.append(((name,), f"must have one entry per rate ({num_positions}), got {len(values)}"))
        per_position = self.counts.accepted_per_position if self.counts is not None else None
        if per_position is not None and len(per_position) != num_positions:
            problems.append(
                (
                    ("counts", "accepted_per_position"),
                    f"must have one entry per rate ({num_positions}), got {len(per_position)}",
                )
            )
        check_rules(problems)
        measured = self.unconditional_rates_measured
        if measured is not None:
            implied = self.unconditional()
            for i, (rate, implied_rate) in enumerate(zip(measured, implied, strict=True)):
                if abs(rate - implied_rate) > _MEASURED_RATE_TOLERANCE:
                    notify(
                        info,
                        ("unconditional_rates_measured",),
                        f"position {i}: {rate} differs from what the rates give ({implied_rate:.6f}); "
                        "the rates no longer match the measurement",
                    )
                    break
        return self


class BatchSizeBin(MeasuredAcceptance):
    """A profile measured while the server ran between ``min_running`` and ``max_running`` requests."""

    min_running: int = Field(ge=0, description="Fewest running requests in the windows of this bin (requests).")
    max_running: int = Field(ge=0, description="Most running requests in the windows of this bin (requests).")

    @model_validator(mode="after")
    def _ordered_range(self) -> BatchSizeBin:
        if self.max_running < self.min_running:
            check_rules([(("max_running",), f"must be >= min_running ({self.min_running}), got {self.max_running}")])
        return self


class AcceptanceProfile(MeasuredAcceptance):
    """``kind: acceptance_profile``: a drafter's measured or assumed acceptance on some traffic."""

    kind: Literal["acceptance_profile"] = Field(description="Document kind.")
    name: str = Field(min_length=1, max_length=200, description="A short name for tables and reports.")
    method: str | None = Field(default=None, description="The drafting method the profile describes (informational).")
    draft_sample_method: Literal["greedy", "probabilistic"] = Field(
        default="greedy",
        description="Draft sampling under which the rates were measured (vLLM's default is greedy).",
    )
    temperature: float | None = Field(
        default=None, ge=0.0, le=10.0, description="Sampling temperature of the measured traffic, if known."
    )
    source: str | None = Field(default=None, max_length=2000, description="Where the numbers come from.")
    bins: list[BatchSizeBin] | None = Field(
        default=None, description="Profiles per running-request range, when the source logged batch sizes."
    )
    notes: str | None = Field(
        default=None, max_length=4000, description="Free text (e.g. only the mean length was known)."
    )
