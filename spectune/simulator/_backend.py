"""Where a simulation runs (its device) and what verifies its drafts: the Triton kernels or their twin."""

from __future__ import annotations

import contextlib
from typing import Literal

import torch

from spectune.errors import SpectuneError
from spectune.kernels import interpreted

__all__ = ["KernelBackend", "backend_on", "on_device", "resolve_backend", "resolve_device", "worker_device"]

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


def worker_device(device: torch.device, worker_index: int, device_count: int) -> torch.device:
    """The GPU study worker ``worker_index`` simulates on: a document's bare ``cuda`` spreads the workers
    round-robin over the machine's ``device_count`` GPUs (worker i on cuda:i mod count); ``cuda:N``, the
    CPU and a one-GPU machine keep ``device``. A simulation's numbers never depend on the GPU it runs on."""
    if device.type != "cuda" or device.index is not None or device_count < 2:
        return device
    return torch.device("cuda", worker_index % device_count)


def on_device(device: torch.device) -> contextlib.AbstractContextManager[object]:
    """Make ``device`` the current CUDA device while the block runs (Triton launches its kernels, and
    CUDA graphs capture, on the current device, not on their tensors'); nothing for the CPU."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def backend_on(backend: str, device: torch.device) -> Literal["triton", "reference"]:
    """``backend`` with 'auto' resolved for ``device`` (Triton on CUDA, the twin elsewhere), unchecked."""
    if backend == "auto":
        return "triton" if device.type == "cuda" else "reference"
    return "triton" if backend == "triton" else "reference"


def resolve_backend(backend: str, device: torch.device) -> Literal["triton", "reference"]:
    """The verifier's backend on ``device``: 'triton' (the kernels) or 'reference' (their twin).

    'auto' is Triton on CUDA and the PyTorch twin on the CPU (the Triton interpreter is ~100x slower;
    ask for 'triton' on the CPU to run the real kernels there anyway). Triton's interpreter is the
    program's choice, never the library's: it is switched on (``TRITON_INTERPRET=1``) before the kernels
    are first imported, by the spectune CLI when a document asks for 'triton' on the CPU, or by the
    program that calls this; here it is only checked.
    """
    if backend_on(backend, device) == "reference":
        return "reference"
    if device.type == "cpu" and not interpreted():
        raise SpectuneError(
            "simulation.kernel_backend: 'triton' on the CPU runs the kernels under Triton's interpreter, which is "
            "off in this process: set TRITON_INTERPRET=1 before it first imports spectune's kernels (the spectune "
            "command does so itself), or use kernel_backend: reference"
        )
    return "triton"
