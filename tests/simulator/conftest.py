from pathlib import Path

import pytest
import yaml

from spectune.config import load_document


@pytest.fixture
def simulation_document(tmp_path: Path):
    """Build a validated simulation document from a base dict updated with ``changes`` (nested keys)."""

    def build(**changes):
        data = {
            "kind": "simulation",
            "name": "test",
            "seed": 0,
            "speculative": {"method": "eagle3", "num_speculative_tokens": 3},
            "acceptance": {"conditional_rates": [0.7, 0.7, 0.7]},
            "workload": {
                "concurrency": 16,
                "num_requests": 64,
                "prompt_tokens": 64,
                "output_tokens": 64,
                "temperature": 0.0,
                "vocab_size": 512,
            },
            "hardware": "h100-sxm",
            "target_model": "llama-3.1-8b",
            "simulation": {"bank_rows": 256},
        }
        for key, value in changes.items():
            if isinstance(value, dict) and isinstance(data.get(key), dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        path = tmp_path / "sim.yaml"
        path.write_text(yaml.safe_dump(data))
        return load_document(path).model

    return build
