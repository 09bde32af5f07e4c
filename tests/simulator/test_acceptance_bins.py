"""A simulation draws from the acceptance bin of its batch size, also when the source's extrapolation
rule differs from its bins' (the bin is then a copy under the source's rule, found by position)."""

from spectune.config import SimulationDocument
from spectune.config._simulation import AcceptanceSource
from spectune.simulator import simulate

BINS = [
    {"min_running": 1, "max_running": 4, "conditional_rates": [0.9, 0.8]},
    {"min_running": 5, "max_running": 64, "conditional_rates": [0.6, 0.5]},
]


def test_the_bin_is_found_by_position_and_extrapolates_by_the_sources_rule():
    source = AcceptanceSource.model_validate(
        {"conditional_rates": [0.7], "extrapolation": "geometric_decay", "bins": BINS}
    )
    assert [source.bin_index(b) for b in (1, 4, 5, 300)] == [0, 0, 1, 1]
    chosen = source.rates_for_batch(2)
    assert chosen.conditional() == [0.9, 0.8] and chosen.extrapolation == "geometric_decay"
    assert AcceptanceSource.model_validate({"conditional_rates": [0.7]}).bin_index(8) is None


def test_a_simulation_with_bins_under_another_extrapolation_rule_runs():
    document = SimulationDocument.model_validate({
        "kind": "simulation", "name": "bins",
        "speculative": {"method": "eagle3", "num_speculative_tokens": 3},
        "acceptance": {"conditional_rates": [0.7], "extrapolation": "geometric_decay", "bins": BINS},
        "workload": {"concurrency": 2, "num_requests": 4, "prompt_tokens": 8, "output_tokens": 8, "temperature": 0.0,
                     "vocab_size": 128},
        "hardware": "h100-sxm", "target_model": "llama-3.1-8b",
        "simulation": {"bank_rows": 16, "baseline": False},
    }, context={"notices": []})  # fmt: skip
    result = simulate(document)
    assert result.num_drafts > 0
