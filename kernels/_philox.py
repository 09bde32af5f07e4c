"""Philox4x32-10 in PyTorch int64 arithmetic: the same bits as Triton's ``tl.philox`` / ``tl.rand``.

The twin draws its uniforms here so that its acceptance decisions use exactly the numbers the
Triton kernels use. Values are uint32 held in int64; a product of two uint32 overflows int64, and
torch's int64 multiply wraps modulo 2**64 (two's complement), which keeps the low 64 bits exact --
``tests/kernels/test_philox.py`` checks the Random123 known-answer vectors and Triton itself.
"""

from __future__ import annotations

import torch

__all__ = ["philox4x32", "uint32_to_uniform"]

_MASK32 = 0xFFFFFFFF
_ROUND_A = 0xD2511F53
_ROUND_B = 0xCD9E8D57
_KEY_A = 0x9E3779B9
_KEY_B = 0xBB67AE85
_NUM_ROUNDS = 10
# Triton's uint_to_uniform_float scale: the largest float32 with (2**31 - 1) * scale < 1.
_UNIFORM_SCALE = 4.6566127342e-10


def philox4x32(
    seed: torch.Tensor, c0: torch.Tensor, c1: torch.Tensor, c2: torch.Tensor, c3: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Philox4x32-10 with key (seed lo, seed hi) and counter (c0, c1, c2, c3).

    seed: int64, any shape broadcastable with the counters (its 64 bits are the key).
    c0..c3: int64 holding uint32 values, broadcastable to one shape.
    Returns the four output words as int64 tensors holding uint32 values.
    """
    c0, c1, c2, c3, seed = torch.broadcast_tensors(c0, c1, c2, c3, seed)
    # Multiply both lanes at once: row 0 is (A, c0), row 1 is (B, c2).
    multipliers = torch.tensor([_ROUND_A, _ROUND_B], dtype=torch.int64, device=seed.device)
    multipliers = multipliers.view((2,) + (1,) * seed.dim())
    even = torch.stack([c0, c2]) & _MASK32
    odd = torch.stack([c3, c1]) & _MASK32  # paired with the other lane's product
    rounds = torch.arange(_NUM_ROUNDS, dtype=torch.int64, device=seed.device).view((-1, 1) + (1,) * seed.dim())
    key_lo = seed & _MASK32
    key_hi = (seed >> 32) & _MASK32
    key_schedule = torch.stack([key_hi, key_lo])  # lane 0 (from A*c0) xors k1, lane 1 (from B*c2) xors k0
    key_increments = torch.tensor([_KEY_B, _KEY_A], dtype=torch.int64, device=seed.device)
    keys = (key_schedule.unsqueeze(0) + rounds * key_increments.view((1, 2) + (1,) * seed.dim())) & _MASK32
    for r in range(_NUM_ROUNDS):
        product = even * multipliers  # wraps modulo 2**64; its low 64 bits are exact
        high = (product >> 32) & _MASK32
        low = product & _MASK32
        # new c2 = hi(A*c0) ^ c3 ^ k1 ; new c0 = hi(B*c2) ^ c1 ^ k0 ; new c3 = lo(A*c0) ; new c1 = lo(B*c2)
        mixed = high ^ odd ^ keys[r]
        even = torch.stack([mixed[1], mixed[0]])  # (new c0, new c2)
        odd = torch.stack([low[0], low[1]])  # (new c3, new c1)
    return even[0], odd[1], even[1], odd[0]


def uint32_to_uniform(words: torch.Tensor) -> torch.Tensor:
    """uint32 words (in int64) -> float32 uniforms in [0, 1), bit-identical to Triton's ``tl.rand``."""
    signed = torch.where(words >= 2**31, words - 2**32, words)
    folded = torch.where(signed < 0, -signed - 1, signed)
    scale = torch.tensor(_UNIFORM_SCALE, dtype=torch.float32, device=words.device)
    return folded.to(torch.float32) * scale
