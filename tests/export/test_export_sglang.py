"""SGLang flags: the chain mapping, the algorithm names, one K for the most common batch size."""

from dataclasses import replace

import pytest

from spectune.export._sglang import sglang_flags
from spectune.study import BucketChoice
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
    return replace(recommendation, space=replace(space, candidates=candidates), choices=choices)


@pytest.mark.parametrize(
    ("method", "algorithm"),
    [
        ("eagle", "EAGLE"),
        ("eagle3", "EAGLE3"),
        ("mtp", "NEXTN"),
        ("draft_model", "STANDALONE"),
        ("ngram", "NGRAM"),
        ("dflash", "DFLASH"),
    ],
)
def test_chain_k_maps_to_steps_topk_1_and_k_plus_1_draft_tokens(outcome, method, algorithm):
    text = sglang_flags(_with(outcome.recommendation, method, [5, 4, 2, 0]))
    flags = text.splitlines()[-1].split()
    assert flags[flags.index("--speculative-algorithm") + 1] == algorithm
    # 4 buckets with equal weights: the lower median, batch size 8, whose K is 4
    assert flags[flags.index("--speculative-num-steps") + 1] == "4"
    assert flags[flags.index("--speculative-eagle-topk") + 1] == "1"
    assert flags[flags.index("--speculative-num-draft-tokens") + 1] == "5"
    assert ("--speculative-draft-model-path" in flags) == (algorithm in ("EAGLE", "EAGLE3", "STANDALONE", "DFLASH"))
    comment = text.splitlines()[1]
    assert comment.startswith("# SGLang has no per-batch-size K table: K = 4 is the choice at batch size 8")


def test_weights_pick_the_most_common_bucket(outcome):
    recommendation = _with(outcome.recommendation, "eagle3", [5, 4, 2, 0])
    weighted = replace(recommendation, space=replace(recommendation.space, batch_size_weights=(1.0, 1.0, 6.0, 1.0)))
    text = sglang_flags(weighted)
    assert "--speculative-num-steps 2 " in text and "the most common batch-size bucket" in text


def test_k0_at_the_main_bucket_or_an_unmapped_method_gives_no_flags(outcome):
    off = sglang_flags(_with(outcome.recommendation, "eagle3", [5, 0, 0, 0]))
    assert all(line.startswith("#") for line in off.strip().splitlines())
    assert "serve without --speculative-algorithm" in off
    suffix = sglang_flags(_with(outcome.recommendation, "suffix", [5, 4, 2, 0], model=None))
    assert all(line.startswith("#") for line in suffix.strip().splitlines())
    assert "no equivalent of vLLM's method 'suffix'" in suffix
