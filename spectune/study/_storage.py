"""Where a study lives: a journal file (default, embedded) or an SQL database (many machines).

Which one: ``--storage``, else the document's ``storage`` (a path relative to the document), else
``OUT/study.journal``, OUT being ``runs/<study name>`` unless given (``resolve_storage``).

- A path (no ``://``): Optuna's ``JournalStorage(JournalFileBackend)``; the fastest choice on one
  machine, safe for many local processes, resumable after any crash.
- ``postgresql+psycopg://...`` (or any SQLAlchemy URL, ``sqlite:///...`` included): ``RDBStorage``
  with heartbeats, so a trial whose worker died on another machine is failed after the grace period
  and its point proposed again; ``pool_pre_ping`` survives dropped connections.

A journal record that cannot be read (a disk error, an edit, a foreign write) stops every command on
that journal with ``JOURNAL:LINE``, before anything is appended after it; ``repair_journal`` (``spectune
study repair``) keeps every readable record and backs the file up. A half-written last record (a
writer killed mid-write) is dropped silently: it was never acknowledged.

A study records what it was made from as user attributes: the space (so ``show``/``export`` work
from the storage alone), the document's hash and the simulator version. A run refuses to resume a
study made from a different document.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import optuna
from optuna.storages import BaseStorage, RDBStorage, RetryFailedTrialCallback
from optuna.storages.journal._storage import JournalStorageReplayResult  # replays one record, to find bad ones

from spectune.config import OBJECTIVE_METRICS, load_document
from spectune.errors import SpectuneError
from spectune.study._backends import FlockJournalLock, OwnedJournalStorage, OwnedRDBStorage, study_creation_lock
from spectune.study._space import StudySpace

__all__ = [
    "JournalRepair",
    "StudyFingerprint",
    "close_storage",
    "default_out_dir",
    "describe_storage",
    "locate_study",
    "open_storage",
    "open_study",
    "prepare_study",
    "reads_are_cheap",
    "record_search",
    "repair_journal",
    "resolve_storage",
    "study_space",
]

ATTR_SPACE = "spectune.space"
ATTR_DOCUMENT_SHA256 = "spectune.document_sha256"
ATTR_SIMULATOR_VERSION = "spectune.simulator_version"
ATTR_SPECTUNE_VERSION = "spectune.version"
# The search settings of the study's latest run ({"strategy", "keep_combos", "refine_budget"}): from the
# storage alone, export then tells whether the search had points left to ask for when it stopped.
# Studies run before it was recorded lack it, and are not judged.
ATTR_SEARCH = "spectune.search"

HEARTBEAT_INTERVAL_S = 60
GRACE_PERIOD_S = 180
MAX_RETRY = 3
_CREATE_ATTEMPTS = 5

StudyFingerprint = Mapping[str, str]  # {"document_sha256": ..., "simulator_version": ...}


def _is_url(storage: str) -> bool:
    return "://" in storage


def default_out_dir(name: str, out: Path | None = None) -> Path:
    """Where a study's artefacts (and by default its journal) go: ``out``, else ``runs/<name>``."""
    return out if out is not None else Path("runs") / name


def resolve_storage(
    name: str, *, option: str | None, document_storage: str | None, document_dir: Path | None, out: Path | None
) -> str:
    """``option`` (--storage), else the document's (a relative path is relative to the document), else OUT/study.journal."""
    if option:
        return option
    if document_storage:
        if _is_url(document_storage) or document_dir is None or Path(document_storage).is_absolute():
            return document_storage
        return str(document_dir / document_storage)
    return str(default_out_dir(name, out) / "study.journal")


def locate_study(target: str, *, storage: str | None, out: Path | None) -> tuple[str, str]:
    """(study name, storage) from a study document's path or a study name."""
    path = Path(target)
    if path.is_file():
        document = load_document(path, expect="study").model
        return document.name, resolve_storage(
            document.name, option=storage, document_storage=document.storage, document_dir=path.parent, out=out
        )
    if path.suffix.lower() in (".yaml", ".yml", ".json"):
        raise SpectuneError(f"{target}: no such file (give a study document or a study name)")
    return target, resolve_storage(target, option=storage, document_storage=None, document_dir=None, out=out)


def describe_storage(storage: str) -> str:
    """The storage without a password, for messages."""
    if not _is_url(storage):
        return storage
    scheme, rest = storage.split("://", 1)
    if "@" in rest:
        credentials, host = rest.rsplit("@", 1)
        user = credentials.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in credentials else f"{scheme}://{user}@{host}"
    return storage


