#!/usr/bin/env bash
# The quickstart, one named step at a time: a virtual environment in .venv, spectune and its pinned
# dependencies installed into it, the shipped configs validated, the quickstart study run. A step that
# fails is named, with what to try; the ones before it need not run again (each is safe to repeat).
set -uo pipefail
cd "$(dirname "$0")"

step() {
    local name=$1 hint=$2
    shift 2
    echo "quickstart: $name" >&2
    if ! "$@"; then
        echo "quickstart: failed at '$name' (command: $*)${hint:+; $hint}" >&2
        exit 1
    fi
}

step "create the virtual environment .venv" "needs Python >= 3.11 with venv (Debian/Ubuntu: apt-get install python3-venv)" \
    "${PYTHON:-python3}" -m venv .venv
step "install spectune and its pinned dependencies" "pip's message above says which package; constraints.txt pins them" \
    .venv/bin/pip install -c constraints.txt -e '.[sim,test,postgres]'
step "validate the shipped configs" "each line above names a file, a line and a field" \
    .venv/bin/spectune validate configs/
step "run the quickstart study" "the line above says why; rerun to resume the study where it stopped" \
    .venv/bin/spectune study run studies/quickstart.yaml
