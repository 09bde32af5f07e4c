"""Test doubles for the study's storage and sampler mechanics -- never presented as a simulation.

``SyntheticEvaluator`` returns metrics from a small closed-form roofline model (acceptance per combo,
tokens per step (1 - a^(K+1)) / (1 - a), a step time that is flat below a ridge and linear above),
with deterministic pseudo-noise keyed by (seed, point). It has the two properties the structure-aware
search relies on -- separable by bucket, unimodal in K -- and a known exhaustive optimum, so tests can
check what a search finds against the truth. It is picklable (worker processes import it by module).
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from spectune.config import POLICY_RUNTIMES
from spectune.config._study import RUNTIMES
from spectune.study import Evaluator, Point, StudySpace
from spectune.study._space import Candidate, Combo, Constraint

ACCEPTANCE = {"eagle3": 0.78, "ngram": 0.45, "draft_model": 0.7}
DRAFT_MS_PER_TOKEN = {"eagle3": 0.35, "ngram": 0.0, "draft_model": 1.2}
# A runtime policy as if it verified better drafts (a stand-in: what it is worth is the simulator's to say).
RUNTIME_ACCEPTANCE_GAIN = {"vllm_adaptive": 0.01, "sglang_adaptive": 0.005}


def make_space(
    *,
    name: str = "double",
    batch_sizes: tuple[int, ...] = (1, 8, 32, 128),
    max_k: int = 6,
    methods: tuple[str, ...] = ("eagle3", "ngram"),
    constraints: tuple[Constraint, ...] = (),
    objectives: tuple[str, ...] = ("throughput",),
    weights: tuple[float, ...] = (),
    policies: tuple[str, ...] = ("k_table",),
    assumed_auc: bool = False,
) -> StudySpace:
    """``assumed_auc``: the space says that no candidate's acceptance sets confidence_auc at any bucket
    (as ``study_context`` does for a document that searches adaptive verification without one; it leaves
    out the synthesized rows' AUC, which the searches do not read)."""
    candidates = tuple(
        Candidate(m, {"method": m} | ({"model": f"org/{m}-head"} if m != "ngram" else {})) for m in methods
    )
    combos = []
    for m in methods:
        for rule in ("standard", "block"):
            for sampling in ("greedy", "probabilistic"):
                if m == "ngram" and (rule == "block" or sampling == "probabilistic"):
                    continue
                combos.append(Combo(m, rule, sampling))
    runtimes = [r for r in RUNTIMES if r in {POLICY_RUNTIMES[p] for p in policies}]
    combos = [
        Combo(c.candidate, c.rejection_sample_method, c.draft_sample_method, runtime)
        for c in combos
        for runtime in runtimes
        # SGLang's adaptive steps: eagle/eagle3, token-by-token verification, greedy chains only
        if runtime != "sglang_adaptive"
        or (
            c.candidate.startswith("eagle")
            and (c.rejection_sample_method, c.draft_sample_method) == ("standard", "greedy")
        )
    ]
    return StudySpace(
        name=name,
        candidates=candidates,
        combos=tuple(combos),
        batch_sizes=batch_sizes,
        min_num_speculative_tokens=1,
        max_num_speculative_tokens=max_k,
        max_batch_size=max(256, batch_sizes[-1]),
        batch_size_weights=weights,
        objectives=objectives,  # type: ignore[arg-type]
        constraints=constraints,
        policies=policies,
        context={"candidates": {m: {"confidence_auc_assumed_at": list(batch_sizes)} for m in methods}}
        if assumed_auc
        else {},
    )


def make_point(batch_size: int, label: str, k: int, refinement: int = 0) -> Point:
    """The point of the combo labelled 'candidate/rule/sampling[/runtime]' at K (the 'off' point at K = 0)."""
    return Point(batch_size, Combo(*label.split("/")) if k else None, k, refinement)


def true_metrics(point: Point) -> dict[str, float]:
    """Noise-free metrics of a point under the closed-form model."""
    bs, k = point.batch_size, point.num_speculative_tokens
    if k == 0:
        alpha, draft_ms, extra_ms = 0.0, 0.0, 0.0
    else:
        assert point.combo is not None
        method, rule, sampling = (
            point.combo.candidate,
            point.combo.rejection_sample_method,
            point.combo.draft_sample_method,
        )
        alpha = (
            ACCEPTANCE[method]
            + (0.03 if sampling == "probabilistic" else 0.0)
            + (0.015 if rule == "block" and sampling == "probabilistic" else 0.0)
            + RUNTIME_ACCEPTANCE_GAIN.get(point.combo.runtime, 0.0)
        )
        draft_ms = DRAFT_MS_PER_TOKEN[method] * k * (1 + bs / 64)
        extra_ms = 0.05 * k if sampling == "probabilistic" else 0.0
    tokens_per_step = (1 - alpha ** (k + 1)) / (1 - alpha) if alpha > 0 else 1.0
    verify_ms = max(12.0, 0.045 * bs * (k + 1))
    step_ms = 2.0 + verify_ms + draft_ms + extra_ms
    return {
        "throughput_tokens_per_s": bs * tokens_per_step / step_ms * 1e3,
        "tpot_p99_ms": 1.25 * step_ms / tokens_per_step,
        "mean_acceptance_length": tokens_per_step,
        "acceptance_per_position": [alpha ** (i + 1) for i in range(k)],
    }


class PointByPoint(Evaluator):
    """An evaluator of one point at a time (``__call__``); a batch is its points one after another."""

    def __call__(self, point: Point) -> dict[str, object]:
        raise NotImplementedError

    def evaluate_many(self, points: Sequence[Point]) -> list[dict[str, object]]:
        return [self(point) for point in points]


class SyntheticEvaluator(PointByPoint):
    """Closed-form metrics with +-``noise`` relative pseudo-noise; optionally slow, optionally logging calls."""

    def __init__(
        self, *, seed: int = 0, noise: float = 0.003, delay_s: float = 0.0, call_log: str | None = None
    ) -> None:
        self.seed = seed
        self.noise = noise
        self.delay_s = delay_s
        self.call_log = call_log

    def __call__(self, point: Point) -> dict[str, object]:
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.call_log is not None:
            with open(self.call_log, "a") as log:
                log.write(f"{os.getpid()} {point.key}\n")
        metrics: dict[str, object] = dict(true_metrics(point))
        digest = hashlib.sha256(f"{self.seed}|{point.key}".encode()).digest()
        u1, u2 = (int.from_bytes(digest[:8], "big") + 1) / 2**64, int.from_bytes(digest[8:16], "big") / 2**64
        gauss = math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)
        noise = self.noise / 2**point.refinement  # a refinement simulates 4x the requests
        throughput = float(metrics["throughput_tokens_per_s"]) * (1 + noise * gauss)  # type: ignore[arg-type]
        metrics["throughput_tokens_per_s"] = throughput
        metrics["throughput_stderr_tokens_per_s"] = noise * throughput
        return metrics


