"""A stand-in for the ``vllm`` command, so that ``measure.sh`` runs end to end without a GPU.

``vllm serve ... [--speculative-config JSON]`` records K and the synthetic acceptance in the state file
``$FAKE_VLLM_STATE`` (removed when it is killed) and waits; ``vllm bench serve ...`` writes the result file that
``bench_synthetic.bench_result`` generates for that K, its acceptance and the command's concurrency,
prompt count and lengths, on ``bench_synthetic.default_surface``. It is a test double: the numbers
come from the known surface, which is the point (calibration must give them back).

    python tests/calibrate/fake_vllm.py --install DIR   # writes DIR/vllm and DIR/curl shims
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_synthetic import bench_result  # noqa: E402

_STATE = "FAKE_VLLM_STATE"


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def serve(args: list[str]) -> None:
    config = json.loads(_option(args, "--speculative-config")) if "--speculative-config" in args else {}
    rates = config.get("synthetic_acceptance_rates", [])
    state = Path(os.environ[_STATE])
    signal.signal(signal.SIGTERM, lambda *_: (state.unlink(missing_ok=True), sys.exit(0)))  # "healthy" only while up
    state.with_suffix(".tmp").write_text(
        json.dumps({"k": config.get("num_speculative_tokens", 0), "unconditional": rates})
    )
    state.with_suffix(".tmp").replace(state)
    time.sleep(3600)


def bench(args: list[str]) -> None:
    state = json.loads(Path(os.environ[_STATE]).read_text())
    unconditional = state["unconditional"]
    conditional = [rate / (unconditional[i - 1] if i else 1.0) for i, rate in enumerate(unconditional)]
    concurrency = int(_option(args, "--max-concurrency"))
    result, _ = bench_result(
        concurrency=concurrency,
        k=state["k"],
        conditional_rates=conditional,
        num_prompts=int(_option(args, "--num-prompts")),
        input_len=int(_option(args, "--random-input-len")),
        output_len=int(_option(args, "--random-output-len")),
        seed=1000 * state["k"] + concurrency,
    )
    directory = Path(_option(args, "--result-dir"))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / _option(args, "--result-filename")).write_text(json.dumps(result))


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
    elif argv[:1] == ["serve"]:
        serve(argv[2:])
    elif argv[:2] == ["bench", "serve"]:
        bench(argv[2:])
    else:
        sys.exit(f"fake vllm: unsupported command {' '.join(argv)}")
