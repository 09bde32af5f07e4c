"""The kernel warm-up: every variant a study's engines can launch, compiled before they meet it."""

import random

import pytest
import torch
from test_lockstep import _documents, _on_cuda

from spectune.kernels._plan import plan
from spectune.simulator import simulate_many
from spectune.simulator._ahead import ahead_call_rows
from spectune.simulator._kernel_call import slot_rows
from spectune.simulator._warmup import engine_plans, engine_rows, study_shapes, warm_up

_STEP_ROWS = range(16, 16 * 256 + 1, 16)  # every call size of step-by-step engines of up to 16 x 256 rows


def test_the_warm_up_plans_every_call_an_engine_can_make():
    # An engine's call has one slice of rows per member (its batch size, rounded up on CUDA); whatever
    # the members, the call's plan is one the warm-up launched.
    rng = random.Random(0)
    cuda = torch.device("cuda")
    max_members, batch_sizes = 16, (1, 2, 4, 8, 16, 32, 64, 128, 256)
    max_rows = max_members * slot_rows(max(batch_sizes), cuda)
    for shape in study_shapes([("standard", "greedy"), ("block", "probabilistic")], [1, 2, 5, 8]):
        for vocab in (4096, 128256):
            planned = set(engine_plans(shape, vocab, 132, range(16, max_rows + 1, 16)))
            assert len(planned) <= 8
            for _ in range(200):
                members = [rng.choice(batch_sizes) for _ in range(rng.randint(1, max_members))]
                rows = sum(slot_rows(b, cuda) for b in members)
                method, has_draft, k = shape
                assert plan(rows, k, vocab, torch.float32, has_draft, method, 132, False, row_table=True) in planned


def test_study_shapes_are_each_rule_and_sampling_at_each_k():
    shapes = study_shapes([("standard", "greedy"), ("block", "probabilistic"), ("standard", "greedy")], range(0, 3))
    assert shapes == [("standard", False, 1), ("standard", False, 2), ("block", True, 1), ("block", True, 2)]


def test_the_warm_up_launches_nothing_off_cuda():
    assert warm_up(torch.device("cpu"), 256, [("block", True, 3)], [64]) == 0


@pytest.mark.parametrize("engine", ["auto", "ahead"])
def test_engines_verifying_ahead_make_calls_of_two_sizes(engine):
    cuda = torch.device("cuda")
    assert engine_rows(cuda, 16 * 256, engine) == list(ahead_call_rows(cuda)) == [512, 4096]
    assert engine_rows(cuda, 16 * 256, "step") == list(_STEP_ROWS)
    assert engine_rows(torch.device("cpu"), 16 * 16) == list(range(1, 257))  # the CPU's auto: step by step


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiles CUDA kernels")
def test_after_the_warm_up_an_engine_compiles_nothing(simulation_document):
    import triton

    documents = _on_cuda(_documents(simulation_document, "block", "probabilistic", backend="triton", vocab=4096)[:3])
    cuda = torch.device("cuda")
    launches = warm_up(cuda, 4096, study_shapes([("block", "probabilistic")], range(1, 6)), engine_rows(cuda, 16 * 64))
    assert launches >= 2 + 5  # the two step writers, and at least one plan a shape
    compiled: list[str] = []
    previous = triton.knobs.compilation.listener
    triton.knobs.compilation.listener = lambda *, src, **_: compiled.append(getattr(src, "name", "?"))
    try:
        results = simulate_many(documents, baseline=False)
    finally:
        triton.knobs.compilation.listener = previous
    assert all(r.num_accepted_tokens > 0 for r in results)
    assert compiled == []


def test_processes_warming_up_together_split_the_launches_without_gaps_or_overlaps(monkeypatch):
    from spectune.simulator import _warmup

    launched: list[tuple[object, ...]] = []
    monkeypatch.setattr(_warmup, "sm_count", lambda device: 132)
    monkeypatch.setattr(_warmup, "_launch_one", lambda *args: launched.append(("call", *args[2:])))
    monkeypatch.setattr(_warmup, "_write_one_step", lambda *args: launched.append(("writer", args[2])))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    shapes = study_shapes([("standard", "greedy"), ("block", "probabilistic")], range(1, 9))
    cuda = torch.device("cuda")
    everything = _warmup.warm_up(cuda, 4096, shapes, _STEP_ROWS)
    alone = list(launched)
    assert everything == len(alone) == len(set(alone)) and ("writer", True) in alone
    launched.clear()
    assert sum(_warmup.warm_up(cuda, 4096, shapes, _STEP_ROWS, (i, 3)) for i in range(3)) == everything
    assert sorted(map(repr, launched)) == sorted(map(repr, alone))