class PlantedEvaluator(PointByPoint):
    """Exact throughput from planted curves ``{(combo label, batch size): {K: tokens/s}}`` (K = 0 is read
    from any curve of the bucket), reported with a relative standard error of ``noise`` that halves with
    every refinement (4x the requests): a decision's noise without a random draw. The (combo, batch size)
    pairs in ``short`` run too short for a steady state at the bucket's own requests: their batch stays
    near half full and they report 60 % of their throughput (refined, they are right)."""

    def __init__(
        self,
        curves: dict[tuple[str, int], dict[int, float]],
        *,
        noise: float = 0.0,
        call_log: str | None = None,
        short: frozenset[tuple[str, int]] = frozenset(),
    ) -> None:
        self.curves = curves
        self.noise = noise
        self.call_log = call_log
        self.short = short

    def __call__(self, point: Point) -> dict[str, object]:
        if self.call_log is not None:
            with open(self.call_log, "a") as log:
                log.write(f"{os.getpid()} {point.key}\n")
        if point.is_off:
            curve = next(c for (label, bs), c in self.curves.items() if bs == point.batch_size)
        else:
            curve = self.curves[(point.label, point.batch_size)]
        throughput = curve[point.num_speculative_tokens]
        short = (point.label, point.batch_size) in self.short and not point.refinement
        return {
            "throughput_tokens_per_s": throughput * (0.6 if short else 1.0),
            "throughput_stderr_tokens_per_s": throughput * self.noise / 2**point.refinement,
            "tpot_p99_ms": 10.0,
            "mean_batch_size": point.batch_size * (0.55 if short else 0.99),
        }


def plateau_curve(low: int, high: int, *, max_k: int, level: float = 1000.0) -> dict[int, float]:
    """K = 0 at 40 % of ``level``, rising steeply to a plateau from ``low`` to ``high`` (each K 0.1 %
    above the one before: the raw best is ``high``), falling steeply after it."""
    curve = {}
    for k in range(max_k + 1):
        if k < low:
            curve[k] = level * (0.4 + 0.5 * k / low)
        elif k <= high:
            curve[k] = level * (1 + 0.001 * (k - low))
        else:
            curve[k] = level * (1 + 0.001 * (high - low)) * (1 - 0.05 * (k - high))
    return curve


