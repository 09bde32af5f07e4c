"""The warm-up's list of kernel variants: what simulations launch, no more and no less.

The kernels run here under Triton's interpreter, so the calls a simulation makes on the CPU are recorded
and held to ``kernel_variants`` for the CPU; a CUDA engine differs only in the sizes that ``slot_rows``
and ``ahead_call_rows`` give it and in the plans of a GPU, which the CUDA tests below check by
themselves (``plan`` is pure). Documents come from the studies users run: each combo of a study at one
bucket, with a short workload.
"""

import os
import random
from pathlib import Path

import pytest
import torch

from spectune.config import load_document
from spectune.kernels import plan
from spectune.simulator import kernel_variants, simulate_many, warm_up
from spectune.simulator._document_run import DocumentRun
from spectune.simulator._kernel_call import KernelCall, slot_rows
from spectune.simulator._warm_up import KernelVariants, member_concurrencies
from spectune.study import Point, space_from_document
from spectune.study._document import simulation_document, simulation_documents

STUDIES = Path(__file__).resolve().parents[2] / "studies"
CPU, CUDA = torch.device("cpu"), torch.device("cuda")
H200_SMS = 132
# The two recording tests below hold the CPU engine's launches under the interpreter to the CPU's list. On
# a CUDA test device the documents run there, at the GPU's call sizes, where a short simulation fills only
# the small one: the CUDA list is checked end to end by benchmarks/warm_up_gpu.sh instead (the study after
# the warm-up adds no entry to Triton's cache).
CPU_RECORDING = pytest.mark.skipif(
    os.environ.get("SPECTUNE_TEST_DEVICE", "cpu") != "cpu",
    reason="records the CPU engine's launches; on CUDA benchmarks/warm_up_gpu.sh checks the list end to end",
)


def _study(name):
    return load_document(STUDIES / name).model


def _documents(study, combos, engine, batch_size, num_requests, output_tokens):
    """A simulation of each of ``study``'s ``combos`` at ``batch_size``, on the kernels under the
    interpreter, with a short workload (``output_tokens(K)``). Combos of one rule and draft sampling (one
    kind of engine) share a K; each kind has its own."""
    kinds = list(dict.fromkeys((c.rejection_sample_method, c.draft_sample_method) for c in combos))
    ks = space_from_document(study).k_values[1:]
    documents = []
    for combo in combos:
        k = ks[(3 * kinds.index((combo.rejection_sample_method, combo.draft_sample_method)) + 2) % len(ks)]
        document = simulation_document(study, Point(batch_size, combo, k))
        workload = {"num_requests": num_requests, "output_tokens": output_tokens(k), "prompt_tokens": 16}
        simulation = {"kernel_backend": "triton", "engine": engine, "bank_rows": 64}
        documents.append(
            document.model_copy(
                update={
                    "workload": document.workload.model_copy(update=workload),
                    "simulation": document.simulation.model_copy(update=simulation),
                }
            )
        )
    return documents


def _launched(monkeypatch, documents):
    """(calls, step writers) the kernel calls of ``simulate_many(documents)`` (counter draws) were made for."""
    calls, writers = set(), set()
    original = KernelCall.__init__

    def init(self, inputs, rows, counts, writer):
        original(self, inputs, rows, counts, writer)
        draft = inputs.draft_logits is not None
        calls.add((inputs.method, draft, inputs.vocab_size, inputs.num_drafts, self.plan))
        if writer is not None:
            writers.add((draft, inputs.vocab_size))

    monkeypatch.setattr(KernelCall, "__init__", init)
    results = simulate_many(documents, baseline=False, draws="counter")
    assert all(r.num_accepted_tokens > 0 for r in results)
    return calls, writers


def _listed(variants: KernelVariants):
    return {(c.method, c.draft_logits, c.vocab, c.num_drafts, c.plan) for c in variants.calls}


@pytest.mark.slow
@CPU_RECORDING
def test_verifying_ahead_a_study_launches_exactly_the_variants_listed_for_its_documents(monkeypatch):
    # Every combo served with K drafts, at batch size 8: a refill's first round verifies the 8 running and
    # 16 upcoming requests' fewest steps (every draft accepted), 24 x 3 rows, which fill the large call
    # (128 rows on the CPU) past half; later rounds take the small one (32).
    study = _study("decision.yaml")
    combos = space_from_document(study).runtime_combos("none")
    documents = _documents(study, combos, "ahead", 8, 24, lambda k: 3 * (k + 1) + 1)
    calls, writers = _launched(monkeypatch, documents)
    variants = kernel_variants(documents, CPU, 1, draws="counter")
    assert calls == _listed(variants)
    assert writers == set(variants.step_writers) == {(False, 256), (True, 256)}
    assert {c.num_requests for c in variants.calls} == {32, 128}  # the CPU's two call sizes


