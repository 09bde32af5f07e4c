"""Philox4x32-10 in numpy uint64 arithmetic: the same bits as Triton's ``tl.philox`` / ``tl.rand``.

The twin draws its uniforms here so that its acceptance decisions use exactly the numbers the
Triton kernels use. Words are uint32 held in uint64, so the 32 x 32-bit products are exact.
numpy rather than torch: a step draws a few thousand words in ~140 element-wise operations, and
numpy's per-operation cost on such small arrays is a fraction of torch's dispatch (tensors on a GPU
are copied to the host and back). ``tests/kernels/test_philox.py`` checks the Random123
known-answer vectors and Triton itself.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["philox4x32", "philox4x32_numpy", "uint32_to_uniform", "uint32_to_uniform_numpy"]

_MASK32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)
_ROUND_A = np.uint64(0xD2511F53)
_ROUND_B = np.uint64(0xCD9E8D57)
_KEY_A = np.uint64(0x9E3779B9)
_KEY_B = np.uint64(0xBB67AE85)
_NUM_ROUNDS = 10
# Triton's uint_to_uniform_float scale: the largest float32 with (2**31 - 1) * scale < 1.
_UNIFORM_SCALE = 4.6566127342e-10


def _host_words(value: torch.Tensor) -> np.ndarray:
    """int64 tensor -> uint64 array of the same 64 bits (host memory)."""
    return value.detach().to("cpu", torch.int64).numpy().view(np.uint64)


def philox4x32(
    seed: torch.Tensor, c0: torch.Tensor, c1: torch.Tensor, c2: torch.Tensor, c3: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Philox4x32-10 with key (seed lo, seed hi) and counter (c0, c1, c2, c3).

    seed: int64, any shape broadcastable with the counters (its 64 bits are the key).
    c0..c3: int64 holding uint32 values, broadcastable to one shape.
    Returns the four output words as int64 tensors holding uint32 values, on ``seed``'s device.
    """
    host = [_host_words(value) for value in (seed, c0, c1, c2, c3)]
    shape = np.broadcast_shapes(*(h.shape for h in host))
    words = philox4x32_numpy(*host)
    return tuple(torch.from_numpy(w.view(np.int64)).view(shape).to(seed.device) for w in words)  # type: ignore[return-value]


def philox4x32_numpy(
    key: np.ndarray, c0: np.ndarray, c1: np.ndarray, c2: np.ndarray, c3: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``philox4x32`` on host arrays: key uint64, counters holding uint32 values (any unsigned integer
    dtype), broadcastable to one shape. Returns uint64 arrays of that
    shape (at least one dimension) holding the uint32 words."""
    x0, x1, x2, x3 = (np.atleast_1d(np.asarray(c).astype(np.uint64) & _MASK32) for c in (c0, c1, c2, c3))
    key = np.atleast_1d(np.asarray(key, dtype=np.uint64))
    # At least one dimension: numpy turns 0-d results into scalars, which torch.from_numpy refuses.
    shape = np.broadcast_shapes(key.shape, x0.shape, x1.shape, x2.shape, x3.shape) or (1,)
    # Every round's key at once: k + r * constant, modulo 2**32. The words broadcast as they mix.
    schedule = np.arange(_NUM_ROUNDS, dtype=np.uint64).reshape((_NUM_ROUNDS,) + (1,) * key.ndim)
    round_k0 = ((key & _MASK32) + schedule * _KEY_A) & _MASK32
    round_k1 = ((key >> _SHIFT32) + schedule * _KEY_B) & _MASK32
    for k0, k1 in zip(round_k0, round_k1):
        product_a = x0 * _ROUND_A
        product_b = x2 * _ROUND_B
        # new c0 = hi(B*c2) ^ c1 ^ k0 ; new c2 = hi(A*c0) ^ c3 ^ k1 ; new c1 = lo(B*c2) ; new c3 = lo(A*c0)
        x0 = (product_b >> _SHIFT32) ^ x1 ^ k0
        x2 = (product_a >> _SHIFT32) ^ x3 ^ k1
        x1 = np.bitwise_and(product_b, _MASK32, out=product_b)
        x3 = np.bitwise_and(product_a, _MASK32, out=product_a)
    return tuple(w if w.shape == shape else np.broadcast_to(w, shape).copy() for w in (x0, x1, x2, x3))  # type: ignore[return-value]


def uint32_to_uniform_numpy(words: np.ndarray) -> np.ndarray:
    """``uint32_to_uniform`` on a host array of uint32 words (any unsigned integer dtype): the same bits."""
    words = words.astype(np.uint32)
    folded = np.where(words >= np.uint32(2**31), ~words, words)  # -signed - 1 = ~words for the negative half
    return folded.astype(np.float32) * np.float32(_UNIFORM_SCALE)


def uint32_to_uniform(words: torch.Tensor) -> torch.Tensor:
    """uint32 words (in int64) -> float32 uniforms in [0, 1), bit-identical to Triton's ``tl.rand``."""
    signed = torch.where(words >= 2**31, words - 2**32, words)
    folded = torch.where(signed < 0, -signed - 1, signed)
    scale = torch.tensor(_UNIFORM_SCALE, dtype=torch.float32, device=words.device)
    return folded.to(torch.float32) * scale
