"""Acceptance profiles from real deployments: vLLM/SGLang logs, Prometheus scrapes, per-request metrics,
and step-time tables with acceptance from ``vllm bench serve`` results.

``calibrate(paths)`` reads the files (format detected per file), rebuilds per-window counts, pools
them and bins them by running-request count; ``calibration_profile`` turns the result into a
``kind: acceptance_profile`` document and ``profile_yaml`` into its text. The call order::

    calibration = calibrate([Path("server.log")])
    profile = calibration_profile(calibration, name="llama-eagle3")
    Path("profile.yaml").write_text(profile_yaml(profile))
"""

from spectune.calibrate._bench import BenchRun, read_bench_result
from spectune.calibrate._bench_table import BenchTable, MeasuredStep, bench_table, step_time_csv
from spectune.calibrate._calibrate import DEFAULT_BIN_EDGES, Calibration, calibrate
from spectune.calibrate._engine_log import MAX_FIT_MEAN_ERROR, EngineLog, EngineWindow, read_engine_log
from spectune.calibrate._estimate import AcceptanceEstimate
from spectune.calibrate._formats import LOG_FORMATS, LogFormat, detect_format
from spectune.calibrate._profile_writer import calibration_profile, profile_yaml
from spectune.calibrate._repeats import MAX_RELATIVE_SPREAD, MIN_REPEATS, RepeatedStep, measured_step_csv
from spectune.calibrate._sweep import CellRecord, MeasurementTree, read_measurement_tree

__all__ = [
    "DEFAULT_BIN_EDGES",
    "MAX_RELATIVE_SPREAD",
    "MIN_REPEATS",
    "CellRecord",
    "MeasurementTree",
    "RepeatedStep",
    "measured_step_csv",
    "read_measurement_tree",
    "EngineLog",
    "EngineWindow",
    "LOG_FORMATS",
    "MAX_FIT_MEAN_ERROR",
    "AcceptanceEstimate",
    "BenchRun",
    "BenchTable",
    "Calibration",
    "LogFormat",
    "MeasuredStep",
    "bench_table",
    "calibrate",
    "calibration_profile",
    "detect_format",
    "profile_yaml",
    "read_bench_result",
    "read_engine_log",
    "step_time_csv",
]
