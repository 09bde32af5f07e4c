"""Standard normals drawn on a GPU from counter-based streams: the bulk of a large vocabulary's base noise.

The family's base noise (``_pair_family.family_base``) is two [rows, V] float64 normal draws: at
V = 128256 and 512 rows, 131 million numbers, which a CPU generator draws in about four seconds in
each process that builds a synthesizer. On CUDA they are drawn here instead, in milliseconds: element
i of stream s is a Box-Muller normal of two 53-bit uniforms from Philox4x32-10 keyed by the seed,
counter (i mod 2**32, i div 2**32, s, 0). The numbers depend on the seed, the stream and the index
alone -- not on the GPU's model or launch grid, as torch's CUDA generator's do -- so a study draws the
same base on every GPU. (They are not the CPU generator's numbers: a GPU's simulations already draw
from counter-based streams the CPU's do not use.)
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._launcher import start_kernel

__all__ = ["philox_normals"]

_BLOCK = 1024
_TWO_PI = tl.constexpr(2.0 * math.pi)
_TWO_TO_26 = tl.constexpr(float(2**26))
_TWO_TO_MINUS_53 = tl.constexpr(2.0**-53)


@triton.jit(do_not_specialize=["numel", "seed", "stream"])
def _normals_kernel(out, numel, seed, stream, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = i < numel
    low = (i & 0xFFFFFFFF).to(tl.uint32)
    high = (i >> 32).to(tl.uint32)
    zero = (i * 0).to(tl.uint32)
    w0, w1, w2, w3 = tl.philox(seed, low, high, zero + stream.to(tl.uint32), zero)
    # 53-bit uniforms: u1 in (0, 1] (its log is finite), u2 in [0, 1)
    u1 = ((w0 >> 5).to(tl.float64) * _TWO_TO_26 + (w1 >> 6).to(tl.float64) + 1.0) * _TWO_TO_MINUS_53
    u2 = ((w2 >> 5).to(tl.float64) * _TWO_TO_26 + (w3 >> 6).to(tl.float64)) * _TWO_TO_MINUS_53
    normal = tl.sqrt(-2.0 * tl.log(u1)) * tl.cos(_TWO_PI * u2)
    tl.store(out + i, normal, mask=live)


def philox_normals(
    shape: tuple[int, ...], seed: int, stream: int, device: torch.device, *, compile_only: bool = False
) -> torch.Tensor:
    """float64 standard normals of ``shape`` on ``device``: stream ``stream`` (0 <= stream < 2**32) of
    ``seed`` (0 <= seed < 2**63), element i in row-major order the i-th of the stream.
    ``compile_only``: compile the kernel for these sizes into Triton's cache and return the tensor unwritten."""
    if not 0 <= seed < 2**63 or not 0 <= stream < 2**32:
        raise ValueError(f"seed must be in [0, 2**63) and stream in [0, 2**32), got {seed} and {stream}")
    out = torch.empty(shape, dtype=torch.float64, device=device)
    numel = out.numel()
    if numel:
        start_kernel(_normals_kernel, (triton.cdiv(numel, _BLOCK),), compile_only)(
            out, numel, seed, stream, BLOCK=_BLOCK
        )
    return out
