"""The recommendation as SGLang server flags.

A chain of K drafts is ``--speculative-num-steps K --speculative-eagle-topk 1
--speculative-num-draft-tokens K+1``. SGLang has no per-batch-size K table, so the K of the most
common bucket is used, and a comment line says so. Comment lines start with ``#``; the flags are one
line to paste after ``python -m sglang.launch_server --model-path TARGET``.
"""

from __future__ import annotations

import shlex

from spectune.study import Recommendation

__all__ = ["SGLANG_ALGORITHMS", "sglang_flags"]

# vLLM method -> SGLang --speculative-algorithm
SGLANG_ALGORITHMS = {
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "mtp": "NEXTN",
    "draft_model": "STANDALONE",
    "ngram": "NGRAM",
    "ngram_gpu": "NGRAM",
    "dflash": "DFLASH",
}
_NEEDS_DRAFT_PATH = {"EAGLE", "EAGLE3", "STANDALONE", "DFLASH"}


def sglang_flags(recommendation: Recommendation) -> str:
    """Comment lines and one line of flags (or only comments when SGLang cannot serve it)."""
    space = recommendation.space
    candidate = space.candidate(recommendation.combo.candidate)
    method = candidate.method
    index = space.representative_bucket()
    choice = recommendation.choices[index]
    k = choice.num_speculative_tokens
    weighted = bool(space.batch_size_weights)
    which = "the most common batch-size bucket" if weighted else "the middle batch-size bucket (no weights given)"
    lines = [
        f"# spectune study {space.name!r}: {recommendation.combo.label}",
        f"# SGLang has no per-batch-size K table: K = {k} is the choice at batch size {choice.batch_size}, "
        f"{which}; vLLM's table is {[list(row) for row in recommendation.schedule]}",
    ]
    algorithm = SGLANG_ALGORITHMS.get(method)
    if algorithm is None:
        lines.append(f"# SGLang has no equivalent of vLLM's method '{method}'; no flags")
        return "\n".join(lines) + "\n"
    if k == 0:
        lines.append(
            f"# speculation does not pay off at batch size {choice.batch_size}: serve without --speculative-algorithm"
        )
        return "\n".join(lines) + "\n"
    if recommendation.combo.rejection_sample_method == "block":
        lines.append("# SGLang has no block verification (open PR); these flags verify token by token")
    if recommendation.combo.draft_sample_method == "probabilistic":
        lines.append("# SGLang drafts greedily; the simulated probabilistic draft sampling has no SGLang flag")
    flags = ["--speculative-algorithm", algorithm]
    model = candidate.speculative_base.get("model")
    if algorithm in _NEEDS_DRAFT_PATH and model:
        flags += ["--speculative-draft-model-path", str(model)]
    flags += [
        "--speculative-num-steps", str(k),
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", str(k + 1),
    ]  # fmt: skip
    lines.append(shlex.join(flags))
    return "\n".join(lines) + "\n"
