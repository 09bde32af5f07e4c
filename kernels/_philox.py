"""Philox4x32-10 in numpy uint64 arithmetic: the same bits as Triton's ``tl.philox`` / ``tl.rand``.

The twin draws its uniforms here so that its acceptance decisions use exactly the numbers the
Triton kernels use. Words are uint32 held in uint64, so the 32 x 32-bit products are exact.
numpy rather than torch: a step draws a few thousand words in ~60 array operations, and
numpy's per-operation cost on such small arrays is a fraction of torch's dispatch (tensors on a GPU
are copied to the host and back). ``tests/kernels/test_philox.py`` checks the Random123
known-answer vectors and Triton itself.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

__all__ = ["philox4x32", "philox4x32_numpy", "philox4x32_rows", "uint32_to_uniform", "uint32_to_uniform_numpy"]

_MASK32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)
_ROUND_A = np.uint64(0xD2511F53)
_ROUND_B = np.uint64(0xCD9E8D57)
_KEY_A = np.uint64(0x9E3779B9)
_KEY_B = np.uint64(0xBB67AE85)
_NUM_ROUNDS = 10
_ROUND_INDEX = np.arange(_NUM_ROUNDS, dtype=np.uint64)
_KEY_STEPS = np.array([_KEY_A, _KEY_B], dtype=np.uint64)
_FACTORS = np.array([_ROUND_A, _ROUND_B], dtype=np.uint64)

Words = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # the four uint32 output words

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
    dtype), broadcastable to one shape. Returns uint64 arrays of that shape (at least one dimension)
    holding the uint32 words."""
    key = np.asarray(key, dtype=np.uint64)
    counters = [np.asarray(c).astype(np.uint64) & _MASK32 for c in (c0, c1, c2, c3)]
    # At least one dimension: numpy turns 0-d results into scalars, which torch.from_numpy refuses.
    shape = np.broadcast_shapes(key.shape, *(c.shape for c in counters)) or (1,)
    key = key.reshape((1,) * (len(shape) - key.ndim) + key.shape)
    multiplied = np.stack([np.broadcast_to(counters[0], shape), np.broadcast_to(counters[2], shape)])
    passed = np.stack([np.broadcast_to(counters[1], shape), np.broadcast_to(counters[3], shape)])
    return _rounds(multiplied, passed, np.stack([key & _MASK32, key >> _SHIFT32]))


@functools.lru_cache(maxsize=64)
def _row_counters(num_rows: int, num_purposes: int) -> tuple[np.ndarray, np.ndarray]:
    rows = np.arange(num_rows, dtype=np.uint64)[None, None, :]
    purposes = np.arange(num_purposes, dtype=np.uint64)[None, :, None]
    zero = np.zeros((1, num_purposes, num_rows), dtype=np.uint64)
    return np.stack([zero, zero + purposes]), np.stack([zero + rows, zero])  # (c0, c2), (c1, c3)


def philox4x32_rows(seed: np.ndarray, num_rows: int, num_purposes: int) -> Words:
    """``philox4x32_numpy(seed[:, None, None], 0, row, purpose, 0)`` over every row < num_rows and
    purpose < num_purposes (uint64 words [R, num_purposes, num_rows]); seed int64 or uint64 [R]. The
    twin's per-step draws, with the counters kept between calls."""
    key = seed.view(np.uint64)[:, None, None]
    multiplied, passed = _row_counters(num_rows, num_purposes)
    return _rounds(multiplied, passed, np.stack([key & _MASK32, key >> _SHIFT32]))


def _rounds(multiplied: np.ndarray, passed: np.ndarray, halves: np.ndarray) -> Words:
    """Ten Philox rounds on the words in pairs -- (c0, c2), the ones multiplied by (A, B), and (c1, c3)
    -- so that a round is five array operations; halves [2, ...]: the key's low and high words.
    Every round's key pair at once: k + r * constant, modulo 2**32."""
    steps = _KEY_STEPS.reshape((1, 2) + (1,) * (halves.ndim - 1))
    schedule = (halves + _ROUND_INDEX.reshape((-1,) + (1,) * halves.ndim) * steps) & _MASK32
    factors = _FACTORS.reshape((2,) + (1,) * (multiplied.ndim - 1))
    for round_keys in schedule:
        products = multiplied * factors  # (A * c0, B * c2)
        # new c0 = hi(B*c2) ^ c1 ^ k0 ; new c2 = hi(A*c0) ^ c3 ^ k1 ; new c1 = lo(B*c2) ; new c3 = lo(A*c0)
        multiplied = (products >> _SHIFT32)[::-1] ^ passed ^ round_keys
        passed = (products & _MASK32)[::-1]
    return multiplied[0], passed[0], multiplied[1], passed[1]


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
