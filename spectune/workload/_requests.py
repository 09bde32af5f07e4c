"""Requests of a workload, drawn once per simulation, deterministic by seed.

Each random quantity (arrival gaps, prompt lengths, output lengths, temperatures) has its own stream
spawned from the seed, so changing how one is drawn leaves the others unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spectune.config import LengthDistribution, WorkloadConfig

__all__ = ["Request", "generate_requests"]


@dataclass(frozen=True)
class Request:
    """One request of the workload.

    ``arrival_time_s`` is the Poisson arrival time in seconds from the start (open loop) or 0.0 for
    every request (closed loop: the simulator admits request i as soon as a slot frees).
    ``output_tokens`` counts every generated token, the first one included. ``temperature_index``
    points into ``WorkloadConfig.temperature_mix[0]``.
    """

    request_id: int
    arrival_time_s: float
    prompt_tokens: int
    output_tokens: int
    temperature: float
    temperature_index: int


def generate_requests(workload: WorkloadConfig, *, seed: int) -> list[Request]:
    """The workload's ``num_requests`` requests, in arrival order (request_id = position)."""
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
    return [
        Request(
            request_id=i,
            arrival_time_s=float(arrivals[i]),
            prompt_tokens=int(prompts[i]),
            output_tokens=int(outputs[i]),
            temperature=temperatures[int(chosen[i])],
            temperature_index=int(chosen[i]),
        )
        for i in range(count)
    ]


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
