#!/usr/bin/env bash
# The warm decision study on a lent GPU, side by side for several trees, under MPS.
#
#   benchmarks/study_gpu.sh OUT TREE [TREE ...]
#
# Each TREE is a copy of spectune's repository (the first usually "."); each is imported through
# PYTHONPATH, so no tree is installed. For each tree: studies/decision.yaml on CUDA with vocab_size
# 4096, once without search.policies ("kt", the study before issue 36) and once with its five policies
# ("pol"); the first run of each tree compiles its kernels (Triton's cache is the tree's own), then
# RUNS (default 2) warm runs of each, interleaved across trees. Every run gets a fresh --out, so nothing
# is resumed. Prints one CSV row a run (tree, commit, study, run, wall s, simulations, table) and
# writes them to OUT/study-gpu.csv.
set -euo pipefail
OUT=$1
shift
RUNS=${RUNS:-2}
WORKERS=${WORKERS:-8}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
MADE=()
trap 'for link in "${MADE[@]}"; do rm -f "$link"; done' EXIT
CSV=$OUT/study-gpu.csv
echo "tree,commit,study,run,wall_s,simulations,table" >"$CSV"

make_docs() { # tree: decision-kt.yaml and decision-pol.yaml beside its studies/decision.yaml
    local tree=$1
    "$PYTHON" - "$tree" <<'PY'
import sys, pathlib, re
tree = pathlib.Path(sys.argv[1])
text = (tree / "studies/decision.yaml").read_text()
text = re.sub(r"vocab_size: \d+", "vocab_size: 4096", text)
text = re.sub(r"device: auto", "device: cuda", text)
(tree / "studies/decision-pol.yaml").write_text(text)
(tree / "studies/decision-kt.yaml").write_text(re.sub(r"\n  policies: \[[^\]]*\]", "", text))
PY
    MADE+=("$tree/studies/decision-pol.yaml" "$tree/studies/decision-kt.yaml")
}

run_one() { # tree study run
    local tree=$1 study=$2 run=$3 log start end
    log=$OUT/$(basename "$(realpath "$tree")")-$study-$run.log
    start=$(date +%s.%N)
    (cd "$tree" && PYTHONPATH=$(pwd):${PYTHONPATH:-} TRITON_CACHE_DIR=$(pwd)/.triton-cache "$PYTHON" -m spectune study run \
        "studies/decision-$study.yaml" --workers "$WORKERS" --out "$OUT/run-$$-$RANDOM" --no-progress) >"$log" 2>&1 ||
        { tail -30 "$log"; return 1; }
    end=$(date +%s.%N)
    local sims table commit
    sims=$(grep -o '^[0-9]* complete trials ([0-9]* simulations)' "$log" | grep -o '([0-9]*' | tr -d '(')
    table=$(grep -o '"num_speculative_tokens_per_batch_size": \[\[[^"]*\]\]' "$log" | head -1 | sed 's/.*: //; s/ //g')
    commit=$(cat "$tree/.commit" 2>/dev/null || git -C "$tree" rev-parse --short HEAD 2>/dev/null || echo "?")
    echo "$tree,$commit,$study,$run,$("$PYTHON" -c "print(round($end - $start, 2))"),$sims,\"$table\"" | tee -a "$CSV"
}

for tree in "$@"; do
    # spectune.kernels is the repository's kernels/ (pyproject's package-dir): a tree imported through
    # PYTHONPATH needs the link, else another install's kernels answer for it (removed at exit, as are the documents made here).
    if [[ ! -e "$tree/spectune/kernels" ]]; then
        ln -s ../kernels "$tree/spectune/kernels"
        MADE+=("$tree/spectune/kernels")
    fi
 make_docs "$tree"; done
for tree in "$@"; do run_one "$tree" kt first; done
for run in $(seq 1 "$RUNS"); do
    for tree in "$@"; do run_one "$tree" kt "$run"; done
done
if [[ "${POLICIES:-1}" == 1 ]]; then
    for run in $(seq 1 "$RUNS"); do
        for tree in "$@"; do run_one "$tree" pol "$run"; done
    done
fi
