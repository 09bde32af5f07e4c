"""Simulation documents: every cross-part rule gets a located error."""

from pathlib import Path

import pytest

from spectune.config import load_document

HEAD = "kind: simulation\nname: t\n"
SPEC = "speculative: {method: eagle3, num_speculative_tokens: 3}\n"
ACCEPT = "acceptance: {conditional_rates: [0.7, 0.6]}\n"
WORK = "workload: {concurrency: 8, num_requests: 16, prompt_tokens: 32, output_tokens: 32, temperature: 0.0}\n"
DEPLOY = "hardware: h100-sxm\ntarget_model: llama-3.1-8b\n"


@pytest.mark.parametrize(
    ("text", "line", "field", "fragment"),
    [
        (HEAD + SPEC + WORK + DEPLOY, 1, "acceptance", "required (a profile or per-position rates)"),
        (
            HEAD + "speculative: {method: eagle3, num_speculative_tokens: 0}\n" + ACCEPT + WORK + DEPLOY,
            3,
            "speculative.num_speculative_tokens",
            "must be >= 1, got 0",
        ),
        (
            HEAD + SPEC + "acceptance: {conditional_rates: [0.7, 1.5]}\n" + WORK + DEPLOY,
            4,
            "acceptance.conditional_rates[1]",
            "must be in [0, 1], got 1.5",
        ),
        (
            HEAD + SPEC + "acceptance: {profile: missing.yaml}\n" + WORK + DEPLOY,
            4,
            "acceptance.profile",
            "no such file",
        ),
        (
            HEAD + SPEC + "acceptance: {profile: p.yaml, conditional_rates: [0.5]}\n" + WORK + DEPLOY,
            4,
            "acceptance.conditional_rates",
            "either profile or inline rates",
        ),
        (
            HEAD + SPEC + ACCEPT + WORK + "hardware: h900\ntarget_model: llama-3.1-8b\n",
            6,
            "hardware.gpu",
            "must be a preset name (h100-sxm, h200",
        ),
        (
            HEAD + SPEC + ACCEPT + WORK + DEPLOY + "drafter: ngram\n",
            8,
            "drafter.method",
            "must match speculative.method ('eagle3')",
        ),
        (
            HEAD + SPEC + ACCEPT + WORK + DEPLOY + "simulation: {device: tpu}\n",
            8,
            "simulation.device",
            "must be one of auto, cpu",
        ),
        (
            HEAD + SPEC + ACCEPT + WORK + DEPLOY + "simulation: {kernel_backend: cuda}\n",
            8,
            "simulation.kernel_backend",
            "must be one of 'auto', 'triton', 'reference'",
        ),
        (HEAD + SPEC + ACCEPT + WORK + DEPLOY + "surprise: 1\n", 8, "surprise", "unknown field"),
        (HEAD + ACCEPT + WORK + DEPLOY, 1, "speculative", "required field is missing"),  # off is said, not assumed
        (
            HEAD + "speculative: null\n" + ACCEPT + WORK + DEPLOY,
            4,
            "acceptance",
            "given, but speculative is null (plain decoding: no drafter, no drafts to accept); remove acceptance",
        ),
        (
            HEAD + "speculative: null\n" + WORK + DEPLOY + "drafter: eagle3-llama-3.1-8b\n",
            7,
            "drafter",
            "given, but speculative is null (plain decoding: no drafter, no drafts to accept); remove drafter",
        ),
    ],
)
def test_bad_simulation_documents_are_located(problems_of, text, line, field, fragment):
    file, problems = problems_of(text)
    matching = [p for p in problems if p.field == field]
    assert matching, [str(p) for p in problems]
    assert matching[0].line == line and fragment in matching[0].message, str(matching[0])


def test_profile_is_read_relative_to_the_document(tmp_path: Path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "p.yaml").write_text(
        "kind: acceptance_profile\nname: p\ndraft_sample_method: probabilistic\nunconditional_rates: [0.8, 0.4]\n"
        "bins:\n  - {min_running: 1, max_running: 8, conditional_rates: [0.9]}\n"
    )
    (tmp_path / "sim.yaml").write_text(HEAD + SPEC + "acceptance: {profile: profiles/p.yaml}\n" + WORK + DEPLOY)
    acceptance = load_document(tmp_path / "sim.yaml").model.acceptance
    assert acceptance.conditional_rates == pytest.approx([0.8, 0.5])
    assert acceptance.measured_with == "probabilistic"
    assert acceptance.rates_for_batch(4).conditional(2) == [0.9, 0.9]
    assert acceptance.rates_for_batch(64).conditional(3) == [0.9, 0.9, 0.9]  # the nearest bin


def test_nearest_batch_size_bin_is_used():
    from spectune.config._simulation import AcceptanceSource

    source = AcceptanceSource.model_validate(
        {
            "conditional_rates": [0.5],
            "bins": [
                {"min_running": 1, "max_running": 1, "conditional_rates": [0.9]},
                {"min_running": 16, "max_running": 16, "conditional_rates": [0.7]},
                {"min_running": 64, "max_running": 64, "conditional_rates": [0.6]},
            ],
        }
    )
    assert [source.rates_for_batch(b).conditional()[0] for b in (1, 3, 8, 16, 40, 64, 512)] == [
        0.9,
        0.9,
        0.7,
        0.7,
        0.6,
        0.6,
        0.6,
    ]


def test_bad_profile_is_reported_with_its_own_file_and_line(tmp_path: Path, problems_of):
    (tmp_path / "p.yaml").write_text("kind: acceptance_profile\nname: p\nconditional_rates: [2.0]\n")
    file, problems = problems_of(HEAD + SPEC + "acceptance: {profile: p.yaml}\n" + WORK + DEPLOY)
    (problem,) = problems
    assert problem.line == 4 and problem.field == "acceptance.profile"
    assert f"{tmp_path / 'p.yaml'}:3: conditional_rates[0]: must be in [0, 1], got 2.0" in problem.message


def test_shipped_simulation_documents_validate():
    root = Path(__file__).resolve().parents[2]
    for path in sorted((root / "configs" / "simulations").glob("*.yaml")):
        assert load_document(path).kind == "simulation"


def test_speculation_off_is_plain_decoding_without_acceptance_or_drafter(problems_of):
    file, problems = problems_of(HEAD + "speculative: null\n" + WORK + DEPLOY)
    assert problems == []
    document = load_document(Path(file)).model
    assert document.speculative is None and document.acceptance is None and document.effective_drafter() is None


def test_speculation_off_needs_only_k_0_in_a_measured_table(problems_of, tmp_path: Path):
    (tmp_path / "times.csv").write_text("batch_size,num_speculative_tokens,step_time_ms\n1,3,9\n16,3,12\n")
    measured = "cost_model: {method: measured, step_times: times.csv}\n"
    _, problems = problems_of(HEAD + "speculative: null\n" + WORK + DEPLOY + measured)
    (problem,) = problems
    assert problem.field == "cost_model.step_times" and "0" in problem.message, str(problem)
    assert "baseline" not in problem.message  # K = 0 is the simulation itself, not its baseline
    (tmp_path / "times.csv").write_text("batch_size,num_speculative_tokens,step_time_ms\n1,0,9\n16,0,12\n")
    assert problems_of(HEAD + "speculative: null\n" + WORK + DEPLOY + measured)[1] == []
