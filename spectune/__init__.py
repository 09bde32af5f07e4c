"""spectune: tune speculative-decoding configs for vLLM and SGLang by simulation.

The subpackages are the pipeline's stages: ``spectune.config`` (validated documents),
``spectune.kernels`` (Triton rejection sampling), and the later stages that build on them. Importing
``spectune`` imports nothing heavy: no torch, no Triton, no device queries.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
