"""Verifying ahead: the kernels verify requests' steps before the loops reach them, and every
simulation's numbers are those of verifying step by step, bit for bit."""

import numpy as np
import pytest
import torch
from engine_cases import lockstep_documents, numbers, on_cuda, on_the_kernels, row_table_documents, with_engine

from spectune.simulator import _ahead, simulate, simulate_many

_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # where the documents' device: auto resolves


def _ahead_documents(simulation_document):
    """Three documents over two acceptance bins and K 2-5 (``row_table_documents``), one whose K changes
    with the batch, and one of two data-parallel replicas."""
    documents = row_table_documents(simulation_document)
    documents.append(lockstep_documents(simulation_document, "block", "probabilistic", vocab=128, requests=12)[2])
    documents.append(
        simulation_document(
            seed=4,
            speculative={
                "method": "eagle3",
                "num_speculative_tokens": 3,
                "rejection_sample_method": "block",
                "draft_sample_method": "probabilistic",
            },
            hardware={"gpu": "h100-sxm", "num_gpus": 4},
            target_model={"preset": "llama-3.1-8b", "tensor_parallel_size": 2},
            workload={"concurrency": 6, "num_requests": 14, "temperature": 0.7, "vocab_size": 128},
            simulation={"bank_rows": 64},
        )
    )
    return on_the_kernels(documents)


def _watch_verifiers(monkeypatch):
    verifiers = []
    original_init = _ahead.AheadVerifier.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        verifiers.append(self)

    monkeypatch.setattr(_ahead.AheadVerifier, "__init__", init)
    return verifiers


def test_verifying_ahead_gives_the_step_by_step_numbers(simulation_document, monkeypatch):
    """CUDA's engine (counter draws; here the kernels under the interpreter): the same numbers verified
    ahead as step by step, in lockstep and alone, over acceptance bins, a K schedule and replicas;
    and far fewer calls than steps."""
    documents = _ahead_documents(simulation_document)
    verifiers = _watch_verifiers(monkeypatch)
    ahead = simulate_many(with_engine(documents, "ahead"), baseline=False, draws="counter")
    assert len(verifiers) == 1 and verifiers[0].refills > 0
    steps = max(r.simulated_steps for r in ahead)
    assert verifiers[0].calls < steps / 3, (verifiers[0].calls, steps)
    alone = simulate(with_engine(documents, "ahead")[3], baseline=False, draws="counter")
    step_by_step = simulate_many(with_engine(documents, "step"), baseline=False, draws="counter")
    assert len(verifiers) == 2  # no third: step by step made none
    assert [numbers(r) for r in ahead] == [numbers(r) for r in step_by_step]
    assert numbers(alone) == numbers(step_by_step[3])
    assert all(r.num_accepted_tokens > 0 for r in ahead)


def test_verifying_ahead_wastes_few_rows(simulation_document, monkeypatch):
    """Each request is verified to its end in rounds that start from the fewest steps it can take, so
    rows past a request's end (verified, never read) stay a small share of those read."""
    document = on_the_kernels(
        [
            simulation_document(
                speculative={"method": "eagle3", "num_speculative_tokens": 4},
                acceptance={"conditional_rates": [0.8, 0.7, 0.6, 0.5]},
                workload={"concurrency": 8, "num_requests": 64, "output_tokens": 96, "temperature": 0.7,
                          "vocab_size": 128},
                simulation={"bank_rows": 16, "engine": "ahead"},
            )
        ]
    )[0]  # fmt: skip
    verifiers = _watch_verifiers(monkeypatch)
    result = simulate(document, baseline=False, draws="counter")
    verified = sum(table.rows for table in verifiers[0].tables.values())
    read = result.num_drafts  # one row a request's step
    assert read <= verified <= 1.25 * read, (verified, read)
    # the loop met the GPU a few times a batch of requests, not every step
    assert verifiers[0].refills <= 64 // 8 + 4, verifiers[0].refills


def test_a_table_keeps_counts_by_request_and_step_and_extends_its_ranges():
    counts = np.zeros((3, 4), dtype=np.int8)
    table = _ahead._CountTable(None, 2, counts, np.zeros(3, np.int64), np.zeros(3, np.int64))  # type: ignore[arg-type]
    assert list(_ahead._ranges(np.array([5, 0]), np.array([2, 3]))) == [5, 6, 0, 1, 2]
    # nothing known yet: the fewest steps the tokens can take (k + 1 = 3 a step), never more
    assert list(table.steps_for(np.array([1, 3, 4, 10]), first_round=True)) == [1, 1, 2, 4]
    table.store(np.array([0, 2]), np.array([0, 3]), np.array([3, 2]), np.array([1, 2, 3, 3, 1], dtype=np.int8))
    assert (
        table.counts.shape[1] >= 5
        and table.counts[0, :3].tolist() == [1, 2, 3]
        and table.counts[2, 3:5].tolist() == [3, 1]
    )
    assert table.covered(np.array([0, 0, 2, 2, 1]), np.array([2, 3, 3, 2, 0])).tolist() == [
        True,
        False,
        True,
        False,
        False,
    ]
    table.store(np.array([0]), np.array([3]), np.array([1]), np.array([2], dtype=np.int8))  # extends 0's range
    assert (table.lo[0], table.hi[0]) == (0, 4)
    table.store(np.array([2]), np.array([7]), np.array([1]), np.array([1], dtype=np.int8))  # past a gap: starts over
    assert (table.lo[2], table.hi[2]) == (7, 8)
    # counts known: the mean seen (2 here), plus a tenth
    assert table.emitted == 13 and table.rows == 7
    assert list(table.steps_for(np.array([2, 20]), first_round=False)) == [int(np.ceil(2 * 1.1 / (13 / 7))), 12]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_verifying_ahead_gives_the_step_by_step_numbers(simulation_document, monkeypatch):
    """On CUDA with the kernels at V = 4096: calls of 512 and 4096 rows, the numbers of one step at a time."""
    documents = on_cuda(
        lockstep_documents(simulation_document, "block", "probabilistic", backend="triton", vocab=4096)[:3]
    )
    verifiers = _watch_verifiers(monkeypatch)
    ahead = simulate_many(documents, baseline=False)
    assert len(verifiers) == 1 and (verifiers[0].small.verifier.total, verifiers[0].large.verifier.total) == (512, 4096)
    step_by_step = simulate_many(with_engine(documents, "step"), baseline=False)
    assert [numbers(r) for r in ahead] == [numbers(r) for r in step_by_step]


@pytest.mark.parametrize(
    ("backend", "draws", "why"),
    [
        ("reference", "counter", f"kernel_backend resolves to 'reference' on {_DEVICE}"),
        (
            "triton",
            "generator",
            rf"the simulation draws from generators on {_DEVICE} \(counter-based draws are CUDA's\)",
        ),
    ],
)
def test_verifying_ahead_without_the_kernels_or_counter_draws_is_refused_naming_the_option(
    simulation_document, backend, draws, why
):
    """``engine: ahead`` needs the kernels and counter-based draws (CUDA's): elsewhere a user error that
    names the field, the reason and what works."""
    from spectune.errors import SpectuneError

    document = with_engine(
        lockstep_documents(simulation_document, "block", "probabilistic", backend=backend)[:1], "ahead"
    )[0]
    with pytest.raises(SpectuneError, match=rf"^simulation\.engine: 'ahead' .*{why}: use engine: auto or step$"):
        simulate(document, baseline=False, draws=draws)
