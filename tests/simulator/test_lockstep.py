"""Lockstep: simulations run side by side (one rejection-sampling call a step) give their numbers alone, bit for bit."""

import pytest
import torch
from engine_cases import lockstep_documents, numbers, on_cuda, on_the_kernels, row_table_documents, with_engine

from spectune.simulator import lockstep_groups, simulate, simulate_many


@pytest.mark.parametrize(
    ("rule", "sampling"), [("standard", "greedy"), ("block", "probabilistic"), ("standard", "probabilistic")]
)
def test_lockstep_equals_alone_on_the_twin(simulation_document, rule, sampling):
    documents = lockstep_documents(simulation_document, rule, sampling)
    assert sorted(map(len, lockstep_groups(documents))) == [1, 3]  # the three that verify share a call
    together = simulate_many(documents, baseline=True)
    for document, result in zip(documents, together):
        alone = simulate(document, baseline=True)
        assert numbers(result) == numbers(alone)
    assert together[0].num_accepted_tokens > 0 and together[2].num_accepted_tokens > 0


def test_lockstep_equals_alone_on_the_kernels(simulation_document):
    """The Triton kernels (here under the interpreter) over persistent buffers shared by the group."""
    documents = lockstep_documents(
        simulation_document, "block", "probabilistic", backend="triton", vocab=128, requests=12
    )[:3]
    together = simulate_many(documents, baseline=False)
    for document, result in zip(documents, together):
        assert numbers(result) == numbers(simulate(document, baseline=False))


def test_a_memory_budget_splits_the_group_and_keeps_the_numbers(simulation_document):
    documents = lockstep_documents(simulation_document, "standard", "greedy")[:3]
    tight = [
        d.model_copy(update={"simulation": d.simulation.model_copy(update={"lockstep_memory_gib": 1e-4})})
        for d in documents
    ]
    assert [len(g) for g in lockstep_groups(tight)] == [1, 1, 1]
    assert [len(g) for g in lockstep_groups(documents)] == [3]
    assert [numbers(r) for r in simulate_many(tight, baseline=False)] == [
        numbers(r) for r in simulate_many(documents, baseline=False)
    ]


def test_the_default_memory_budget_is_split_between_the_processes_sharing_the_device(simulation_document, monkeypatch):
    """A study's N local workers each see the same free memory when they start: each takes 1/N of the
    default budget, so together they hold what one process alone would."""
    from spectune.simulator import _groups

    documents = lockstep_documents(simulation_document, "standard", "greedy")[:3]
    together = sum(_groups._member_bytes(d) for d in documents)
    monkeypatch.setattr(_groups, "_available_ram", lambda: 4 * 1.5 * together)  # the CPU's default: a quarter of it
    monkeypatch.setattr("torch.cuda.mem_get_info", lambda device=None: (2 * 1.5 * together, 0))  # CUDA's: half
    assert [len(g) for g in lockstep_groups(documents)] == [3]
    assert len(lockstep_groups(documents, processes=2)) > 1
    budget = {"lockstep_memory_gib": 1.5 * together / 2**30}
    explicit = [d.model_copy(update={"simulation": d.simulation.model_copy(update=budget)}) for d in documents]
    assert [len(g) for g in lockstep_groups(explicit, processes=2)] == [3]  # a set budget is each process's


def test_different_rules_do_not_share_a_call(simulation_document):
    documents = (
        lockstep_documents(simulation_document, "standard", "greedy")[:1]
        + lockstep_documents(simulation_document, "block", "greedy")[:1]
    )
    assert [len(g) for g in lockstep_groups(documents)] == [1, 1]


def test_lockstep_equals_alone_with_replicas_and_acceptance_bins(simulation_document):
    """Data-parallel replicas are members of their own (their loops share the document's streams), and
    a bin's synthesizer joins the engine when a running batch first falls in it."""
    replicas = simulation_document(
        speculative={"method": "eagle3", "num_speculative_tokens": 3},
        hardware={"gpu": "h100-sxm", "num_gpus": 4},
        target_model={"preset": "llama-3.1-8b", "tensor_parallel_size": 2},
        workload={"concurrency": 12, "num_requests": 40, "temperature": 0.7},
        simulation={"bank_rows": 64},
    )
    bins = simulation_document(
        seed=3,
        speculative={"method": "eagle3", "num_speculative_tokens": 2},
        acceptance={
            "conditional_rates": [0.5],
            "bins": [
                {"min_running": 1, "max_running": 4, "conditional_rates": [0.9]},
                {"min_running": 5, "max_running": 64, "conditional_rates": [0.3]},
            ],
        },
        workload={"concurrency": 8, "num_requests": 40, "temperature": 0.7},
        simulation={"bank_rows": 64},
    )
    assert replicas.num_replicas == 2
    together = simulate_many([replicas, bins], baseline=False)
    assert [len(g) for g in lockstep_groups([replicas, bins])] == [2]
    for document, result in zip([replicas, bins], together):
        assert numbers(result) == numbers(simulate(document, baseline=False))
    assert together[0].num_requests == 40 and together[1].num_drafts > 0


