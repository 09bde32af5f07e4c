"""Serving metrics from a loop trace, in the units vLLM and `vllm bench serve` report."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from spectune.simulator._loop import LoopTrace

__all__ = ["KvCacheReport", "SimulationResult", "summarize"]

_NOISE_BLOCKS = 20


@dataclass(frozen=True)
class KvCacheReport:
    """One replica's KV cache over a run: capacity (tokens), peak use (fraction of blocks), preemptions (all replicas)."""

    capacity_tokens: int
    peak_usage: float
    num_preemptions: int


@dataclass(frozen=True)
class SimulationResult:
    """One simulation's numbers. Times at this boundary carry their unit in the name.

    Throughput and the mean batch size are over the steady state (from the first finish to the last
    admission: ramp-up and drain excluded) when the run has one. TPOT is per request, (finish - first token) / (output tokens - 1); ITL is the gap between successive
    chunks a request receives (a speculative step delivers several tokens in one chunk), as
    `vllm bench serve` measures it. Acceptance is in vLLM's units: mean acceptance length includes the
    bonus token. ``speedup_vs_no_spec`` is the throughput ratio over the same requests served without
    speculation (in an open loop below saturation both serve the offered load, so look at
    ``tpot_speedup_vs_no_spec``, the ratio of median TPOTs). ``acceptance_per_position`` is unconditional (what vLLM logs as "Per-position
    acceptance rate"); ``conditional_acceptance_per_position`` divides consecutive positions.
    """

    throughput_tokens_per_s: float
    throughput_stderr_tokens_per_s: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    mean_acceptance_length: float | None
    acceptance_per_position: list[float]
    conditional_acceptance_per_position: list[float]
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    speedup_vs_no_spec: float | None
    tpot_speedup_vs_no_spec: float | None
    baseline_throughput_tokens_per_s: float | None
    baseline_tpot_p50_ms: float | None
    mean_batch_size: float
    mean_step_ms: float
    step_time_share: dict[str, float]
    num_requests: int
    output_tokens: int
    simulated_time_s: float
    simulated_steps: int
    truncated: bool
    wall_time_s: float
    kernel_wall_time_s: float
    synthesis_wall_time_s: float
    num_replicas: int = 1
    kv_cache_tokens: int | None = None
    kv_cache_peak_usage: float | None = None
    num_preemptions: int = 0
    kv_cache_bound_steps: int = 0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _percentile_ms(values: np.ndarray, q: float) -> float:
    values = values[np.isfinite(values)]
    return float(np.percentile(values, q) * 1e3) if len(values) else float("nan")


def _steady_window(trace: LoopTrace) -> np.ndarray:
    """Steps of the steady state: after the first request finishes (the batch has filled) and up to the
    last admission (after it the batch drains). The whole run when that window is too short to measure."""
    ends = np.asarray(trace.step_end_s)
    if trace.first_finish_s is not None and trace.last_admission_s is not None:
        steady = np.flatnonzero((ends > trace.first_finish_s) & (ends <= trace.last_admission_s))
        if len(steady) >= 2 * _NOISE_BLOCKS:
            return steady
    return np.arange(len(ends))


def _throughput_and_noise(trace: LoopTrace) -> tuple[float, float]:
    """Output tokens per second over the steady state, and its standard error from batch means over
    contiguous blocks of steps (the blocks are long enough to be nearly independent)."""
    ends = np.asarray(trace.step_end_s)
    if len(ends) == 0:
        return 0.0, 0.0
    tokens = np.asarray(trace.step_tokens, dtype=np.float64)
    starts = np.concatenate([[float(np.nanmin(trace.arrival_s))], ends[:-1]])
    window = _steady_window(trace)
    span = ends[window[-1]] - starts[window[0]]
    throughput = float(tokens[window].sum() / span) if span > 0 else 0.0
    if len(window) < 2 * _NOISE_BLOCKS:
        return throughput, throughput  # too few steps to tell noise from signal: say so loudly
    block_rates = []
    for block in np.array_split(window, _NOISE_BLOCKS):
        block_span = ends[block[-1]] - starts[block[0]]
        if block_span > 0:
            block_rates.append(tokens[block].sum() / block_span)
    stderr = float(np.std(block_rates, ddof=1) / np.sqrt(len(block_rates))) if len(block_rates) > 1 else throughput
    return throughput, stderr


