"""SGLang flags: the chain mapping, the algorithm names, a K table as pinned adaptive slots (EAGLE/EAGLE3),
one K for the most common batch size otherwise."""

import json
from dataclasses import replace

import pytest

from spectune.config import SglangAdaptive
from spectune.export._sglang import sglang_export, sglang_flags
from spectune.study import BucketChoice, merge_schedule
from spectune.study._space import Candidate


def _with(recommendation, method, ks, model="org/head"):
    space = recommendation.space
    base = {"method": method} | ({"model": model} if model else {})
    candidates = tuple(
        Candidate(c.name, base) if c.name == recommendation.combo.candidate else c for c in space.candidates
    )
    choices = tuple(
        BucketChoice(c.batch_size, c.first_batch_size, c.last_batch_size, k, c.evaluation)
        for c, k in zip(recommendation.choices, ks)
    )
    schedule = tuple(
        merge_schedule([(c.first_batch_size, c.last_batch_size, c.num_speculative_tokens) for c in choices])
    )
    return replace(recommendation, space=replace(space, candidates=candidates), choices=choices, schedule=schedule)


ALGORITHMS = [
    ("eagle", "EAGLE"),
    ("eagle3", "EAGLE3"),
    ("mtp", "NEXTN"),
    ("draft_model", "STANDALONE"),
    ("ngram", "NGRAM"),
    ("dflash", "DFLASH"),
]


@pytest.mark.parametrize(("method", "algorithm"), ALGORITHMS)
def test_chain_k_maps_to_steps_topk_1_and_k_plus_1_draft_tokens(outcome, method, algorithm):
    text = sglang_flags(_with(outcome.recommendation, method, [4, 4, 4, 4]))
    flags = text.splitlines()[-1].split()
    assert flags[flags.index("--speculative-algorithm") + 1] == algorithm
    assert flags[flags.index("--speculative-num-steps") + 1] == "4"
    assert flags[flags.index("--speculative-eagle-topk") + 1] == "1"
    assert flags[flags.index("--speculative-num-draft-tokens") + 1] == "5"
    assert ("--speculative-draft-model-path" in flags) == (algorithm in ("EAGLE", "EAGLE3", "STANDALONE", "DFLASH"))
    assert "--speculative-adaptive" not in flags
    assert text.splitlines()[1] == "# K = 4 at every batch size"


@pytest.mark.parametrize(("method", "algorithm"), [a for a in ALGORITHMS if a[1] not in ("EAGLE", "EAGLE3")])
def test_a_table_of_a_method_without_adaptive_steps_gets_the_main_buckets_k(outcome, method, algorithm):
    text = sglang_flags(_with(outcome.recommendation, method, [5, 4, 2, 0]))
    flags = text.splitlines()[-1].split()
    # 4 buckets with equal weights: the lower median, batch size 8, whose K is 4
    assert flags[flags.index("--speculative-num-steps") + 1] == "4" and "--speculative-adaptive" not in flags
    assert text.splitlines()[1].startswith(
        "# SGLang varies K with the batch size only with --speculative-adaptive, for EAGLE/EAGLE3 only: K = 4 is "
        "the choice at batch size 8"
    )


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_a_k_table_reaches_sglang_as_singleton_candidate_steps(outcome, method):
    recommendation = _with(outcome.recommendation, method, [5, 4, 2, 0])
    exported = sglang_export(recommendation)
    flags = exported.flags.splitlines()[-1].split()
    assert flags[flags.index("--speculative-num-steps") + 1] == "5"
    assert flags[flags.index("--speculative-num-draft-tokens") + 1] == "6"
    assert flags[flags.index("--speculative-adaptive-config") + 1] == "sglang-adaptive.json"
    assert "--speculative-adaptive" in flags
    data = exported.adaptive_config.to_sglang_json()
    slots = {key: value["candidate_steps"] for key, value in data.items() if key.isdigit()}
    assert slots == {str(start): [k] for start, _, k in recommendation.schedule}
    # SGLang reads the file back as the same slots, and serves the table's K at every batch size here
    read_back = SglangAdaptive.from_sglang_json(json.loads(json.dumps(data)))
    sizes = read_back.capture_sizes(256)
    wanted = {b: k for start, end, k in recommendation.schedule for b in range(start, end + 1)}
    assert all(read_back.served_k(b, sizes) == wanted[b] for b in range(1, 257))
    assert "warning" not in exported.flags
    assert "impossible" not in exported.flags and "no per-batch-size K table" not in exported.flags


def test_a_row_boundary_off_the_capture_sizes_is_warned_with_the_k_sglang_serves(outcome):
    recommendation = replace(_with(outcome.recommendation, "eagle3", [4, 4, 2, 2]), schedule=((1, 9, 4), (10, 256, 2)))
    text = sglang_flags(recommendation)
    # batch size 9 pads to SGLang's capture size 10, whose slot is the second row's
    warnings = [line for line in text.splitlines() if line.startswith("# warning")]
    assert len(warnings) == 1
    assert warnings[0].startswith(
        "# warning: SGLang serves batch size 9 K = 2, not the table's K = 4: it pads a batch to the next CUDA-graph size, "
        "here past the row boundary"
    )


def test_weights_pick_the_most_common_bucket(outcome):
    recommendation = _with(outcome.recommendation, "mtp", [5, 4, 2, 0])
    weighted = replace(recommendation, space=replace(recommendation.space, batch_size_weights=(1.0, 1.0, 6.0, 1.0)))
    text = sglang_flags(weighted)
    assert "--speculative-num-steps 2 " in text and "the most common batch-size bucket" in text


def test_k0_at_the_main_bucket_or_an_unmapped_method_gives_no_flags(outcome):
    off = sglang_flags(_with(outcome.recommendation, "mtp", [5, 0, 0, 0]))
    assert all(line.startswith("#") for line in off.strip().splitlines())
    assert "serve without --speculative-algorithm" in off
    suffix = sglang_flags(_with(outcome.recommendation, "suffix", [5, 4, 2, 0], model=None))
    assert all(line.startswith("#") for line in suffix.strip().splitlines())
    assert "no equivalent of vLLM's method 'suffix'" in suffix
