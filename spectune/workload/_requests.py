"""Requests of a workload, drawn once per simulation, deterministic by seed.

Each random quantity (arrival gaps, prompt lengths, output lengths, temperatures) has its own stream
spawned from the seed, so changing how one is drawn leaves the others unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spectune.config import LengthDistribution, WorkloadConfig

__all__ = ["RequestTable", "draw_lengths", "generate_requests"]


@dataclass(frozen=True)
class RequestTable:
    """The requests of one simulation, as arrays over request index (length N, in arrival order).

    arrival_s          float64 [N]  Poisson arrival times in seconds from the start (open loop), or
                                    all 0.0 (closed loop: the simulator admits request i as soon
                                    as a slot frees)
    prompt_tokens      int64   [N]  prompt length (tokens)
    output_tokens      int64   [N]  tokens to generate, the first one included
    temperature_index  int64   [N]  index into ``temperatures``
    temperatures       the distinct temperatures of the mix, as ``WorkloadConfig.temperature_mix[0]``
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    temperature_index: np.ndarray
    temperatures: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.output_tokens)

    @property
    def temperature(self) -> np.ndarray:
        """float64 [N]: each request's sampling temperature (0 = greedy)."""
        return np.asarray(self.temperatures, dtype=np.float64)[self.temperature_index]


def generate_requests(workload: WorkloadConfig, *, seed: int) -> RequestTable:
    """The workload's ``num_requests`` requests, deterministic by ``seed`` (a non-negative integer)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    arrival_rng, prompt_rng, output_rng, temperature_rng, trace_rng = (
        np.random.default_rng(stream) for stream in np.random.SeedSequence(seed).spawn(5)
    )
    count = workload.num_requests
    if workload.arrival_rate_per_s is not None:
        arrivals = np.cumsum(arrival_rng.exponential(1.0 / workload.arrival_rate_per_s, size=count))
    else:
        arrivals = np.zeros(count)
    if workload.lengths_csv is not None:
        pairs = np.asarray(workload.lengths_csv.pairs, dtype=np.int64)
        if workload.lengths_csv.order == "sequential":
            rows = np.arange(count) % len(pairs)
        else:
            rows = trace_rng.integers(0, len(pairs), size=count)
        prompts, outputs = pairs[rows, 0], pairs[rows, 1]
    else:
        assert workload.prompt_tokens is not None and workload.output_tokens is not None  # the model's rule
        prompts = draw_lengths(workload.prompt_tokens, count, prompt_rng)
        outputs = draw_lengths(workload.output_tokens, count, output_rng)
    temperatures, shares = workload.temperature_mix
    chosen = temperature_rng.choice(len(temperatures), size=count, p=np.asarray(shares))
    return RequestTable(
        arrival_s=arrivals.astype(np.float64),
        prompt_tokens=prompts.astype(np.int64),
        output_tokens=outputs.astype(np.int64),
        temperature_index=chosen.astype(np.int64),
        temperatures=temperatures,
    )


def draw_lengths(length: int | LengthDistribution, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` token lengths (int64), fixed or drawn, rounded and clipped to the distribution's bounds."""
    if isinstance(length, int):
        return np.full(count, length, dtype=np.int64)
    low, high = length.min_tokens, length.upper_tokens
    if length.distribution == "uniform":
        return rng.integers(low, high + 1, size=count, dtype=np.int64)
    mean, std = length.mean_tokens, length.std_tokens
    assert mean is not None and std is not None  # the model requires both for normal and lognormal
    if length.distribution == "normal":
        draws = rng.normal(mean, std, size=count)
    else:
        sigma = math.sqrt(math.log1p((std / mean) ** 2))
        draws = rng.lognormal(math.log(mean) - sigma**2 / 2, sigma, size=count)
    return np.clip(np.rint(draws), low, high).astype(np.int64)
