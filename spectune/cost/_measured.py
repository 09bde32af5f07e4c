"""Step times interpolated from a measured table, with a leave-one-out fit report.

Interpolation (``StepTimeInterpolator``):

- in batch size, per measured K: piecewise-linear between the measured batch sizes;
  below the smallest one, flat (step time does not fall with fewer requests: the weights are read
  anyway); above the largest one, the last segment's slope (never negative) out to twice the largest
  measured batch size, and no further;
- in K: linear between the two nearest measured K (each evaluated at the batch size as above);
  no extrapolation in K -- a K below the smallest or above the largest measured one is refused.

Refusals raise ``OutOfTableRange`` (a ``SpectuneError``) naming the table and what it covers; read
``limits`` first. The table gives the total; the split into drafting / verification / sampling /
overhead is the roofline's split at the same point, scaled to the measured total. Prefill times come
from the roofline (tables hold decode steps only).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable

from spectune.config import StepTimeTable
from spectune.cost._interface import (
    CostLimits,
    CostModel,
    FitReport,
    HeldOutPoint,
    OutOfTableRange,
    StepPhases,
    StepTime,
    StepTimer,
    check_step_arguments,
    timer_by_batch_and_k,
)
from spectune.cost._roofline import RooflineCostModel

__all__ = ["MAX_BATCH_EXTRAPOLATION", "MeasuredCostModel", "StepTimeInterpolator"]

MAX_BATCH_EXTRAPOLATION = 2.0  # answer up to this multiple of the largest measured batch size


class StepTimeInterpolator:
    """Piecewise-linear step time over (batch size, K) points; see the module docstring for the policy."""

    def __init__(self, points: Iterable[tuple[int, int, float]], *, label: str = "the step-time table") -> None:
        """``points``: (batch_size, num_speculative_tokens, seconds); K with fewer than 2 batch sizes are dropped."""
        rows: dict[int, list[tuple[int, float]]] = {}
        for batch_size, k, seconds in points:
            rows.setdefault(k, []).append((batch_size, seconds))
        self._rows = {k: sorted(row) for k, row in sorted(rows.items()) if len(row) >= 2}
        self._ks = list(self._rows)
        self._label = label

    def without(self, batch_size: int, num_speculative_tokens: int) -> StepTimeInterpolator:
        """The same table less one point (a K left with one batch size drops out); other rows are shared."""
        rest = StepTimeInterpolator((), label=self._label)
        rows = dict(self._rows)
        row = [point for point in rows.pop(num_speculative_tokens, []) if point[0] != batch_size]
        if len(row) >= 2:
            rows[num_speculative_tokens] = row
        rest._rows = dict(sorted(rows.items()))
        rest._ks = list(rest._rows)
        return rest

    @property
    def limits(self) -> CostLimits:
        if not self._ks:
            return CostLimits(max_batch_size=0, min_num_speculative_tokens=0, max_num_speculative_tokens=0)
        largest = min(int(MAX_BATCH_EXTRAPOLATION * row[-1][0]) for row in self._rows.values())
        return CostLimits(largest, self._ks[0], self._ks[-1])

    def _row_time(self, k: int, batch_size: int) -> float:
        row = self._rows[k]
        sizes = [size for size, _ in row]
        if batch_size <= sizes[0]:
            return row[0][1]
        if batch_size > MAX_BATCH_EXTRAPOLATION * sizes[-1]:
            raise OutOfTableRange(
                f"{self._label}: batch_size {batch_size} is beyond what num_speculative_tokens {k} covers (measured "
                f"up to {sizes[-1]}, extrapolated to {int(MAX_BATCH_EXTRAPOLATION * sizes[-1])}); measure larger batches"
            )
        i = min(bisect.bisect_left(sizes, batch_size), len(row) - 1)
        if sizes[i] == batch_size:
            return row[i][1]
        (b0, t0), (b1, t1) = row[i - 1], row[i]
        slope = (t1 - t0) / (b1 - b0)
        if batch_size > b1:  # past the last point: the last slope, never downhill
            return t1 + max(slope, 0.0) * (batch_size - b1)
        return t0 + slope * (batch_size - b0)

    def __call__(self, batch_size: int, num_speculative_tokens: int) -> float:
        """Seconds per step at (batch size, K)."""
        k = num_speculative_tokens
        if not self._ks or not self._ks[0] <= k <= self._ks[-1]:
            covered = f"{self._ks[0]}..{self._ks[-1]}" if self._ks else "nothing"
            raise OutOfTableRange(
                f"{self._label}: num_speculative_tokens {k} is outside the measured K ({covered}); K is "
                "interpolated, never extrapolated -- measure it"
            )
        if k in self._rows:
            return self._row_time(k, batch_size)
        j = bisect.bisect_left(self._ks, k)
        k0, k1 = self._ks[j - 1], self._ks[j]
        t0, t1 = self._row_time(k0, batch_size), self._row_time(k1, batch_size)
        return t0 + (t1 - t0) * (k - k0) / (k1 - k0)


def leave_one_out(points: list[tuple[int, int, float]], label: str) -> FitReport:
    """Predict each point from all the others; points the rest cannot reach are listed as skipped."""
    held_out: list[HeldOutPoint] = []
    skipped: list[tuple[int, int]] = []
    full = StepTimeInterpolator(points, label=label)
    for batch_size, k, seconds in points:
        rest = full.without(batch_size, k)
        try:
            predicted = rest(batch_size, k)
        except OutOfTableRange:
            skipped.append((batch_size, k))
            continue
        held_out.append(HeldOutPoint(batch_size, k, seconds, predicted))
    return FitReport(num_points=len(points), held_out=tuple(held_out), skipped=tuple(skipped))


def _total(phases: StepPhases) -> float:
    drafting_s, verification_s, sampling_s, overhead_s = phases
    return drafting_s + verification_s + sampling_s + overhead_s  # as StepTime.total_s adds them


def _scaled(point: tuple[float, float | None], estimate: StepPhases) -> StepPhases:
    """The roofline's phases scaled to the table's total (moved by the roofline's change with context)."""
    measured, at_table_context = point
    estimate_s = _total(estimate)
    total = measured
    if at_table_context is not None:
        total = max(measured + estimate_s - at_table_context, min(measured, estimate_s))
    scale = total / estimate_s
    drafting_s, verification_s, sampling_s, overhead_s = estimate
    return drafting_s * scale, verification_s * scale, sampling_s * scale, overhead_s * scale


class MeasuredCostModel(CostModel):
    """A measured step-time table, interpolated; the roofline supplies the phase split and prefill."""

    def __init__(
        self, table: StepTimeTable, roofline: RooflineCostModel, *, table_context_tokens: float | None = None
    ) -> None:
        self._label = table.file or "the inline step-time table"
        self._points = [(p.batch_size, p.num_speculative_tokens, p.step_time_ms / 1000.0) for p in table.points]
        self._interpolate = StepTimeInterpolator(self._points, label=self._label)
        self._roofline = roofline
        self._table_context_tokens = table_context_tokens

    @property
    def limits(self) -> CostLimits:
        return self._interpolate.limits

    def step_time(
        self, batch_size: int, num_speculative_tokens: int, context_tokens: float, *, draft_probabilities: bool = False
    ) -> StepTime:
        """The table's time at (B, K); with ``step_times_context_tokens`` set, plus the roofline's change
        from that context to ``context_tokens`` (never below the smaller of table and roofline)."""
        check_step_arguments(batch_size, num_speculative_tokens, context_tokens)
        estimate = self._roofline.step_timer(draft_probabilities=draft_probabilities)
        point = self._point(batch_size, num_speculative_tokens, estimate)
        return StepTime(*_scaled(point, estimate(batch_size, num_speculative_tokens, context_tokens)))

    def step_timer(self, *, draft_probabilities: bool = False) -> StepTimer:
        estimate = self._roofline.step_timer(draft_probabilities=draft_probabilities)

        def step(batch_size: int, num_speculative_tokens: int) -> Callable[[float], StepPhases]:
            point = self._point(batch_size, num_speculative_tokens, estimate)
            return lambda context: _scaled(point, estimate(batch_size, num_speculative_tokens, context))

        return timer_by_batch_and_k(step)

    def _point(self, batch_size: int, num_speculative_tokens: int, estimate: StepTimer) -> tuple[float, float | None]:
        """The table's time at (B, K), and the roofline's total there at the table's context (None: not given)."""
        measured = self._interpolate(batch_size, num_speculative_tokens)
        if self._table_context_tokens is None:
            return measured, None
        return measured, _total(estimate(batch_size, num_speculative_tokens, self._table_context_tokens))

    def prefill_time(self, num_prompt_tokens: int, *, num_prompts: int = 1) -> float:
        return self._roofline.prefill_time(num_prompt_tokens, num_prompts=num_prompts)

    def fit_report(self) -> FitReport:
        """Leave-one-out over the table's own points, under the same interpolation policy."""
        return leave_one_out(self._points, self._label)
