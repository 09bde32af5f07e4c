"""The serving simulator: one speculative config on one deployment and workload -> serving metrics.

``simulate(document)`` runs an iteration-level serving loop that verifies drafts through
``spectune.kernels`` (Triton on CUDA, the PyTorch twin on the CPU unless asked otherwise) and advances a
clock by ``spectune.cost``'s step times.
"""

from spectune.simulator._groups import lockstep_groups
from spectune.simulator._metrics import SimulationResult
from spectune.simulator._run import simulate, simulate_many
from spectune.simulator._warm_up import kernel_variants, warm_up

# Bump whenever a change alters simulated numbers: a study refuses to resume across versions, so that
# trials simulated by different code are never compared.
__version__ = "2026.11.29.1"

__all__ = [
    "SimulationResult",
    "__version__",
    "kernel_variants",
    "lockstep_groups",
    "simulate",
    "simulate_many",
    "warm_up",
]