def test_kernels_over_row_tables_give_the_twins_numbers(simulation_document):
    """The kernels read each step's rows in the banks of every synthesizer the group meets (another
    document's, another acceptance bin's: offsets from the first bank, of either sign) and give the
    numbers of the twin, which takes the same bank rows."""
    documents = row_table_documents(simulation_document)
    kernels = on_the_kernels(documents)
    assert [len(g) for g in lockstep_groups(kernels)] == [3]
    twin = simulate_many(documents, baseline=False)
    for result, expected in zip(simulate_many(kernels, baseline=False), twin):
        assert numbers(result) == numbers(expected)
    assert all(r.num_accepted_tokens > 0 for r in twin)


def test_whole_call_steps_point_every_row_inside_a_bank(simulation_document, monkeypatch):
    """With counter draws (CUDA's engine) the step writer writes every row of the call whatever the
    members' batch sizes, and the kernels read every row, those past a batch and those of a member
    without a step too. Here over synthesizers of three documents and two acceptance bins (banks at
    offsets of either sign from the first): before every kernel launch each row table entry must be a
    row of one of the engine's banks, and the rows past a batch row 0 of one."""
    from spectune.simulator import _kernel_call
    from spectune.simulator._kernels import KernelVerifier

    verifiers, partial_steps, rows_past = [], [], []
    original_init, original_start, original_launch = (
        KernelVerifier.__init__,
        KernelVerifier.start,
        _kernel_call.launch,
    )

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        verifiers.append(self)

    def start(self, requests):
        partial_steps.extend(len(ids) < self.slots[id(member)][1] for member, (ids, _, _) in requests.items())
        original_start(self, requests)

    def checked_launch(inputs, plan, rows):
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():  # no host sync in a capture
            return original_launch(inputs, plan, rows=rows)
        verifier = verifiers[-1]
        out_of_batch = verifier.staged_rows[2] == 0
        for table, column in [(verifier.target_rows, 0), (verifier.draft_rows, 1)]:
            inside = torch.zeros_like(table, dtype=torch.bool)
            first_rows = torch.zeros(table.shape[0], dtype=torch.bool, device=table.device)
            for synthesizer in verifier.keep:
                start, rows_ = verifier.bank_offsets[id(synthesizer)][column], synthesizer.banks()[0].shape[0]
                entries = table - start
                inside |= (entries >= 0) & (entries < rows_ * verifier.vocab) & (entries % verifier.vocab == 0)
                first_rows |= (entries == 0).all(dim=1)
            assert bool(inside.all()), f"row table {column} points outside the banks: {table[~inside][:4].tolist()}"
            assert bool(first_rows[out_of_batch].all())
        rows_past.append(int(out_of_batch.sum()))
        return original_launch(inputs, plan, rows=rows)

    monkeypatch.setattr(KernelVerifier, "__init__", init)
    monkeypatch.setattr(KernelVerifier, "start", start)
    monkeypatch.setattr(_kernel_call, "launch", checked_launch)
    documents = with_engine(on_the_kernels(row_table_documents(simulation_document)), "step")  # a call a step
    results = simulate_many(documents, baseline=False, draws="counter")
    assert len(verifiers) == 1 and len(verifiers[0].keep) == 4  # two documents' banks and two bins'
    assert any(partial_steps) and max(rows_past) > 0 and all(r.num_accepted_tokens > 0 for r in results)


