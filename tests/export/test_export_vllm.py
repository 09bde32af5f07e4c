"""vLLM artefacts: real field names and values, configs that validate, the synthetic forms."""

import json
from dataclasses import replace

from typer.testing import CliRunner

from spectune.cli import app
from spectune.config import SpeculativeConfig
from spectune.config._speculative import METHODS
from spectune.export import write_artefacts
from spectune.export._artefacts import recommended_yaml
from spectune.export._trtllm import trtllm_yaml
from spectune.export._vllm import vllm_speculative_config, vllm_synthetic_config

# vLLM's SpeculativeConfig field names (vllm/config/speculative.py) that a recommendation may carry.
VLLM_FIELDS = {
    "method", "model", "num_speculative_tokens", "rejection_sample_method", "draft_sample_method",
    "num_speculative_tokens_per_batch_size", "draft_tensor_parallel_size", "prompt_lookup_min",
    "prompt_lookup_max", "synthetic_acceptance_rates", "synthetic_acceptance_length", "quantization",
    "revision", "max_model_len", "enforce_eager", "parallel_drafting",
}  # fmt: skip


def test_vllm_json_has_only_vllm_field_names_and_values(outcome):
    config = vllm_speculative_config(outcome.recommendation)
    assert set(config) <= VLLM_FIELDS
    assert set(config) <= set(SpeculativeConfig.model_fields)
    assert config["method"] in METHODS
    assert config["rejection_sample_method"] in ("standard", "block")
    assert config["draft_sample_method"] in ("greedy", "probabilistic")
    rows = config["num_speculative_tokens_per_batch_size"]
    assert rows[0][0] == 1 and rows[-1][1] == outcome.space.max_batch_size
    assert all(next_row[0] == row[1] + 1 for row, next_row in zip(rows, rows[1:]))
    assert max(k for _, _, k in rows) == config["num_speculative_tokens"]
    json.dumps(config)  # plain JSON types only


def test_every_written_config_passes_spectune_validate(outcome, tmp_path):
    written = write_artefacts(outcome, tmp_path).written
    names = {p.name for p in written}
    expected = {"recommended.yaml", "vllm.json", "vllm-synthetic.json", "sglang.txt", "trials.csv", "report.html"}
    expected |= {"sglang-adaptive.json"}  # eagle3's K table, pinned
    assert names == expected | ({"trtllm.yaml"} if trtllm_yaml(outcome.recommendation) is not None else set())
    result = CliRunner().invoke(
        app,
        [
            "validate",
            "--strict",
            str(tmp_path / "recommended.yaml"),
            str(tmp_path / "vllm.json"),
            str(tmp_path / "vllm-synthetic.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "3 files checked: 3 valid, 0 invalid (0 errors, 0 warnings)"


def test_recommended_yaml_is_the_same_config_as_vllm_json(outcome):
    import yaml

    from_yaml = yaml.safe_load(recommended_yaml(outcome))
    assert SpeculativeConfig.model_validate(from_yaml) == SpeculativeConfig.model_validate(
        vllm_speculative_config(outcome.recommendation)
    )


def test_a_single_k_everywhere_needs_no_table(outcome):
    recommendation = replace(outcome.recommendation, schedule=((1, 256, 3),), num_speculative_tokens=3)
    config = vllm_speculative_config(recommendation)
    assert "num_speculative_tokens_per_batch_size" not in config and config["num_speculative_tokens"] == 3


def test_synthetic_forms_pin_the_simulated_acceptance(outcome):
    recommendation = outcome.recommendation
    current = vllm_synthetic_config(recommendation, "current")
    legacy = vllm_synthetic_config(recommendation, "legacy")
    k = recommendation.num_speculative_tokens
    rates = current["synthetic_acceptance_rates"]
    assert current["rejection_sample_method"] == legacy["rejection_sample_method"] == "synthetic"
    assert len(rates) == k and all(a >= b for a, b in zip(rates, rates[1:]))
    chosen = next(c for c in recommendation.choices if c.num_speculative_tokens == k)
    assert rates == [round(r, 4) for r in chosen.evaluation.metrics.acceptance_per_position[:k]]
    assert "synthetic_acceptance_rates" not in legacy and "draft_sample_method" not in legacy
    assert abs(legacy["synthetic_acceptance_rate"] - sum(rates) / k) < 1e-4
    for config in (current, legacy):
        notices = []
        SpeculativeConfig.model_validate(config, context={"notices": notices})
        # the legacy form validates for servers of March-April 2026, with vLLM 0.33's removal named
        assert [path for path, _ in notices] == ([("synthetic_acceptance_rate",)] if config is legacy else [])
