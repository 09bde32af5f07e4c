"""Triton's interpreter: a program-wide switch, so the program decides it, here, for the commands that simulate."""

from __future__ import annotations

import os

from spectune.config import SimulationOptions

__all__ = ["use_interpreter_if_asked"]


def use_interpreter_if_asked(options: SimulationOptions) -> None:
    """Switch Triton's interpreter on when a document asks for the Triton kernels on the CPU.

    Triton reads ``TRITON_INTERPRET`` when the kernels are first imported, so it is set before the
    simulator loads them; study workers take it with the environment they start with
    (``spectune._spawn``). A value already in the environment is left as it is (the simulator then
    says if it cannot run).
    """
    if options.kernel_backend != "triton" or options.device not in ("cpu", "auto"):
        return
    if options.device == "auto":
        import torch  # a study's workers start after this: only "auto" waits for torch here

        if torch.cuda.is_available():
            return
    os.environ.setdefault("TRITON_INTERPRET", "1")
