"""Acceptance profiles from real deployments: vLLM/SGLang logs, Prometheus scrapes, per-request metrics,
and step-time tables with acceptance from ``vllm bench serve`` results.

``calibrate(paths)`` reads the files (format detected per file), rebuilds per-window counts, pools
them and bins them by running-request count; ``calibration_profile`` turns the result into a
``kind: acceptance_profile`` document and ``profile_yaml`` into its text. The call order::

    calibration = calibrate([Path("server.log")])
    profile = calibration_profile(calibration, name="llama-eagle3")
    Path("profile.yaml").write_text(profile_yaml(profile))
"""

from spectune.calibrate._bench_table import BenchTable
from spectune.calibrate._calibrate import DEFAULT_BIN_EDGES, Calibration, calibrate
from spectune.calibrate._engine_log import MAX_FIT_MEAN_ERROR, EngineLog, read_engine_log
from spectune.calibrate._estimate import AcceptanceEstimate
from spectune.calibrate._formats import LogFormat
from spectune.calibrate._profile_writer import calibration_profile, profile_yaml
from spectune.calibrate._repeats import MAX_RELATIVE_SPREAD, MIN_REPEATS, RepeatedStep, measured_step_csv

__all__ = [
    "AcceptanceEstimate",
    "BenchTable",
    "Calibration",
    "DEFAULT_BIN_EDGES",
    "EngineLog",
    "LogFormat",
    "MAX_FIT_MEAN_ERROR",
    "MAX_RELATIVE_SPREAD",
    "MIN_REPEATS",
    "RepeatedStep",
    "calibrate",
    "calibration_profile",
    "measured_step_csv",
    "profile_yaml",
    "read_engine_log",
]
