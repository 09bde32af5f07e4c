"""A request longer than the model's context is refused at the workload field that asks for it.

Llama-3.1's config.json (meta-llama/Llama-3.1-8B and -70B on Hugging Face) has
``max_position_embeddings: 131072``; vLLM serves that as its default --max-model-len and refuses a
longer prompt. vLLM also refuses a speculative ``max_model_len`` above the target's
(``SpeculativeConfig._maybe_override_draft_max_model_len`` in vllm/config/speculative.py).
"""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spectune.cli import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()

_SIMULATION = """\
kind: simulation
name: long-context
speculative: {method: eagle3, num_speculative_tokens: 2, rejection_sample_method: synthetic,
  synthetic_acceptance_rate: 0.6SPEC_EXTRA}
workload:
  concurrency: 2
  num_requests: 4
  prompt_tokens: PROMPT
  output_tokens: 1024
  temperature: 0.0
  vocab_size: 128
hardware: h100-sxm
target_model: TARGET
"""


def _document(tmp_path: Path, prompt: str = "200000", target: str = "llama-3.1-8b", spec_extra: str = "") -> Path:
    path = tmp_path / "long.yaml"
    path.write_text(_SIMULATION.replace("PROMPT", prompt).replace("TARGET", target).replace("SPEC_EXTRA", spec_extra))
    return path


def _cli(*args: str):
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    return result


@pytest.mark.parametrize("command", ["validate", "simulate"])
def test_a_200k_prompt_on_a_128k_llama_is_refused_at_its_line(tmp_path, command):
    path = _document(tmp_path)
    result = _cli(command, str(path))
    assert result.exit_code == 1, result.output
    assert (
        f"{path}:8: workload.prompt_tokens: prompt + output must be <= target_model.max_model_len_tokens "
        "(131072 tokens); the longest request is 201024 tokens" in result.output
    ), result.output


def test_the_largest_of_a_length_distribution_is_its_max_tokens(tmp_path):
    path = _document(
        tmp_path, prompt="{distribution: lognormal, mean_tokens: 900, std_tokens: 300,\n    max_tokens: 131000}"
    )
    result = _cli("validate", str(path))
    assert result.exit_code == 1, result.output
    assert f"{path}:9: workload.prompt_tokens.max_tokens: prompt + output must be <= " in result.output
    assert "132024 tokens (prompt max_tokens 131000 + output fixed at 1024)" in result.output


def test_a_request_that_fits_and_an_explicit_larger_context_pass(tmp_path):
    assert _cli("validate", str(_document(tmp_path, prompt="130048"))).exit_code == 0
    explicit = "{preset: llama-3.1-8b, max_model_len_tokens: 262144}"
    assert _cli("validate", str(_document(tmp_path, target=explicit))).exit_code == 0


def test_a_speculative_max_model_len_is_a_limit_too_and_no_larger_than_the_targets(tmp_path):
    shorter = _document(tmp_path, prompt="4096", spec_extra=", max_model_len: 4096")
    result = _cli("validate", str(shorter))
    assert result.exit_code == 1, result.output
    assert "workload.prompt_tokens: prompt + output must be <= speculative.max_model_len (4096 tokens)" in (
        result.output
    )
    larger = _document(tmp_path, prompt="64", spec_extra=", max_model_len: 200000")
    result = _cli("validate", str(larger))
    assert result.exit_code == 1, result.output
    assert (
        "speculative.max_model_len: must be <= target_model.max_model_len_tokens (131072) as vLLM requires, "
        "got 200000" in result.output
    )


def test_a_study_whose_prompt_exceeds_the_context_is_refused_before_it_runs(tmp_path, tiny_study):
    path = tmp_path / "tiny.yaml"
    path.write_text(tiny_study().replace("prompt_tokens: 64", "prompt_tokens: 131072"))
    out = tmp_path / "out"
    result = _cli("study", "run", str(path), "--out", str(out))
    assert result.exit_code == 1, result.output
    assert (
        f"{path}:5: workload.prompt_tokens: prompt + output must be <= target_model.max_model_len_tokens "
        "(131072 tokens); the longest request is 131136 tokens" in result.output
    ), result.output
    assert not (out / "study.journal").exists()


def test_a_trace_row_past_the_context_is_named(tmp_path, tiny_study):
    trace = tmp_path / "trace.csv"
    trace.write_text("prompt_tokens,output_tokens\n64,64\n130000,2000\n")
    path = tmp_path / "tiny.yaml"
    path.write_text(
        tiny_study().replace("  prompt_tokens: 64\n  output_tokens: 64\n", "  lengths_csv: {path: trace.csv}\n")
    )
    result = _cli("validate", str(path))
    assert result.exit_code == 1, result.output
    assert "workload.lengths_csv.path: prompt + output must be <= target_model.max_model_len_tokens" in result.output
    assert "trace row 2 asks for 130000 prompt + 2000 output = 132000 tokens" in result.output
