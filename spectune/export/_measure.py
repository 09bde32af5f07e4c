"""``measure.sh``: the few real-GPU measurements that check a recommendation, as a plain bash script.

For each K the recommendation uses, its neighbours K - 1 and K + 1, and K = 0 (no drafter), the
script starts ``vllm serve`` once with that K and acceptance pinned to the simulated rates
(``rejection_sample_method: synthetic``: the drafter and verifier run for real, only the accept
decisions are forced), then runs ``vllm bench serve`` at each bucket's batch size as
``--max-concurrency``, with random prompts at the study's mean prompt and output lengths and
``--ignore-eos`` (every request produces exactly that many tokens: the step-time estimator in
``spectune.calibrate`` relies on it). Results land in ``RESULTS/k{K}/k{K}-c{C}.json``, which
``spectune calibrate RESULTS/`` reads.

Only flags documented for ``vllm serve`` and ``vllm bench serve`` are used (``VLLM_SERVE_FLAGS``,
``VLLM_BENCH_SERVE_FLAGS``; docs/calibration.md lists them with their source).
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from spectune.config import (
    SpeculativeConfig,
    conditional_to_unconditional,
    extend_conditional,
    unconditional_to_conditional,
)
from spectune.study import Evaluation, Recommendation, StudyOutcome

__all__ = ["SERVER_START_S", "VLLM_BENCH_SERVE_FLAGS", "VLLM_SERVE_FLAGS", "measure_script", "measurement_ks"]

VLLM_SERVE_FLAGS = ("--port", "--max-num-seqs", "--tensor-parallel-size", "--speculative-config")
VLLM_BENCH_SERVE_FLAGS = (
    "--backend", "--model", "--port", "--dataset-name", "--random-input-len", "--random-output-len", "--num-prompts",
    "--max-concurrency", "--ignore-eos", "--seed", "--save-result", "--result-dir", "--result-filename",
)  # fmt: skip
SERVER_START_S = 120.0  # weights, CUDA graph capture and warm-up per server start (assumed, not measured)
_PROMPTS_PER_CONCURRENCY = 4  # four waves of requests per run ...
_MIN_PROMPTS = 32  # ... and enough requests at small concurrency for the counters


def measurement_ks(recommendation: Recommendation) -> list[int]:
    """K = 0, every K of the schedule and its neighbours (K - 1 >= 1 and K + 1), ascending."""
    ks = {0}
    for _, _, k in recommendation.schedule:
        if k > 0:
            ks.update(n for n in (k - 1, k, k + 1) if n >= 1)
    return sorted(ks)


def _combo_evaluations(outcome: StudyOutcome, recommendation: Recommendation, k: int) -> dict[int, Evaluation]:
    """Evaluations of the recommended combo at K (K = 0: the shared 'off' point), by batch size."""
    space = recommendation.space
    found = {b: outcome.completed.get(space.point(b, recommendation.combo.label, k)) for b in space.batch_sizes}
    return {b: e for b, e in found.items() if e is not None}


def _simulated_rates(outcome: StudyOutcome, recommendation: Recommendation, k: int) -> list[float] | None:
    """Unconditional rates the simulation saw at K (most common bucket first); else the nearest simulated K's,
    cut, or extended by the candidate's extrapolation rule."""
    space = recommendation.space
    order = sorted(space.batch_sizes, key=lambda b: abs(math.log(b / space.batch_sizes[space.representative_bucket()])))
    by_k: dict[int, list[float]] = {}
    for candidate_k in sorted({p.num_speculative_tokens for p in outcome.completed if p.combo == recommendation.combo}):
        evaluations = _combo_evaluations(outcome, recommendation, candidate_k)
        for batch_size in order:
            evaluation = evaluations.get(batch_size)
            values = evaluation.metrics.acceptance_per_position if evaluation is not None else None
            if values is not None and len(values) >= candidate_k:
                by_k[candidate_k] = list(values[:candidate_k])
                break
    if not by_k:
        return None
    nearest = min(by_k, key=lambda n: (abs(n - k), -n))
    facts = space.context.get("candidates", {}).get(recommendation.combo.candidate, {})
    conditional = extend_conditional(
        unconditional_to_conditional(_monotone(by_k[nearest])), k, facts.get("extrapolation", "repeat_last")
    )
    return [round(r, 4) for r in _monotone(conditional_to_unconditional(conditional))]