def open_storage(
    storage: str,
    *,
    retry_failed_trials: bool = False,
    heartbeat_interval_s: int = HEARTBEAT_INTERVAL_S,
    grace_period_s: int = GRACE_PERIOD_S,
) -> BaseStorage:
    """Open a journal file (a path) or an SQL database (a URL); ``SpectuneError`` names the storage.

    On a database, a RUNNING trial whose heartbeat (recorded every ``heartbeat_interval_s``) is older
    than ``grace_period_s`` is taken as dead; a journal's trials are told dead by their owner."""
    if not _is_url(storage):
        path = Path(storage)
        if path.exists() and not path.is_file():
            raise SpectuneError(f"--storage {storage}: not a regular file (a journal file, or a database URL)")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = FlockJournalLock(str(path))
            lock.acquire()
            try:
                _repair_journal_tail(path)
                _check_journal(path)  # before anything is appended after an unreadable record
            finally:
                lock.release()
            return OwnedJournalStorage(str(path), lock, journal_problem)
        except OSError as err:
            raise SpectuneError(f"--storage: cannot open the journal file {storage}: {err.strerror or err}") from None
    last_error: Exception | None = None
    for attempt in range(_CREATE_ATTEMPTS):
        try:
            return _rdb_storage(storage, retry_failed_trials, heartbeat_interval_s, grace_period_s)
        except ImportError as err:
            raise SpectuneError(
                f"--storage {describe_storage(storage)}: no database driver ({err}); for PostgreSQL install "
                "spectune[postgres] and spell the driver: postgresql+psycopg://USER:PASSWORD@HOST/DB"
            ) from None
        except Exception as err:  # noqa: BLE001 -- SQLAlchemy raises many kinds; all mean "cannot open it"
            # Workers starting together on an empty database race to create its tables; the loser retries.
            last_error = err
            time.sleep(0.2 * (attempt + 1))
    message = str(last_error).strip().splitlines()[0] if str(last_error).strip() else type(last_error).__name__
    raise SpectuneError(f"--storage {describe_storage(storage)}: cannot open the database: {message}")


def _rdb_storage(storage: str, retry_failed_trials: bool, heartbeat_interval_s: int, grace_period_s: int) -> RDBStorage:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeat arguments
        return OwnedRDBStorage(
            storage,
            engine_kwargs={"pool_pre_ping": True},
            heartbeat_interval=heartbeat_interval_s,
            grace_period=grace_period_s,
            failed_trial_callback=RetryFailedTrialCallback(max_retry=MAX_RETRY) if retry_failed_trials else None,
        )


def reads_are_cheap(study: optuna.Study) -> bool:
    """Whether reading the study's trials costs microseconds: a journal is read on from where the last
    read ended, where a database answers a query with every trial (poll those seldom)."""
    return isinstance(study._storage, optuna.storages.JournalStorage)


def close_storage(storage: BaseStorage) -> None:
    """Release a database storage's connections (a journal file holds none)."""
    if isinstance(storage, RDBStorage):
        storage.remove_session()
        storage.engine.dispose()


def _repair_journal_tail(path: Path) -> None:
    """End the journal with a newline: drop a half-written last record (a writer killed mid-write), which
    would corrupt the next one, or end a whole one that lost only its newline."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as journal:
        journal.seek(-1, os.SEEK_END)
        if journal.read(1) == b"\n":
            return
        journal.seek(0)
        data = journal.read()
        start = data.rfind(b"\n") + 1
        try:
            whole = isinstance(json.loads(data[start:].decode("utf-8")).get("op_code"), int)
        except (ValueError, AttributeError):
            whole = False
        if whole:
            journal.seek(0, os.SEEK_END)
            journal.write(b"\n")
        else:
            journal.truncate(start)


@dataclass(frozen=True)
class JournalRepair:
    """What ``repair_journal`` did: records kept, unreadable lines dropped (number, why), the backup."""

    kept: int
    dropped: tuple[tuple[int, str], ...]
    backup: Path | None


def _read_records(data: bytes) -> tuple[list[bytes], list[tuple[int, str]]]:
    """Each readable record (without its newline), and each unreadable line's (1-based number, reason).

    A record is readable when it decodes as a JSON object and Optuna's replay applies it: random
    bytes, half lines and records without ``op_code`` are not (Optuna itself skips a bad last line
    but fails on one with records after it, and the next write would put one there).
    """
    replay = JournalStorageReplayResult("spectune-check-")
    kept: list[bytes] = []
    bad: list[tuple[int, str]] = []
    lines = data.split(b"\n")
    if not lines[-1]:
        lines.pop()  # what follows the last newline: nothing, or a record cut short
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            bad.append((number, "an empty line"))
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            bad.append((number, "not UTF-8 text"))
            continue
        except ValueError as err:
            bad.append((number, f"not JSON: {err}"[:120]))
            continue
        if not isinstance(record, dict) or not isinstance(record.get("op_code"), int):
            bad.append((number, "not a journal record: no op_code"))
            continue
        try:
            replay.apply_logs([record])
        except (ValueError, KeyError, TypeError, AttributeError, IndexError, AssertionError) as err:
            bad.append((number, f"a record Optuna cannot apply: {type(err).__name__}: {err}"[:120]))
            continue
        kept.append(line)
    return kept, bad


def _check_journal(path: Path) -> None:
    problem = journal_problem(path)
    if problem is not None:
        raise SpectuneError(problem)


def journal_problem(path: Path) -> str | None:
    """The located message for the journal's first unreadable record (``JOURNAL:LINE``), else None."""
    if not path.exists():
        return None
    _, bad = _read_records(path.read_bytes())
    if not bad:
        return None
    number, reason = bad[0]
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    return (
        f"{path}:{number}: unreadable journal record ({reason}){more}; nothing is written after it. "
        f"'spectune study repair {path}' keeps every readable record and backs the file up first"
    )


