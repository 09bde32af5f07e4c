"""Seeded vLLM server logs whose engine lines come from a roofline with planted efficiency parameters.

Each window's step time is the roofline's at (running requests, K, context) with the planted achieved
bandwidth fraction and per-step overhead; the log prints what vLLM prints for it: the generation
throughput (running x acceptance length / step time), the KV cache usage (running x context / cache
size) and the SpecDecoding line, all rounded as vLLM rounds them. A test fits them back.
"""

from __future__ import annotations

from collections.abc import Sequence

from spectune.config import CostModelConfig, DrafterSpec, HardwareConfig, TargetModelSpec
from spectune.cost import RooflineCostModel

KV_CACHE_TOKENS = 480_000


def planted_roofline(
    hardware: HardwareConfig, target: TargetModelSpec, drafter: DrafterSpec | None, fraction: float, overhead_s: float
) -> RooflineCostModel:
    gpu = hardware.gpu.model_copy(update={"achievable_bandwidth_fraction": fraction})
    return RooflineCostModel(
        hardware.model_copy(update={"gpu": gpu}), target, drafter, CostModelConfig(overhead_s=overhead_s)
    )


def engine_log(
    roofline: RooflineCostModel,
    windows: Sequence[tuple[int, int, float]],
    *,
    conditional_rates: Sequence[float] = (0.75, 0.7, 0.65, 0.6, 0.55),
    prefill_windows: int = 1,
) -> str:
    """Log text: a startup line with the cache size, then one engine (+ SpecDecoding) line per (running, K, context)."""
    lines = [
        f"(EngineCore_DP0 pid=7) INFO 12-01 10:00:00 [kv_cache_utils.py:1087] GPU KV cache size: {KV_CACHE_TOKENS:,} tokens"
    ]
    for i in range(prefill_windows):  # a ramp-up window that prefills: the fit must leave it out
        lines.append(
            f"(APIServer pid=1) INFO 12-01 10:00:{i:02d} [loggers.py:271] Engine 000: Avg prompt throughput: 9000.0 tokens/s, "
            "Avg generation throughput: 120.0 tokens/s, Running: 64 reqs, Waiting: 12 reqs, GPU KV cache usage: 8.0%, Prefix cache hit rate: 0.0%"
        )
    for index, (running, k, context) in enumerate(windows):
        unconditional, product = [], 1.0
        for rate in conditional_rates[:k]:
            product *= rate
            unconditional.append(product)
        length = 1.0 + sum(unconditional)
        length_printed = float(f"{length:.2f}")
        step = roofline.step_time(running, k, context).total_s
        generation = running * length_printed / step
        usage = 100.0 * running * context / KV_CACHE_TOKENS
        stamp = f"INFO 12-01 10:{index // 6 + 1:02d}:{index % 6 * 10:02d}"
        lines.append(
            f"(APIServer pid=1) {stamp} [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
            f"throughput: {generation:.1f} tokens/s, Running: {running} reqs, Waiting: 0 reqs, GPU KV cache usage: {usage:.1f}%, "
            "Prefix cache hit rate: 0.0%"
        )
        if k:
            drafts = 1000
            accepted = round(drafts * (length - 1))
            rates = ", ".join(f"{u:.3f}" for u in unconditional)
            lines.append(
                f"(APIServer pid=1) {stamp} [metrics.py:101] SpecDecoding metrics: Mean acceptance length: {length_printed:.2f}, "
                f"Accepted throughput: {accepted / 10:.2f} tokens/s, Drafted throughput: {drafts * k / 10:.2f} tokens/s, "
                f"Accepted: {accepted} tokens, Drafted: {drafts * k} tokens, Per-position acceptance rate: {rates}, "
                f"Avg Draft acceptance rate: {100 * accepted / (drafts * k):.1f}%"
            )
    return "\n".join(lines) + "\n"


def varied_windows(k: int = 3) -> list[tuple[int, int, float]]:
    """Windows across batch sizes and contexts that fit the cache."""
    return [
        (n, k, c)
        for n in (1, 2, 4, 8, 16, 32, 64, 128, 256)
        for c in (400.0, 1500.0, 5000.0)
        if n * c <= 0.95 * KV_CACHE_TOKENS
    ]
