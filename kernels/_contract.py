"""The contract of ``rejection_sample``, shared by the Triton launcher and the PyTorch twin.

Both entry points validate their arguments here, so a wrong shape, dtype, device or a missing or
extra argument gives the same ``ValueError`` (naming the argument, what is allowed and what was
given) whichever backend is called.

Also here: the random streams both backends draw from. Every uniform is one output word of
Philox4x32-10 keyed by the request's seed, with the counter ``(0, row, purpose, 0)`` where ``row``
is the position within the request (0..K, K = the bonus row). A request's draws therefore depend
on its own seed and positions only -- not on the batch size, its index in the batch or the launch
shape (batch invariance).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

__all__ = [
    "DEFAULT_TILE",
    "LOGIT_DTYPES",
    "METHODS",
    "METHOD_BLOCK",
    "METHOD_STANDARD",
    "METHOD_SYNTHETIC",
    "PURPOSE_RESIDUAL",
    "PURPOSE_VERIFY",
    "VerifyInputs",
    "validate_inputs",
]

Method = Literal["standard", "block", "synthetic"]
METHODS: tuple[str, ...] = ("standard", "block", "synthetic")
# The kernels' METHOD code of each method: its index in METHODS.
METHOD_STANDARD = 0
METHOD_BLOCK = 1
METHOD_SYNTHETIC = 2
LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# Vocabulary tile: the unit of the two-level sampler (choose a tile by its mass, then a token in
# it). Part of the sampling scheme, so it depends on nothing but this constant: never on R.
DEFAULT_TILE = 4096

# Philox counter word 2. PURPOSE_VERIFY words: (acceptance uniform, tile choice, race key lo, race
# key hi) for the target sample at that row. PURPOSE_RESIDUAL words: (tile choice, unused, race key
# lo, race key hi) for the draft-logit residual max(p - q, 0) at that row. The race key seeds the
# hashed per-token noise of the in-tile exponential race.
PURPOSE_VERIFY = 0
PURPOSE_RESIDUAL = 1


@dataclass(frozen=True)
class VerifyInputs:
    """Validated arguments of one ``rejection_sample`` call (tensors as given, small ones normalised).

    target_logits: float32|bfloat16|float16 [R, K+1, V], last dim contiguous.
    draft_tokens: int64 [R, K], -1 (or any id outside [0, V)) = placeholder.
    draft_logits: same dtype family [R, K, V] or None (one-hot drafts).
    temperature: float32 [R], 0 = greedy.
    seed: int64 [R].
    synthetic_conditional_rates: float32 [K] when method == "synthetic", else None.
    """

    target_logits: torch.Tensor
    draft_tokens: torch.Tensor
    draft_logits: torch.Tensor | None
    temperature: torch.Tensor
    seed: torch.Tensor
    method: Method
    synthetic_conditional_rates: torch.Tensor | None

    @property
    def num_requests(self) -> int:
        return self.target_logits.shape[0]

    @property
    def num_drafts(self) -> int:
        return self.target_logits.shape[1] - 1

    @property
    def vocab_size(self) -> int:
        return self.target_logits.shape[2]


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def _require_tensor(name: str, value: object) -> torch.Tensor:
    if value is None:
        raise ValueError(f"{name}: is required, got None")
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name}: must be a torch.Tensor, got {type(value).__name__}")
    return value


def _require_dtype(name: str, t: torch.Tensor, allowed: tuple[torch.dtype, ...]) -> None:
    if t.dtype not in allowed:
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise ValueError(f"{name}: dtype must be one of {names}, got {str(t.dtype).removeprefix('torch.')}")


def _require_shape(name: str, t: torch.Tensor, expected: tuple[int, ...], meaning: str) -> None:
    if tuple(t.shape) != expected:
        want = "[" + ", ".join(str(s) for s in expected) + "]"
        raise ValueError(f"{name}: shape must be {meaning} = {want}, got {_shape(t)}")


def _value_checks_allowed(t: torch.Tensor) -> bool:
    """Checking tensor values needs a device sync; skip it while a CUDA graph is being captured."""
    if t.device.type != "cuda":
        return True
    return not torch.cuda.is_current_stream_capturing()


def validate_inputs(
    target_logits: object,
    draft_tokens: object,
    draft_logits: object,
    temperature: object,
    seed: object,
    method: object,
    synthetic_conditional_rates: object,
) -> VerifyInputs:
    """Check every argument of ``rejection_sample``; raise ``ValueError`` naming the first bad one."""
    target = _require_tensor("target_logits", target_logits)
    _require_dtype("target_logits", target, LOGIT_DTYPES)
    if target.dim() != 3 or target.shape[1] < 1 or target.shape[2] < 1:
        raise ValueError(f"target_logits: shape must be [R, K+1, V] with K+1 >= 1 and V >= 1, got {_shape(target)}")
    num_requests, num_rows, vocab = target.shape
    num_drafts = num_rows - 1
    if vocab >= 2**31:
        raise ValueError(f"target_logits: vocabulary size must be < 2**31, got {vocab}")
    device = target.device

    tokens = _require_tensor("draft_tokens", draft_tokens)
    _require_dtype("draft_tokens", tokens, (torch.int32, torch.int64))
    _require_shape("draft_tokens", tokens, (num_requests, num_drafts), "[R, K] from target_logits")

    draft = None
    if draft_logits is not None:
        draft = _require_tensor("draft_logits", draft_logits)
        _require_dtype("draft_logits", draft, LOGIT_DTYPES)
        _require_shape("draft_logits", draft, (num_requests, num_drafts, vocab), "[R, K, V] from target_logits")

    temp = _require_tensor("temperature", temperature)
    _require_dtype("temperature", temp, (torch.float32,))
    _require_shape("temperature", temp, (num_requests,), "[R] from target_logits")

    seeds = _require_tensor("seed", seed)
    _require_dtype("seed", seeds, (torch.int64,))
    _require_shape("seed", seeds, (num_requests,), "[R] from target_logits")

    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method: must be one of {', '.join(METHODS)}, got {method!r}")

    rates = None
    if method == "synthetic":
        rates = _require_tensor("synthetic_conditional_rates", synthetic_conditional_rates)
        _require_dtype("synthetic_conditional_rates", rates, (torch.float32,))
        _require_shape("synthetic_conditional_rates", rates, (num_drafts,), "[K] from target_logits")
    elif synthetic_conditional_rates is not None:
        raise ValueError(
            f"synthetic_conditional_rates: must be None unless method == 'synthetic', got a value with method={method!r}"
        )

    named = [("draft_tokens", tokens), ("draft_logits", draft), ("temperature", temp), ("seed", seeds)]
    named.append(("synthetic_conditional_rates", rates))
    for name, t in named:
        if t is not None and t.device != device:
            raise ValueError(f"{name}: must be on target_logits' device {device}, got {t.device}")

    if _value_checks_allowed(temp):
        _check_values(temp, rates)

    return VerifyInputs(
        target_logits=target,
        draft_tokens=tokens.to(torch.int64),
        draft_logits=draft,
        temperature=temp,
        seed=seeds,
        method=method,  # type: ignore[arg-type]
        synthetic_conditional_rates=rates,
    )


def _check_values(temperature: torch.Tensor, rates: torch.Tensor | None) -> None:
    bad = ~torch.isfinite(temperature) | (temperature < 0)
    if bool(bad.any()):
        index = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"temperature: must be finite and >= 0 (0 = greedy), got {float(temperature[index])} at request {index}"
        )
    if rates is not None:
        bad = ~torch.isfinite(rates) | (rates < 0) | (rates > 1)
        if bool(bad.any()):
            index = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"synthetic_conditional_rates: must be in [0, 1], got {float(rates[index])} at position {index}"
            )
