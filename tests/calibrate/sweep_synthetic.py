"""Seeded ``vllm bench sweep serve`` trees and K-forced bench records, from a known step-time surface.

``forced_record`` is one run of a server with global ``num_speculative_tokens`` G that forces K by a
one-range table: the acceptance of ``bench_synthetic.bench_result`` at K, its per-position rates
padded with zeros to G (vLLM labels one counter per position of G), and the step time of K plus, at
K = 0 with the drafter loaded, ``k0_tax`` of it (the drafter still prefills). ``write_sweep_tree``
lays records out as vLLM 0.33.0's ``vllm/benchmarks/sweep/serve.py`` does: one folder per (serve,
bench) parameter set, ``run={n}.json`` per repeat and ``summary.json`` listing them, each record
updated with ``run_number`` and the serve and bench parameters.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

try:
    from .bench_synthetic import bench_result, default_surface
except ImportError:  # imported as a top-level module by tests/export/fake_vllm.py
    from bench_synthetic import bench_result, default_surface  # type: ignore[no-redef]

K0_TAX = 0.08  # the drafter's prefill and lookahead at a forced K = 0, as a fraction of the plain step


def forced_record(
    *,
    concurrency: int,
    forced_k: int,
    global_k: int,
    conditional_rates: Sequence[float],
    num_prompts: int,
    input_len: int = 100,
    output_len: int = 64,
    seed: int = 0,
    jitter: float = 0.01,
    k0_tax: float = K0_TAX,
    surface: Callable[[int, int], float] = default_surface,
) -> dict:
    """One K-forced run's bench result (global_k = 0: plain decoding, no drafter)."""
    taxed = k0_tax if forced_k == 0 and global_k > 0 else 0.0
    result, _ = bench_result(
        concurrency=concurrency,
        k=forced_k,
        conditional_rates=conditional_rates,
        surface=lambda b, k: surface(b, k) * (1.0 + taxed),
        num_prompts=num_prompts,
        input_len=input_len,
        output_len=output_len,
        jitter=jitter,
        seed=seed,
    )
    key = "spec_decode_per_position_acceptance_rates"
    if key in result:
        result[key] = result[key] + [0.0] * (global_k - forced_k)
    return result


def speculative_config(forced_k: int, global_k: int, max_num_seqs: int = 256) -> dict:
    return {
        "method": "eagle3",
        "model": "org/eagle3-head",
        "num_speculative_tokens": global_k,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_rates": [round(0.8**i, 4) for i in range(1, global_k + 1)],
        "num_speculative_tokens_per_batch_size": [[1, max_num_seqs, forced_k]],
    }


def write_sweep_tree(
    root: Path,
    *,
    ks: Sequence[int],
    global_k: int,
    concurrencies: Sequence[int],
    conditional_rates: Sequence[float],
    num_runs: int = 3,
    seed: int = 0,
    jitter: float = 0.01,
    spoil: Callable[[int, int, int, dict], None] | None = None,
) -> list[Path]:
    """The tree under ``root`` (an experiment folder); ``spoil(k, concurrency, run, record)`` may edit a record.

    Returns the summary.json files written."""
    summaries = []
    for k in ks:
        serve = {"_benchmark_name": f"k{k}", "speculative_config": speculative_config(k, global_k)}
        for concurrency in concurrencies:
            bench = {
                "_benchmark_name": f"c{concurrency}",
                "max_concurrency": concurrency,
                "num_prompts": 4 * concurrency,
            }
            folder = root / f"SERVE--k{k}-BENCH--c{concurrency}"
            folder.mkdir(parents=True, exist_ok=True)
            records = []
            for run in range(num_runs):
                record = forced_record(
                    concurrency=concurrency,
                    forced_k=k,
                    global_k=global_k,
                    conditional_rates=conditional_rates,
                    num_prompts=4 * concurrency,
                    seed=seed + 10_000 * k + 10 * concurrency + run,
                    jitter=jitter,
                )
                record |= {"run_number": run} | serve | bench
                if spoil is not None:
                    spoil(k, concurrency, run, record)
                (folder / f"run={run}.json").write_text(json.dumps(record, indent=4), encoding="utf-8")
                records.append(record)
            summary = folder / "summary.json"
            summary.write_text(json.dumps(records, indent=4), encoding="utf-8")
            summaries.append(summary)
    return summaries
