"""The bash functions of ``measure.sh``: serving, benchmarking, the protocols' loops and the sweep's files.

``spectune.export._measure`` decides what to measure; this module only writes it as bash. Every
``vllm`` call goes through ``serve`` and ``bench`` (``sweep_command`` only prints one), so the flags
a test checks against the documented ones are in two places.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from spectune.study import Recommendation

__all__ = ["WARMUP_PROMPTS", "bash_functions", "measure_function", "sweep_function"]

WARMUP_PROMPTS = 16  # one short unmeasured run per server: the first requests pay compilation and caches


def bash_functions(context: Mapping[str, Any], max_batch_size: int, prompt_tokens: int, output_tokens: int) -> str:
    serve_flags = (
        f'--port "$PORT" --max-num-seqs {context.get("max_num_seqs", max_batch_size)} '
        f"--tensor-parallel-size {context.get('tensor_parallel_size', 1)}"
    )
    bench_flags = (
        f'--backend vllm --model "$TARGET" --port "$PORT" --dataset-name random --random-input-len {prompt_tokens} '
        f"--random-output-len {output_tokens} --ignore-eos --seed 0"
    )
    lines = [
        "serve() {  # serve DIR GLOBAL_K DRAFTER [speculative-config JSON]; the server log goes beside the results",
        '  OUT="$RESULTS/$MODE/$1" GLOBAL_K="$2" DRAFTER="$3"',
        '  mkdir -p "$OUT"',
        f"  local args=({serve_flags})",
        '  if [[ -n "${4:-}" ]]; then args+=(--speculative-config "$4"); fi',
        '  vllm serve "$TARGET" "${args[@]}" > "$OUT/server.log" 2>&1 &',
        "  SERVER=$!",
        '  until curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; do',
        '    if ! kill -0 "$SERVER" 2> /dev/null; then echo "vllm serve exited; see $OUT/server.log" >&2; exit 1; fi',
        '    sleep "${HEALTH_POLL_S:-5}"',
        "  done",
        "}",
        "",
        "stop() {",
        '  kill "$SERVER"; wait "$SERVER" || true; SERVER=',
        "}",
        'trap \'if [[ -n "$SERVER" ]]; then kill "$SERVER" 2> /dev/null || true; fi\' EXIT',
        "",
        "bench() {  # bench K CONCURRENCY PROMPTS RUN (RUN=warmup: unmeasured, kept apart)",
        '  local dir="$OUT/c$2" name="run=$4.json"',
        '  if [[ "$4" == warmup ]]; then dir="$OUT" name=warmup.json; fi',
        f"  vllm bench serve {bench_flags} \\",
        '    --num-prompts "$3" --max-concurrency "$2" --save-result --result-dir "$dir" --result-filename "$name" \\',
        '    --metadata "spectune_forced_k=$1" "spectune_num_speculative_tokens=$GLOBAL_K" "spectune_drafter=$DRAFTER" \\',
        '      "spectune_protocol=$MODE" "spectune_run=$4"',
        "}",
        "",
        "sweep_command() {  # what vllm bench sweep serve runs with the files write_sweep_params writes",
        "  echo \"vllm bench sweep serve --serve-cmd 'vllm serve $TARGET " + serve_flags.replace('"', "") + "' \\\\\"",
        "  echo \"  --bench-cmd 'vllm bench serve " + bench_flags.replace('"', "") + "' \\\\\"",
        '  echo "  --serve-params $RESULTS/serve_params.json --bench-params $RESULTS/bench_params.json \\\\"',
        f'  echo "  --num-runs $REPEATS --warmup-num-prompts {WARMUP_PROMPTS} --output-dir $RESULTS --experiment-name sweep"',
        "}",
        "",
    ]
    return "\n".join(lines)


def measure_function(
    name: str,
    candidates: list[tuple[int, str | None]],
    global_k: int | None,
    runs: list[tuple[int, int]],
    recommendation: Recommendation,
    *,
    as_served: bool,
) -> str:
    lines = [f"{name}() {{"]
    for k, config in candidates:
        uses = [f"{start}-{end}" for start, end, row_k in recommendation.schedule if row_k == k]
        role = f"recommended for batch sizes {', '.join(uses)}" if uses else "a neighbour of a recommended K"
        role = role if uses or k else "the baseline (the table has no 0 row)"
        if config is None:
            lines.append(f"  # K = 0 without a drafter (plain decoding); {role}")
            lines.append("  serve k0 0 none")
        else:
            what = f"forced by [[1, MAX, {k}]] under num_speculative_tokens {global_k}" if as_served else "static"
            drafter = "loaded"
            lines.append(f"  # K = {k} ({what}); {role}")
            lines.append(f"  serve k{k} {global_k if as_served else k} {drafter} {shlex.quote(config)}")
        lines.append(f"  bench {k} {runs[0][0]} {WARMUP_PROMPTS} warmup")
        lines.append('  for run in $(seq 1 "$REPEATS"); do')
        lines += [f'    bench {k} {batch_size} {prompts} "$run"' for batch_size, prompts in runs]
        lines += ["  done", "  stop"]
    lines.append("}")
    return "\n".join(lines) + "\n"


def sweep_function(candidates: list[tuple[int, str | None]], runs: list[tuple[int, int]]) -> str:
    serve_params = {f"k{k}": ({"speculative_config": json.loads(config)} if config else {}) for k, config in candidates}
    bench_params = {f"c{b}": {"max_concurrency": b, "num_prompts": n} for b, n in runs}
    lines = [
        "write_sweep_params() {  # the K-forcing protocol as the sweep's parameter files (see sweep_command)",
        '  mkdir -p "$RESULTS"',
        "  cat > \"$RESULTS/serve_params.json\" << 'JSON'",
        json.dumps(serve_params, indent=2),
        "JSON",
        "  cat > \"$RESULTS/bench_params.json\" << 'JSON'",
        json.dumps(bench_params, indent=2),
        "JSON",
        '  echo "wrote $RESULTS/serve_params.json and $RESULTS/bench_params.json; run:"',
        "  sweep_command",
        '  echo "then: spectune calibrate $RESULTS/sweep --out profile.yaml"',
        "}",
    ]
    return "\n".join(lines) + "\n"
