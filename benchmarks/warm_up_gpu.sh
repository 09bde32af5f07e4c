#!/usr/bin/env bash
# `spectune warm-up` on a fresh Triton cache, then the study it warmed up, on a GPU machine.
#
#   benchmarks/warm_up_gpu.sh          # from the repository root, with spectune installed (pip install -e .)
#
# 1. TRITON_CACHE_DIR is a new, empty folder: a fresh machine's cache.
# 2. `python3 -m spectune warm-up` on a copy of studies/decision.yaml with vocab_size 4096 and
#    simulation.device cuda (its acceptance profiles read from the repository), timed.
# 3. `python3 -m spectune study run` on the same copy with --workers 8 and a fresh --out, timed.
# Then both times, and the kernels Triton's cache held after each step: if the study added any, the
# warm-up missed variants the study launched.
#
# Environment: PYTHON (default python3); WORKERS (default 8); MPS (default 1: start NVIDIA's MPS daemon
# for the run where none is running, and stop it at the end, as the committed GPU study times were
# measured under MPS; 0: leave MPS alone); COLD=1 also times the study alone on another empty cache
# (a fresh machine without the warm-up); KEEP=1 keeps the work folder (the copy, the logs, the caches).
set -euo pipefail

PYTHON=${PYTHON:-python3}
WORKERS=${WORKERS:-8}
MPS=${MPS:-1}
if [[ ! -f studies/decision.yaml || ! -d spectune ]]; then
    echo "run this from the repository root (studies/decision.yaml, spectune/)" >&2
    exit 2
fi
REPO=$(pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/warm-up-gpu.XXXXXX")
STUDY="$WORK/decision-cuda.yaml"
STARTED_MPS=0

cleanup() {
    if [[ "$STARTED_MPS" == 1 ]]; then
        echo quit | nvidia-cuda-mps-control || true
    fi
    if [[ "${KEEP:-0}" == 1 ]]; then
        echo "kept $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

# The CUDA copy: the same study at V = 4096 on the GPU; its profiles' paths made absolute, as the copy
# lives elsewhere.
"$PYTHON" - "$REPO/studies/decision.yaml" "$STUDY" <<'PY'
import sys
from pathlib import Path

import yaml

source, target = Path(sys.argv[1]), Path(sys.argv[2])
study = yaml.safe_load(source.read_text())
study["workload"]["vocab_size"] = 4096
study.setdefault("simulation", {})["device"] = "cuda"
for candidate in study["candidates"]:
    acceptance = candidate.get("acceptance") or {}
    if "profile" in acceptance:
        acceptance["profile"] = str((source.parent / acceptance["profile"]).resolve())
target.write_text(yaml.safe_dump(study, sort_keys=False))
PY
"$PYTHON" -m spectune validate "$STUDY"

if [[ "$MPS" == 1 ]]; then
    if [[ -e "${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}/control" ]]; then
        echo "MPS: a control daemon is running already"
    elif command -v nvidia-cuda-mps-control >/dev/null; then
        nvidia-cuda-mps-control -d
        STARTED_MPS=1
        echo "MPS: started (stopped at the end)"
    else
        echo "MPS: nvidia-cuda-mps-control not found; the workers time-slice the GPU" >&2
    fi
fi

now() { date +%s.%N; }
seconds() { "$PYTHON" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$2"; }
cached() { find "$TRITON_CACHE_DIR" -mindepth 1 -maxdepth 1 -type d | wc -l; }

export TRITON_CACHE_DIR="$WORK/triton-cache"
mkdir -p "$TRITON_CACHE_DIR"
echo "TRITON_CACHE_DIR=$TRITON_CACHE_DIR (empty: $(cached) entries)"

echo "== spectune warm-up $STUDY"
start=$(now)
"$PYTHON" -m spectune warm-up "$STUDY" 2>&1 | tee "$WORK/warm-up.log"
warm_up_s=$(seconds "$start" "$(now)")
after_warm_up=$(cached)

echo "== spectune study run $STUDY --workers $WORKERS"
start=$(now)
"$PYTHON" -m spectune study run "$STUDY" --workers "$WORKERS" --out "$WORK/out" --no-progress 2>&1 |
    tee "$WORK/study.log"
study_s=$(seconds "$start" "$(now)")
after_study=$(cached)

if [[ "${COLD:-0}" == 1 ]]; then
    export TRITON_CACHE_DIR="$WORK/triton-cache-cold"
    mkdir -p "$TRITON_CACHE_DIR"
    echo "== spectune study run $STUDY --workers $WORKERS (empty cache, no warm-up)"
    start=$(now)
    "$PYTHON" -m spectune study run "$STUDY" --workers "$WORKERS" --out "$WORK/out-cold" --no-progress 2>&1 |
        tee "$WORK/study-cold.log"
    cold_s=$(seconds "$start" "$(now)")
fi

echo
echo "commit $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $WORKERS workers, MPS ${MPS}"
echo "warm-up           ${warm_up_s} s  (Triton's cache after it: ${after_warm_up} entries)"
echo "study run         ${study_s} s  (Triton's cache after it: ${after_study} entries)"
if ((after_study > after_warm_up)); then
    echo "the study added $((after_study - after_warm_up)) cache entries: kernels or launchers the warm-up did not make" >&2
fi
if [[ "${COLD:-0}" == 1 ]]; then
    echo "study run, cold   ${cold_s} s  (an empty cache, no warm-up)"
fi
