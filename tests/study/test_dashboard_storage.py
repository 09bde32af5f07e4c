"""A study's journal opens as plain Optuna storage, as optuna-dashboard opens it (its default file lock,
no spectune code): the study, every trial's parameters, value and times, and parameter importances."""

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from typer.testing import CliRunner

from spectune.cli import app


def test_the_journal_reads_as_plain_optuna_storage_with_importances(tmp_path, tiny_study):
    (tmp_path / "tiny.yaml").write_text(tiny_study(max_k=2))
    result = CliRunner().invoke(app, ["study", "run", str(tmp_path / "tiny.yaml"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "out" / "study.journal")))
    (summary,) = optuna.get_all_study_summaries(storage)
    assert summary.study_name == "tiny" and summary.n_trials == 6
    study = optuna.load_study(study_name="tiny", storage=storage)
    trials = study.get_trials()
    assert {t.state for t in trials} == {optuna.trial.TrialState.COMPLETE}
    assert {(t.params["batch_size"], t.params["num_speculative_tokens"]) for t in trials} == {
        (b, k) for b in (1, 4) for k in (0, 1, 2)
    }
    assert all(t.values[0] > 0 and t.datetime_start <= t.datetime_complete for t in trials)  # history and timeline
    importances = optuna.importance.get_param_importances(study)
    assert {"batch_size", "num_speculative_tokens"} <= importances.keys()