def repair_journal(journal: str) -> JournalRepair:
    """Rewrite a journal file with only its readable records, after copying it to ``JOURNAL.bak``
    (``.bak.1``, ... when taken). Hold no study open on it meanwhile: a running worker's view would go stale."""
    path = Path(journal)
    if not path.is_file():
        raise SpectuneError(f"{journal}: no journal file there")
    lock = FlockJournalLock(str(path))
    try:
        lock.acquire()
        try:
            data = path.read_bytes()
            kept, bad = _read_records(data)
            if not bad and (not data or data.endswith(b"\n")):
                return JournalRepair(kept=len(kept), dropped=(), backup=None)
            backup = _free_name(path.with_name(path.name + ".bak"))
            shutil.copy2(path, backup)
            temporary = path.with_name(f".{path.name}.repair.tmp")
            temporary.write_bytes(b"".join(record + b"\n" for record in kept))
            os.replace(temporary, path)
        finally:
            lock.release()
    except OSError as err:
        raise SpectuneError(f"{journal}: cannot repair: {err.strerror or err}") from None
    return JournalRepair(kept=len(kept), dropped=tuple(bad), backup=backup)


def _free_name(path: Path) -> Path:
    candidate, n = path, 0
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.{n}")
    return candidate


def open_study(storage: BaseStorage, name: str, *, sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    """Load an existing study; ``SpectuneError`` lists the studies the storage holds if it is not there."""
    try:
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    except KeyError:
        names = sorted(s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False))
        held = ", ".join(names) if names else "none"
        raise SpectuneError(f"no study named {name!r} in this storage (it holds: {held})") from None


def prepare_study(
    storage: BaseStorage, space: StudySpace, fingerprint: StudyFingerprint, *, storage_label: str
) -> optuna.Study:
    """Create the study, or check that the existing one was made from the same document and simulator.

    The check and the creation hold one lock (``study_creation_lock``): two documents started at the
    same moment on one study name are never both accepted."""
    objectives: tuple[Literal["maximize"], Literal["minimize"]] = ("maximize", "minimize")  # throughput, then TPOT
    directions = objectives[: len(space.objectives)]
    with study_creation_lock(storage, space.name):
        study = optuna.create_study(storage=storage, study_name=space.name, directions=directions, load_if_exists=True)
        attrs = study.user_attrs
        if ATTR_DOCUMENT_SHA256 not in attrs:
            # The hash goes last: a reader without the lock (show, export) that sees it sees the rest.
            study.set_user_attr(ATTR_SPACE, space.to_json())
            study.set_user_attr(ATTR_SIMULATOR_VERSION, fingerprint["simulator_version"])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.set_metric_names(_metric_names(space))
            study.set_user_attr(ATTR_DOCUMENT_SHA256, fingerprint["document_sha256"])
            return study
    if attrs[ATTR_DOCUMENT_SHA256] != fingerprint["document_sha256"]:
        raise SpectuneError(
            f"study {space.name!r} in {storage_label} was made from a different version of this document "
            f"(sha256 {attrs[ATTR_DOCUMENT_SHA256][:12]}, now {fingerprint['document_sha256'][:12]}); its "
            "trials would not be comparable. Undo the change, or give the study a new name (or --out/--storage)"
        )
    if attrs.get(ATTR_SIMULATOR_VERSION) != fingerprint["simulator_version"]:
        raise SpectuneError(
            f"study {space.name!r} in {storage_label} was simulated with simulator version "
            f"{attrs.get(ATTR_SIMULATOR_VERSION)!r}, this is {fingerprint['simulator_version']!r}; its trials "
            "would not be comparable. Give the study a new name (or --out/--storage)"
        )
    return study


def record_search(study: optuna.Study, strategy: str, *, keep_combos: int, refine_budget: float) -> None:
    """Keep the settings this run searches with in the study (``ATTR_SEARCH``), written when they change."""
    settings = {"strategy": strategy, "keep_combos": keep_combos, "refine_budget": refine_budget}
    if study.user_attrs.get(ATTR_SEARCH) != settings:
        study.set_user_attr(ATTR_SEARCH, settings)


def _metric_names(space: StudySpace) -> list[str]:
    return [OBJECTIVE_METRICS[objective] for objective in space.objectives]


def study_space(study: optuna.Study) -> StudySpace:
    """The space a study was made with, from its user attributes."""
    data: Any = study.user_attrs.get(ATTR_SPACE)
    if not isinstance(data, dict):
        raise SpectuneError(f"study {study.study_name!r} was not made by spectune (it has no {ATTR_SPACE} attribute)")
    return StudySpace.from_json(data)
