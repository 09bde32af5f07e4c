"""An export while trials are still running says the recommendation is partial, in every place it lands."""

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from typer.testing import CliRunner

from spectune.cli import app

runner = CliRunner()


def test_export_with_a_running_trial_says_partial_in_the_output_and_the_artefacts(tmp_path, tiny_study):
    document = tmp_path / "tiny.yaml"
    document.write_text(tiny_study())
    out = tmp_path / "out"
    first = runner.invoke(app, ["study", "run", str(document), "--out", str(out)])
    assert first.exit_code == 0, first.output
    assert "PARTIAL" not in first.output and "PARTIAL" not in (out / "recommended.yaml").read_text()

    journal = out / "study.journal"
    storage = JournalStorage(JournalFileBackend(str(journal)))
    study_id = storage.get_study_id_from_name("tiny")
    storage.create_new_trial(study_id)  # what a worker that has claimed a point leaves until it ends
    assert optuna.load_study(study_name="tiny", storage=storage).trials[-1].state == optuna.trial.TrialState.RUNNING

    export = tmp_path / "export"
    result = runner.invoke(app, ["export", str(document), "--storage", str(journal), "--out", str(export)])
    assert result.exit_code == 0, result.output
    assert "PARTIAL: the study is unfinished (1 trial(s) running or waiting" in result.output
    assert "# PARTIAL: the study is unfinished" in (export / "recommended.yaml").read_text()
    assert "PARTIAL: the study is unfinished" in (export / "report.html").read_text()
    shown = runner.invoke(app, ["study", "show", str(document), "--storage", str(journal)])
    assert "PARTIAL: the study is unfinished" in shown.output, shown.output


@pytest.mark.parametrize("sampler", ["structured", "exhaustive"])
def test_export_of_a_search_stopped_by_n_trials_says_partial_and_a_finished_one_does_not(tmp_path, tiny_study, sampler):
    # The tiny study has 2 batch sizes x (K = 0 + one combo at K = 1) = 4 points: 3 trials leave the exhaustive
    # search a point, and the structured one has not settled the last bucket.
    document = tmp_path / "tiny.yaml"
    document.write_text(tiny_study())
    out = tmp_path / "out"
    first = runner.invoke(
        app, ["study", "run", str(document), "--out", str(out), "--sampler", sampler, "--n-trials", "3"]
    )
    assert first.exit_code == 0, first.output
    assert "PARTIAL: the study is unfinished (its search stopped before it had every point" in first.output

    journal = out / "study.journal"
    assert all(t.state.is_finished() for t in optuna.load_study(study_name="tiny", storage=_storage(journal)).trials)
    export = tmp_path / "export"
    result = runner.invoke(app, ["export", str(document), "--storage", str(journal), "--out", str(export)])
    assert result.exit_code == 0, result.output
    assert "note: PARTIAL: the study is unfinished (its search stopped before it had every point" in result.output
    assert "# PARTIAL: the study is unfinished (its search stopped" in (export / "recommended.yaml").read_text()
    assert "PARTIAL: the study is unfinished (its search stopped" in (export / "report.html").read_text()

    resumed = runner.invoke(app, ["study", "run", str(document), "--out", str(out), "--sampler", sampler])
    assert resumed.exit_code == 0, resumed.output
    assert "PARTIAL" not in resumed.output
    again = runner.invoke(app, ["export", str(document), "--storage", str(journal), "--out", str(export)])
    assert again.exit_code == 0, again.output
    assert "PARTIAL" not in again.output and "PARTIAL" not in (export / "recommended.yaml").read_text()


def _storage(journal):
    return JournalStorage(JournalFileBackend(str(journal)))
