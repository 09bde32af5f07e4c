"""The recommendation as SGLang server flags, and the ``--speculative-adaptive-config`` file they name.

A chain of K drafts is ``--speculative-num-steps K --speculative-eagle-topk 1
--speculative-num-draft-tokens K+1``. SGLang varies K with the batch size only through its adaptive
steps (``--speculative-adaptive --speculative-adaptive-config FILE``, SGLang 0.5.23
``srt/speculative/adaptive_spec_params.py``), which serve EAGLE/EAGLE3 at topk 1 only (lines 60-72):

- where the study searched ``sglang_adaptive``, the file holds the simulated slots (candidate steps
  1..K max per bucket, a bucket whose best is K = 0 pinned to [0]);
- else a K table reaches SGLang as singleton candidates, one slot per row start, pinned to the row's K
  (``SglangAdaptive.pinned``). SGLang routes a batch by padding it to the next CUDA-graph batch size,
  then taking the closest key at or below (``_route``, lines 343-358), so a row boundary that is not a
  capture size is served the next row's K for a few batch sizes: a comment names them;
- other methods, or a single K, get one K: the most common bucket's.

With adaptive steps SGLang sizes the draft-token width as max(candidate steps) + 1
(``srt/speculative/spec_info.py:277-289``) and starts each slot at ``--speculative-num-steps`` when it
is a candidate, else at the slot's middle candidate (lines 176-179). Comment lines start with ``#``;
the flags are one line to paste after ``python -m sglang.launch_server --model-path TARGET``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from spectune.config import SglangAdaptive, SglangAdaptiveSlot
from spectune.study import PolicyScore, Recommendation, merge_schedule, sglang_candidate_steps

__all__ = ["SGLANG_ADAPTIVE_CONFIG_NAME", "SGLANG_ALGORITHMS", "SglangExport", "sglang_export", "sglang_flags"]

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
_ADAPTIVE_ALGORITHMS = {"EAGLE", "EAGLE3"}
SGLANG_ADAPTIVE_CONFIG_NAME = "sglang-adaptive.json"


@dataclass(frozen=True)
class SglangExport:
    """sglang.txt's text and, where the flags use adaptive steps, the config file they name."""

    flags: str
    adaptive_config: SglangAdaptive | None


def sglang_flags(recommendation: Recommendation) -> str:
    """Comment lines and one line of flags (or only comments when SGLang cannot serve it)."""
    return sglang_export(recommendation).flags


def sglang_export(recommendation: Recommendation) -> SglangExport:
    """The flags and the adaptive config for the recommendation (``sglang.txt`` and its file)."""
    space = recommendation.space
    if recommendation.sglang is not None and recommendation.sglang_preferred:
        exported = _simulated(recommendation, recommendation.sglang)
        if exported is not None:
            return exported
    candidate = space.candidate(recommendation.combo.candidate)
    algorithm = SGLANG_ALGORITHMS.get(candidate.method)
    lines = [f"# spectune study {space.name!r}: {recommendation.combo.label}"]
    if algorithm is None:
        lines.append(f"# SGLang has no equivalent of vLLM's method '{candidate.method}'; no flags")
        return SglangExport(_text(lines), None)
    if algorithm in _ADAPTIVE_ALGORITHMS:
        adaptive = _adaptive(recommendation, lines)
        if adaptive is not None:
            return adaptive
    return _single_k(recommendation, algorithm, lines)


def _text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def _chain_flags(recommendation: Recommendation, candidate_name: str, algorithm: str, k: int) -> list[str]:
    model = recommendation.space.candidate(candidate_name).speculative_base.get("model")
    flags = ["--speculative-algorithm", algorithm]
    if algorithm in _NEEDS_DRAFT_PATH and model:
        flags += ["--speculative-draft-model-path", str(model)]
    flags += [
        "--speculative-num-steps", str(k),
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", str(k + 1),
    ]  # fmt: skip
    return flags


def _verification_comments(recommendation: Recommendation) -> list[str]:
    lines = []
    if recommendation.combo.rejection_sample_method == "block":
        lines.append("# SGLang has no block verification (open PR); these flags verify token by token")
    if recommendation.combo.draft_sample_method == "probabilistic":
        lines.append("# SGLang drafts greedily; the simulated probabilistic draft sampling has no SGLang flag")
    if recommendation.adaptive_verification:
        lines.append(
            "# SGLang has no adaptive verification: every step verifies the K below (vLLM's K max), as a K table"
        )
    return lines


