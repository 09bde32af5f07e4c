"""``simulate`` / ``simulate_many``: build the pieces simulation documents ask for, run their loops (in
lockstep where they can share a call), summarise."""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from spectune.config import SimulationDocument
from spectune.simulator._backend import on_device, resolve_backend, resolve_device
from spectune.simulator._document_run import DocumentRun, Progress
from spectune.simulator._drive import drive
from spectune.simulator._groups import lockstep_groups
from spectune.simulator._metrics import SimulationResult
from spectune.simulator._verifiers import Draws, draws_for, make_verifier

__all__ = ["simulate", "simulate_many"]


def simulate(
    document: SimulationDocument,
    *,
    baseline: bool | None = None,
    progress: Progress | None = None,
    draws: Draws | None = None,
) -> SimulationResult:
    """Simulate ``document``: its speculative config on its deployment and workload.

    ``baseline`` (default: ``document.simulation.baseline``) also simulates the same requests without
    speculation, for ``speedup_vs_no_spec``. ``progress(finished requests, total)`` is called per step.
    ``draws`` (see ``simulate_many``). Same document, same seed: the same numbers.
    """
    return simulate_many([document], baseline=baseline, progress=progress, draws=draws)[0]


def simulate_many(
    documents: Sequence[SimulationDocument],
    *,
    baseline: bool | None = None,
    progress: Progress | None = None,
    processes: int = 1,
    draws: Draws | None = None,
) -> list[SimulationResult]:
    """Simulate several documents, side by side where they can share a rejection-sampling call.

    Documents on one device and backend with the same vocabulary, verification rule, draft sampling
    (and synthetic rates) run in lockstep groups sized to ``simulation.lockstep_memory_gib``; each
    result equals what ``simulate`` returns for its document alone, bit for bit (wall times aside).
    ``progress`` is passed on only for a single document. ``processes``: how many processes simulate
    on this device at once (a study's local workers); the default memory budget is split between them.
    ``draws``: where a step's logit rows are drawn from, 'generator' (each simulation's generator) or
    'counter' (each request's counter-based stream); default counter on CUDA, generator elsewhere
    (``simulation.engine: ahead`` needs counter draws). The engine (``simulation.engine``) never
    changes the numbers; the draws do.
    """
    results: list[SimulationResult | None] = [None] * len(documents)
    for group in lockstep_groups(documents, processes):
        devices = {resolve_device(documents[i].simulation.device) for i in group}
        device = devices.pop()
        previous_threads = torch.get_num_threads()
        if device.type == "cpu":
            torch.set_num_threads(documents[group[0]].simulation.cpu_threads)  # restored below
        try:
            with on_device(device):
                group_results = _simulate_group(
                    [documents[i] for i in group],
                    device,
                    baseline=baseline,
                    progress=progress if len(documents) == 1 else None,
                    draws=draws,
                )
        finally:
            torch.set_num_threads(previous_threads)
        for i, result in zip(group, group_results):
            results[i] = result
    return [r for r in results if r is not None]


def _simulate_group(
    documents: list[SimulationDocument],
    device: torch.device,
    *,
    baseline: bool | None,
    progress: Progress | None,
    draws: Draws | None,
) -> list[SimulationResult]:
    started = time.perf_counter()
    runs = [DocumentRun(document, device, progress) for document in documents]
    first, spec = documents[0], documents[0].speculative
    backend = resolve_backend(first.simulation.kernel_backend, device)
    engine = first.simulation.engine
    synthetic = (
        spec.synthetic_conditional_rates() if spec is not None and spec.rejection_sample_method == "synthetic" else None
    )
    engine_started = time.perf_counter()
    members = [member for run in runs for member in run.members]
    verifier = make_verifier(
        members,
        engine=engine,
        draws=draws_for(device, draws),
        backend=backend,
        device=device,
        method=spec.rejection_sample_method if spec is not None else "standard",  # plain: never verifies
        synthetic_rates=torch.tensor(synthetic, dtype=torch.float32, device=device) if synthetic else None,
        vocab_size=first.workload.vocab_size,
        draft_logits=spec is not None and spec.draft_sample_method == "probabilistic",
    )
    try:
        drive(members, verifier)  # fills each member's trace and wall-time shares
    finally:
        verifier.close()
    engine_s = time.perf_counter() - engine_started
    total_rows = max(sum(m.rows_verified for m in members), 1)
    results = []
    for run in runs:
        rows = sum(m.rows_verified for m in run.members)
        own_s = run.setup_s + engine_s * rows / total_rows if len(runs) > 1 else time.perf_counter() - started
        results.append(run.summary(baseline, own_s))
    return results
