"""The simulator serves as vLLM does: KV-cache capacity and preemption, replicas, draft TP, acceptance bins."""

import numpy as np
import pytest

from spectune.config import kv_cache_capacity_tokens
from spectune.cost import build_cost_model
from spectune.simulator import simulate
from spectune.simulator._kv import BLOCK_SIZE_TOKENS, KvCacheCapacity, drafting_slots
from spectune.workload import generate_requests

# --- KV cache ------------------------------------------------------------------------------------


def test_reserve_preempts_the_newest_requests_until_the_rest_fit():
    pool = KvCacheCapacity(num_blocks=20, num_requests=4)
    assert pool.try_grow(3, 4 * BLOCK_SIZE_TOKENS)  # a prefill holds 4 blocks
    running = np.array([0, 1, 2], dtype=np.int64)  # oldest first
    preempted = pool.reserve_decode(running, np.full(3, 6 * BLOCK_SIZE_TOKENS))  # 3 x 6 = 18 > 16 free
    assert preempted.tolist() == [2]
    assert pool.held.tolist() == [6, 6, 0, 4] and pool.free == 4 and pool.num_preemptions == 1
    assert pool.reserve_decode(running[:2], np.full(2, 6 * BLOCK_SIZE_TOKENS)).tolist() == []  # already held
    pool.release(np.array([0, 1, 3]))
    assert pool.free == 20


def test_drafting_slots_follow_vllms_per_method_lookahead():
    assert drafting_slots("eagle3", 3) == 3
    assert drafting_slots("eagle3", 3, parallel_drafting=True) == 3 + 2  # P-EAGLE: K - 1 more
    assert drafting_slots("dflash", 4) == 8 and drafting_slots("dspark", 4) == 7
    assert drafting_slots("draft_model", 4) == 5 and drafting_slots("draft_model", 4, parallel_drafting=True) == 8
    assert drafting_slots("eagle3", 0) == 0


def _with_kv_blocks(simulation_document, blocks: int, **changes):
    """A document whose single replica holds exactly ``blocks`` KV blocks (llama-3.1-8b + EAGLE-3 on an H100)."""
    probe = simulation_document(**changes)
    drafter = probe.effective_drafter()
    weights = probe.target_model.num_parameters * 2 + drafter.num_parameters * 2
    per_token = probe.target_model.kv_cache_bytes_per_token + drafter.kv_cache_bytes_per_token
    utilization = (weights + (blocks * BLOCK_SIZE_TOKENS + 0.5) * per_token) / probe.hardware.gpu.memory_bytes
    document = simulation_document(hardware={"gpu": "h100-sxm", "gpu_memory_utilization": utilization}, **changes)
    assert kv_cache_capacity_tokens(document.hardware, document.target_model, drafter) == blocks * BLOCK_SIZE_TOKENS
    return document


def test_kv_cap_binds_and_preempts_where_the_blocks_run_out(simulation_document):
    # 16 requests of 64 + 64 tokens, K = 3 (3 lookahead slots): near the end each needs ceil(136/16) = 9
    # blocks, 144 in all. 100 blocks cannot hold them (preemption must happen); 160 always can.
    workload = {"concurrency": 16, "num_requests": 48, "prompt_tokens": 64, "output_tokens": 64}
    tight = simulate(_with_kv_blocks(simulation_document, 100, workload=workload), baseline=False)
    ample = simulate(_with_kv_blocks(simulation_document, 160, workload=workload), baseline=False)
    assert tight.kv_cache_tokens == 1600 and ample.kv_cache_tokens == 2560
    assert tight.num_preemptions > 0 and tight.kv_cache_bound_steps > 0
    assert ample.num_preemptions == 0 and ample.kv_cache_bound_steps == 0
    assert tight.kv_cache_peak_usage <= 1.0 and ample.kv_cache_peak_usage <= 144 / 160
    # preempted requests recompute and still finish with exactly their output
    expected_tokens = int(
        generate_requests(simulation_document(workload=workload).workload, seed=0).output_tokens.sum()
    )
    assert tight.num_requests == ample.num_requests == 48
    assert tight.output_tokens == ample.output_tokens == expected_tokens
    assert tight.throughput_tokens_per_s < ample.throughput_tokens_per_s


def test_a_request_larger_than_the_kv_cache_is_an_error_not_a_hang(simulation_document):
    from spectune.errors import SpectuneError

    document = _with_kv_blocks(
        simulation_document, 3, workload={"concurrency": 1, "num_requests": 2, "prompt_tokens": 64}
    )
    with pytest.raises(SpectuneError, match="needs 64 tokens of KV cache, more than the 48"):
        simulate(document, baseline=False)


def test_weights_that_leave_no_kv_cache_are_refused(simulation_document):
    from spectune.errors import DocumentError

    with pytest.raises(DocumentError, match="gpu_memory_utilization: leaves no KV cache"):
        simulation_document(hardware={"gpu": "h100-sxm", "gpu_memory_utilization": 0.2})


# --- replicas ------------------------------------------------------------------------------------


