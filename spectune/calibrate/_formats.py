"""Which source format a file holds: detected from its first telling line, or stated by the caller."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from spectune.calibrate._bench import looks_like_bench_result
from spectune.calibrate._lines import iter_lines
from spectune.calibrate._per_request import PER_REQUEST_KEY
from spectune.calibrate._prometheus import PROMETHEUS_PREFIX
from spectune.calibrate._sglang_log import SGLANG_MARKER
from spectune.calibrate._vllm_log import SPEC_DECODING_MARKER
from spectune.errors import DocumentError, Problem

__all__ = ["LOG_FORMATS", "LogFormat", "detect_format"]

LogFormat = Literal["vllm-log", "vllm-prometheus", "vllm-per-request", "sglang-log", "vllm-bench"]
LOG_FORMATS: tuple[str, ...] = LogFormat.__args__  # type: ignore[attr-defined]

_PROMETHEUS_LINE = re.compile(r"^\s*(?:#\s*(?:HELP|TYPE)\s+)?" + re.escape(PROMETHEUS_PREFIX))
_VLLM_ENGINE_LINE = re.compile(r"\bRunning:\s*\d+\s*reqs?\b")


def _telling(text: str) -> LogFormat | None:
    if SPEC_DECODING_MARKER in text:
        return "vllm-log"
    if SGLANG_MARKER in text and "accept len" in text:
        return "sglang-log"
    if _PROMETHEUS_LINE.match(text):
        return "vllm-prometheus"
    stripped = text.lstrip()
    if stripped.startswith("{") and (f'"{PER_REQUEST_KEY}"' in text or '"acceptance_histogram"' in text):
        return "vllm-per-request"
    return None


def detect_format(path: Path) -> LogFormat:
    """The format of ``path``, from the first line that only one format has; ``DocumentError`` if none does."""
    if _is_bench_result(path):
        return "vllm-bench"
    saw_engine_line = saw_sglang_decode = False
    for _, text in iter_lines(path):
        found = _telling(text)
        if found is not None:
            return found
        saw_engine_line = saw_engine_line or bool(_VLLM_ENGINE_LINE.search(text))
        saw_sglang_decode = saw_sglang_decode or SGLANG_MARKER in text
    if saw_engine_line:
        hint = (
            "it is a vLLM log without 'SpecDecoding metrics:' lines: was speculative decoding on, and "
            "logging not disabled (--disable-log-stats)?"
        )
    elif saw_sglang_decode:
        hint = "it is an SGLang log whose 'Decode batch' lines have no 'accept len': was speculative decoding on?"
    else:
        hint = (
            "found no vLLM 'SpecDecoding metrics:' line, no SGLang 'Decode batch ... accept len' line, no "
            f"'{PROMETHEUS_PREFIX}*' Prometheus counter, no JSON line with '{PER_REQUEST_KEY}' metrics and no "
            "vllm bench serve result (a JSON object with max_concurrency and mean_tpot_ms)"
        )
    raise DocumentError([Problem(str(path), None, "", f"no usable lines: {hint}")])


def _is_bench_result(path: Path) -> bool:
    """A ``vllm bench serve --save-result`` file: one JSON object (vLLM writes it on one line)."""
    if path.suffix.lower() != ".json":
        return False
    try:
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            return looks_like_bench_result(handle.read(200_000))
    except OSError:
        return False  # iter_lines reports it, located