def fingerprint(text: str = "doc-v1") -> dict[str, str]:
    return {"document_sha256": hashlib.sha256(text.encode()).hexdigest(), "simulator_version": "double-1"}


def journal(tmp_path: Path) -> str:
    return str(tmp_path / "study.journal")


class EnvironmentEvaluator(SyntheticEvaluator):
    """A ``SyntheticEvaluator`` that raises unless SPECTUNE_TEST_STARTER is set where it runs."""

    def __call__(self, point: Point) -> dict[str, object]:
        if "SPECTUNE_TEST_STARTER" not in os.environ:
            raise RuntimeError("SPECTUNE_TEST_STARTER is not set in this worker")
        return super().__call__(point)


class MeetingEvaluator(SyntheticEvaluator):
    """A ``SyntheticEvaluator`` whose first batch in each process waits until ``parties`` processes have
    each begun one (their pids in ``folder``): a study run by that many workers then has each of them
    evaluate points, however late one starts (it waits for an event, never for a time)."""

    def __init__(self, folder: str, parties: int) -> None:
        super().__init__()
        self.folder, self.parties, self._met = folder, parties, False

    def evaluate_many(self, points: Sequence[Point]) -> list[dict[str, object]]:
        if not self._met:
            Path(self.folder, str(os.getpid())).touch()
            while len(list(Path(self.folder).iterdir())) < self.parties:
                time.sleep(0.01)
            self._met = True
        return super().evaluate_many(points)


class GatedEvaluator(SyntheticEvaluator):
    """A ``SyntheticEvaluator`` that, in each process, evaluates its first batch at once and every later
    one only once the file ``gate`` exists (a test opens it when it has seen what it waits for)."""

    def __init__(self, gate: str, call_log: str) -> None:
        super().__init__(call_log=call_log)
        self.gate, self._batches = gate, 0

    def evaluate_many(self, points: Sequence[Point]) -> list[dict[str, object]]:
        if self._batches:
            while not os.path.exists(self.gate):
                time.sleep(0.01)
        self._batches += 1
        return super().evaluate_many(points)


HALTED = b"halted\n"


class HaltingEvaluator(SyntheticEvaluator):
    """A ``SyntheticEvaluator`` for runs a test kills. In each worker process, a batch that begins once
    the process has evaluated ``after`` points writes ``HALTED`` to stdout (inherited from the run's
    process: a test reads it from a pipe, an event rather than a poll) and is held until the run's
    process is gone (its death closes the parent's sentinel; run in the run's own process, until that
    is killed): killed mid-trial, or orphaned with work left. Each process thus evaluates at most its
    batches up to ``after`` points and one more."""

    def __init__(self, after: int, call_log: str | None = None) -> None:
        super().__init__(call_log=call_log)
        self.after, self._evaluated = after, 0

    def evaluate_many(self, points: Sequence[Point]) -> list[dict[str, object]]:
        if self._evaluated >= self.after:
            os.write(1, HALTED)
            parent = multiprocessing.parent_process()
            if parent is None:  # workers=1: the run's own process, held until the test kills it
                while True:
                    signal.pause()
            parent.join()
        self._evaluated += len(points)
        return super().evaluate_many(points)


class HeldPointEvaluator(SyntheticEvaluator):
    """A ``SyntheticEvaluator`` for a TPE run of many workers: the study's first batch to begin (the one
    that creates the file ``marker``) waits, before it evaluates, until another running trial proposes
    one of its points, or the study has its ``n_trials`` trials. So a trial that meets a point being
    evaluated is made to happen whenever TPE repeats that point (it waits on trials' states, never on a
    time; no deadlock: the other workers run on)."""

    def __init__(self, space: StudySpace, storage: str, marker: str, *, n_trials: int, call_log: str) -> None:
        super().__init__(call_log=call_log)
        self.space, self.storage, self.marker, self.n_trials = space, storage, marker, n_trials

    def evaluate_many(self, points: Sequence[Point]) -> list[dict[str, object]]:
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return super().evaluate_many(points)
        import optuna
        from optuna.trial import TrialState

        from spectune.study._records import trial_point
        from spectune.study._storage import open_storage

        study = optuna.load_study(study_name=self.space.name, storage=open_storage(self.storage))
        mine = set(points)
        while True:
            trials = study.get_trials(deepcopy=False)
            running = [trial_point(self.space, t) for t in trials if t.state == TrialState.RUNNING]
            if len(trials) >= self.n_trials or sum(point in mine for point in running) > len(mine):
                break
            time.sleep(0.005)  # a poll of the trials' states, not a wait for a time to pass
        return super().evaluate_many(points)