def test_four_gpus_at_tp_2_give_about_twice_the_throughput_of_two(simulation_document):
    def run(num_gpus: int):
        return simulate(
            simulation_document(
                hardware={"gpu": "h100-sxm", "num_gpus": num_gpus},
                target_model={"preset": "llama-3.1-8b", "tensor_parallel_size": 2},
                workload={"concurrency": 64, "max_num_seqs": 16, "num_requests": 256, "output_tokens": 32},
            ),
            baseline=False,
        )

    two, four = run(2), run(4)
    assert two.num_replicas == 1 and four.num_replicas == 2
    assert four.num_requests == two.num_requests == 256 and four.output_tokens == two.output_tokens
    assert four.throughput_tokens_per_s / two.throughput_tokens_per_s == pytest.approx(2.0, rel=0.15)
    assert four.mean_batch_size == pytest.approx(two.mean_batch_size, rel=0.1)  # per replica: max_num_seqs each


def test_dynamic_speculation_is_off_under_data_parallelism_with_a_warning(simulation_document, tmp_path):
    from spectune.config import load_document

    spec = {
        "method": "eagle3",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 64, 0]],
    }
    one = simulation_document(speculative=spec, workload={"concurrency": 32})
    two = simulation_document(
        speculative=spec, workload={"concurrency": 32}, hardware={"gpu": "h100-sxm", "num_gpus": 2}
    )
    notices = load_document(tmp_path / "sim.yaml").notices
    assert any("disables dynamic speculation under data parallelism" in n.message for n in notices)
    # one replica at batch 32 runs K = 0 from the table; two replicas at 16 each serve K = 3 throughout
    assert simulate(one, baseline=False).num_drafts < 0.2 * simulate(two, baseline=False).num_drafts


# --- drafter tensor parallelism ------------------------------------------------------------------


def test_draft_tensor_parallel_size_reaches_the_drafter_and_its_cost(simulation_document):
    deployment = {"hardware": {"gpu": "h100-sxm", "num_gpus": 4}, "target_model": "llama-3.1-70b"}
    same = simulation_document(speculative={"method": "eagle", "num_speculative_tokens": 3}, **deployment)
    one = simulation_document(
        speculative={"method": "eagle", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1}, **deployment
    )
    assert same.effective_drafter().tensor_parallel_size is None and one.effective_drafter().tensor_parallel_size == 1
    cost_same, cost_one = (
        build_cost_model(d.hardware, d.target_model, d.effective_drafter(), d.cost_model) for d in (same, one)
    )
    assert cost_one.step_time(8, 3, 500).drafting_s > 1.2 * cost_same.step_time(8, 3, 500).drafting_s


def test_draft_tensor_parallel_size_must_be_one_or_the_targets(simulation_document):
    from spectune.errors import DocumentError

    with pytest.raises(
        DocumentError,
        match=r"speculative.draft_tensor_parallel_size: must be 1 or the target's "
        r"tensor_parallel_size \(4\) as vLLM requires, got 2",
    ):
        simulation_document(
            speculative={"method": "eagle", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2},
            hardware={"gpu": "h100-sxm", "num_gpus": 4},
            target_model="llama-3.1-70b",
        )


def test_parallel_drafting_is_costed_as_one_pass(simulation_document):
    sequential = simulation_document(speculative={"method": "eagle3", "num_speculative_tokens": 5})
    parallel = simulation_document(
        speculative={"method": "eagle3", "num_speculative_tokens": 5, "parallel_drafting": True}
    )
    assert parallel.effective_drafter().drafting == "parallel"
    costs = [
        build_cost_model(d.hardware, d.target_model, d.effective_drafter(), d.cost_model)
        for d in (sequential, parallel)
    ]
    assert costs[1].step_time(8, 5, 500).drafting_s < 0.5 * costs[0].step_time(8, 5, 500).drafting_s


# --- acceptance bins -----------------------------------------------------------------------------


def test_a_dynamic_run_takes_the_acceptance_bin_of_each_steps_batch(simulation_document):
    # Drafts happen only at batch sizes 1-2 (the table turns speculation off above); the bin measured
    # there accepts 0.9, the bin of the configured max_num_seqs 0.2. The run must draw from the first.
    document = simulation_document(
        speculative={
            "method": "eagle3",
            "num_speculative_tokens": 3,
            "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 64, 0]],
        },
        acceptance={
            "conditional_rates": [0.5],
            "bins": [
                {"min_running": 1, "max_running": 2, "conditional_rates": [0.9]},
                {"min_running": 3, "max_running": 64, "conditional_rates": [0.2]},
            ],
        },
        workload={
            "concurrency": None,
            "arrival_rate_per_s": 5.0,
            "max_num_seqs": 64,
            "num_requests": 96,
            "output_tokens": 48,
        },
    )
    result = simulate(document, baseline=False)
    assert result.num_drafts > 200
    for rate in result.conditional_acceptance_per_position:
        assert rate == pytest.approx(0.9, abs=0.06)


def test_a_short_prefill_takes_blocks_back_from_partial_prefills_queued_behind_it():
    pool = KvCacheCapacity(num_blocks=10, num_requests=3)
    assert pool.grow_prefill(1, 0, 4 * BLOCK_SIZE_TOKENS, [2]) == (64, [])
    assert pool.grow_prefill(2, 0, 6 * BLOCK_SIZE_TOKENS, []) == (96, [])  # the pool is full
    # request 0, ahead of both, needs 6 blocks: the last partial prefill (2) gives its 6 back, 1 keeps its 4
    assert pool.grow_prefill(0, 0, 6 * BLOCK_SIZE_TOKENS, [1, 2]) == (96, [2])
    assert pool.held.tolist() == [6, 4, 0] and pool.free == 0 and pool.num_preemptions == 1
    assert pool.grow_prefill(0, 96, 2 * BLOCK_SIZE_TOKENS, []) == (0, [])  # nothing behind to take from
