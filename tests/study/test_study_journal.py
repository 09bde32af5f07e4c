"""A damaged journal file: located refusals and ``repair_journal``."""

import builtins
import errno
import json
import os
from pathlib import Path

import pytest
from study_doubles import SyntheticEvaluator, fingerprint, make_space
from typer.testing import CliRunner

from spectune.cli import app
from spectune.errors import SpectuneError
from spectune.study import load_outcome, repair_journal, run_study

runner = CliRunner()


@pytest.fixture(scope="module")
def journal_bytes(tmp_path_factory):
    space = make_space(batch_sizes=(8,), max_k=2, methods=("ngram",))
    storage = tmp_path_factory.mktemp("journal") / "s.journal"
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=str(storage), strategy="exhaustive")
    return space, storage.read_bytes()


def test_a_clean_journal_needs_no_repair_and_gets_no_backup(journal_bytes, tmp_path):
    _, good = journal_bytes
    journal = tmp_path / "s.journal"
    journal.write_bytes(good)
    result = repair_journal(str(journal))
    assert result.backup is None and result.dropped == () and result.kept == len(good.splitlines())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.journal", "s.journal.flock"]


def test_repair_takes_a_free_backup_name_and_keeps_a_whole_record_that_lacks_its_newline(journal_bytes, tmp_path):
    space, good = journal_bytes
    journal = tmp_path / "s.journal"
    (tmp_path / "s.journal.bak").write_bytes(b"an older backup\n")
    journal.write_bytes(b"[1, 2]\n" + good[:-1])  # a JSON list first; the last record's newline lost
    with pytest.raises(
        SpectuneError, match=f"{journal}:1: unreadable journal record \\(not a journal record: no op_code\\)"
    ):
        load_outcome(str(journal), space.name)
    result = repair_journal(str(journal))
    assert (
        result.dropped == ((1, "not a journal record: no op_code"),) and result.backup == tmp_path / "s.journal.bak.1"
    )
    assert journal.read_bytes() == good
    assert (tmp_path / "s.journal.bak").read_bytes() == b"an older backup\n"
    assert sum(t.state == "COMPLETE" for t in load_outcome(str(journal), space.name).trials) == space.size


def test_repair_of_a_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(SpectuneError, match="no journal file there"):
        repair_journal(str(tmp_path / "none.journal"))


def test_a_storage_that_is_not_a_regular_file_is_refused_not_read(tmp_path):
    space = make_space(batch_sizes=(8,), max_k=1, methods=("ngram",))
    for storage in ("/dev/zero", str(tmp_path)):
        with pytest.raises(SpectuneError, match=f"--storage {storage}: not a regular file"):
            run_study(space, SyntheticEvaluator(), fingerprint(), storage=storage)


@pytest.mark.parametrize("journal", [True, False])
def test_a_wait_for_earlier_trials_polls_a_journal_every_few_milliseconds(tmp_path, monkeypatch, journal):
    # The trials of a round decide one after another, each seeing the one before at its next poll: on a
    # journal (reads cost microseconds) the polls stay a few milliseconds apart; on a database they back
    # off to 50 ms (each read is a query with every trial).
    import optuna
    from optuna.distributions import CategoricalDistribution

    from spectune.study import _sampler

    storage = (
        optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "s.journal")))
        if journal
        else optuna.storages.InMemoryStorage()
    )
    study = optuna.create_study(storage=storage)
    undecided = study.ask()  # running, no point yet
    delays: list[float] = []

    def sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) == 12:  # it decides: its params are written
            for name in (_sampler.PARAM_BATCH_SIZE, _sampler.PARAM_COMBO, _sampler.PARAM_K):
                storage.set_trial_param(undecided._trial_id, name, 0, CategoricalDistribution([1]))

    monkeypatch.setattr(_sampler.time, "sleep", sleep)
    earlier = _sampler.wait_for_earlier_trials(study, undecided.number + 1)
    assert [t.number for t in earlier] == [undecided.number] and len(delays) == 12
    assert max(delays) == (0.002 if journal else 0.05)


