"""A stand-in ``vllm`` that records every command and serves K-forced bench records, for ``measure.sh`` tests.

Each call appends its arguments as one JSON line to ``$FAKE_VLLM_LOG``. ``vllm serve ... [--speculative-config
JSON]`` records in ``$FAKE_VLLM_STATE`` the global K, the K its one-range table forces (or the global K
without a table; 0 without a config) and the synthetic rates, then waits until killed; ``vllm bench serve``
writes ``sweep_synthetic.forced_record`` for that server with the command's concurrency, prompts, lengths
and ``--metadata`` pairs. Its numbers come from a known surface, which is the point: calibration must
give them back.

    python tests/export/fake_vllm.py --install DIR   # writes DIR/vllm and DIR/curl shims
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "calibrate"))

from sweep_synthetic import forced_record  # noqa: E402

_STATE = "FAKE_VLLM_STATE"
_LOG = "FAKE_VLLM_LOG"


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def _metadata(args: list[str]) -> dict[str, str]:
    if "--metadata" not in args:
        return {}
    pairs = {}
    for item in args[args.index("--metadata") + 1 :]:
        if item.startswith("--"):
            break
        key, value = item.split("=", 1)
        pairs[key] = value
    return pairs


def serve(args: list[str]) -> None:
    config = json.loads(_option(args, "--speculative-config")) if "--speculative-config" in args else {}
    global_k = config.get("num_speculative_tokens", 0)
    table = config.get("num_speculative_tokens_per_batch_size")
    forced_k = min(table[0][2], global_k) if table else global_k
    state = Path(os.environ[_STATE])
    signal.signal(signal.SIGTERM, lambda *_: (state.unlink(missing_ok=True), sys.exit(0)))  # "healthy" only while up
    rates = config.get("synthetic_acceptance_rates", [])
    state.with_suffix(".tmp").write_text(
        json.dumps({"forced_k": forced_k, "global_k": global_k, "unconditional": rates})
    )
    state.with_suffix(".tmp").replace(state)
    time.sleep(3600)


def bench(args: list[str]) -> None:
    state = json.loads(Path(os.environ[_STATE]).read_text())
    unconditional = state["unconditional"][: state["forced_k"]]
    conditional = [rate / (unconditional[i - 1] if i else 1.0) for i, rate in enumerate(unconditional)]
    concurrency = int(_option(args, "--max-concurrency"))
    metadata = _metadata(args)
    run = metadata.get("spectune_run", "0")
    result = forced_record(
        concurrency=concurrency,
        forced_k=state["forced_k"],
        global_k=state["global_k"],
        conditional_rates=conditional,
        num_prompts=int(_option(args, "--num-prompts")),
        input_len=int(_option(args, "--random-input-len")),
        output_len=int(_option(args, "--random-output-len")),
        seed=1000 * state["forced_k"] + concurrency + 100_000 * (int(run) if run.isdigit() else 99),
    )
    directory = Path(_option(args, "--result-dir"))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / _option(args, "--result-filename")).write_text(json.dumps(result | metadata))


def install(directory: Path) -> None:
    """Shims ``vllm`` (this file) and ``curl`` (healthy once a fake server has written its state) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    shims = {
        "vllm": f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n',
        "curl": f'#!/bin/sh\ntest -s "${_STATE}"\n',
    }
    for name, text in shims.items():
        path = directory / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv[:1] == ["--install"]:
        install(Path(argv[1]))
        sys.exit(0)
    with open(os.environ[_LOG], "a", encoding="utf-8") as log:
        log.write(json.dumps(argv) + "\n")
    if argv[:1] == ["serve"]:
        serve(argv[2:])
    elif argv[:2] == ["bench", "serve"]:
        bench(argv[2:])
    else:
        sys.exit(f"fake vllm: unsupported command {' '.join(argv)}")
