"""The example tables in configs/step_times/ are what their headers say: roofline output, not measurements.

Regenerate them after changing the roofline or its defaults:

    .venv/bin/python tests/cost/test_example_tables.py --write
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from spectune.config import CostModelConfig, DrafterSpec, HardwareConfig, TargetModelSpec, read_step_time_table
from spectune.cost import build_cost_model

TABLE_DIR = Path(__file__).resolve().parents[2] / "configs" / "step_times"
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256)
CONTEXT_TOKENS = 1024

# file name -> (hardware, target model, drafter, K values)
EXAMPLES = {
    "h100-llama-3.1-8b-eagle3.csv": (
        {"gpu": "h100-sxm", "num_gpus": 1},
        "llama-3.1-8b",
        "eagle3-llama-3.1-8b",
        range(0, 8),
    ),
    "h100x4-llama-3.1-70b-eagle3.csv": (
        {"gpu": "h100-sxm", "num_gpus": 4},
        "llama-3.1-70b",
        "eagle3-llama-3.1-70b",
        range(0, 6),
    ),
}


def example_table_text(name: str) -> str:
    hardware, target, drafter, ks = EXAMPLES[name]
    cost = build_cost_model(
        HardwareConfig.model_validate(hardware),
        TargetModelSpec.model_validate(target),
        DrafterSpec.model_validate(drafter),
        CostModelConfig(),
    )
    lines = [
        "# ILLUSTRATIVE, NOT A MEASUREMENT. Computed by spectune's roofline cost model with its defaults:",
        f"# {hardware['num_gpus']} x {hardware['gpu']}, target {target}, drafter {drafter}, "
        f"{CONTEXT_TOKENS} tokens of context per request.",
        "# It shows the shape a vLLM dynamic-speculation profile or a `vllm bench` sweep gives (K = 0 is plain",
        "# decoding). Replace it with your own measurements. Regenerate: python tests/cost/test_example_tables.py --write",
        "batch_size,num_speculative_tokens,step_time_ms",
    ]
    for k in ks:
        for batch_size in BATCH_SIZES:
            lines.append(f"{batch_size},{k},{cost.step_time(batch_size, k, CONTEXT_TOKENS).total_s * 1e3:.4f}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_table_is_current_roofline_output(name):
    assert (TABLE_DIR / name).read_text() == example_table_text(name)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_table_is_labelled_illustrative_and_loads(name):
    path = TABLE_DIR / name
    assert path.read_text().startswith("# ILLUSTRATIVE, NOT A MEASUREMENT.")
    table = read_step_time_table(path)
    assert len(table.points) == len(BATCH_SIZES) * len(EXAMPLES[name][3])
    assert table.num_speculative_tokens_measured()[0] == 0


def test_every_file_in_the_example_folder_is_checked():
    assert sorted(path.name for path in TABLE_DIR.iterdir()) == sorted(EXAMPLES)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: test_example_tables.py --write")
    for example in EXAMPLES:
        (TABLE_DIR / example).write_text(example_table_text(example))