def test_the_warm_up_stops_when_told(monkeypatch):
    from spectune.simulator import _warmup

    launched: list[object] = []
    monkeypatch.setattr(_warmup, "sm_count", lambda device: 132)
    monkeypatch.setattr(_warmup, "_launch_one", lambda *args: launched.append(args))
    monkeypatch.setattr(_warmup, "_write_one_step", lambda *args: launched.append(args))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    shapes = study_shapes([("block", "probabilistic")], range(1, 9))
    made = _warmup.warm_up(torch.device("cuda"), 4096, shapes, _STEP_ROWS, keep_going=lambda: len(launched) < 3)
    assert made == len(launched) == 3


def test_a_later_warm_up_skips_what_an_earlier_one_finished_until_the_build_changes(monkeypatch, tmp_path):
    from spectune.simulator import _warmup

    launched: list[tuple[object, ...]] = []
    failing: list[bool] = []

    def launch_one(*args: object) -> None:
        if failing:
            raise RuntimeError("compile failed")
        launched.append(("call", *args[2:]))

    monkeypatch.setattr(_warmup, "sm_count", lambda device: 132)
    monkeypatch.setattr(_warmup, "_launch_one", launch_one)
    monkeypatch.setattr(_warmup, "_write_one_step", lambda *args: launched.append(("writer", args[2])))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(_warmup, "_build_stamp", lambda device: "build 1")
    shapes = study_shapes([("standard", "greedy"), ("block", "probabilistic")], range(1, 9))
    cuda, rows = torch.device("cuda"), _STEP_ROWS

    everything = _warmup.warm_up(cuda, 4096, shapes, rows)  # no marks: every launch
    launched.clear()
    assert _warmup.warm_up(cuda, 4096, shapes, rows, keep_going=lambda: len(launched) < 5, marks=tmp_path) == 5
    first = list(launched)
    launched.clear()
    assert _warmup.warm_up(cuda, 4096, shapes, rows, marks=tmp_path) == everything - 5  # the rest only
    assert not set(map(repr, first)) & set(map(repr, launched))
    assert _warmup.warm_up(cuda, 4096, shapes, rows, (1, 2), marks=tmp_path) == 0  # all marked
    assert _warmup.warm_up(cuda, 128256, shapes, rows, marks=tmp_path) > 0  # another vocabulary: other variants

    monkeypatch.setattr(_warmup, "_build_stamp", lambda device: "build 2")  # the kernels (or Triton, the GPU) changed
    failing.append(True)
    with pytest.raises(RuntimeError, match="compile failed"):
        _warmup.warm_up(cuda, 4096, shapes, rows, marks=tmp_path)
    failing.clear()
    launched.clear()
    # the writers, launched before the failure, stay marked; the failed call and the rest run again
    assert _warmup.warm_up(cuda, 4096, shapes, rows, marks=tmp_path) == everything - 2
    assert all(kind == "call" for kind, *_ in launched)


def test_the_warm_up_launches_every_shapes_smallest_call_before_any_larger_one(monkeypatch):
    from spectune.simulator import _warmup

    launched: list[tuple[object, ...]] = []
    monkeypatch.setattr(_warmup, "sm_count", lambda device: 132)
    monkeypatch.setattr(_warmup, "_launch_one", lambda *args: launched.append(args[2:]))
    monkeypatch.setattr(_warmup, "_write_one_step", lambda *args: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    shapes = study_shapes([("standard", "greedy"), ("block", "probabilistic")], range(1, 9))
    _warmup.warm_up(torch.device("cuda"), 4096, shapes, _STEP_ROWS)
    first = {shape: engine_plans(shape, 4096, 132, _STEP_ROWS)[0] for shape in shapes}
    assert launched[: len(shapes)] == [(shape, first[shape]) for shape in shapes]
    assert len(launched) == sum(len(engine_plans(s, 4096, 132, _STEP_ROWS)) for s in shapes) > len(shapes)
