"""Processes released together by a barrier, to race on one storage (never by sleeping)."""

from __future__ import annotations

import multiprocessing

from study_doubles import fingerprint, make_space

from spectune.errors import SpectuneError


def _prepare(storage: str, document: str, barrier, results) -> None:  # type: ignore[no-untyped-def]
    from spectune.study._storage import close_storage, open_storage, prepare_study

    opened = open_storage(storage)
    barrier.wait()
    try:
        prepare_study(opened, make_space(name="raced"), fingerprint(document), storage_label=storage)
        results.put((document, "accepted"))
    except SpectuneError as err:
        results.put((document, str(err)))
    finally:
        close_storage(opened)


def race_two_documents(storage: str) -> list[str]:
    """Two processes prepare study 'raced' on ``storage`` from two documents at one instant: each
    one's verdict ('accepted' or its error), document 'a' first."""
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(2), context.Queue()
    processes = [
        context.Process(target=_prepare, args=(storage, document, barrier, results)) for document in ("a", "b")
    ]
    for process in processes:
        process.start()
    verdicts = dict(results.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=120)
    return [verdicts["a"], verdicts["b"]]


def accepted_count(verdicts: list[str]) -> int:
    return sum(1 for v in verdicts if v == "accepted")
