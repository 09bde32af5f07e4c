"""A study's recommendation as configs vLLM and SGLang accept as they are, plus its trials and report.

``write_artefacts`` writes ``recommended.yaml`` (passes ``spectune validate``), ``vllm.json``
(``--speculative-config``), ``vllm-synthetic.json`` (the same with acceptance pinned to the simulated
rates, for checking on a GPU), ``sglang.txt`` (server flags), ``trtllm.yaml`` (TensorRT-LLM's LLM-API
``speculative_config``), ``measure.sh`` (the GPU measurements that check the recommendation, for
``spectune calibrate``), ``trials.csv`` and ``report.html``, as one set beside a manifest of what it
wrote (``.spectune-manifest.json``): it never overwrites or removes a file it did not write.
"""

from spectune.export._artefacts import (
    ARTEFACT_NAMES,
    bucket_comments,
    check_output_dir,
    json_text,
    recommended_yaml,
    write_artefacts,
)
from spectune.export._measure import (
    VLLM_BENCH_SERVE_FLAGS,
    VLLM_SERVE_FLAGS,
    forced_ks,
    measure_script,
    measurement_ks,
)
from spectune.export._report import report_html
from spectune.export._sglang import (
    SGLANG_ADAPTIVE_CONFIG_NAME,
    SGLANG_ALGORITHMS,
    SglangExport,
    sglang_export,
    sglang_flags,
)
from spectune.export._svg import Band, Series, chart_svg, nice_ticks
from spectune.export._tables import TRIAL_COLUMNS, pareto_rows, summary_rows, tie_cell, trials_csv
from spectune.export._trtllm import TRTLLM_DECODING_TYPE, trtllm_options, trtllm_yaml
from spectune.export._vllm import (
    SyntheticForm,
    recommended_speculative_config,
    simulated_acceptance_rates,
    vllm_serve_command,
    vllm_speculative_config,
    vllm_synthetic_config,
)

__all__ = [
    "TRTLLM_DECODING_TYPE",
    "trtllm_options",
    "trtllm_yaml",
    "ARTEFACT_NAMES",
    "SGLANG_ALGORITHMS",
    "TRIAL_COLUMNS",
    "Band",
    "VLLM_BENCH_SERVE_FLAGS",
    "VLLM_SERVE_FLAGS",
    "Series",
    "SyntheticForm",
    "bucket_comments",
    "chart_svg",
    "check_output_dir",
    "json_text",
    "forced_ks",
    "measure_script",
    "measurement_ks",
    "nice_ticks",
    "pareto_rows",
    "recommended_speculative_config",
    "recommended_yaml",
    "report_html",
    "sglang_flags",
    "sglang_export",
    "SglangExport",
    "SGLANG_ADAPTIVE_CONFIG_NAME",
    "simulated_acceptance_rates",
    "summary_rows",
    "tie_cell",
    "trials_csv",
    "vllm_serve_command",
    "vllm_speculative_config",
    "vllm_synthetic_config",
    "write_artefacts",
]
