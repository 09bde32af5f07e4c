"""Which rejection-sampling implementation verifies drafts: the Triton kernels or their PyTorch twin."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Literal

import torch

from spectune.errors import SpectuneError
from spectune.kernels import interpreted
from spectune.kernels import rejection_sample as triton_rejection_sample
from spectune.kernels.reference import rejection_sample as reference_rejection_sample

__all__ = ["KernelBackend", "on_device", "resolve_device", "select_rejection_sample"]

KernelBackend = Literal["auto", "triton", "reference"]


def resolve_device(device: str) -> torch.device:
    """'auto' -> CUDA when available, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SpectuneError(f"simulation.device: '{device}' was asked for, but no CUDA device is available")
    resolved = torch.device(device)
    count = torch.cuda.device_count() if resolved.type == "cuda" else 0
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= count:
        have = "cuda:0" if count == 1 else f"cuda:0 to cuda:{count - 1}"
        raise SpectuneError(
            f"simulation.device: '{device}' was asked for, but this machine has {count} CUDA "
            f"device{'' if count == 1 else 's'} ({have})"
        )
    return resolved


def on_device(device: torch.device) -> contextlib.AbstractContextManager[object]:
    """Make ``device`` the current CUDA device while the block runs (Triton launches its kernels, and
    CUDA graphs capture, on the current device, not on their tensors'); nothing for the CPU."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def select_rejection_sample(backend: KernelBackend, device: torch.device) -> tuple[str, Callable[..., Any]]:
    """(name, function) with the contract of ``spectune.kernels.rejection_sample``.

    'auto' is Triton on CUDA and the PyTorch twin on the CPU (the Triton interpreter is ~100x slower;
    ask for 'triton' on the CPU to run the real kernels there anyway). Triton's interpreter is the
    program's choice, never the library's: it is switched on (``TRITON_INTERPRET=1``) before the kernels
    are first imported, by the spectune CLI when a document asks for 'triton' on the CPU, or by the
    program that calls this; here it is only checked.
    """
    if backend == "auto":
        backend = "triton" if device.type == "cuda" else "reference"
    if backend == "reference":
        return "reference", reference_rejection_sample
    if device.type == "cpu" and not interpreted():
        raise SpectuneError(
            "simulation.kernel_backend: 'triton' on the CPU runs the kernels under Triton's interpreter, which is "
            "off in this process: set TRITON_INTERPRET=1 before it first imports spectune's kernels (the spectune "
            "command does so itself), or use kernel_backend: reference"
        )
    return "triton", triton_rejection_sample