@pytest.mark.slow
@CPU_RECORDING
def test_step_by_step_each_engine_launches_exactly_the_variants_listed_for_its_document(monkeypatch):
    # eagle3's last combo of each rule and draft sampling: served with a runtime policy (SGLang's adaptive
    # steps, vLLM's adaptive verification), one document an engine, so that each call holds its own rows.
    study = _study("decision.yaml")
    eagle3 = [c for c in space_from_document(study).combos if c.candidate == "eagle3"]
    combos = list({(c.rejection_sample_method, c.draft_sample_method): c for c in eagle3}.values())
    assert {c.runtime for c in combos} == {"sglang_adaptive", "vllm_adaptive"}
    documents = _documents(study, combos, "step", 2, 2, lambda k: 3)
    calls, writers = _launched(monkeypatch, documents)
    assert calls == _listed(kernel_variants(documents, CPU, 1, draws="counter"))
    assert writers == {(False, 256), (True, 256)}


def test_without_counter_draws_no_step_writer_is_listed_and_the_twin_lists_no_call():
    study = _study("quickstart.yaml")
    documents = _documents(study, space_from_document(study).combos, "auto", 2, 2, lambda k: 3)
    generator = kernel_variants(documents, CPU, 1)  # the CPU's default draws: generators, step by step
    assert generator.step_writers == () and generator.calls and generator.base_noise == ()
    twin = [
        d.model_copy(update={"simulation": d.simulation.model_copy(update={"kernel_backend": "reference"})})
        for d in documents
    ]
    assert kernel_variants(twin, CPU, 1, draws="counter") == KernelVariants((), (), ())
    on_cuda = kernel_variants(twin, CUDA, H200_SMS)  # the twin on CUDA: the base noise only
    assert on_cuda.calls == () and on_cuda.step_writers == () and on_cuda.base_noise == ((64, 256),)


@pytest.mark.parametrize("study_file", ["decision.yaml", "quickstart.yaml"])
def test_on_cuda_a_study_lists_each_rule_and_sampling_it_searches_at_each_k_at_both_call_sizes(study_file):
    study = _study(study_file)
    vocab, search = study.workload.vocab_size, study.search.num_speculative_tokens
    variants = kernel_variants(simulation_documents(study), CUDA, H200_SMS)
    shapes = {
        (rule, sampling == "probabilistic", vocab, k)
        for _, rule, sampling in study.combinations()
        for k in range(search.min, search.max + 1)
    }
    assert {(c.method, c.draft_logits, c.vocab, c.num_drafts) for c in variants.calls} == shapes
    listed = _listed(variants)
    for method, draft, _, k in shapes:
        for rows in (512, 4096):  # ahead: 8 lanes of 64 and of 512 rows
            chosen = plan(rows, k, vocab, torch.float32, draft, method, H200_SMS, False, row_table=True)
            assert (method, draft, vocab, k, chosen) in listed
    assert {c.num_requests for c in variants.calls} <= {512, 4096}
    assert set(variants.step_writers) == {(False, vocab), (True, vocab)}
    assert variants.base_noise == ((study.simulation.bank_rows, vocab),)


def test_on_cuda_step_by_step_every_group_an_engine_can_hold_takes_a_listed_plan():
    """An engine's call holds its members' slots (each a batch size rounded up to 16) and their largest K:
    whichever points a study's round puts together, the call's plan is listed."""
    rng = random.Random(0)
    study = _study("decision.yaml")
    documents = [
        d.model_copy(update={"simulation": d.simulation.model_copy(update={"engine": "step"})})
        for d in simulation_documents(study)
        if d.speculative is not None
    ]
    listed = _listed(kernel_variants(documents, CUDA, H200_SMS))
    by_kind = {}
    for document in documents:
        spec = document.speculative
        by_kind.setdefault((spec.rejection_sample_method, spec.draft_sample_method), []).append(document)
    for (method, sampling), members in by_kind.items():
        for _ in range(100):
            group = rng.sample(members, rng.randint(1, 24))
            rows = sum(slot_rows(d.workload.concurrency, CUDA) for d in group)
            k = max(d.speculative.num_speculative_tokens for d in group)
            draft = sampling == "probabilistic"
            chosen = plan(rows, k, 256, torch.float32, draft, method, H200_SMS, False, row_table=True)
            assert (method, draft, 256, k, chosen) in listed, (method, sampling, rows, k)


@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        ({"concurrency": 5, "num_requests": 40}, [3, 2]),
        ({"concurrency": 1, "num_requests": 40}, [1]),
        ({"concurrency": None, "arrival_rate_per_s": 4.0, "num_requests": 40}, [256, 256]),
        ({"concurrency": None, "arrival_rate_per_s": 4.0, "num_requests": 1}, [256]),
    ],
)
def test_member_concurrencies_are_those_of_the_members_a_document_run_makes(simulation_document, workload, expected):
    document = simulation_document(
        hardware={"gpu": "h100-sxm", "num_gpus": 4},
        target_model={"preset": "llama-3.1-8b", "tensor_parallel_size": 2},
        workload={**workload, "max_num_seqs": 256},
        simulation={"bank_rows": 64},
    )
    assert document.num_replicas == 2
    members = DocumentRun(document, CPU, None).members
    assert member_concurrencies(document) == [m.concurrency for m in members] == expected


def test_the_warm_up_compiles_for_cuda_devices_only():
    with pytest.raises(ValueError, match="CUDA device"):
        warm_up(KernelVariants((), (), ()), CPU)
