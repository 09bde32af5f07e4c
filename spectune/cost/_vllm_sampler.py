"""What vLLM's own rejection sampler costs: its measured times, interpolated in R, K and V.

The user serves with vLLM's sampler, not spectune's kernels, so a step is charged what vLLM's takes.
The table holds vLLM 0.33.0's ``rejection_sample`` on an H200 (fp32 target logits, V = 128256,
temperature 0.8 for the non-greedy columns; CUDA-graph replays with L2 flushed, median, 2026-11-29),
in microseconds, at R = 1, 64, 256 requests and K = 3, 7 draft tokens:

=====================  ==========  ===========
column                 K = 3       K = 7
=====================  ==========  ===========
greedy                 14, 55, 145  15, 88, 265
standard (one-hot)     14, 81, 246  15, 114, 371
standard, draft logits 18, 108, 355 22, 178, 619
block (one-hot)        17, 84, 250  23, 122, 379
block, draft logits    25, 150, 494 32, 280, 1034
synthetic              14, 80, 245  16, 113, 370
=====================  ==========  ===========

Between table points the time is linear in R (and linear past R = 256 along the last segment) and
linear in K (extrapolated along the K = 3..7 slope, no lower than the R = 1, K = 3 time, which is the
launch latency of 4-6 dependent kernels and does not scale). What lies above that floor scales with
the bytes read: with V / 128256 (the draft columns' extra over one-hot with the drafter's vocabulary)
and with the H200's HBM bandwidth over the GPU's.

Plain decoding (K = 0, no drafts) is charged the greedy or the standard column at K = 0, the
sampler's one read of R rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["SamplerWork", "VllmSamplerTimes"]

_REFERENCE_VOCAB = 128256
_REFERENCE_BANDWIDTH_BYTES_PER_S = 4.8e12  # H200 datasheet HBM bandwidth
_TABLE_R = (1, 64, 256)
_TABLE_K = (3, 7)
# column -> (times at K = 3 for R = 1, 64, 256; times at K = 7 for the same R), microseconds
_TABLE_US: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "greedy": ((14, 55, 145), (15, 88, 265)),
    "standard": ((14, 81, 246), (15, 114, 371)),
    "standard_draft": ((18, 108, 355), (22, 178, 619)),
    "block": ((17, 84, 250), (23, 122, 379)),
    "block_draft": ((25, 150, 494), (32, 280, 1034)),
    "synthetic": ((14, 80, 245), (16, 113, 370)),
}


@dataclass(frozen=True)
class SamplerWork:
    """What the sampler is asked to do in every step of one simulation.

    ``rejection_sample_method``: vLLM's verification rule (a drafter without a distribution falls back
    to 'standard' before it gets here). ``all_greedy``: every request samples at temperature 0, so vLLM
    runs only its greedy path.
    """

    rejection_sample_method: Literal["standard", "block", "synthetic"] = "standard"
    all_greedy: bool = False


def _along_r(times: tuple[float, float, float], requests: float) -> float:
    (r0, r1, r2), (t0, t1, t2) = _TABLE_R, times
    if requests <= r1:
        return t0 + (requests - r0) / (r1 - r0) * (t1 - t0)
    return t1 + (requests - r1) / (r2 - r1) * (t2 - t1)


class VllmSamplerTimes:
    """vLLM's rejection-sampler time for a step (seconds), from the measured H200 table."""

    def __init__(self, work: SamplerWork, *, vocab_size: int, hbm_bandwidth_bytes_per_s: float) -> None:
        self._work = work
        self._vocab_scale = vocab_size / _REFERENCE_VOCAB
        self._bandwidth_scale = _REFERENCE_BANDWIDTH_BYTES_PER_S / hbm_bandwidth_bytes_per_s

    def column(self, num_speculative_tokens: int, *, draft_probabilities: bool) -> str:
        """The table column a step uses."""
        if self._work.all_greedy:
            return "greedy"
        if num_speculative_tokens == 0:
            return "standard"
        method = self._work.rejection_sample_method
        if method == "synthetic":
            return "synthetic"
        return f"{method}_draft" if draft_probabilities else method

    def _table_us(self, column: str, requests: int, num_speculative_tokens: int) -> float:
        at_k3, at_k7 = (_along_r(times, requests) for times in _TABLE_US[column])
        k3, k7 = _TABLE_K
        floor = _TABLE_US[column][0][0]
        return max(at_k3 + (num_speculative_tokens - k3) / (k7 - k3) * (at_k7 - at_k3), floor)

    def time_s(
        self,
        batch_size: int,
        num_speculative_tokens: int,
        *,
        draft_probabilities: bool = False,
        draft_vocab_size: int = 0,
    ) -> float:
        """Seconds vLLM's sampler takes for ``batch_size`` requests verifying K drafts each."""
        column = self.column(num_speculative_tokens, draft_probabilities=draft_probabilities)
        base_column = column.removesuffix("_draft")
        floor = _TABLE_US[base_column][0][0]
        base = self._table_us(base_column, batch_size, num_speculative_tokens)
        microseconds = floor + (base - floor) * self._vocab_scale * self._bandwidth_scale
        if column != base_column:  # reading draft logits: the extra scales with the draft vocabulary
            extra = self._table_us(column, batch_size, num_speculative_tokens) - base
            microseconds += max(extra, 0.0) * (draft_vocab_size / _REFERENCE_VOCAB) * self._bandwidth_scale
        return microseconds * 1e-6
