"""What the fork server of a study's processes imports once for all of them (``spectune._spawn``).

torch, Optuna and the study code; on a machine with an NVIDIA driver also Triton, and Triton's own
cache key (a hash of its compiler's sources and library, which each process would otherwise compute
at its first kernel: about half a second). Not the kernels: Triton reads its interpreter switch when
a kernel is defined, from the environment each child takes from its starter.
"""

import contextlib
import os

import optuna  # noqa: F401
import torch  # noqa: F401

import spectune.simulator  # noqa: F401
import spectune.study  # noqa: F401

if os.path.exists("/proc/driver/nvidia/version"):
    with contextlib.suppress(Exception):  # a head start only: a child that needs the key computes it
        from triton.runtime.cache import triton_key

        triton_key()  # cached in the server, so in every child forked from it
