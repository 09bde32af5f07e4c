#!/usr/bin/env bash
# The decision study without search.policies on two CPU cores (taskset), side by side for several trees.
#
#   benchmarks/study_cpu2.sh OUT TREE [TREE ...]
#
# Issue 35's CPU yardstick ("the 2-core CPU decision study with --workers 2") on any many-core machine:
# the study is pinned to cores 0-1, device cpu, its vocabulary as committed (256). RUNS (default 2)
# runs a tree, interleaved; each tree imported through PYTHONPATH. Appends rows to OUT/study-cpu2.csv.
set -euo pipefail
OUT=$1
shift
RUNS=${RUNS:-2}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
MADE=()
trap 'for link in "${MADE[@]}"; do rm -f "$link"; done' EXIT
CSV=$OUT/study-cpu2.csv
[[ -f "$CSV" ]] || echo "tree,commit,run,wall_s,simulations" >"$CSV"
for tree in "$@"; do
    # spectune.kernels is the repository's kernels/ (pyproject's package-dir): a tree imported through
    # PYTHONPATH needs the link, else another install's kernels answer for it (removed at exit, as are the documents made here).
    if [[ ! -e "$tree/spectune/kernels" ]]; then
        ln -s ../kernels "$tree/spectune/kernels"
        MADE+=("$tree/spectune/kernels")
    fi

    "$PYTHON" - "$tree" <<'PY'
import sys, pathlib, re
tree = pathlib.Path(sys.argv[1])
text = (tree / "studies/decision.yaml").read_text()
text = re.sub(r"device: auto", "device: cpu", text)
(tree / "studies/decision-cpu-kt.yaml").write_text(re.sub(r"\n  policies: \[[^\]]*\]", "", text))
PY
    MADE+=("$tree/studies/decision-cpu-kt.yaml")
done
for run in $(seq 1 "$RUNS"); do
    for tree in "$@"; do
        log=$OUT/cpu2-$(basename "$(realpath "$tree")")-$run.log
        start=$(date +%s.%N)
        (cd "$tree" && PYTHONPATH=$(pwd):${PYTHONPATH:-} taskset -c 0,1 "$PYTHON" -m spectune study run \
            studies/decision-cpu-kt.yaml --workers 2 --out "$OUT/cpu2-$$-$RANDOM" --no-progress) >"$log" 2>&1 ||
            { tail -30 "$log"; exit 1; }
        end=$(date +%s.%N)
        sims=$(grep -o '^[0-9]* complete trials ([0-9]* simulations)' "$log" | grep -o '([0-9]*' | tr -d '(')
        commit=$(cat "$tree/.commit" 2>/dev/null || echo "?")
        echo "$tree,$commit,$run,$("$PYTHON" -c "print(round($end - $start, 2))"),$sims" | tee -a "$CSV"
    done
done
