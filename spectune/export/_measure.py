"""``measure.sh``: the few real-GPU measurements that check a recommendation, as a plain bash script.

The default protocol measures the K table *as it will be served* (the K-forcing protocol of vLLM's
sweep tuner docs, PR #49163): every candidate K -- the table's K, their neighbours K - 1 and K + 1 up
to the table's maximum, and K = 0 -- gets one ``vllm serve`` with the same global
``num_speculative_tokens`` (the table's maximum) and a one-range table ``[[1, MAX_NUM_SEQS, K]]`` that
forces K at every batch size. K = 0 is a candidate like the others: its drafter stays loaded, prefills,
and KV lookahead is reserved at the global K, as in a served table's 0 row (vLLM #49548 measured this
"K = 0 tax" at +6.6 % TPOT at concurrency 2 and +21.6 % at 189). Only ``--max-concurrency`` varies
between bench runs, and every (K, concurrency) cell runs ``REPEATS`` >= 3 times, the repeats of all
concurrencies interleaved so that a drift of the GPU spreads over every cell instead of biasing one.

``--plain-k0`` keeps the older protocol: one server per K with ``num_speculative_tokens = K`` and
K = 0 served without a drafter, i.e. it measures plain decoding at K = 0 (the cost of turning
speculation off, not of a table's 0 row). ``--sweep-params`` writes ``serve_params.json`` and
``bench_params.json`` for ``vllm bench sweep serve`` (the keys of vLLM 0.33.0's
``vllm/benchmarks/sweep/param_sweep.py``: a dict of named parameter sets, dict values passed as JSON)
and prints the sweep command instead of running anything.

Acceptance is pinned to the simulated rates (``rejection_sample_method: synthetic``: the drafter and
verifier run for real, only the accept decisions are forced). Bench runs use random prompts at the
study's mean prompt and output lengths and ``--ignore-eos`` (the step-time estimator in
``spectune.calibrate`` relies on it), and stamp each result with ``--metadata`` (the forced K, the
global K, whether the drafter was loaded, the repeat), which ``spectune calibrate RESULTS/`` reads.

Only flags documented for ``vllm serve`` and ``vllm bench serve`` are used (``VLLM_SERVE_FLAGS``,
``VLLM_BENCH_SERVE_FLAGS``; docs/calibration.md lists them with their source).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from spectune.calibrate import MIN_REPEATS  # calibrate refuses cells with fewer runs
from spectune.config import (
    SpeculativeConfig,
    conditional_to_unconditional,
    extend_conditional,
    unconditional_to_conditional,
)
from spectune.export._measure_bash import bash_functions, measure_function, sweep_function
from spectune.study import Evaluation, Recommendation, StudyOutcome

__all__ = [
    "MIN_REPEATS",
    "SERVER_START_S",
    "VLLM_BENCH_SERVE_FLAGS",
    "VLLM_SERVE_FLAGS",
    "forced_ks",
    "measure_script",
    "measurement_ks",
]

VLLM_SERVE_FLAGS = ("--port", "--max-num-seqs", "--tensor-parallel-size", "--speculative-config")
VLLM_BENCH_SERVE_FLAGS = (
    "--backend", "--model", "--port", "--dataset-name", "--random-input-len", "--random-output-len", "--num-prompts",
    "--max-concurrency", "--ignore-eos", "--seed", "--save-result", "--result-dir", "--result-filename", "--metadata",
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


def forced_ks(recommendation: Recommendation) -> list[int]:
    """The K the K-forcing protocol serves: ``measurement_ks`` up to the table's maximum K (the global K).

    Forcing K needs K <= num_speculative_tokens, and raising the global K past the table's maximum would
    change the lookahead every candidate pays, so the maximum's upper neighbour is not measured."""
    top = max(k for _, _, k in recommendation.schedule)
    return [k for k in measurement_ks(recommendation) if k <= top]


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


def _speculative_json(
    recommendation: Recommendation, k: int, rates: list[float], table: list[list[int]] | None = None
) -> str:
    base = dict(recommendation.space.candidate(recommendation.combo.candidate).speculative_base)
    config: dict[str, Any] = base | {
        "num_speculative_tokens": k,
        "rejection_sample_method": "synthetic",
        "draft_sample_method": recommendation.combo.draft_sample_method,
        "synthetic_acceptance_rates": rates,
    }
    if recommendation.adaptive_verification:
        config["enable_adaptive_verification"] = True
    if table is not None:
        config["num_speculative_tokens_per_batch_size"] = table
    else:
        config.pop("num_speculative_tokens_per_batch_size", None)
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


