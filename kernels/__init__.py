"""Rejection sampling for speculative decoding: Triton kernels and their PyTorch twin.

``rejection_sample`` runs the Triton kernels (compiled on a CUDA device, interpreted on the CPU
with ``TRITON_INTERPRET=1``); ``spectune.kernels.reference.rejection_sample`` is the same function
in plain PyTorch (the simulator's CPU backend). The simulator's engine calls the kernels through
``validate_inputs`` / ``plan_for`` / ``launch(inputs, plan, rows=RowTable(...))`` (each logit row read
where a row table says; ``plan`` makes ``plan_for``'s choice from sizes alone), writes a step's inputs
with ``write_step`` (numpy twin: ``host_step``) and draws a large vocabulary's base noise with
``philox_normals``; the per-step seed mix is ``kernel_seeds`` (torch form ``kernel_seeds_torch``).
``launch``, ``write_step`` and ``philox_normals`` take ``compile_only=True`` to compile their kernels
into Triton's cache without launching them (``spectune warm-up``). Importing this package imports
neither Triton nor the kernels: the first call does (``write_step`` and ``philox_normals`` are loaded
when named).
"""

from typing import Any

from ._arguments import RowTable, StepTables
from ._contract import DEFAULT_TILE, VerifyInputs, validate_inputs
from ._launcher import interpreted, launch, plan_for, rejection_sample, sm_count
from ._plan import LaunchPlan, plan
from ._seeds import kernel_seeds, kernel_seeds_torch, seed_bases

__all__ = [
    "DEFAULT_TILE",
    "LaunchPlan",
    "MEMBER_FIELDS",
    "ROW_FIELDS",
    "RowTable",
    "StepTables",
    "VerifyInputs",
    "host_step",
    "interpreted",
    "kernel_seeds",
    "kernel_seeds_torch",
    "launch",
    "philox_normals",
    "plan",
    "plan_for",
    "rejection_sample",
    "seed_bases",
    "sm_count",
    "validate_inputs",
    "write_step",
]

_TRITON_MODULES = {
    "MEMBER_FIELDS": "_step_writer",
    "ROW_FIELDS": "_step_writer",
    "host_step": "reference",
    "write_step": "_step_writer",
    "philox_normals": "_normals",
}


def __getattr__(name: str) -> Any:
    # The step writer and the normals are Triton source, the reference its own module: imported on first use.
    if name in _TRITON_MODULES:
        import importlib

        return getattr(importlib.import_module(f".{_TRITON_MODULES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
