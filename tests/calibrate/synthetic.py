"""Seeded synthetic sources for the calibrate tests, written exactly as vLLM and SGLang write them.

Every source is generated from known per-window counts (drawn from known conditional rates), so a
test can check what ``spectune calibrate`` recovers against the counts that produced the text. The
committed files under ``fixtures/`` and ``examples/logs/`` are these generators' output; a test checks
that they still are. Rewrite them with ``python tests/calibrate/synthetic.py``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLE_LOG = Path(__file__).parents[2] / "examples" / "logs" / "vllm-eagle3.log"
LOG_INTERVAL_S = 10.0


@dataclass(frozen=True)
class WindowTruth:
    """The exact counts behind one window (vLLM units: bonus token not counted)."""

    num_drafts: int
    num_draft_tokens: int
    accepted_per_position: tuple[int, ...]
    running: int

    @property
    def num_accepted(self) -> int:
        return sum(self.accepted_per_position)


@dataclass
class SyntheticSource:
    """Text of a source file and the windows that produced it."""

    text: str
    windows: list[WindowTruth] = field(default_factory=list)

    def pooled(self, running: tuple[int, int] | None = None) -> tuple[int, int, list[int]]:
        """(drafts, accepted, per-position accepted) over all windows, or those with running in [lo, hi]."""
        chosen = [w for w in self.windows if running is None or running[0] <= w.running <= running[1]]
        k = len(chosen[0].accepted_per_position)
        return (
            sum(w.num_drafts for w in chosen),
            sum(w.num_accepted for w in chosen),
            [sum(w.accepted_per_position[i] for w in chosen) for i in range(k)],
        )

    def conditional(self, running: tuple[int, int] | None = None) -> list[float]:
        drafts, _, per_position = self.pooled(running)
        previous = [drafts, *per_position[:-1]]
        return [n / p for n, p in zip(per_position, previous, strict=True)]

    def unconditional(self, running: tuple[int, int] | None = None) -> list[float]:
        drafts, _, per_position = self.pooled(running)
        return [n / drafts for n in per_position]


def draw_window(
    rng: np.random.Generator,
    conditional_rates: Sequence[float],
    num_drafts: int,
    running: int,
    *,
    jitter: float = 0.0,
    short_draft_fraction: float = 0.0,
) -> WindowTruth:
    """Accepted lengths of ``num_drafts`` drafts; ``jitter`` moves this window's rates (traffic drift).

    With ``short_draft_fraction`` > 0 that share of drafts has fewer than K tokens (as ngram proposes
    near the end of a match); a short draft cannot be accepted past its length.
    """
    k = len(conditional_rates)
    rates = (
        np.clip(np.asarray(conditional_rates) + rng.normal(0.0, jitter, size=k), 0.02, 0.98)
        if jitter
        else np.asarray(conditional_rates)
    )
    accepted_steps = np.cumprod(rng.random((num_drafts, k)) < rates, axis=1)
    lengths = np.full(num_drafts, k)
    if short_draft_fraction:
        short = rng.random(num_drafts) < short_draft_fraction
        lengths[short] = rng.integers(1, k, size=int(short.sum())) if k > 1 else 1
        accepted_steps = accepted_steps * (np.arange(k)[None, :] < lengths[:, None])
    per_position = tuple(int(c) for c in accepted_steps.sum(axis=0))
    return WindowTruth(num_drafts, int(lengths.sum()), per_position, running)


def spec_decoding_message(window: WindowTruth, *, extra_fields: bool = False, old_format: bool = False) -> str:
    """vLLM's ``SpecDecoding metrics:`` message for the window, with vLLM's own number formats."""
    accepted, drafted = window.num_accepted, window.num_draft_tokens
    if old_format:
        return f"SpecDecoding metrics: Draft acceptance rate: {accepted / drafted * 100:.1f}%, Accepted: {accepted} tokens, Drafted: {drafted} tokens"
    rates = ", ".join(f"{n / window.num_drafts:.3f}" for n in window.accepted_per_position)
    fork = ""
    if extra_fields:
        # What forks add: more per-position lists and timings, between vLLM's own fields.
        top1 = ", ".join(f"{min(1.0, 1.1 * n / window.num_drafts):.3f}" for n in window.accepted_per_position)
        fork = f"Per-position top-1 agreement: {top1}, Draft time: {0.8 * window.num_drafts / 1000:.2f} ms, "
    return (
        "SpecDecoding metrics: "
        f"Mean acceptance length: {1 + accepted / window.num_drafts:.2f}, "
        f"Accepted throughput: {accepted / LOG_INTERVAL_S:.2f} tokens/s, "
        f"Drafted throughput: {drafted / LOG_INTERVAL_S:.2f} tokens/s, "
        f"Accepted: {accepted} tokens, "
        f"Drafted: {drafted} tokens, "
        f"{fork}"
        f"Per-position acceptance rate: {rates}, "
        f"Avg Draft acceptance rate: {accepted / drafted * 100:.1f}%"
    )


def engine_message(window: WindowTruth, rng: np.random.Generator) -> str:
    generated = (window.num_accepted + window.num_drafts) / LOG_INTERVAL_S
    return (
        f"Engine 000: Avg prompt throughput: {rng.uniform(0, 3000):.1f} tokens/s, Avg generation throughput: "
        f"{generated:.1f} tokens/s, Running: {window.running} reqs, Waiting: 0 reqs, GPU KV cache usage: "
        f"{min(99.0, 0.9 * window.running):.1f}%, Prefix cache hit rate: {rng.uniform(0, 60):.1f}%"
    )


def _clock(second: int) -> str:
    return f"05-06 {4 + second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}"


def vllm_log(
    windows: Sequence[WindowTruth],
    rng: np.random.Generator,
    *,
    style: str = "plain",
    extra_fields: bool = False,
    old_format: bool = False,
    engine_lines: bool = True,
) -> str:
    """A server log: startup lines, then per window an engine line, access-log lines and the spec line.

    ``style``: "plain" (vLLM's own prefix), "compose" (``docker compose logs`` service prefix and ANSI
    colours) or "timestamps" (``docker logs --timestamps``).
    """

    def prefixed(second: int, source: str, message: str) -> str:
        level = "\x1b[32mINFO\x1b[0m" if style == "compose" else "INFO"
        line = f"(APIServer pid=1) {level} {_clock(second)} [{source}] {message}"
        if style == "compose":
            return f"\x1b[36mvllm-1  |\x1b[0m {line}"
        if style == "timestamps":
            return f"2026-05-06T{_clock(second)[6:]}.{rng.integers(0, 10**9):09d}Z {line}"
        return line

    lines = [
        prefixed(0, "api_server.py:1880", "vLLM API server version 0.33.0"),
        prefixed(
            1,
            "speculative.py:532",
            f"Speculative decoding: method=eagle3, num_speculative_tokens={len(windows[0].accepted_per_position)}",
        ),
        prefixed(30, "launcher.py:29", "Available routes are: /v1/chat/completions, /v1/completions, /metrics"),
    ]
    for index, window in enumerate(windows):
        second = 40 + int(LOG_INTERVAL_S) * index
        for request in range(int(rng.integers(0, 3))):
            lines.append(
                prefixed(
                    second - 3,
                    "launcher.py:112",
                    f'172.18.0.1:{50000 + request} - "POST /v1/chat/completions HTTP/1.1" 200 OK',
                )
            )
        if engine_lines:
            lines.append(prefixed(second, "loggers.py:271", engine_message(window, rng)))
        lines.append(
            prefixed(
                second,
                "metrics.py:101",
                spec_decoding_message(window, extra_fields=extra_fields, old_format=old_format),
            )
        )
    return "\n".join(lines) + "\n"


def _bin_windows(
    rng: np.random.Generator,
    rates_by_running: dict[int, Sequence[float]],
    windows_per_bin: int,
    *,
    jitter: float = 0.02,
) -> list[WindowTruth]:
    windows = []
    for running, rates in rates_by_running.items():
        for _ in range(windows_per_bin):
            drafts = int(running * rng.integers(180, 260))
            windows.append(draw_window(rng, rates, drafts, running, jitter=jitter))
    order = rng.permutation(len(windows))
    return [windows[i] for i in order]


# Llama-3.1-8B-Instruct with RedHatAI's EAGLE3 head, K=3, MT-Bench, temperature 0 (vLLM's acceptance
# test: unconditional 0.7296, 0.5208, 0.3545), drifting a little lower at large batch as the mix widens.
EAGLE3_RATES_BY_RUNNING = {
    1: (0.730, 0.714, 0.681),
    2: (0.730, 0.714, 0.681),
    4: (0.728, 0.712, 0.679),
    8: (0.725, 0.708, 0.675),
    16: (0.720, 0.702, 0.668),
    32: (0.712, 0.694, 0.660),
    64: (0.700, 0.680, 0.645),
}


def compose_ansi_log() -> SyntheticSource:
    rng = np.random.default_rng(20260506)
    windows = _bin_windows(rng, EAGLE3_RATES_BY_RUNNING, 6)
    return SyntheticSource(vllm_log(windows, rng, style="compose"), windows)


def example_log() -> SyntheticSource:
    rng = np.random.default_rng(3)
    windows = _bin_windows(rng, {r: EAGLE3_RATES_BY_RUNNING[r] for r in (1, 4, 16, 64)}, 8)
    return SyntheticSource(vllm_log(windows, rng), windows)


def fork_timestamps_log() -> SyntheticSource:
    rng = np.random.default_rng(5)
    rates = (0.80, 0.74, 0.70, 0.66, 0.62)
    windows = [draw_window(rng, rates, int(rng.integers(2000, 9000)), 24, jitter=0.03) for _ in range(25)]
    return SyntheticSource(vllm_log(windows, rng, style="timestamps", extra_fields=True), windows)


def ngram_short_drafts_log() -> SyntheticSource:
    rng = np.random.default_rng(11)
    rates = (0.55, 0.60, 0.62, 0.64)
    windows = [draw_window(rng, rates, int(rng.integers(150, 900)), 4, short_draft_fraction=0.3) for _ in range(20)]
    return SyntheticSource(vllm_log(windows, rng, engine_lines=False), windows)


def old_format_log() -> SyntheticSource:
    rng = np.random.default_rng(13)
    windows = [draw_window(rng, (0.75, 0.70, 0.65), int(rng.integers(300, 3000)), 8) for _ in range(15)]
    return SyntheticSource(vllm_log(windows, rng, old_format=True, engine_lines=False), windows)


def k_changes_log() -> str:
    rng = np.random.default_rng(17)
    first = [draw_window(rng, (0.7, 0.7, 0.7), 500, 4) for _ in range(3)]
    second = [draw_window(rng, (0.7, 0.7, 0.7, 0.7, 0.7), 500, 4) for _ in range(2)]
    return vllm_log(first, rng) + vllm_log(second, rng)


def prometheus_scrape(totals: dict[tuple[str, str], WindowTruth], running: dict[str, int]) -> str:
    """A ``/metrics`` page as prometheus_client writes it; ``totals`` are cumulative, by (model, engine)."""
    blocks = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        + "".join(f'vllm:num_requests_running{{engine="0",model_name="{m}"}} {float(r)}\n' for m, r in running.items()),
        "# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.\n"
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        + "".join(
            f'vllm:e2e_request_latency_seconds_bucket{{engine="0",le="{le}",model_name="{m}"}} 12.0\n'
            for m in running
            for le in ("0.3", "+Inf")
        ),
    ]
    counters = {
        "num_drafts": ("Number of spec decoding drafts.", lambda w: [("", w.num_drafts)]),
        "num_draft_tokens": ("Number of draft tokens.", lambda w: [("", w.num_draft_tokens)]),
        "num_accepted_tokens": ("Number of accepted tokens.", lambda w: [("", w.num_accepted)]),
        "num_accepted_tokens_per_pos": (
            "Accepted tokens per draft position.",
            lambda w: [(f',position="{i}"', n) for i, n in enumerate(w.accepted_per_position)],
        ),
    }
    for counter, (help_text, samples) in counters.items():
        name = f"vllm:spec_decode_{counter}"
        block = f"# HELP {name}_total {help_text}\n# TYPE {name}_total counter\n"
        for (model, engine), window in totals.items():
            for position, value in samples(window):
                block += f'{name}_total{{engine="{engine}",model_name="{model}"{position}}} {float(value)}\n'
        block += f"# HELP {name}_created {help_text}\n# TYPE {name}_created gauge\n"
        for model, engine in totals:
            block += f'{name}_created{{engine="{engine}",model_name="{model}"}} 1.7780832e+09\n'
        blocks.append(block)
    return "".join(blocks)


def _add(a: WindowTruth, b: WindowTruth) -> WindowTruth:
    return WindowTruth(
        a.num_drafts + b.num_drafts,
        a.num_draft_tokens + b.num_draft_tokens,
        tuple(x + y for x, y in zip(a.accepted_per_position, b.accepted_per_position, strict=True)),
        b.running,
    )


PROMETHEUS_MODELS = {"meta-llama/Llama-3.1-8B-Instruct": (0.73, 0.71, 0.68), "Qwen/Qwen3-8B": (0.65, 0.61, 0.51)}


def prometheus_scrapes() -> tuple[str, str, dict[str, SyntheticSource]]:
    """Two scrapes of a server hosting two models on two engines each; truth per model is the difference."""
    rng = np.random.default_rng(19)
    before, after, truths = {}, {}, {}
    for model, rates in PROMETHEUS_MODELS.items():
        truths[model] = SyntheticSource("")
        for engine in ("0", "1"):
            start = draw_window(rng, rates, int(rng.integers(10_000, 50_000)), 0)
            delta = draw_window(rng, rates, int(rng.integers(20_000, 60_000)), 12)
            before[(model, engine)] = start
            after[(model, engine)] = _add(start, delta)
            truths[model].windows.append(delta)
    running = {model: 12 for model in PROMETHEUS_MODELS}
    return prometheus_scrape(before, running), prometheus_scrape(after, running), truths


def prometheus_restart_scrape() -> str:
    """A later scrape after a restart: the counters started again from zero."""
    rng = np.random.default_rng(23)
    totals = {(model, "0"): draw_window(rng, rates, 900, 0) for model, rates in PROMETHEUS_MODELS.items()}
    return prometheus_scrape(totals, {model: 3 for model in PROMETHEUS_MODELS})


def per_request_jsonl() -> SyntheticSource:
    """Responses with ``metrics.speculative_decoding`` (summary level), one per line; some with n > 1 (null)."""
    rng = np.random.default_rng(29)
    rates = (0.70, 0.66, 0.62, 0.58)
    source = SyntheticSource("")
    lines = []
    for index in range(60):
        record = {
            "id": f"chatcmpl-{index:04d}",
            "object": "chat.completion",
            "model": "qwen3-32b",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "..."}, "finish_reason": "stop"}],
        }
        if index % 15 == 7:
            record["metrics"] = {"speculative_decoding": None}
        else:
            window = draw_window(rng, rates, int(rng.integers(20, 400)), 1, jitter=0.05)
            source.windows.append(window)
            k = len(rates)
            counts = [window.num_drafts, *window.accepted_per_position, 0]
            histogram = [counts[j] - counts[j + 1] for j in range(k + 1)]
            record["usage"] = {
                "prompt_tokens": int(rng.integers(50, 2000)),
                "completion_tokens": window.num_drafts + window.num_accepted,
            }
            record["metrics"] = {
                "speculative_decoding": {
                    "mean_acceptance_length": 1 + window.num_accepted / window.num_drafts,
                    "draft_acceptance_rate": window.num_accepted / window.num_draft_tokens,
                    "acceptance_histogram": histogram,
                    "acceptance_histogram_by_draft_length": {str(k): histogram},
                    "num_spec_steps": window.num_drafts,
                    "num_accepted_draft_tokens": window.num_accepted,
                    "num_draft_tokens": window.num_draft_tokens,
                    "num_spec_tokens": k,
                }
            }
        lines.append(json.dumps(record))
    source.text = "\n".join(lines) + "\n"
    return source


SGLANG_RATES = (0.78, 0.72, 0.66, 0.60)
SGLANG_DECODE_LOG_INTERVAL = 40


def sglang_log() -> SyntheticSource:
    """Decode lines every 40 steps; each window's verifications are 40 x #running-req."""
    rng = np.random.default_rng(31)
    source = SyntheticSource("")
    lines = [
        "[2026-05-06 04:30:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', speculative_algorithm='EAGLE3', speculative_num_steps=4, speculative_eagle_topk=1, speculative_num_draft_tokens=5)"
    ]
    k = len(SGLANG_RATES)
    for index in range(50):
        running = int(rng.choice([1, 2, 4, 8, 16, 32]))
        window = draw_window(rng, SGLANG_RATES, SGLANG_DECODE_LOG_INTERVAL * running, running, jitter=0.03)
        source.windows.append(window)
        accept_len = (window.num_accepted + window.num_drafts) / window.num_drafts
        accept_rate = window.num_accepted / (window.num_drafts * k)
        lines.append(
            f"[2026-05-06 04:{31 + index // 60:02d}:{index % 60:02d} TP0] Decode batch. #running-req: {running}, "
            f"#token: {running * 1180}, token usage: {running * 0.004:.2f}, accept len: {accept_len:.2f}, "
            f"accept rate: {accept_rate:.2f}, cuda graph: True, gen throughput (token/s): {running * 95.3:.2f}, #queue-req: 0, "
        )
    source.text = "\n".join(lines) + "\n"
    return source


def committed_files() -> dict[Path, str]:
    """Every generated file, by where it is committed."""
    before, after, _ = prometheus_scrapes()
    return {
        FIXTURES / "vllm-compose-ansi.log": compose_ansi_log().text,
        FIXTURES / "vllm-fork-timestamps.log": fork_timestamps_log().text,
        FIXTURES / "vllm-ngram-short-drafts.log": ngram_short_drafts_log().text,
        FIXTURES / "vllm-old-format.log": old_format_log().text,
        FIXTURES / "vllm-k-changes.log": k_changes_log(),
        FIXTURES / "prometheus-before.prom": before,
        FIXTURES / "prometheus-after.prom": after,
        FIXTURES / "prometheus-after-restart.prom": prometheus_restart_scrape(),
        FIXTURES / "per-request.jsonl": per_request_jsonl().text,
        FIXTURES / "sglang.log": sglang_log().text,
        EXAMPLE_LOG: example_log().text,
    }


if __name__ == "__main__":
    for path, text in committed_files().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="\n")
        print(f"wrote {path}")