def _single_k(recommendation: Recommendation, algorithm: str, lines: list[str]) -> SglangExport:
    space = recommendation.space
    index = space.representative_bucket()
    choice = recommendation.choices[index]
    k = choice.num_speculative_tokens
    if len({k for _, _, k in recommendation.schedule}) == 1:
        lines.append(f"# K = {k} at every batch size")
    else:
        which = "the most common batch-size bucket" if space.batch_size_weights else "the middle batch-size bucket"
        if algorithm in _ADAPTIVE_ALGORITHMS:
            why = "SGLang pins a K per batch size only with --speculative-adaptive"
        else:
            why = "SGLang varies K with the batch size only with --speculative-adaptive, for EAGLE/EAGLE3 only"
        lines.append(
            f"# {why}: K = {k} is the choice at batch size {choice.batch_size}, {which}"
            f"{'' if space.batch_size_weights else ' (no weights given)'}; vLLM's table is "
            f"{[list(row) for row in recommendation.schedule]}"
        )
    if k == 0:
        lines.append(
            f"# speculation does not pay off at batch size {choice.batch_size}: serve without --speculative-algorithm"
        )
        return SglangExport(_text(lines), None)
    lines += _verification_comments(recommendation)
    lines.append(shlex.join(_chain_flags(recommendation, recommendation.combo.candidate, algorithm, k)))
    return SglangExport(_text(lines), None)


def _simulated(recommendation: Recommendation, simulated: PolicyScore) -> SglangExport | None:
    """The simulated sglang_adaptive policy: its slots (candidates 1..K max per bucket, [0] where the
    bucket's best is off); None when it is off everywhere."""
    space = recommendation.space
    rows = merge_schedule(
        [(c.first_batch_size, c.last_batch_size, c.num_speculative_tokens) for c in simulated.score.choices]
    )
    if all(k == 0 for _, _, k in rows):
        return None
    config = SglangAdaptive(
        slots={
            start: SglangAdaptiveSlot(candidate_steps=sglang_candidate_steps(k) if k else [0]) for start, _, k in rows
        }
    )
    lines = [
        f"# spectune study {space.name!r}: {simulated.combo.label}",
        f"# {simulated.describe()}, as simulated: {simulated.aggregate_throughput_tokens_per_s:,.0f} output "
        f"tokens/s (vLLM's recommendation: {recommendation.combo.label})",
        "# slots (batch size from -> candidate steps): "
        + "; ".join(f"{start} -> {list(config.slots[start].candidate_steps)}" for start, _, _ in rows),
    ]
    algorithm = SGLANG_ALGORITHMS[space.candidate(simulated.combo.candidate).method]
    return _adaptive_flags(recommendation, simulated.combo.candidate, algorithm, rows, config, lines)


def _adaptive(recommendation: Recommendation, lines: list[str]) -> SglangExport | None:
    """The recommended K table pinned as singleton candidate steps; None for one K (or off everywhere)."""
    space = recommendation.space
    algorithm = SGLANG_ALGORITHMS[space.candidate(recommendation.combo.candidate).method]
    max_num_seqs = int(space.context.get("max_num_seqs", space.max_batch_size))
    rows = list(recommendation.schedule)
    if len({k for _, _, k in rows}) == 1 or all(k == 0 for _, _, k in rows):
        return None
    config = SglangAdaptive.pinned(rows)
    lines.append(
        f"# the K table {[list(row) for row in rows]} as singleton candidate steps (one SGLang slot per row, "
        "pinned to its K)"
    )
    lines += _routing_warnings(config, rows, max_num_seqs)
    lines += _verification_comments(recommendation)
    return _adaptive_flags(recommendation, recommendation.combo.candidate, algorithm, rows, config, lines)


def _adaptive_flags(
    recommendation: Recommendation,
    candidate_name: str,
    algorithm: str,
    rows: list[tuple[int, int, int]],
    config: SglangAdaptive,
    lines: list[str],
) -> SglangExport:
    k_max = max(k for _, _, k in rows)
    flags = _chain_flags(recommendation, candidate_name, algorithm, k_max)
    flags += ["--speculative-adaptive", "--speculative-adaptive-config", SGLANG_ADAPTIVE_CONFIG_NAME]
    lines.append(
        f"# {SGLANG_ADAPTIVE_CONFIG_NAME} (written beside this file) holds the slots; SGLang starts each slot at "
        f"--speculative-num-steps {k_max} where it is a candidate, else at the slot's middle candidate"
    )
    lines.append(shlex.join(flags))
    return SglangExport(_text(lines), config)


def _routing_warnings(config: SglangAdaptive, rows: list[tuple[int, int, int]], max_num_seqs: int) -> list[str]:
    """Where SGLang's CUDA-graph routing serves another K than the table: one warning line per run."""
    sizes = config.capture_sizes(max_num_seqs)
    wanted = {b: k for start, end, k in rows for b in range(start, end + 1)}
    runs: list[list[int]] = []  # [first, last, table K, served K]
    for batch_size in range(1, max_num_seqs + 1):
        served = config.served_k(batch_size, sizes)
        k = wanted.get(batch_size)
        if k is None or served == k:
            continue
        if runs and runs[-1][1] == batch_size - 1 and runs[-1][2:] == [k, served]:
            runs[-1][1] = batch_size
        else:
            runs.append([batch_size, batch_size, k, served if served is not None else -1])
    return [
        f"# warning: SGLang serves batch size{f's {first}-{last}' if last > first else f' {first}'} K = {served}, "
        f"not the table's K = {k}: it pads a batch to the next CUDA-graph size, here past the row boundary "
        f"(capture sizes {sizes[:12]}{'...' if len(sizes) > 12 else ''})"
        for first, last, k, served in runs
    ]
