"""Where a document's values come from, as a user meets it: YAML merge keys, ``--set`` overrides and a
study name that becomes a folder. Each case is one located line, or a document read as YAML means it."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spectune.cli import app
from spectune.config import load_document

REPO = Path(__file__).resolve().parents[2]
SIMULATION = REPO / "configs/simulations/llama-3.1-8b-eagle3-h100.yaml"
runner = CliRunner()

NAME_RULE = "letters, digits, '.', '_' and '-', not starting with '-', and not '.' or '..'"


def _cli(*args: str):
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    return result


# Study names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["..", ".", "...", "-rf", "a/b", "a\\\\b", "a\\x00b", "a\\tb"])
def test_a_study_name_that_is_not_one_safe_folder_name_is_refused_at_its_line(tmp_path, tiny_study, name):
    document = tmp_path / "s.yaml"
    document.write_text(tiny_study().replace("name: tiny", f'name: "{name}"'))
    result = _cli("validate", str(document))
    assert result.exit_code == 1
    shown = repr(name.encode().decode("unicode_escape"))
    assert result.output.splitlines()[0] == (
        f"{document}:2: name: must be one folder name (it names runs/<name>): {NAME_RULE}; got {shown}"
    )


def test_study_run_named_dotdot_writes_nothing_beside_runs(tmp_path, tiny_study, monkeypatch):
    # The reported case: runs/.. is the current folder, whose recommended.yaml was overwritten.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recommended.yaml").write_text("mine\n")
    Path("dd.yaml").write_text(tiny_study().replace("name: tiny", "name: '..'"))
    result = _cli("study", "run", "dd.yaml")
    assert result.exit_code == 1
    assert (
        result.output.strip()
        == f"dd.yaml:2: name: must be one folder name (it names runs/<name>): {NAME_RULE}; got '..'"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dd.yaml", "recommended.yaml"]
    assert (tmp_path / "recommended.yaml").read_text() == "mine\n"


def test_export_by_an_unsafe_study_name_without_out_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "vllm.json").write_text('{"mine": 1}\n')
    result = _cli("export", "..", "--storage", str(tmp_path / "s.journal"))
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: study name '..': the default --out runs/<name> needs one folder name: {NAME_RULE} "
        "(give --out, or the study document)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vllm.json"]


# YAML merge keys -----------------------------------------------------------------------------------

_MERGED_CANDIDATES = """\
candidates:
  - &first
    name: eagle3
    speculative: &spec {method: eagle3, model: RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3}
    acceptance: {unconditional_rates: [0.73, 0.52, 0.35]}
  - <<: *first
    name: eagle3-other
    speculative: {<<: *spec, model: someone/another-eagle3}
    acceptance: {unconditional_rates: [0.6, 0.4, 0.2]}
"""


def _with_candidates(study_text: str, candidates: str) -> str:
    head, rest = study_text.split("candidates:\n", 1)
    return head + candidates + rest[rest.index("search:") :]


def test_a_merge_key_override_is_read_as_yaml_means_it(tmp_path, tiny_study):
    document = tmp_path / "merged.yaml"
    document.write_text(_with_candidates(tiny_study(), _MERGED_CANDIDATES))
    result = _cli("validate", str(document))
    assert result.exit_code == 0, result.output
    first, other = load_document(document, expect="study").model.candidates
    assert (other.name, other.speculative.model) == ("eagle3-other", "someone/another-eagle3")
    assert other.speculative.method == first.speculative.method == "eagle3"  # merged, not overridden
    assert other.acceptance != first.acceptance


def test_an_earlier_merged_mapping_wins_over_a_later_one(tmp_path, tiny_study):
    # yaml.org/type/merge.html: keys of mappings earlier in the << list override those later in it,
    # and a key a merged mapping overrides itself stays overridden when it is merged again.
    document = tmp_path / "merged.yaml"
    candidates = _MERGED_CANDIDATES.replace(
        "speculative: {<<: *spec, model: someone/another-eagle3}",
        "speculative: {<<: [&mine {<<: *spec, model: someone/mine}, *spec]}",
    )
    document.write_text(_with_candidates(tiny_study(), candidates))
    assert _cli("validate", str(document)).exit_code == 0
    other = load_document(document, expect="study").model.candidates[1]
    assert other.speculative.model == "someone/mine"


def test_a_key_written_twice_in_one_mapping_is_still_refused_beside_a_merge(tmp_path, tiny_study):
    document = tmp_path / "twice.yaml"
    candidates = _MERGED_CANDIDATES.replace("    name: eagle3-other\n", "    name: eagle3-other\n    name: eagle3-b\n")
    document.write_text(_with_candidates(tiny_study(), candidates))
    result = _cli("validate", str(document))
    assert result.exit_code == 1
    line = candidates.splitlines().index("    name: eagle3-b") + 1 + tiny_study().splitlines().index("candidates:")
    assert result.output.splitlines()[0] == (
        f"{document}:{line}: candidates[1].name: duplicate key 'name' (first on line {line - 1}); "
        "YAML would silently keep the last"
    )


# --set ------------------------------------------------------------------------------------------------


def test_set_kind_is_blamed_on_the_option_not_on_the_files_line():
    result = _cli("simulate", str(SIMULATION), "--set", "kind=study")
    assert result.exit_code == 1
    assert result.output.strip() == "--set kind=study: kind: expected a simulation document here, got 'study'"
    unknown = _cli("simulate", str(SIMULATION), "--set", "kind=nonsense")
    assert unknown.exit_code == 1
    assert unknown.output.strip().startswith("--set kind=nonsense: kind: must be one of acceptance_profile, ")