@pytest.mark.parametrize("engine", ["step", "ahead"])
def test_counter_draws_give_the_kernels_and_the_twin_the_same_numbers(simulation_document, engine):
    """CUDA's draws (each request's own Philox stream, the kernels' rows written by the step writer, the
    twin's made on the host), tried on the CPU: the kernels give the twin's numbers over banks of
    several documents and acceptance bins, and a simulation's numbers are the same alone."""
    documents = row_table_documents(simulation_document)
    twin = simulate_many(documents, baseline=False, draws="counter")
    kernels = with_engine(on_the_kernels(documents), engine)
    assert [numbers(r) for r in simulate_many(kernels, baseline=False, draws="counter")] == [numbers(r) for r in twin]
    assert numbers(simulate(documents[2], baseline=False, draws="counter")) == numbers(twin[2])
    assert all(r.num_accepted_tokens > 0 for r in twin)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_every_cuda_step_replays_one_graph_and_gives_the_eager_numbers(simulation_document, monkeypatch):
    """On CUDA a whole step (staging copy, step writer, kernel launches, counts copy) is one graph: it
    runs eagerly once (compiling), is captured at the second step and replayed at every later one,
    whatever the members' k and acceptance bins; the numbers equal those of eager steps only."""
    from spectune.simulator._kernel_call import KernelCall

    documents = on_cuda(
        lockstep_documents(simulation_document, "block", "probabilistic", backend="triton", vocab=4096)[:3]
    )
    documents = with_engine(documents, "step")  # step by step: a graph replay a step
    launches: list[int] = []
    original_launch = KernelCall.launch_once

    def counting_launch(self):
        launches.append(1)
        original_launch(self)

    monkeypatch.setattr(KernelCall, "launch_once", counting_launch)
    replayed = simulate_many(documents, baseline=False)
    assert len(launches) == 2  # one engine: the eager first step and the capture
    monkeypatch.setattr(KernelCall, "run", lambda self: self.launch_once())
    eager = simulate_many(documents, baseline=False)
    assert len(launches) > 2 + max(r.simulated_steps for r in eager) // 2
    assert [numbers(r) for r in replayed] == [numbers(r) for r in eager]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_kernels_give_the_cuda_twins_numbers(simulation_document):
    """On CUDA both backends draw from each request's counter-based stream (the kernels' rows written
    on the device by the step writer, the twin's made on the host): the same rows, the same numbers."""
    documents = on_cuda(lockstep_documents(simulation_document, "block", "probabilistic", vocab=4096)[:3])
    twin = simulate_many(documents, baseline=False)
    for result, expected in zip(simulate_many(on_the_kernels(documents), baseline=False), twin):
        assert numbers(result) == numbers(expected)
    assert all(r.num_accepted_tokens > 0 for r in twin)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs a CUDA device")
def test_cuda_engines_of_a_process_reuse_their_pinned_buffers(simulation_document):
    """The pinned buffers a step's graph copies from and to go back to the engine's pool, not to torch's
    pinned-memory cache, and later engines of other sizes take them from there."""
    from spectune.simulator._kernel_call import pooled_buffers

    documents = on_cuda(
        lockstep_documents(simulation_document, "block", "probabilistic", backend="triton", vocab=4096)[:3]
    )
    for rounds in range(3):
        for document in documents:  # engines of 16 rows each, then all three together (48 rows)
            simulate_many([document], baseline=False)
        simulate_many(documents, baseline=False)
        if rounds == 0:
            pool = set(pooled_buffers())
    assert len(pool) >= 2 and set(pooled_buffers()) == pool


@pytest.mark.parametrize("engine", ["step", "ahead"])
def test_an_ended_engine_is_freed_without_the_cyclic_garbage_collector(simulation_document, monkeypatch, engine):
    """An engine's verifier and kernel call hold each other while it runs (the call's writer is a method
    of the verifier); ending the engine breaks that, so reference counting frees it at once. Left to
    the cyclic collector, a CUDA engine's graph could be freed inside a later engine's graph capture,
    whose memory release invalidates that capture."""
    import gc
    import weakref

    from spectune.simulator._kernels import KernelVerifier

    engines = []
    original_init = KernelVerifier.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        engines.append(weakref.ref(self))

    monkeypatch.setattr(KernelVerifier, "__init__", init)
    documents = on_the_kernels(
        lockstep_documents(simulation_document, "block", "probabilistic", vocab=128, requests=12)[:2]
    )
    gc.disable()
    try:
        results = simulate_many(with_engine(documents, engine), baseline=False, draws="counter")
        assert engines and all(engine() is None for engine in engines)  # verifying ahead: a call per size
    finally:
        gc.enable()
    assert all(r.num_accepted_tokens > 0 for r in results)
