"""What a study tries is what vLLM 0.33.0 serves: no combination that vLLM serves otherwise than written."""

from pathlib import Path

from typer.testing import CliRunner

from spectune.cli import app
from spectune.config import load_document

runner = CliRunner()

STUDY = """\
kind: study
name: tiny
workload:
  num_requests: 16
  prompt_tokens: 64
  output_tokens: 16
  temperature: 0.7
  vocab_size: 128
  max_num_seqs: 64
hardware: h100-sxm
target_model: llama-3.1-8b
candidates:
  - name: peagle
    speculative: {method: eagle, model: yuhuili/EAGLE-LLaMA3.1-Instruct-8B, parallel_drafting: true}
    acceptance: {unconditional_rates: [0.73, 0.52, 0.35]}
search:
  num_speculative_tokens: {min: 1, max: 3}
  rejection_sample_methods: [standard, block]
  draft_sample_methods: [greedy, probabilistic]
schedule:
  batch_sizes: [1, 8]
"""


def test_a_study_never_tries_eagle_parallel_drafting_with_block_or_probabilistic_drafts(tmp_path: Path):
    path = tmp_path / "study.yaml"
    path.write_text(STUDY)
    document = load_document(path).model
    assert [f"{c.label}/{r}/{s}" for c, r, s in document.combinations()] == ["peagle/standard/greedy"]
    skipped = dict(document.skipped_combinations())
    assert set(skipped) == {"peagle/standard/probabilistic", "peagle/block/greedy", "peagle/block/probabilistic"}
    assert all("V1 runner" in why and "one-hot" in why for why in skipped.values())


def test_a_study_candidate_pinned_to_fly_is_refused_on_its_line(tmp_path: Path):
    path = tmp_path / "study.yaml"
    path.write_text(STUDY.replace("parallel_drafting: true}", "rejection_sample_method: fly}"))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    assert (
        f"{path}:14: candidates[0].speculative.rejection_sample_method: must be 'standard' or 'block'" in result.output
    )
    assert "FLy" in result.output