class _SmallDevice:
    """The journal's device with ``capacity`` bytes: an append past it writes what fits and raises
    ENOSPC, as a full disk does (a test double for the disk, at the builtin ``open``)."""

    def __init__(self, journal: Path, capacity: int) -> None:
        self.journal, self.capacity, self.open = journal, capacity, builtins.open

    def __call__(self, file, mode="r", *args, **kwargs):  # type: ignore[no-untyped-def]
        handle = self.open(file, mode, *args, **kwargs)
        if mode != "ab" or Path(file) != self.journal:
            return handle
        device = self

        class Limited:
            def __enter__(self):  # type: ignore[no-untyped-def]
                return self

            def __exit__(self, *exc):  # type: ignore[no-untyped-def]
                handle.close()

            def write(self, data: bytes) -> int:
                room = device.capacity - handle.tell()
                if len(data) > room:
                    handle.write(data[: max(room, 0)])
                    handle.flush()
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                return handle.write(data)

            def __getattr__(self, name):  # type: ignore[no-untyped-def]
                return getattr(handle, name)

        return Limited()


def test_a_full_disk_under_the_journal_is_named_keeps_every_record_and_resumes(tmp_path, monkeypatch, tiny_study):
    document = tmp_path / "tiny.yaml"
    document.write_text(tiny_study(max_k=2))
    clean = runner.invoke(app, ["study", "run", str(document), "--out", str(tmp_path / "clean")])
    assert clean.exit_code == 0, clean.output
    full_size = (tmp_path / "clean" / "study.journal").stat().st_size
    journal = tmp_path / "full" / "study.journal"
    monkeypatch.setattr(builtins, "open", _SmallDevice(journal, full_size // 2))
    full = runner.invoke(app, ["study", "run", str(document), "--out", str(tmp_path / "full")])
    assert full.exit_code == 1, full.output
    assert (
        f"error: no space left on the device holding {journal}: the journal's records up to this write are kept; "
        "free some space and run the same command to resume"
    ) in full.output.splitlines()
    assert "Traceback" not in full.output and "Should not reach" not in full.output
    kept = journal.read_bytes()
    assert kept.endswith(b"\n") and all(json.loads(line)["op_code"] >= 0 for line in kept.splitlines())
    monkeypatch.undo()  # space freed
    resumed = runner.invoke(app, ["study", "run", str(document), "--out", str(tmp_path / "full")])
    assert resumed.exit_code == 0, resumed.output
    assert (tmp_path / "full" / "vllm.json").read_text() == (tmp_path / "clean" / "vllm.json").read_text()
    assert journal.read_bytes().startswith(kept)  # nothing written before the full disk was lost


class _ForeignWriter(SyntheticEvaluator):
    """Appends a line that is not a journal record while its first point is simulated (a foreign write)."""

    def __init__(self, journal: Path) -> None:
        super().__init__()
        self.journal, self.written = journal, False

    def __call__(self, point):  # type: ignore[no-untyped-def]
        if not self.written:
            self.written = True
            with builtins.open(self.journal, "ab") as handle:
                handle.write(b"not a record\n")
        return super().__call__(point)


def test_a_bad_journal_record_appearing_mid_run_is_named_by_journal_and_line(tmp_path):
    space = make_space(batch_sizes=(8,), max_k=2, methods=("ngram",))
    journal = tmp_path / "s.journal"
    with pytest.raises(SpectuneError) as raised:
        run_study(space, _ForeignWriter(journal), fingerprint(), storage=str(journal), strategy="exhaustive")
    lines = journal.read_bytes().splitlines()
    number = lines.index(b"not a record") + 1
    assert str(raised.value).startswith(f"{journal}:{number}: unreadable journal record (not JSON: ")
