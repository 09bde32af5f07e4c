"""The kernels' seed for a request's step: one mix of (request seed, steps done), in three forms.

Each (request, step) gets ``((seed * REQUEST_MIX + steps_done * STEP_MIX) mod 2**64, xor-shifted
right by 31) >> 1`` (the top bit clear: a non-negative int64), so nearby steps share no Philox stream
and a request's seeds depend on its own seed and steps alone. The numpy form (the twin's) and the
torch form (the kernel verifier's on the CPU) are here; the Triton form is the step writer's
``_mix_seed`` (``_step_writer.py``), written from these constants, kept out of this module so that
the twin's path never imports Triton. ``tests/kernels/test_seeds.py`` and ``test_step_writer.py`` hold
the three to each other.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["REQUEST_MIX", "STEP_MIX", "STEP_MIX_INT64", "kernel_seeds", "kernel_seeds_torch", "seed_bases"]

REQUEST_MIX = 0x9E3779B97F4A7C15
STEP_MIX = 0xBF58476D1CE4E5B9
# The step multiplier as int64 (two's complement: int64 products wrap as uint64 ones do).
STEP_MIX_INT64 = STEP_MIX - 2**64
_SHIFT = np.uint64(31)


def kernel_seeds(request_seeds: np.ndarray, steps_done: np.ndarray) -> np.ndarray:
    """int64 [B]: the kernels' seed of each (request, step). ``request_seeds``, ``steps_done``: int64 [B].

    Arithmetic modulo 2**64 on uint64 views of the int64 inputs (arrays wrap silently; only numpy
    scalars warn)."""
    mixed = np.asarray(request_seeds, dtype=np.int64).view(np.uint64) * np.uint64(REQUEST_MIX)
    mixed += np.asarray(steps_done, dtype=np.int64).view(np.uint64) * np.uint64(STEP_MIX)
    mixed ^= mixed >> _SHIFT
    mixed >>= np.uint64(1)
    return mixed.view(np.int64)


def seed_bases(request_seeds: np.ndarray) -> np.ndarray:
    """int64 [N]: each request's seed times ``REQUEST_MIX`` (mod 2**64), what the device forms add steps to."""
    return (np.atleast_1d(request_seeds).astype(np.uint64) * np.uint64(REQUEST_MIX)).view(np.int64)


def kernel_seeds_torch(bases: torch.Tensor, ids: torch.Tensor, steps_done: torch.Tensor, out: torch.Tensor) -> None:
    """``kernel_seeds`` in torch, into ``out`` (int64 [B]): ``bases`` int64 [N] from ``seed_bases``,
    ``ids`` (rows of ``bases``) and ``steps_done`` int64 [B]. int64 shifts are arithmetic, so masks
    make them logical, as on uint64."""
    torch.index_select(bases, 0, ids, out=out)
    out.add_(steps_done, alpha=STEP_MIX_INT64)
    out.bitwise_xor_(out.bitwise_right_shift(31).bitwise_and_(2**33 - 1))
    out.bitwise_right_shift_(1).bitwise_and_(2**63 - 1)
