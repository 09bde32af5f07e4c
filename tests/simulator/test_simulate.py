"""The simulator against closed forms and its own invariants."""

import math

import numpy as np
import pytest

from spectune.simulator import simulate


def _closed_form_tokens_per_step(alpha: float, k: int) -> float:
    return (1 - alpha ** (k + 1)) / (1 - alpha)


@pytest.mark.parametrize("draws", ["generator", "counter"])
@pytest.mark.parametrize(("alpha", "k", "temperature"), [(0.7, 3, 0.0), (0.8, 4, 0.8), (0.5, 2, 1.0)])
def test_tokens_per_step_match_the_closed_form(simulation_document, alpha, k, temperature, draws):
    """With the CPU's draws (each simulation's generator) and with CUDA's (each request's counter-based
    stream, tried here on the CPU)."""
    document = simulation_document(
        speculative={"method": "eagle3", "num_speculative_tokens": k},
        acceptance={"conditional_rates": [alpha] * k},
        workload={"concurrency": 32, "num_requests": 128, "output_tokens": 96, "temperature": temperature},
    )
    result = simulate(document, baseline=False, draws=draws)
    expected = _closed_form_tokens_per_step(alpha, k)
    # Each draft is one trial of a truncated geometric; its variance bounds the sampling error.
    variance = sum((2 * i + 1) * alpha**i for i in range(1, k + 1)) - (expected - 1) ** 2
    tolerance = 5 * math.sqrt(max(variance, 1e-9) / result.num_drafts) + 0.01  # + calibration granularity
    assert result.mean_acceptance_length == pytest.approx(expected, abs=tolerance)
    conditional = result.conditional_acceptance_per_position
    assert len(conditional) == k
    assert all(abs(rate - alpha) < 0.05 for rate in conditional), conditional


def test_synthetic_mode_reproduces_its_rates(simulation_document):
    rates = [0.9, 0.5, 0.2]
    document = simulation_document(
        speculative={
            "method": "eagle3",
            "num_speculative_tokens": 3,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_rates": rates,
        },
        acceptance=None,
        workload={"temperature": 0.8},
    )
    result = simulate(document, baseline=False)
    standard_error = max(math.sqrt(0.25 / result.num_drafts), 1e-3)
    for measured, expected in zip(result.acceptance_per_position, rates):
        assert measured == pytest.approx(expected, abs=5 * standard_error)


def test_same_seed_same_numbers_and_other_seed_differs(simulation_document):
    first = simulate(simulation_document(workload={"temperature": 0.8}), baseline=False).to_dict()
    again = simulate(simulation_document(workload={"temperature": 0.8}), baseline=False).to_dict()
    other = simulate(simulation_document(seed=1, workload={"temperature": 0.8}), baseline=False).to_dict()
    for volatile in ("wall_time_s", "kernel_wall_time_s", "synthesis_wall_time_s"):
        first.pop(volatile), again.pop(volatile), other.pop(volatile)
    assert first == again
    assert first != other


def test_every_request_finishes_with_exactly_its_output_tokens(simulation_document):
    document = simulation_document(
        workload={"output_tokens": {"distribution": "uniform", "min_tokens": 1, "max_tokens": 80}}
    )
    result = simulate(document, baseline=True)
    assert result.num_requests == 64
    assert not result.truncated
    from spectune.workload import generate_requests

    assert result.output_tokens == int(generate_requests(document.workload, seed=0).output_tokens.sum())


def test_speculation_beats_plain_decoding_at_batch_one_and_acceptance_counts_match(simulation_document):
    document = simulation_document(workload={"concurrency": 1, "num_requests": 8, "output_tokens": 128})
    result = simulate(document)
    assert result.speedup_vs_no_spec is not None and result.speedup_vs_no_spec > 1.3
    assert result.num_draft_tokens == 3 * result.num_drafts
    assert result.num_accepted_tokens == pytest.approx((result.mean_acceptance_length - 1) * result.num_drafts)


def test_best_k_falls_as_the_batch_grows(simulation_document):
    """Under the roofline, verification of B·(K+1) tokens stops being free past the ridge point."""
    best = {}
    for batch in (1, 256):
        throughput = {}
        for k in (1, 2, 4, 6):
            document = simulation_document(
                speculative={"method": "eagle3", "num_speculative_tokens": k},
                acceptance={"conditional_rates": [0.75]},
                workload={
                    "concurrency": batch,
                    "num_requests": max(2 * batch, 8),
                    "output_tokens": 48,
                    "prompt_tokens": 16,
                    "max_num_batched_tokens": 65536,
                },
            )
            throughput[k] = simulate(document, baseline=False).throughput_tokens_per_s
        best[batch] = max(throughput, key=throughput.get)
    assert best[256] < best[1], best


