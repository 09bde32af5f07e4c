"""Rejection sampling for speculative decoding: Triton kernels and their PyTorch twin.

``rejection_sample`` runs the Triton kernels (compiled on a CUDA device, interpreted on the CPU
with ``TRITON_INTERPRET=1``); ``spectune.kernels.reference.rejection_sample`` is the same function
in plain PyTorch (the simulator's CPU backend). Importing this package imports neither Triton nor
the kernels; the first call does.
"""

from ._launcher import interpreted, rejection_sample

__all__ = ["interpreted", "rejection_sample"]
