"""Profile references are read when a document is loaded, before validation, wherever an acceptance sits."""

from pathlib import Path

import pytest

from spectune.config import apply_overrides, load_document, read_mapping, validate_source
from spectune.config._simulation import AcceptanceSource
from spectune.errors import DocumentError

REPO = Path(__file__).resolve().parents[2]
HEAD = "kind: simulation\nname: t\n"
SPEC = "speculative: {method: eagle3, num_speculative_tokens: 3}\n"
WORK = "workload: {concurrency: 8, num_requests: 16, prompt_tokens: 32, output_tokens: 32, temperature: 0.0}\n"
DEPLOY = "hardware: h100-sxm\ntarget_model: llama-3.1-8b\n"
PROFILE = "kind: acceptance_profile\nname: p\nconditional_rates: [0.8, 0.5]\n"


def _quickstart(ngram_profile: str) -> str:
    """The quickstart study with its EAGLE-3 profile by absolute path and the ngram one replaced."""
    text = (
        (REPO / "studies" / "quickstart.yaml").read_text().replace("../configs/profiles/ngram-code.yaml", ngram_profile)
    )
    return text.replace("../configs/profiles/", f"{REPO / 'configs' / 'profiles'}/")


def test_a_study_reads_each_candidates_profile_relative_to_itself(tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "p.yaml").write_text(PROFILE)
    text = _quickstart("profiles/p.yaml")
    (tmp_path / "study.yaml").write_text(text)
    candidates = load_document(tmp_path / "study.yaml").model.candidates
    assert candidates[1].acceptance.conditional_rates == [0.8, 0.5]
    assert candidates[1].acceptance.profile == str(tmp_path / "profiles" / "p.yaml")
    assert candidates[0].acceptance.conditional_rates is not None  # the shipped EAGLE-3 profile, read as well


def test_an_unreadable_profile_in_a_study_names_the_candidates_field_and_line(tmp_path):
    text = _quickstart("gone.yaml")
    (tmp_path / "study.yaml").write_text(text)
    with pytest.raises(DocumentError) as caught:
        load_document(tmp_path / "study.yaml")
    (problem,) = caught.value.problems
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "gone.yaml" in row)
    assert (problem.file, problem.line, problem.field) == (
        str(tmp_path / "study.yaml"),
        line,
        "candidates[1].acceptance.profile",
    )
    assert "cannot use it" in problem.message and "no such file" in problem.message


def test_a_bad_profile_and_another_problem_are_reported_together(tmp_path):
    (tmp_path / "p.yaml").write_text("kind: acceptance_profile\nname: p\nconditional_rates: [2.0]\n")
    (tmp_path / "sim.yaml").write_text(
        HEAD + SPEC + "acceptance: {profile: p.yaml}\n" + WORK + "hardware: h900\ntarget_model: llama-3.1-8b\n"
    )
    with pytest.raises(DocumentError) as caught:
        load_document(tmp_path / "sim.yaml")
    fields = [p.field for p in caught.value.problems]
    assert fields == ["acceptance.profile", "hardware.gpu"], [str(p) for p in caught.value.problems]


def test_a_profile_given_by_set_is_read_relative_to_the_document(tmp_path):
    (tmp_path / "p.yaml").write_text(PROFILE)
    (tmp_path / "sim.yaml").write_text(HEAD + SPEC + "acceptance: {conditional_rates: [0.1]}\n" + WORK + DEPLOY)
    source = apply_overrides(read_mapping(tmp_path / "sim.yaml"), ["acceptance={profile: p.yaml}"])
    assert validate_source(source).model.acceptance.conditional_rates == [0.8, 0.5]
    missing = apply_overrides(read_mapping(tmp_path / "sim.yaml"), ["acceptance={profile: q.yaml}"])
    with pytest.raises(DocumentError) as caught:
        validate_source(missing)
    (problem,) = caught.value.problems
    assert problem.file == "--set acceptance={profile: q.yaml}" and problem.field == "acceptance.profile"


def test_a_mapping_validated_directly_cannot_name_a_profile_without_its_rates():
    # Models never read files: the loader does, so a reference outside a loaded document is an error.
    with pytest.raises(ValueError, match="profile: a profile is read when its document is loaded from a file"):
        AcceptanceSource.model_validate({"profile": "p.yaml"})
