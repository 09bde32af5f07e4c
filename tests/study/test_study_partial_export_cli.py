"""An export while trials are still running says the recommendation is partial, in every place it lands."""

import optuna
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