def _monotone(rates: Sequence[float]) -> list[float]:
    """Clipped to [0, 1] and non-increasing, as vLLM requires of synthetic_acceptance_rates."""
    out: list[float] = []
    for rate in rates:
        out.append(min(max(rate, 0.0), out[-1] if out else 1.0))
    return out


def _speculative_json(recommendation: Recommendation, k: int, rates: list[float]) -> str:
    base = dict(recommendation.space.candidate(recommendation.combo.candidate).speculative_base)
    config: dict[str, Any] = base | {
        "num_speculative_tokens": k,
        "rejection_sample_method": "synthetic",
        "draft_sample_method": recommendation.combo.draft_sample_method,
        "synthetic_acceptance_rates": rates,
    }
    SpeculativeConfig.model_validate(config, context={"notices": []})  # what vLLM would refuse, spectune refuses first
    return json.dumps(config)


def _bench_seconds(evaluations: Mapping[int, Evaluation], batch_size: int, prompts: int, output_tokens: float) -> float:
    """Seconds one bench run takes at the simulated throughput (the nearest simulated bucket's)."""
    if not evaluations:
        return 0.0
    nearest = min(evaluations, key=lambda b: abs(math.log(b / batch_size)))
    throughput = (
        evaluations[nearest].throughput * batch_size / nearest
        if nearest != batch_size
        else evaluations[nearest].throughput
    )
    return prompts * output_tokens / throughput if throughput > 0 else 0.0


