"""Races on one storage: processes released together by a barrier (never by sleeping), and a storage
wrapper that starves a worker between its read of the study and its claim of a point."""

from __future__ import annotations

import multiprocessing
import time

from optuna.storages import BaseStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import FrozenTrial
from study_doubles import SyntheticEvaluator, fingerprint, make_space

from spectune.errors import SpectuneError


def _prepare(storage: str, name: str, document: str, barrier, results) -> None:  # type: ignore[no-untyped-def]
    from spectune.study._storage import close_storage, open_storage, prepare_study

    opened = open_storage(storage)
    barrier.wait()
    try:
        prepare_study(opened, make_space(name=name), fingerprint(document), storage_label=storage)
        results.put((document, "accepted"))
    except SpectuneError as err:
        results.put((document, str(err)))
    finally:
        close_storage(opened)


def race_two_documents(storage: str, name: str = "raced") -> list[str]:
    """Two processes prepare study ``name`` on ``storage`` from two documents at one instant: each
    one's verdict ('accepted' or its error), document 'a' first."""
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(2), context.Queue()
    processes = [
        context.Process(target=_prepare, args=(storage, name, document, barrier, results)) for document in ("a", "b")
    ]
    for process in processes:
        process.start()
    verdicts = dict(results.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=120)
    return [verdicts["a"], verdicts["b"]]


def accepted_count(verdicts: list[str]) -> int:
    return sum(1 for v in verdicts if v == "accepted")


class SlowClaims(BaseStorage, BaseHeartbeat):
    """A storage (``inner``) seen through a starved worker: every point it claims (a param write)
    comes ``claim_delay_s`` after it read the study, and with ``hold_first`` its first trial, once
    created, stays unclaimed until a later-numbered trial exists (another worker is waiting on it)
    and then ``hold_s`` longer -- longer than any grace a worker could give an unclaimed trial."""

    def __init__(self, inner: BaseStorage, *, claim_delay_s: float, hold_first: bool, hold_s: float) -> None:
        self.inner = inner
        self.claim_delay_s = claim_delay_s
        self.hold_first = hold_first
        self.hold_s = hold_s
        self.held = False

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        trial_id = self.inner.create_new_trial(study_id, template_trial)
        if self.hold_first and not self.held:
            self.held = True
            number = self.inner.get_trial(trial_id).number
            print(f"holding trial {number}", flush=True)  # the test starts the other workers now
            while not any(t.number > number for t in self.inner.get_all_trials(study_id, deepcopy=False)):
                time.sleep(0.05)
            time.sleep(self.hold_s)
        return trial_id

    def set_trial_param(self, trial_id: int, param_name: str, param_value_internal: float, distribution) -> None:  # type: ignore[no-untyped-def]
        time.sleep(self.claim_delay_s)
        self.inner.set_trial_param(trial_id, param_name, param_value_internal, distribution)

    def get_heartbeat_interval(self) -> int | None:
        return self.inner.get_heartbeat_interval() if isinstance(self.inner, BaseHeartbeat) else None

    def remove_session(self) -> None:
        self.inner.remove_session()


def _forward(name: str):  # type: ignore[no-untyped-def]
    def forwarded(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)(*args, **kwargs)

    return forwarded


for _name in (BaseStorage.__abstractmethods__ | BaseHeartbeat.__abstractmethods__) - set(vars(SlowClaims)):
    setattr(SlowClaims, _name, _forward(_name))
SlowClaims.__abstractmethods__ = frozenset()


def run_starved_worker(storage: str, name: str, index: int, n_trials: int) -> None:
    """One worker process of a 40-point-budget structured study on ``storage``, through ``SlowClaims``:
    worker 0 holds its first trial unclaimed past the old 15 s grace for unowned trials, and says
    so on stdout when it starts holding it."""
    import optuna

    from spectune.study import run_study
    from spectune.study._records import UNOWNED_GRACE
    from spectune.study._storage import close_storage, open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    opened = open_storage(storage)
    slow = SlowClaims(opened, claim_delay_s=0.02, hold_first=index == 0, hold_s=UNOWNED_GRACE.total_seconds() + 5)
    try:
        run_study(
            make_space(name=name, batch_sizes=(1, 8, 64), max_k=4),
            SyntheticEvaluator(delay_s=0.05),
            fingerprint(),
            storage=slow,
            strategy="structured",
            n_trials=n_trials,
        )
    finally:
        close_storage(opened)
