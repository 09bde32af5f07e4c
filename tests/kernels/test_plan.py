"""The launch policy (``_plan.plan``): pure, so checked here on the CPU for an H200's 132 SMs."""

import dataclasses

import pytest
import torch

from spectune.kernels._plan import LaunchPlan, plan

H200_SMS = 132
V = 128256


def h200(num_requests, num_drafts=7, dtype=torch.float32, draft_logits=False, method="standard", **keywords):
    return plan(num_requests, num_drafts, V, dtype, draft_logits, method, H200_SMS, False, **keywords)


def test_one_request_is_one_small_grid_launch_with_a_barrier():
    chosen = h200(1, draft_logits=True)
    assert chosen.small_grid and chosen.barrier and chosen.small_grid_warps == 8
    assert (chosen.tile, chosen.rows_pad, chosen.tiles_pad) == (4096, 8, 32)
    assert not h200(2).small_grid  # 2 x 8 rows x 32 tiles = 512 programs > two an SM


def test_large_fp32_grids_stream_tiles_through_bulk_copies():
    chosen = h200(256)
    assert chosen.bulk_copies and chosen.pass_a_tiles == 16 and chosen.stages == 3
    assert chosen.pass_a_registers is None and chosen.pass_a_warps == 4


def test_mid_fp32_grids_read_one_tile_a_program_under_the_register_cap():
    chosen = h200(64)  # 64 x 8 rows x 32 tiles = 16384 programs, within 128 an SM
    assert not chosen.bulk_copies and chosen.pass_a_tiles == 1 and chosen.stages == 1
    assert chosen.pass_a_registers == 80


def test_sixteen_bit_grids_use_plain_loads_and_four_tiles_a_program_past_one_tile_a_program():
    chosen = h200(256, dtype=torch.bfloat16)
    assert not chosen.bulk_copies and chosen.pass_a_tiles == 4 and chosen.pass_a_registers == 72
    assert h200(64, dtype=torch.float16).pass_a_tiles == 1
    assert chosen.direct_warps == 4 and h200(256).direct_warps == 8


def test_unaligned_logits_fall_back_to_plain_loads():
    chosen = h200(256, aligned=False)
    assert not chosen.bulk_copies and chosen.pass_a_tiles == 1 and chosen.pass_a_registers == 80


def test_row_tables_take_plain_loads_and_room_for_the_row_starts_with_draft_logits():
    chosen = h200(256, draft_logits=True, row_table=True)
    assert not chosen.bulk_copies and chosen.pass_a_tiles == 1 and chosen.pass_a_registers == 88
    assert h200(256, row_table=True).pass_a_registers == 80  # one-hot drafts fit the usual cap


def test_first_decision_takes_four_warps_with_draft_logits_past_one_wave():
    assert h200(256, draft_logits=True).decide_warps == 4
    assert h200(132, draft_logits=True).decide_warps == 8  # one wave of 132 programs
    assert h200(256).decide_warps == 8  # one-hot: fewer registers


def test_block_verification_pass_b_reads_two_tiles_a_program_in_large_grids():
    assert h200(256, draft_logits=True, method="block").residual_tiles == 2
    assert h200(256, draft_logits=True, method="standard").residual_tiles == 1
    assert h200(16, num_drafts=3, draft_logits=True, method="block").residual_tiles == 1


def test_small_vocabularies_take_a_smaller_tile():
    chosen = plan(4, 3, 300, torch.float32, False, "standard", H200_SMS, False)
    assert chosen.tile == 512 and chosen.small_grid_warps == 4
    assert plan(4, 3, 300, torch.float32, False, "standard", H200_SMS, False, tile=64).tile == 64


def test_interpreter_blocks_requests_and_exercises_the_loops():
    chosen = plan(24, 4, 300, torch.float32, True, "block", H200_SMS, True, tile=64)
    assert chosen.block_requests == 32 and not chosen.small_grid and not chosen.barrier
    assert chosen.pass_a_tiles == 2 and chosen.residual_tiles == 2 and chosen.bulk_copies
    assert (chosen.rows_pad, chosen.tiles_pad) == (8, 8)  # no compiled floors


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_drafts", [1, 3, 7])
@pytest.mark.parametrize("vocab", [32000, 128256, 151936])
@pytest.mark.parametrize(("method", "draft_logits"), [("standard", False), ("standard", True), ("block", True)])
def test_batch_size_moves_the_plan_between_a_few_compiled_variants(dtype, num_drafts, vocab, method, draft_logits):
    # Every field is compiled in, so each distinct plan compiles its own kernels: R may only pick
    # among a few buckets, never become a constexpr itself (a simulation varies R every step).
    plans = {plan(r, num_drafts, vocab, dtype, draft_logits, method, H200_SMS, False) for r in range(1, 513)}
    assert 2 <= len(plans) <= 6, sorted(plans, key=str)


def test_plan_fields_are_checked_when_overridden():
    chosen = h200(8)
    with pytest.raises(ValueError, match="tile: must be a power of two, got 96"):
        dataclasses.replace(chosen, tile=96)
    with pytest.raises(ValueError, match="pass_a_tiles: must be >= 1, got 0"):
        dataclasses.replace(chosen, pass_a_tiles=0)
    interpreted = plan(8, 3, 300, torch.float32, True, "standard", 1, True)
    with pytest.raises(ValueError, match="barrier: the interpreter"):
        dataclasses.replace(interpreted, small_grid=True, barrier=True)
    assert isinstance(chosen, LaunchPlan) and hash(chosen) == hash(h200(8))