def measure_script(outcome: StudyOutcome) -> str | None:
    """The script's text; None without a recommendation or without the study's context (old storages)."""
    recommendation = outcome.recommendation
    context = outcome.space.context
    if recommendation is None or not context.get("output_tokens") or not context.get("prompt_tokens"):
        return None
    space = recommendation.space
    prompt_tokens, output_tokens = round(context["prompt_tokens"]), round(context["output_tokens"])
    runs = [(b, max(_PROMPTS_PER_CONCURRENCY * b, _MIN_PROMPTS)) for b in space.batch_sizes]
    blocks, bench_s, skipped = [], 0.0, []
    ks = measurement_ks(recommendation)
    for k in ks:
        rates = _simulated_rates(outcome, recommendation, k) if k else []
        if rates is None:
            skipped.append(k)
            continue
        evaluations = _combo_evaluations(outcome, recommendation, k)
        bench_s += sum(_bench_seconds(evaluations, b, n, output_tokens) for b, n in runs)
        blocks.append(_block(recommendation, k, rates, runs))
    starts = len(blocks)
    total_min = (starts * SERVER_START_S + bench_s) / 60
    schedule = json.dumps([list(row) for row in recommendation.schedule])
    header = [
        "#!/usr/bin/env bash",
        f"# Measurement plan for spectune study {space.name!r}: {recommendation.combo.label}, schedule {schedule}.",
        f"# Estimated GPU time: about {total_min:.0f} min -- {starts} server starts at ~{SERVER_START_S / 60:.0f} min each (assumed) and",
        f"# {starts * len(runs)} bench runs, {bench_s / 60:.1f} min at the simulated throughput.",
        "#",
        f"# It serves K = {', '.join(map(str, ks))} (the schedule's K, their neighbours, and K = 0 without a drafter) with",
        "# acceptance pinned to the simulated per-position rates (rejection_sample_method: synthetic), so the GPU",
        "# measures the step times the study assumed, and benchmarks each at the concurrencies",
        f"# {', '.join(str(b) for b, _ in runs)} (the study's batch sizes) with random {prompt_tokens}-token prompts and",
        f"# {output_tokens}-token outputs (--ignore-eos: every request yields exactly that many tokens).",
        *(["# Not measured (never simulated with this combo): K = " + ", ".join(map(str, skipped))] if skipped else []),
        *(
            [
                f"# The servers verify with the synthetic rule, not {recommendation.combo.rejection_sample_method}: that rule's own "
                "sampling cost is not in these step times."
            ]
            if recommendation.combo.rejection_sample_method != "standard"
            else []
        ),
        "#",
        f"# Usage:  TARGET=<served model of {context.get('target_model', 'the target')}> bash measure.sh [RESULTS_DIR]",
        "# Then:   spectune calibrate RESULTS_DIR --out profile.yaml    (also writes step-times.csv beside it)",
        "# and rerun the study with  cost_model: {method: measured, step_times: step-times.csv}",
        "set -euo pipefail",
        ': "${TARGET:?set TARGET to the model to serve (a Hugging Face id or a path)}"',
        'RESULTS="${1:-results}"',
        'PORT="${PORT:-8000}"',
        "SERVER=",
        "",
        "serve() {  # serve K [speculative-config JSON]; the server log goes beside the results",
        '  mkdir -p "$RESULTS/k$1"',
        f'  local args=(--port "$PORT" --max-num-seqs {context.get("max_num_seqs", space.max_batch_size)} '
        f"--tensor-parallel-size {context.get('tensor_parallel_size', 1)})",
        '  if [[ -n "${2:-}" ]]; then args+=(--speculative-config "$2"); fi',
        '  vllm serve "$TARGET" "${args[@]}" > "$RESULTS/k$1/server.log" 2>&1 &',
        "  SERVER=$!",
        '  until curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; do',
        '    if ! kill -0 "$SERVER" 2> /dev/null; then echo "vllm serve exited; see $RESULTS/k$1/server.log" >&2; exit 1; fi',
        '    sleep "${HEALTH_POLL_S:-5}"',
        "  done",
        "}",
        "",
        "stop() {",
        '  kill "$SERVER"; wait "$SERVER" || true; SERVER=',
        "}",
        'trap \'if [[ -n "$SERVER" ]]; then kill "$SERVER" 2> /dev/null || true; fi\' EXIT',
        "",
        "bench() {  # bench K CONCURRENCY PROMPTS",
        '  vllm bench serve --backend vllm --model "$TARGET" --port "$PORT" --dataset-name random \\',
        f'    --random-input-len {prompt_tokens} --random-output-len {output_tokens} --num-prompts "$3" --max-concurrency "$2" \\',
        '    --ignore-eos --seed 0 --save-result --result-dir "$RESULTS/k$1" --result-filename "k$1-c$2.json"',
        "}",
        "",
    ]
    return "\n".join(header) + "\n" + "".join(blocks) + 'echo "done: spectune calibrate $RESULTS --out profile.yaml"\n'


def _block(recommendation: Recommendation, k: int, rates: list[float], runs: list[tuple[int, int]]) -> str:
    if k == 0:
        lines = ["# K = 0: no drafter loaded (speculation off), the baseline", "serve 0"]
    else:
        uses = [f"{start}-{end}" for start, end, row_k in recommendation.schedule if row_k == k]
        role = f"recommended for batch sizes {', '.join(uses)}" if uses else "a neighbour of a recommended K"
        lines = [
            f"# K = {k}: {role}; synthetic acceptance {rates}",
            f"serve {k} {shlex.quote(_speculative_json(recommendation, k, rates))}",
        ]
    lines += [f"bench {k} {batch_size} {prompts}" for batch_size, prompts in runs]
    lines.append("stop")
    return "\n".join(lines) + "\n\n"