def _tpot_s(trace: LoopTrace) -> np.ndarray:
    """Per finished request: (finish - first token) / (output tokens - 1), NaN for one-token outputs."""
    finished = np.isfinite(trace.finish_s)
    decode_tokens = trace.output_tokens[finished] - 1
    decode_time = trace.finish_s[finished] - trace.first_token_s[finished]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(decode_tokens > 0, decode_time / np.maximum(decode_tokens, 1), np.nan)


def summarize(
    trace: LoopTrace,
    *,
    baseline: LoopTrace | None,
    wall_time_s: float,
    kernel_wall_time_s: float,
    synthesis_wall_time_s: float,
    num_replicas: int = 1,
    kv_cache: KvCacheReport | None = None,
) -> SimulationResult:
    """Turn a trace (and the same workload's no-speculation trace) into a ``SimulationResult``."""
    throughput, stderr = _throughput_and_noise(trace)
    finished = np.isfinite(trace.finish_s)
    tpot = _tpot_s(trace)
    gaps = np.concatenate(trace.chunk_gaps_s) if trace.chunk_gaps_s else np.zeros(0)
    ttft = trace.first_token_s - trace.arrival_s
    unconditional = (trace.accepted_per_position / trace.num_drafts).tolist() if trace.num_drafts else []
    conditional = []
    previous = 1.0
    for rate in unconditional:
        conditional.append(rate / previous if previous > 0 else 0.0)
        previous = rate
    accepted = int(trace.accepted_per_position.sum())
    baseline_throughput = _throughput_and_noise(baseline)[0] if baseline is not None else None
    baseline_tpot_ms = _percentile_ms(_tpot_s(baseline), 50) if baseline is not None else None
    tpot_p50_ms = _percentile_ms(tpot, 50)
    breakdown = trace.step_breakdown_s
    total_step_s = float(breakdown.sum())
    names = ("drafting", "verification", "sampling", "overhead", "prefill")
    steps = max(trace.simulated_steps, 1)
    return SimulationResult(
        throughput_tokens_per_s=throughput,
        throughput_stderr_tokens_per_s=stderr,
        tpot_p50_ms=tpot_p50_ms,
        tpot_p99_ms=_percentile_ms(tpot, 99),
        itl_p50_ms=_percentile_ms(gaps, 50),
        itl_p99_ms=_percentile_ms(gaps, 99),
        ttft_p50_ms=_percentile_ms(ttft, 50),
        ttft_p99_ms=_percentile_ms(ttft, 99),
        mean_acceptance_length=1.0 + accepted / trace.num_drafts if trace.num_drafts else None,
        acceptance_per_position=unconditional,
        conditional_acceptance_per_position=conditional,
        num_drafts=trace.num_drafts,
        num_draft_tokens=trace.num_draft_tokens,
        num_accepted_tokens=accepted,
        speedup_vs_no_spec=throughput / baseline_throughput if baseline_throughput else None,
        tpot_speedup_vs_no_spec=baseline_tpot_ms / tpot_p50_ms if baseline_tpot_ms and tpot_p50_ms > 0 else None,
        baseline_throughput_tokens_per_s=baseline_throughput,
        baseline_tpot_p50_ms=baseline_tpot_ms,
        mean_batch_size=float(np.mean(np.asarray(trace.step_batch_size)[_steady_window(trace)]))
        if trace.step_batch_size
        else 0.0,
        mean_step_ms=total_step_s / steps * 1e3,
        step_time_share={name: float(v / total_step_s) if total_step_s else 0.0 for name, v in zip(names, breakdown)},
        num_requests=int(finished.sum()),
        output_tokens=int(np.sum(trace.step_tokens)),
        simulated_time_s=float(trace.step_end_s[-1] - np.nanmin(trace.arrival_s)) if trace.step_end_s else 0.0,
        simulated_steps=trace.simulated_steps,
        truncated=trace.truncated,
        wall_time_s=wall_time_s,
        kernel_wall_time_s=kernel_wall_time_s,
        synthesis_wall_time_s=synthesis_wall_time_s,
        num_replicas=num_replicas,
        kv_cache_tokens=kv_cache.capacity_tokens if kv_cache is not None else None,
        kv_cache_peak_usage=kv_cache.peak_usage if kv_cache is not None else None,
        num_preemptions=kv_cache.num_preemptions if kv_cache is not None else 0,
        kv_cache_bound_steps=trace.kv_bound_steps,
    )
