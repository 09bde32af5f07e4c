"""SGLang server logs: the decode line's ``accept len`` (mean acceptance length only).

SGLang logs every ``--decode-log-interval`` decode steps (40 by default)::

    [2026-05-06 04:34:37 TP0] Decode batch. #running-req: 8, #token: 9120, token usage: 0.04,
        accept len: 2.61, accept rate: 0.54, cuda graph: True, gen throughput (token/s): 512.34, #queue-req: 0,

``accept len`` is the window's tokens per verification (bonus included, vLLM's unit); older builds
omit ``accept rate`` (accepted drafts per drafted token). SGLang exports no per-position counts, so a
profile from SGLang knows the mean length and not how acceptance falls with position. Windows are
weighted by ``#running-req``: a window's verifications are its steps (fixed) times its batch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

from spectune.calibrate._lines import decimal_half_step, iter_lines
from spectune.calibrate._windows import LengthWindow, SourceWindows
from spectune.errors import DocumentError, Problem

__all__ = ["SGLANG_MARKER", "infer_sglang_num_positions", "read_sglang_log"]

SGLANG_MARKER = "Decode batch"
_RUNNING = re.compile(r"#running-req:\s*(\d+)")
_ACCEPT_LENGTH = re.compile(r"\baccept len:\s*([0-9]+(?:\.[0-9]+)?)")
_ACCEPT_RATE = re.compile(r"\baccept rate:\s*([0-9]+(?:\.[0-9]+)?)")


def read_sglang_log(path: Path) -> tuple[SourceWindows, list[tuple[int, float, float]]]:
    """The windows of an SGLang log, and (line, accept len, accept rate) where the rate was logged."""
    source = SourceWindows(file=str(path))
    rates: list[tuple[int, float, float]] = []
    for number, text in iter_lines(path):
        if SGLANG_MARKER not in text:
            continue
        length_match = _ACCEPT_LENGTH.search(text)
        if length_match is None:
            continue  # speculative decoding off, or a build that does not log it
        running_match = _RUNNING.search(text)
        length = float(length_match.group(1))
        if length < 1.0:
            source.skip(number, "accept len", f"must be >= 1 tokens per step, got {length_match.group(1)}")
            continue
        running = int(running_match.group(1)) if running_match else None
        if running == 0:
            source.skip(number, "#running-req", "no running requests in this window")
            continue
        source.length_windows.append(
            LengthWindow(
                file=source.file,
                line=number,
                mean_acceptance_length=length,
                rounding=decimal_half_step(length_match.group(1)),
                weight=float(running) if running is not None else 1.0,
                num_running=running,
            )
        )
        rate_match = _ACCEPT_RATE.search(text)
        if rate_match is not None:
            rates.append((number, length, float(rate_match.group(1))))
    return source, rates


def _num_positions_range(length: float, rate: float) -> tuple[float, float]:
    """K consistent with accept len and accept rate (both printed to 2 decimals): (len - 1) / rate."""
    low = max(length - 0.005 - 1.0, 0.0) / (rate + 0.005)
    high = (length + 0.005 - 1.0) / (rate - 0.005) if rate > 0.005 else math.inf
    return low, high


def infer_sglang_num_positions(
    file: str, observations: Sequence[tuple[int, float, float]], given: int | None
) -> int | None:
    """K from ``accept rate`` = accepted drafts / (K * verifications), checked against ``given``.

    Returns ``given`` when it fits every line, the one whole K that fits every line when none was
    given, or None when the lines do not pin K down. Raises ``DocumentError`` on a line that ``given``
    contradicts.
    """
    low, high = 1.0, math.inf
    for line, length, rate in observations:
        line_low, line_high = _num_positions_range(length, rate)
        if given is not None and not line_low - 1e-9 <= given <= line_high + 1e-9:
            raise DocumentError(
                [
                    Problem(
                        file,
                        line,
                        "accept rate",
                        f"accept len {length:g} and accept rate {rate:g} give K = (len - 1) / rate in "
                        f"[{line_low:.2f}, {line_high:.2f}], not K={given} (--num-speculative-tokens); with "
                        "--speculative-eagle-topk > 1 SGLang drafts trees, which spectune does not model",
                    )
                ]
            )
        low, high = max(low, line_low), min(high, line_high)
    if given is not None:
        return given
    whole = [k for k in range(math.ceil(low - 1e-9), math.floor(min(high, 1e6) + 1e-9) + 1)] if high < math.inf else []
    return whole[0] if len(whole) == 1 else None
