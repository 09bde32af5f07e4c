"""A study's recommendation as configs vLLM and SGLang accept as they are, plus its trials and report.

``write_artefacts`` writes ``recommended.yaml`` (passes ``spectune validate``), ``vllm.json``
(``--speculative-config``), ``vllm-synthetic.json`` (the same with acceptance pinned to the simulated
rates, for checking on a GPU), ``sglang.txt`` (server flags), ``trtllm.yaml`` (TensorRT-LLM's LLM-API
``speculative_config``), ``measure.sh`` (the GPU measurements that check the recommendation, for
``spectune calibrate``), ``trials.csv`` and ``report.html``, as one set beside a manifest of what it
wrote (``.spectune-manifest.json``): it never overwrites or removes a file it did not write.
"""

from spectune.export._artefacts import check_output_dir, write_artefacts
from spectune.export._tables import pareto_rows, summary_rows
from spectune.export._vllm import vllm_serve_command

__all__ = [
    "check_output_dir",
    "pareto_rows",
    "summary_rows",
    "vllm_serve_command",
    "write_artefacts",
]
