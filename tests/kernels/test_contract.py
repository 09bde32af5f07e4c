"""Bad arguments raise ValueError naming the argument, what is allowed and what was given."""

import os
import subprocess
import sys

import pytest
import torch

from spectune.kernels import reference, rejection_sample

ENTRY_POINTS = {"triton": rejection_sample, "reference": reference.rejection_sample}


def _arguments(device, num_requests=3, num_drafts=2, vocab=11):
    return dict(
        target_logits=torch.randn(num_requests, num_drafts + 1, vocab, device=device),
        draft_tokens=torch.zeros(num_requests, num_drafts, dtype=torch.int64, device=device),
        temperature=torch.ones(num_requests, device=device),
        seed=torch.arange(num_requests, device=device),
    )


BAD_CASES = [
    ("target_logits", lambda a: a.update(target_logits=a["target_logits"].double()), "dtype must be one of"),
    ("target_logits", lambda a: a.update(target_logits=a["target_logits"][0]), "shape must be [R, K+1, V]"),
    ("target_logits", lambda a: a.update(target_logits=[1.0]), "must be a torch.Tensor"),
    ("draft_tokens", lambda a: a.update(draft_tokens=a["draft_tokens"].float()), "dtype must be one of int32, int64"),
    ("draft_tokens", lambda a: a.update(draft_tokens=a["draft_tokens"][:, :1]), "shape must be [R, K]"),
    ("draft_logits", lambda a: a.update(draft_logits=torch.randn(3, 3, 11)), "shape must be [R, K, V]"),
    ("draft_logits", lambda a: a.update(draft_logits=torch.randn(3, 2, 11).to(torch.int32)), "dtype must be"),
    ("temperature", lambda a: a.pop("temperature"), "is required, got None"),
    ("temperature", lambda a: a.update(temperature=a["temperature"].double()), "dtype must be one of float32"),
    ("temperature", lambda a: a.update(temperature=torch.tensor([1.0, -0.5, 1.0])), "must be finite and >= 0"),
    ("temperature", lambda a: a.update(temperature=torch.tensor([1.0, float("nan"), 1.0])), "must be finite"),
    ("seed", lambda a: a.pop("seed"), "is required, got None"),
    ("seed", lambda a: a.update(seed=a["seed"].int()), "dtype must be one of int64"),
    ("seed", lambda a: a.update(seed=torch.arange(4)), "shape must be [R]"),
    ("method", lambda a: a.update(method="fly"), "must be one of standard, block, synthetic, got 'fly'"),
    ("synthetic_conditional_rates", lambda a: a.update(method="synthetic"), "is required, got None"),
    (
        "synthetic_conditional_rates",
        lambda a: a.update(synthetic_conditional_rates=torch.ones(2)),
        "must be None unless method == 'synthetic'",
    ),
    (
        "synthetic_conditional_rates",
        lambda a: a.update(method="synthetic", synthetic_conditional_rates=torch.ones(3)),
        "shape must be [K]",
    ),
    (
        "synthetic_conditional_rates",
        lambda a: a.update(method="synthetic", synthetic_conditional_rates=torch.tensor([0.5, 1.5])),
        "must be in [0, 1]",
    ),
]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize(
    ("argument", "breaker", "message"), BAD_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_CASES)]
)
def test_bad_argument_raises_value_error_naming_it(entry, argument, breaker, message):
    arguments = _arguments("cpu")
    breaker(arguments)
    with pytest.raises(ValueError) as caught:
        ENTRY_POINTS[entry](**arguments)
    assert str(caught.value).startswith(f"{argument}: "), str(caught.value)
    assert message in str(caught.value), str(caught.value)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_tensor_on_another_device_is_rejected(entry):
    arguments = _arguments("cpu")
    arguments["seed"] = arguments["seed"].to("meta")
    with pytest.raises(ValueError, match="^seed: must be on target_logits' device cpu, got meta"):
        ENTRY_POINTS[entry](**arguments)


def test_non_contiguous_vocabulary_is_rejected(device):
    arguments = _arguments(device)
    arguments["target_logits"] = torch.randn(3, 3, 22, device=device)[:, :, ::2]
    with pytest.raises(ValueError, match="^target_logits: last dimension must be contiguous"):
        rejection_sample(**arguments)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_outputs_have_the_contract_shapes_and_dtypes(entry, device):
    arguments = _arguments(device, num_requests=5, num_drafts=3)
    arguments["draft_tokens"] = arguments["draft_tokens"].int()
    tokens, num_tokens = ENTRY_POINTS[entry](**arguments)
    assert tokens.shape == (5, 4) and tokens.dtype == torch.int64 and tokens.device.type == device
    assert num_tokens.shape == (5,) and num_tokens.dtype == torch.int32
    positions = torch.arange(4, device=device)[None, :]
    assert bool((tokens[positions >= num_tokens[:, None]] == -1).all())
    assert bool((tokens[positions < num_tokens[:, None]] >= 0).all())


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_empty_batch_gives_empty_outputs(entry, device):
    tokens, num_tokens = ENTRY_POINTS[entry](**_arguments(device, num_requests=0))
    assert tokens.shape == (0, 3) and num_tokens.shape == (0,)


def test_cpu_tensors_without_the_interpreter_raise_a_clear_error():
    script = (
        "import torch\n"
        "from spectune.kernels import rejection_sample\n"
        "try:\n"
        "    rejection_sample(torch.randn(1, 2, 5), torch.zeros(1, 1, dtype=torch.int64),\n"
        "                     temperature=torch.ones(1), seed=torch.zeros(1, dtype=torch.int64))\n"
        "except ValueError as error:\n"
        "    print(error)\n"
    )
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("target_logits: is on the CPU"), result.stdout
    assert "TRITON_INTERPRET=1" in result.stdout
