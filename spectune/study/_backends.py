"""The two Optuna storages a study runs on, with what spectune needs of them beyond Optuna's own.

- **Ownership at creation.** Every trial is created with its owner (host, pid, process start time)
  among its user attributes, in the same journal record or database transaction that creates it.
  Another worker therefore never sees a trial of ours without its owner, so it never has to guess
  whether an unowned trial is live: it asks whether the owner's process is. (Written afterwards,
  a starved worker's live trial looked unowned past the grace period and was failed by another
  worker, whose next write to it raised ``UpdateFinishedTrialError``.)
- **One creator per study.** ``study_creation_lock`` serialises the check of a study's document
  hash with its creation: a journal's file lock (the one its writes take; reentrant here, since
  the creation's own writes take it again), a PostgreSQL session advisory lock keyed by the study's
  name. Both are released by the kernel or the server when their holder dies.
- **A failed journal write loses nothing** (``_JournalFile``): a full disk is named as such.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

from spectune.errors import SpectuneError
from spectune.study._records import ATTR_OWNER, owner_attr

__all__ = ["FlockJournalLock", "OwnedJournalStorage", "OwnedRDBStorage", "study_creation_lock"]


class FlockJournalLock:
    """The journal's write lock as a kernel ``flock``, released when its holder dies, even by SIGKILL.

    Optuna's default symlink lock outlives a killed holder, and every other writer then waits out a
    30-second grace period; a study killed mid-write would resume only after that. It has the
    interface ``JournalFileBackend`` calls (``acquire``/``release``) and is reentrant within a thread
    (a study's creation holds it across the writes that take it again).
    """

    def __init__(self, journal_path: str) -> None:
        self.journal_path = journal_path
        self._path = journal_path + ".flock"
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    def acquire(self) -> bool:
        self._thread_lock.acquire()
        if self._depth == 0:
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except BaseException:
                    os.close(fd)
                    raise
            except BaseException:
                self._thread_lock.release()
                raise
            self._fd = fd
        self._depth += 1
        return True

    def release(self) -> None:
        try:
            self._depth -= 1
            if self._depth == 0:
                fd, self._fd = self._fd, None
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)
        finally:
            self._thread_lock.release()


def _owned_template() -> FrozenTrial:
    """A new RUNNING trial that already names its owner."""
    return FrozenTrial(
        number=-1,
        state=TrialState.RUNNING,
        value=None,
        datetime_start=datetime.now(),
        datetime_complete=None,
        params={},
        distributions={},
        user_attrs={ATTR_OWNER: owner_attr()},
        system_attrs={},
        intermediate_values={},
        trial_id=-1,
    )


class _JournalFile(JournalFileBackend):
    """Optuna's journal file, whose failed append leaves the file as it was and says why, located.

    A full disk wrote part of a record and raised mid-way; Optuna then replayed the torn record and
    stopped at ``AssertionError: Should not reach.``. Here the bytes of the failed append are cut off
    again (under the write lock, so no other writer's record can follow them), so every record
    acknowledged before stays readable and a run after space is freed resumes from them.
    """

    def __init__(self, path: str, lock: FlockJournalLock) -> None:
        super().__init__(path, lock_obj=lock)  # type: ignore[arg-type]
        self._path = path
        self._write_lock = lock

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        self._write_lock.acquire()
        try:
            size = os.path.getsize(self._path) if os.path.exists(self._path) else 0
            try:
                super().append_logs(logs)
            except OSError as err:
                with contextlib.suppress(OSError):  # cutting a file never needs space
                    os.truncate(self._path, size)
                raise SpectuneError(_write_error(self._path, err)) from None
        finally:
            self._write_lock.release()


def _write_error(path: str, err: OSError) -> str:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"no space left on the device holding {path}: the journal's records up to this write are kept; "
            "free some space and run the same command to resume"
        )
    return f"{path}: cannot write the journal: {err.strerror or err}; its records up to this write are kept"


class OwnedJournalStorage(JournalStorage):
    """A journal file whose new trials carry their owner from their first record."""

    def __init__(self, path: str, lock: FlockJournalLock, describe_problem: Callable[[Path], str | None]) -> None:
        """``describe_problem(path)``: the located message for the journal's first unreadable record, else None."""
        super().__init__(_JournalFile(path, lock))
        self.file_lock = lock
        self._describe_problem = describe_problem

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        return super().create_new_trial(study_id, template_trial or _owned_template())

    def _sync_with_backend(self) -> None:
        # A record that turns unreadable mid-run (a foreign write, a disk error) is named as at start.
        try:
            super()._sync_with_backend()
        except (ValueError, KeyError, TypeError, AttributeError, IndexError, AssertionError) as err:
            path = self.file_lock.journal_path
            raise SpectuneError(self._describe_problem(Path(path)) or f"{path}: unreadable journal: {err}") from None


class OwnedRDBStorage(RDBStorage):
    """A database whose new trials carry their owner from the transaction that creates them."""

    # Optuna's caching wrapper calls this one (``create_new_trial`` calls it too).
    def _create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> FrozenTrial:
        return super()._create_new_trial(study_id, template_trial or _owned_template())


def _advisory_key(name: str) -> int:
    """A signed 64-bit key for PostgreSQL's advisory locks, from the study's name."""
    digest = hashlib.sha256(b"spectune.study:" + name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@contextmanager
def study_creation_lock(storage: BaseStorage, name: str) -> Iterator[None]:
    """Hold the lock under which study ``name`` is created and its document checked (see the module).

    Other SQL databases than PostgreSQL get no lock: SQLite serialises its writers itself but not
    this check (run its workers from one document), and the rest are not tested here.
    """
    if isinstance(storage, OwnedJournalStorage):
        storage.file_lock.acquire()
        try:
            yield
        finally:
            storage.file_lock.release()
        return
    if isinstance(storage, RDBStorage) and storage.engine.dialect.name == "postgresql":
        # A session lock on a connection of its own: the creation's writes commit on other connections.
        with storage.engine.connect() as connection:
            key = _advisory_key(name)
            connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": key})
            try:
                yield
            finally:
                connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": key})
                connection.commit()
        return
    yield