def test_schedule_row_sets_k_per_batch_size(simulation_document):
    document = simulation_document(
        speculative={
            "method": "eagle3",
            "num_speculative_tokens": 4,
            "num_speculative_tokens_per_batch_size": [[1, 8, 4], [9, 64, 0]],
        },
        workload={"concurrency": 16},
    )
    result = simulate(document, baseline=False)
    # Speculation runs only while the decode batch is <= 8 (the ramp-up); in steady state K = 0.
    assert result.num_drafts < 0.2 * result.output_tokens
    assert result.num_draft_tokens == 4 * result.num_drafts


def test_open_loop_throughput_follows_the_offered_load(simulation_document):
    document = simulation_document(
        workload={
            "concurrency": None,
            "arrival_rate_per_s": 5.0,
            "num_requests": 200,
            "output_tokens": 32,
            "max_num_seqs": 64,
        }
    )
    result = simulate(document, baseline=False)
    offered = 5.0 * 32
    assert result.throughput_tokens_per_s == pytest.approx(offered, rel=0.25)
    assert np.isfinite(result.ttft_p99_ms)


def test_measured_step_times_drive_the_clock(simulation_document, tmp_path):
    """With a measured table, every decode step costs exactly the table's time at (batch, K)."""
    rows = ["batch_size,num_speculative_tokens,step_time_ms"]
    rows += [f"{batch},{k},{20.0 if k == 3 else 10.0}" for batch in (1, 16) for k in (0, 3)]
    (tmp_path / "times.csv").write_text("\n".join(rows) + "\n")
    document = simulation_document(
        workload={"concurrency": 8, "num_requests": 8, "prompt_tokens": 1, "output_tokens": 64},
        cost_model={"method": "measured", "step_times": str(tmp_path / "times.csv")},
    )
    result = simulate(document)
    # One prefill-only step first (costed by the roofline, well under one decode step), then decode steps.
    prefill_step_s = result.simulated_time_s - (result.simulated_steps - 1) * 0.020
    assert 0.0 < prefill_step_s < 0.020
    assert result.baseline_tpot_p50_ms == pytest.approx(10.0, rel=1e-6)


@pytest.mark.parametrize("num_gpus", [1, 2])
def test_speculation_off_is_the_baseline_a_speculative_config_is_compared_with(simulation_document, num_gpus):
    """``speculative: null`` runs the plain-decoding path: no drafts, and the very numbers the baseline
    of a speculative document on the same deployment and requests reports (one replica, or two)."""
    workload = {"concurrency": 8, "num_requests": 48, "output_tokens": 48}
    speculative = simulate(simulation_document(workload=workload, hardware={"gpu": "h100-sxm", "num_gpus": num_gpus}))
    off = simulate(
        simulation_document(
            speculative=None, acceptance=None, workload=workload, hardware={"gpu": "h100-sxm", "num_gpus": num_gpus}
        )
    )
    assert (off.num_drafts, off.num_draft_tokens, off.mean_acceptance_length, off.acceptance_per_position) == (
        0,
        0,
        None,
        [],
    )
    assert off.step_time_share["drafting"] == 0.0 and off.num_replicas == num_gpus
    assert off.throughput_tokens_per_s == speculative.baseline_throughput_tokens_per_s
    assert off.tpot_p50_ms == speculative.baseline_tpot_p50_ms
    assert (off.speedup_vs_no_spec, off.tpot_speedup_vs_no_spec) == (1.0, 1.0)  # its own baseline
    assert (
        simulate(
            simulation_document(speculative=None, acceptance=None, workload=workload), baseline=False
        ).speedup_vs_no_spec
        is None
    )


def test_a_cuda_device_the_machine_lacks_is_refused_naming_the_field(monkeypatch):
    import torch

    from spectune.errors import SpectuneError
    from spectune.simulator._backend import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(SpectuneError, match=r"simulation.device: 'cuda:2' .* has 2 CUDA devices \(cuda:0 to cuda:1\)"):
        resolve_device("cuda:2")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(SpectuneError, match=r"has 1 CUDA device \(cuda:0\)"):
        resolve_device("cuda:1")


def _two_gpus() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() >= 2


@pytest.mark.skipif(not _two_gpus(), reason="needs two CUDA devices")
def test_a_simulation_on_the_second_gpu_gives_the_first_ones_numbers(simulation_document):
    # Triton launches and CUDA graphs capture on the current device: the simulation makes its own current.
    import torch

    current = torch.cuda.current_device()
    results = []
    for device in ("cuda:0", "cuda:1"):
        document = simulation_document(simulation={"device": device, "bank_rows": 256}, workload={"temperature": 0.8})
        result = simulate(document, baseline=False).to_dict()
        for volatile in ("wall_time_s", "kernel_wall_time_s", "synthesis_wall_time_s"):
            result.pop(volatile)
        results.append(result)
    assert results[0] == results[1]
    assert torch.cuda.current_device() == current
