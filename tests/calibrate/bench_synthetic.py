"""Seeded ``vllm bench serve --save-result`` files, generated from a known step-time surface and acceptance.

``bench_result`` runs a small engine at a fixed concurrency: every step, each decoding request drafts
K tokens, accepts a prefix of them with the given conditional rates (drawn per request and step) and
emits the accepted tokens plus one, cut at its output length (``--ignore-eos``); the step lasts the
surface's time at the number of decoding requests, with Gaussian jitter. A finished request's slot
takes the next prompt, whose first token comes at the end of the step it is admitted in. The file has
the fields vLLM writes (per-request latencies summarised the way vLLM summarises them) and the exact
counter differences; ``BenchTruth`` keeps the counts, so a test can check what calibration recovers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

StepSurface = Callable[[int, int], float]  # (decoding requests, K) -> ms


@dataclass(frozen=True)
class BenchTruth:
    """What produced a file: its point and exact counts (vLLM units, bonus not counted)."""

    concurrency: int
    k: int
    num_drafts: int
    accepted_per_position: tuple[int, ...]


def default_surface(batch_size: int, k: int) -> float:
    """A roofline-like step time (ms): flat until B*(K+1) passes a ridge, then linear; drafting costs per K."""
    tokens = batch_size * (k + 1)
    return 6.0 + 0.45 * k + 0.035 * max(tokens - 48, 0) + 0.004 * tokens


def bench_result(
    *,
    concurrency: int,
    k: int,
    conditional_rates: Sequence[float],
    surface: StepSurface = default_surface,
    num_prompts: int | None = None,
    input_len: int = 512,
    output_len: int = 128,
    jitter: float = 0.03,
    seed: int = 0,
) -> tuple[dict, BenchTruth]:
    """One run's result JSON object and its truth."""
    rng = np.random.default_rng(seed)
    num_prompts = num_prompts if num_prompts is not None else 4 * concurrency
    rates = np.asarray(conditional_rates[:k], dtype=np.float64)
    slot_request = np.full(concurrency, -1)
    tokens = np.zeros(num_prompts, dtype=np.int64)
    sent, first, last_chunk, finish = (np.full(num_prompts, np.nan) for _ in range(4))
    itls: list[float] = []
    accepted_per_position = np.zeros(k, dtype=np.int64)
    num_drafts = 0
    clock = 0.0
    next_request = 0
    while True:
        for slot in np.flatnonzero(slot_request < 0):
            if next_request < num_prompts:
                slot_request[slot] = next_request
                sent[next_request] = clock
                next_request += 1
        active = slot_request[slot_request >= 0]
        if active.size == 0:
            break
        decoding = active[~np.isnan(first[active])]
        admitted = active[np.isnan(first[active])]
        duration = surface(max(decoding.size, 1), k) * max(1.0 + jitter * rng.standard_normal(), 0.5)
        clock += duration
        if decoding.size:
            passed = rng.random((decoding.size, k)) < rates if k else np.zeros((decoding.size, 0), dtype=bool)
            accepted = np.cumprod(passed, axis=1).sum(axis=1) if k else np.zeros(decoding.size, dtype=np.int64)
            num_drafts += decoding.size if k else 0
            for i in range(k):
                accepted_per_position[i] += int((accepted > i).sum())
            tokens[decoding] = np.minimum(tokens[decoding] + accepted + 1, output_len)
            itls.extend((clock - last_chunk[decoding]).tolist())
            last_chunk[decoding] = clock
        first[admitted] = clock
        last_chunk[admitted] = clock
        tokens[admitted] = 1
        done = active[tokens[active] >= output_len]
        finish[done] = clock
        slot_request[np.isin(slot_request, done)] = -1
    ttft = first - sent
    tpot = (finish - first) / (output_len - 1)
    e2el = finish - sent
    result: dict = {
        "date": "20261201-000000",
        "backend": "vllm",
        "model_id": "synthetic",
        "num_prompts": num_prompts,
        "max_concurrency": concurrency,
        "duration": clock / 1000.0,
        "completed": num_prompts,
        "failed": 0,
        "total_input_tokens": num_prompts * input_len,
        "total_output_tokens": num_prompts * output_len,
        "request_throughput": num_prompts / (clock / 1000.0),
        "output_throughput": num_prompts * output_len / (clock / 1000.0),
    }
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", np.asarray(itls)), ("e2el", e2el)):
        result[f"mean_{name}_ms"] = float(np.mean(values))
        result[f"median_{name}_ms"] = float(np.median(values))
        result[f"std_{name}_ms"] = float(np.std(values))
        result[f"p99_{name}_ms"] = float(np.percentile(values, 99))
    if k:
        accepted_total = int(accepted_per_position.sum())
        result |= {
            "spec_decode_acceptance_rate": 100.0 * accepted_total / (k * num_drafts),
            "spec_decode_acceptance_length": 1.0 + accepted_total / num_drafts,
            "spec_decode_num_drafts": num_drafts,
            "spec_decode_draft_tokens": k * num_drafts,
            "spec_decode_accepted_tokens": accepted_total,
            "spec_decode_per_position_acceptance_rates": [int(n) / num_drafts for n in accepted_per_position],
        }
    return result, BenchTruth(concurrency, k, num_drafts, tuple(int(n) for n in accepted_per_position))


def write_bench_results(
    directory: Path,
    *,
    concurrencies: Sequence[int],
    ks: Sequence[int],
    conditional_rates: Sequence[float],
    surface: StepSurface = default_surface,
    seed: int = 0,
    **options,
) -> list[BenchTruth]:
    """One file per (K, concurrency) under ``directory``/k{K}/, named as measure.sh names them."""
    truths = []
    for k in ks:
        (directory / f"k{k}").mkdir(parents=True, exist_ok=True)
        for concurrency in concurrencies:
            result, truth = bench_result(
                concurrency=concurrency,
                k=k,
                conditional_rates=conditional_rates,
                surface=surface,
                seed=seed + 1000 * k + concurrency,
                **options,
            )
            (directory / f"k{k}" / f"k{k}-c{concurrency}.json").write_text(json.dumps(result), encoding="utf-8")
            truths.append(truth)
    return truths
