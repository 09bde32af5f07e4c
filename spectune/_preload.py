"""What the fork server of a study's processes imports once for all of them (``spectune._spawn``).

torch, Optuna and the study code; on a machine with an NVIDIA driver also Triton, and Triton's own
cache key (a hash of its compiler's sources and library, which each process would otherwise compute
at its first kernel: about half a second). Not the kernels: Triton reads its interpreter switch when
a kernel is defined, from the environment each child takes from its starter.
"""

import optuna  # noqa: F401
import torch  # noqa: F401

import spectune.simulator  # noqa: F401
import spectune.study  # noqa: F401
from spectune._spawn import nvidia_driver_present, triton_head_start

head_start = triton_head_start(nvidia_driver_present())  # cached in the server, so in every child forked from it
if head_start is not None:
    head_start.join()