def _forced_rates(outcome: StudyOutcome, recommendation: Recommendation, k: int, global_k: int) -> list[float] | None:
    """Synthetic rates for a server of global K that forces K: K's simulated rates, then the global K's.

    vLLM requires one rate per position of the global K; the positions past the forced K are never drafted."""
    top = _simulated_rates(outcome, recommendation, global_k)
    if top is None or not 0 < k < global_k:
        return top
    own = _simulated_rates(outcome, recommendation, k)
    return top if own is None else _monotone(own[:k] + top[k:])


def _plan_seconds(
    outcome: StudyOutcome, recommendation: Recommendation, ks: Sequence[int], runs: list[tuple[int, int]]
) -> float:
    """GPU seconds of one pass over the cells of ``ks`` at the simulated throughput."""
    output_tokens = round(outcome.space.context["output_tokens"])
    total = 0.0
    for k in ks:
        evaluations = _combo_evaluations(outcome, recommendation, k)
        total += sum(_bench_seconds(evaluations, b, n, output_tokens) for b, n in runs)
    return total


def measure_script(outcome: StudyOutcome) -> str | None:
    """The script's text; None without a recommendation or without the study's context (old storages)."""
    recommendation = outcome.recommendation
    context = outcome.space.context
    if recommendation is None or not context.get("output_tokens") or not context.get("prompt_tokens"):
        return None
    space = recommendation.space
    max_num_seqs = int(context.get("max_num_seqs", space.max_batch_size))
    runs = [(b, max(_PROMPTS_PER_CONCURRENCY * b, _MIN_PROMPTS)) for b in space.batch_sizes]
    global_k = max(k for _, _, k in recommendation.schedule)
    forced: list[tuple[int, str | None]] = []  # (K, speculative-config JSON); None: no drafter
    for k in forced_ks(recommendation) if global_k > 0 else [0]:
        rates = _forced_rates(outcome, recommendation, k, global_k) if global_k > 0 else []
        if rates is None:
            continue
        table = [[1, max_num_seqs, k]]
        forced.append((k, _speculative_json(recommendation, global_k, rates, table) if global_k > 0 else None))
    plain: list[tuple[int, str | None]] = []
    skipped = []
    for k in measurement_ks(recommendation):
        rates = _simulated_rates(outcome, recommendation, k) if k else []
        if rates is None:
            skipped.append(k)
            continue
        plain.append((k, _speculative_json(recommendation, k, rates) if k else None))
    forced_s = _plan_seconds(outcome, recommendation, [k for k, _ in forced], runs)
    plain_s = _plan_seconds(outcome, recommendation, [k for k, _ in plain], runs)
    header = _header(outcome, recommendation, forced, plain, runs, forced_s, plain_s, skipped, max_num_seqs)
    body = [
        bash_functions(context, space.max_batch_size, round(context["prompt_tokens"]), round(context["output_tokens"])),
        measure_function("measure_as_served", forced, global_k, runs, recommendation, as_served=True),
        measure_function("measure_plain_k0", plain, None, runs, recommendation, as_served=False),
        sweep_function(forced, runs),
        'case "$MODE" in',
        "  as-served) measure_as_served ;;",
        "  plain-k0) measure_plain_k0 ;;",
        "  sweep-params) write_sweep_params; exit 0 ;;",
        "esac",
        'echo "done: spectune calibrate $RESULTS/$MODE --out profile.yaml"',
    ]
    return "\n".join(header) + "\n" + "\n".join(body) + "\n"


def _gpu_minutes(starts: int, bench_s: float) -> float:
    return (starts * SERVER_START_S + MIN_REPEATS * bench_s) / 60  # the short warm-ups are left out


