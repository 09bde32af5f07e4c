"""What every cost model answers, and the small value types it answers with."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Integral, Real

from spectune.config import MAX_NUM_SPECULATIVE_TOKENS
from spectune.errors import SpectuneError

__all__ = [
    "CostLimits",
    "CostModel",
    "FitReport",
    "HeldOutPoint",
    "StepPhases",
    "StepTime",
    "StepTimer",
    "timer_by_batch_and_k",
]


@dataclass(frozen=True)
class StepTime:
    """The wall time of one serving iteration, by phase (seconds); ``total_s`` is their sum."""

    drafting_s: float
    verification_s: float
    sampling_s: float
    overhead_s: float
    total_s: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_s", self.drafting_s + self.verification_s + self.sampling_s + self.overhead_s)


StepPhases = tuple[float, float, float, float]  # drafting_s, verification_s, sampling_s, overhead_s
# (batch_size, num_speculative_tokens, context_tokens) -> the step's phases: ``CostModel.step_timer``
StepTimer = Callable[[int, int, float], StepPhases]


def timer_by_batch_and_k(step: Callable[[int, int], Callable[[float], StepPhases]]) -> StepTimer:
    """A ``StepTimer`` from ``step(batch_size, K)`` -> the phases as a function of the context, built once
    per (batch size, K): a loop asks for the same few again and again."""
    steps: dict[tuple[int, int], Callable[[float], StepPhases]] = {}

    def timer(batch_size: int, num_speculative_tokens: int, context_tokens: float) -> StepPhases:
        at = steps.get((batch_size, num_speculative_tokens))
        if at is None:
            at = steps[batch_size, num_speculative_tokens] = step(batch_size, num_speculative_tokens)
        return at(context_tokens)

    return timer


@dataclass(frozen=True)
class CostLimits:
    """The batch sizes and K a cost model can answer for; a ``None`` bound means unbounded."""

    max_batch_size: int | None
    min_num_speculative_tokens: int
    max_num_speculative_tokens: int | None


@dataclass(frozen=True)
class HeldOutPoint:
    """One table point predicted by the model built without it (seconds)."""

    batch_size: int
    num_speculative_tokens: int
    measured_s: float
    predicted_s: float

    @property
    def relative_error(self) -> float:
        """|predicted - measured| / measured (fraction)."""
        return abs(self.predicted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True)
class FitReport:
    """How well a measured table predicts points it did not see: leave-one-out over its own points.

    ``held_out`` has one entry per point the rest of the table could predict within the
    extrapolation policy; ``skipped`` lists (batch size, K) of the points it could not.
    """

    num_points: int
    held_out: tuple[HeldOutPoint, ...]
    skipped: tuple[tuple[int, int], ...]

    @property
    def mean_relative_error(self) -> float | None:
        """Mean of |predicted - measured| / measured over the held-out points (None if there are none)."""
        if not self.held_out:
            return None
        return math.fsum(point.relative_error for point in self.held_out) / len(self.held_out)

    @property
    def max_relative_error(self) -> float | None:
        """Largest relative error over the held-out points (None if there are none)."""
        return max((point.relative_error for point in self.held_out), default=None)

    @property
    def worst_point(self) -> HeldOutPoint | None:
        """The held-out point with the largest relative error."""
        return max(self.held_out, key=lambda point: point.relative_error, default=None)

    def summary(self) -> str:
        """One line for reports: counts, mean and max relative error, and where the max is."""
        worst = self.worst_point
        if worst is None:
            return f"leave-one-out: no point of {self.num_points} can be predicted from the others"
        return (
            f"leave-one-out over {len(self.held_out)} of {self.num_points} points: mean relative error "
            f"{self.mean_relative_error:.1%}, max {self.max_relative_error:.1%} (batch_size {worst.batch_size}, "
            f"num_speculative_tokens {worst.num_speculative_tokens})"
            + (f"; {len(self.skipped)} points skipped (outside the extrapolation bounds)" if self.skipped else "")
        )


class CostModel(ABC):
    """Step and prefill times of one deployment (hardware, target model, drafter).

    Call order:

    1. ``build_cost_model(hardware, target_model, drafter, config)`` once per deployment; it picks the
       roofline or the measured table and checks that hardware, target and drafter fit together.
    2. Before simulating, read ``limits`` to check that the batch sizes and K you will ask for are
       covered (a measured table covers a bounded range; the roofline covers everything).
    3. Each simulated iteration: ``step_time(batch_size, num_speculative_tokens, context_tokens)``
       -> ``StepTime``; advance the clock by ``total_s``. ``batch_size`` counts decoding requests,
       K = 0 is plain decoding (no draft, one token verified per request), ``context_tokens`` is the
       mean number of tokens already in each request's KV cache. A simulator's loop asks through
       ``step_timer()`` instead: the same numbers as plain floats, its arguments trusted.
    4. Each step that admits requests: ``prefill_time(num_prompt_tokens, num_prompts=...)`` for their
       prompts (target and neural drafter both read them); it is the time to their first token.
    5. ``fit_report()`` after building, to show how well a measured table predicts its own held-back
       points (None for the roofline, which is not fitted).

    Times are float seconds. Out-of-range arguments raise ``ValueError``; a question a measured table
    cannot answer raises ``SpectuneError`` naming the table and what it covers.
    """

    @abstractmethod
    def step_time(
        self, batch_size: int, num_speculative_tokens: int, context_tokens: float, *, draft_probabilities: bool = False
    ) -> StepTime:
        """Wall time of one iteration: draft K tokens for each of ``batch_size`` requests, verify the
        B·(K+1) positions on the target, rejection-sample, plus the fixed overhead.

        ``draft_probabilities``: the drafter hands over its full distributions (vLLM
        ``draft_sample_method: probabilistic``), so sampling also reads B·K draft-logit rows.
        """

    def step_timer(self, *, draft_probabilities: bool = False) -> StepTimer:
        """``step_time`` for a loop that asks every step: a function of (batch_size, num_speculative_tokens,
        context_tokens) -> (drafting_s, verification_s, sampling_s, overhead_s), the numbers ``step_time``
        gives, bit for bit. It does not check its arguments (the loop's are valid by construction); a
        model may keep what depends only on (batch size, K), which the loop asks for again and again."""

        def timer(batch_size: int, num_speculative_tokens: int, context_tokens: float) -> StepPhases:
            step = self.step_time(
                batch_size, num_speculative_tokens, context_tokens, draft_probabilities=draft_probabilities
            )
            return step.drafting_s, step.verification_s, step.sampling_s, step.overhead_s

        return timer

    @abstractmethod
    def prefill_time(self, num_prompt_tokens: int, *, num_prompts: int = 1) -> float:
        """Seconds to prefill ``num_prompt_tokens`` tokens, split evenly over ``num_prompts`` prompts, in one
        pass of the target and of a neural drafter (plus the step overhead)."""

    @property
    @abstractmethod
    def limits(self) -> CostLimits:
        """The batch sizes and K this model answers for."""

    def fit_report(self) -> FitReport | None:
        """Held-back error of a measured table; None when nothing was fitted."""
        return None


def check_step_arguments(batch_size: int, num_speculative_tokens: int, context_tokens: float) -> None:
    """Raise ``ValueError`` naming the argument, what is allowed and what was given."""
    if not _is_integer(batch_size) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    k = num_speculative_tokens
    if not _is_integer(k) or not 0 <= k <= MAX_NUM_SPECULATIVE_TOKENS:
        raise ValueError(f"num_speculative_tokens must be an integer in [0, {MAX_NUM_SPECULATIVE_TOKENS}], got {k!r}")
    if (
        isinstance(context_tokens, bool)
        or not isinstance(context_tokens, Real)
        or not (math.isfinite(context_tokens) and context_tokens >= 0)
    ):
        raise ValueError(f"context_tokens must be a finite number >= 0, got {context_tokens!r}")


def check_prompt_tokens(num_prompt_tokens: int, num_prompts: int = 1) -> None:
    """Raise ``ValueError`` unless 1 <= ``num_prompts`` <= ``num_prompt_tokens``, both integers."""
    if not _is_integer(num_prompts) or num_prompts < 1:
        raise ValueError(f"num_prompts must be an integer >= 1, got {num_prompts!r}")
    if not _is_integer(num_prompt_tokens) or num_prompt_tokens < num_prompts:
        raise ValueError(
            f"num_prompt_tokens must be an integer >= num_prompts ({num_prompts}), got {num_prompt_tokens!r}"
        )


def _is_integer(value: object) -> bool:
    # numpy integers count; bools do not (a plain int first: the ABC check is the slow path)
    return type(value) is int or (isinstance(value, Integral) and not isinstance(value, bool))


class OutOfTableRange(SpectuneError):
    """A measured table was asked for a batch size or K outside what it covers."""
