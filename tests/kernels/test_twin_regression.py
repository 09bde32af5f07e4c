"""The twin's tokens, bit for bit, against what it emitted before its fast paths (a golden file).

``fixtures/twin_tokens.json`` holds, per case, the sha256 of the tokens and counts that the twin as
of 48cd712 (log-softmax of every row, the race in int64 torch, Philox in torch) returned for it.
The cases cover every method, one-hot and draft-logit drafts, fp32 and bf16, temperature mixes with
greedy requests, placeholders and out-of-range ids, rows with NaN and +-inf, vocabularies that are
and are not multiples of 16, several tiles a row, and the simulator's own synthesised rows. Rebuild
the file only when a change is meant to alter tokens: ``python tests/kernels/test_twin_regression.py``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

from spectune.kernels._contract import validate_inputs
from spectune.kernels.reference import rejection_sample_from_inputs

GOLDEN = Path(__file__).parent / "fixtures" / "twin_tokens.json"


def _random_case(
    seed: int, requests: int, drafts: int, vocab: int, dtype: torch.dtype, temperatures: list[float]
) -> dict:
    generator = torch.Generator().manual_seed(seed)
    target = torch.randn(requests, drafts + 1, vocab, generator=generator) * 3
    draft = target[:, :drafts] + torch.randn(requests, drafts, vocab, generator=generator) * 1.5
    tokens = torch.multinomial(torch.softmax(draft.reshape(-1, vocab), -1), 1, generator=generator).view(
        requests, drafts
    )
    if seed % 3 == 0 and drafts > 2:
        tokens[::5, 2:] = -1
        tokens[1::7, 1] = vocab + 2
    if seed % 4 == 1:
        target[0, 0, :] = float("nan")
        target[1 % requests, -1, 3 % vocab] = float("inf")
        draft[2 % requests, 0, :] = float("-inf")
    temperature = torch.tensor(temperatures)[torch.arange(requests) % len(temperatures)]
    return dict(
        target_logits=target.to(dtype),
        draft_tokens=tokens,
        draft_logits=draft.to(dtype),
        temperature=temperature.float(),
        seed=torch.randint(0, 2**62, (requests,), generator=generator),
    )


def _synthesised_case(seed: int, requests: int, drafts: int, vocab: int, sampling: str) -> dict:
    from spectune.workload import LogitSynthesizer

    synthesizer = LogitSynthesizer(
        [0.8, 0.75, 0.7, 0.7, 0.65, 0.6, 0.6, 0.55][:drafts],
        [0.0, 0.7, 1.0],
        vocab_size=vocab,
        draft_sample_method=sampling,
        device="cpu",
        bank_rows=64,
    )
    generator = torch.Generator().manual_seed(seed)
    step = synthesizer.generate(torch.randint(0, 3, (requests,), generator=generator), generator)
    return dict(
        target_logits=step.target_logits,
        draft_tokens=step.draft_tokens,
        draft_logits=step.draft_logits,
        temperature=step.temperature,
        seed=torch.randint(0, 2**62, (requests,), generator=generator),
    )


def cases() -> dict[str, tuple[dict, str, int]]:
    """name -> (arguments, method, tile size)."""
    found: dict[str, tuple[dict, str, int]] = {}
    shapes = [(1, 1, 16), (3, 3, 77), (17, 5, 256), (64, 4, 300), (40, 7, 1000)]
    temperature_sets = {"sampled": [0.7], "mixed": [0.0, 0.6, 1.0], "greedy": [0.0]}
    seed = 0
    for requests, drafts, vocab in shapes:
        for dtype in (torch.float32, torch.bfloat16):
            for mix, temperatures in temperature_sets.items():
                seed += 1
                arguments = _random_case(seed, requests, drafts, vocab, dtype, temperatures)
                for method in ("standard", "block", "synthetic"):
                    for with_draft in (False, True):
                        tile = 64 if vocab >= 300 and seed % 2 else 4096
                        name = f"r{requests}-k{drafts}-v{vocab}-{str(dtype)[6:]}-{mix}-{method}-{'draft' if with_draft else 'onehot'}-t{tile}"
                        case = (
                            dict(arguments)
                            if with_draft
                            else {k: v for k, v in arguments.items() if k != "draft_logits"}
                        )
                        if method == "synthetic":
                            case["synthetic_conditional_rates"] = torch.linspace(0.9, 0.4, drafts)
                        found[name] = (case, method, tile)
    for requests, drafts, vocab in [(256, 5, 256), (8, 3, 4096), (33, 8, 256)]:
        for sampling in ("greedy", "probabilistic"):
            arguments = _synthesised_case(requests + drafts, requests, drafts, vocab, sampling)
            for method in ("standard", "block"):
                found[f"synth-r{requests}-k{drafts}-v{vocab}-{sampling}-{method}"] = (arguments, method, 4096)
    return found


def digest(arguments: dict, method: str, tile: int) -> str:
    inputs = validate_inputs(
        arguments["target_logits"],
        arguments["draft_tokens"],
        arguments.get("draft_logits"),
        arguments["temperature"],
        arguments["seed"],
        method,
        arguments.get("synthetic_conditional_rates"),
    )
    tokens, counts = rejection_sample_from_inputs(inputs, tile_size=tile)
    return hashlib.sha256(tokens.numpy().tobytes() + counts.numpy().tobytes()).hexdigest()[:16]


_CASES = cases()


@pytest.mark.parametrize("name", sorted(_CASES))
def test_the_twin_emits_the_tokens_it_emitted_before(name):
    golden = json.loads(GOLDEN.read_text())
    assert digest(*_CASES[name]) == golden[name]


def test_the_golden_file_covers_every_case():
    assert set(json.loads(GOLDEN.read_text())) == set(_CASES)


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps({name: digest(*case) for name, case in sorted(_CASES.items())}, indent=0) + "\n")
    sys.stdout.write(f"wrote {len(_CASES)} digests to {GOLDEN}\n")