def _header(
    outcome: StudyOutcome,
    recommendation: Recommendation,
    forced: list[tuple[int, str | None]],
    plain: list[tuple[int, str | None]],
    runs: list[tuple[int, int]],
    forced_s: float,
    plain_s: float,
    skipped: list[int],
    max_num_seqs: int,
) -> list[str]:
    context = outcome.space.context
    schedule = json.dumps([list(row) for row in recommendation.schedule])
    global_k = max(k for _, _, k in recommendation.schedule)
    cells = len(forced) * len(runs)
    concurrencies = ", ".join(str(b) for b, _ in runs)
    lines = [
        "#!/usr/bin/env bash",
        f"# Measurement plan for spectune study {outcome.space.name!r}: {recommendation.combo.label}, schedule {schedule}.",
        f"# Estimated GPU time: about {_gpu_minutes(len(forced), forced_s):.0f} min -- {len(forced)} server starts at "
        f"~{SERVER_START_S / 60:.0f} min each (assumed) and",
        f"# {MIN_REPEATS * cells} bench runs ({cells} cells x REPEATS={MIN_REPEATS}), {MIN_REPEATS * forced_s / 60:.1f} min "
        "at the simulated throughput.",
        f"# (--plain-k0: about {_gpu_minutes(len(plain), plain_s):.0f} min, {len(plain)} server starts.)",
        "#",
    ]
    if global_k > 0:
        lines += [
            "# Protocol (default): the K table as vLLM serves it. Every candidate K = "
            + ", ".join(str(k) for k, _ in forced),
            "# (the table's K, their neighbours up to its maximum, and 0) gets one server with the table's global",
            f"# num_speculative_tokens = {global_k} and the one-range table [[1, {max_num_seqs}, K]], which forces K at every",
            "# batch size. K = 0 keeps the drafter loaded: it prefills, and KV lookahead is reserved at the global K,",
            "# as in the served table's 0 row (vLLM #49548 measured this K = 0 tax at +6.6% TPOT at concurrency 2).",
        ]
    else:
        lines += ["# The recommendation turns speculation off: K = 0 is served without a drafter, as deployed."]
    lines += [
        f"# Only --max-concurrency varies: {concurrencies} (the study's batch sizes), random {round(context['prompt_tokens'])}-token",
        f"# prompts, {round(context['output_tokens'])}-token outputs (--ignore-eos), each cell REPEATS times (default {MIN_REPEATS}, at least {MIN_REPEATS}),",
        "# the repeats of all concurrencies interleaved, after one unmeasured warm-up run per server.",
        "# Acceptance is pinned to the simulated per-position rates (rejection_sample_method: synthetic).",
        "# --plain-k0: one server per K (num_speculative_tokens = K, K = "
        + ", ".join(str(k) for k, _ in plain)
        + "), K = 0 without a drafter:",
        "# it measures plain decoding at K = 0 (speculation off), not a table's 0 row.",
        "# --sweep-params: write serve_params.json and bench_params.json for vllm bench sweep serve instead.",
        *(
            [
                "# Adaptive verification is on in every server (enable_adaptive_verification): each forced K is the cap",
                "# of every step's verification budget, which vLLM sizes from its start-up cost profile; with synthetic",
                "# acceptance its per-slot estimates learn the pinned rates, not the drafter's own confidence.",
            ]
            if recommendation.adaptive_verification
            else []
        ),
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
        f"# Usage:  TARGET=<served model of {context.get('target_model', 'the target')}> bash measure.sh "
        "[--plain-k0 | --sweep-params] [RESULTS_DIR]",
        "# Then:   spectune calibrate RESULTS_DIR/as-served --out profile.yaml    (also writes step-times.csv beside it)",
        "# and rerun the study with  cost_model: {method: measured, step_times: step-times.csv}",
        "set -euo pipefail",
        "MODE=as-served",
        'case "${1:-}" in',
        "  --plain-k0) MODE=plain-k0; shift ;;",
        "  --sweep-params) MODE=sweep-params; shift ;;",
        '  -*) echo "usage: TARGET=<model> bash measure.sh [--plain-k0 | --sweep-params] [RESULTS_DIR]; got $1" >&2; exit 2 ;;',
        "esac",
        ': "${TARGET:?set TARGET to the model to serve (a Hugging Face id or a path)}"',
        'RESULTS="${1:-results}"',
        'PORT="${PORT:-8000}"',
        f'REPEATS="${{REPEATS:-{MIN_REPEATS}}}"',
        f'if ! [[ "$REPEATS" =~ ^[0-9]+$ ]] || (( REPEATS < {MIN_REPEATS} )); then',
        f'  echo "REPEATS must be a whole number >= {MIN_REPEATS} (a cell\'s median and spread need {MIN_REPEATS} runs), got $REPEATS" >&2',
        "  exit 2",
        "fi",
        "SERVER=",
        "",
    ]
    return lines
