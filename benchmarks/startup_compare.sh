#!/usr/bin/env bash
# Side-by-side start-up comparison of two commits (default: main against startup), for a quiet machine.
#
#   benchmarks/startup_compare.sh [BASE_REF] [NEW_REF]
#
# Environment: RUNS (default 5) alternating runs of each measure per ref; WORKERS (default 2) for the
# decision study; DECISION (default studies/decision.yaml; on an H200 give a copy with
# simulation.device: cuda and vocab_size: 4096, and WORKERS=8 under MPS for the warm GPU case);
# PYTHON (default python3); KEEP=1 keeps the work folder; FRESH=1 adds ``decision-fresh``: the decision
# study with an empty Triton cache each run (TRITON_CACHE_DIR), the fresh machine's first run, where
# main compiled kernels in warm-up processes beside the workers and this branch compiles each variant
# where it is first launched. Each ref gets its own worktree and venv
# (pip install -c constraints.txt -e '.[sim]'), and one untimed decision run first, so Triton's cache
# and the .pyc files are warm for both: the timed runs compare start-up and steady state, not a
# fresh machine. Every study run writes to a fresh --out, so nothing is resumed.
#
# Measures (wall seconds, from the command's start to its exit):
#   help       spectune --help
#   validate   spectune validate configs/*.yaml
#   quickstart spectune study run studies/quickstart.yaml
#   decision   spectune study run $DECISION --workers $WORKERS
# Output: benchmarks/results/startup-compare-DATE.csv (ref, commit, measure, run, seconds; CSV= to
# choose) and a table of medians, min and max with the new ref's median as a ratio of the base's (a
# retired trick paid where the ratio is >= 1.10).
set -euo pipefail

BASE=${1:-main}
NEW=${2:-startup}
RUNS=${RUNS:-5}
WORKERS=${WORKERS:-2}
DECISION=${DECISION:-studies/decision.yaml}
PYTHON=${PYTHON:-python3}
REPO=$(git rev-parse --show-toplevel)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/startup-compare.XXXXXX")
CSV=${CSV:-$REPO/benchmarks/results/startup-compare-$(date +%F).csv}
echo "ref,commit,measure,run,seconds" >"$CSV"

cleanup() {
    for ref in "$BASE" "$NEW"; do
        git -C "$REPO" worktree remove --force "$WORK/$ref" 2>/dev/null || true
    done
    [[ "${KEEP:-0}" == 1 ]] || rm -rf "$WORK"
}
trap cleanup EXIT

for ref in "$BASE" "$NEW"; do
    git -C "$REPO" worktree add --detach -q "$WORK/$ref" "$ref"
    "$PYTHON" -m venv "$WORK/$ref/.venv"
    (cd "$WORK/$ref" && .venv/bin/pip install -q -c constraints.txt -e '.[sim]')
    cp "$DECISION" "$WORK/$ref/decision-compare.yaml"
done

timed() { # ref measure run command...: append one CSV row
    local ref=$1 measure=$2 run=$3
    shift 3
    local start end
    if [[ "$measure" == decision-fresh ]]; then
        export TRITON_CACHE_DIR="$WORK/triton-$ref-$run"
    fi
    start=$(date +%s.%N)
    (cd "$WORK/$ref" && "$@" >/dev/null 2>"$WORK/$ref-$measure-$run.err") || {
        echo "$ref $measure run $run failed:" >&2
        cat "$WORK/$ref-$measure-$run.err" >&2
        exit 1
    }
    end=$(date +%s.%N)
    unset TRITON_CACHE_DIR
    echo "$ref,$(git -C "$REPO" rev-parse --short "$ref"),$measure,$run,$(echo "$end - $start" | bc)" >>"$CSV"
}

for ref in "$BASE" "$NEW"; do # warm the caches (untimed)
    (cd "$WORK/$ref" && .venv/bin/spectune study run decision-compare.yaml --workers "$WORKERS" \
        --out "$WORK/warm-$ref" --no-progress >/dev/null)
done

for run in $(seq 1 "$RUNS"); do
    for ref in "$BASE" "$NEW"; do # alternate, so that a drift of the machine hits both
        timed "$ref" help "$run" .venv/bin/spectune --help
        timed "$ref" validate "$run" bash -c '.venv/bin/spectune validate configs/*.yaml'
        timed "$ref" quickstart "$run" .venv/bin/spectune study run studies/quickstart.yaml \
            --out "$WORK/out-$ref-quickstart-$run" --no-progress
        timed "$ref" decision "$run" .venv/bin/spectune study run decision-compare.yaml --workers "$WORKERS" \
            --out "$WORK/out-$ref-decision-$run" --no-progress
        if [[ "${FRESH:-0}" == 1 ]]; then
            timed "$ref" decision-fresh "$run" .venv/bin/spectune study run decision-compare.yaml \
                --workers "$WORKERS" --out "$WORK/out-$ref-fresh-$run" --no-progress
        fi
    done
done

"$PYTHON" - "$CSV" "$BASE" "$NEW" <<'PY'
import csv, statistics, sys
path, base, new = sys.argv[1:]
rows = list(csv.DictReader(open(path)))
times = {}
for row in rows:
    times.setdefault((row["measure"], row["ref"]), []).append(float(row["seconds"]))
print(f"{'measure':<11} {'ref':<12} {'median s':>9} {'min':>7} {'max':>7}  new/base")
for measure in ("help", "validate", "quickstart", "decision", "decision-fresh"):
    if (measure, base) not in times:
        continue
    for ref in (base, new):
        t = times[(measure, ref)]
        ratio = statistics.median(t) / statistics.median(times[(measure, base)])
        print(f"{measure:<11} {ref:<12} {statistics.median(t):>9.2f} {min(t):>7.2f} {max(t):>7.2f}  {ratio:.3f}")
print(f"rows: {path}")
PY
