"""vLLM 0.33.0's adaptive verification: the start-up cost tables, the per-step budget, the global admission.

vLLM (``vllm/v1/worker/gpu/spec_decode/adaptive_verification.py``) sizes each step's verification budget b
itself. At start-up it replays dummy batches at a synthetic KV context
(``VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN``, 8192, ``vllm/envs.py``) at every captured CUDA-graph
token count and at a few larger ones (``batches_to_profile``), and keeps two curves: the drafter's cost by
number of requests (graph replays only) and the target's forward cost by number of tokens
(``set_initial_cost_curves``). ``build_cost_tables_from_curves`` turns them into tables: at or below the
capture limit a step function of the next profiled size (a batch pads to the next captured size), above
it interpolated between the points past the limit, extrapolated linearly past the last one.

Each step (``get_num_tokens``) it scores every (request, draft position) by its survival probability, the
running product of the request's acceptance estimates, one step stale, and takes
``b = argmax_b (decoding requests + sum of the b best survivals) / (draft_cost[requests] +
verify_cost[non-draft tokens + b])``. ``_assign_draft_token_budget`` then admits the globally best b slots
by the fresh estimates; survival falls along a request, so the admitted slots are a prefix of each.

Here the profile replays spectune's own cost model (the deployment's) at those shapes, so the tables
are what vLLM would measure on the simulated GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from spectune.cost import StepTimer

__all__ = [
    "PROFILE_CONTEXT_TOKENS",
    "CostTables",
    "admit_top_slots",
    "choose_budget",
    "cost_tables_from_curves",
    "profile_token_counts",
    "profiled_cost_tables",
    "vllm_capture_sizes",
]

PROFILE_CONTEXT_TOKENS = 8192  # VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN's default (vllm/envs.py:63)
_DEFAULT_MAX_GRAPH_TOKENS = 512  # vllm/config/vllm.py:2463-2465 (1024 only on data-centre Blackwell)


@dataclass(frozen=True)
class CostTables:
    """What vLLM's start-up profile leaves: seconds by index.

    draft_s: float64 [max_num_reqs + 1], the drafter's cost at that many requests
    verify_s: float64 [max_num_batched_tokens + 1], the target's forward at that many tokens
    """

    draft_s: np.ndarray
    verify_s: np.ndarray


def vllm_capture_sizes(max_num_seqs: int, decode_query_len: int, max_num_batched_tokens: int) -> list[int]:
    """vLLM 0.33.0's default CUDA-graph capture sizes (tokens) for a speculative deployment.

    ``VllmConfig._set_cudagraph_sizes`` (vllm/config/vllm.py:2447-2605), one decode tier: a ceiling of
    min(max_num_seqs x query length x 2, 512), the grid 1, 2, 4, every 8 to 256, every 16 beyond, plus the
    uniform decode sizes n x query length for request counts n on the same grid, all within the ceiling
    and max_num_batched_tokens.
    """
    ceiling = min(max_num_seqs * decode_query_len * 2, _DEFAULT_MAX_GRAPH_TOKENS)
    ceiling = min(max_num_batched_tokens, ceiling)

    def grid(limit: int) -> list[int]:
        sizes = [n for n in (1, 2, 4) if n <= limit]
        sizes += list(range(8, min(limit + 1, 256), 8))
        sizes += list(range(256, limit + 1, 16))
        return sizes

    sizes = set(grid(ceiling))
    if max_num_batched_tokens <= ceiling:
        sizes.add(max_num_batched_tokens)
    if decode_query_len > 1:
        counts = set(grid(min(max_num_seqs, _DEFAULT_MAX_GRAPH_TOKENS))) | {
            min(max_num_seqs, _DEFAULT_MAX_GRAPH_TOKENS)
        }
        sizes |= {n * decode_query_len for n in counts if n * decode_query_len <= ceiling}
    elif max_num_seqs <= ceiling:
        sizes.add(max_num_seqs)
    return sorted(size for size in sizes if size <= max_num_batched_tokens)


def profile_token_counts(capture_sizes: Sequence[int], max_num_batched_tokens: int) -> list[int]:
    """The token counts vLLM's start-up profile replays: every capture size, then 1.5x the limit and
    doublings up to max_num_batched_tokens (``batches_to_profile``)."""
    sizes = list(capture_sizes)
    limit = sizes[-1] if sizes else 0
    tail: set[int] = set()
    if limit:
        tail.add(min(limit + limit // 2, max_num_batched_tokens))
        size = limit
        while size < max_num_batched_tokens:
            size = min(size * 2, max_num_batched_tokens)
            tail.add(size)
        tail -= set(sizes)
    return sizes + sorted(tail)


def _table(points: Sequence[tuple[int, float]], length: int, capture_limit: int) -> np.ndarray:
    """A cost per size 0..length-1 from profiled (size, seconds): the next point's cost at or below the
    capture limit (padding), interpolated past it, linear past the last point; never decreasing in the
    points (a larger pass is not cheaper)."""
    sizes = np.asarray([size for size, _ in points], dtype=np.float64)
    costs = np.maximum.accumulate(np.asarray([cost for _, cost in points], dtype=np.float64))
    wanted = np.arange(length, dtype=np.float64)
    table = costs[np.minimum(np.searchsorted(sizes, wanted, side="left"), len(sizes) - 1)]
    if capture_limit:
        past = wanted > capture_limit
        profiled_past = sizes > capture_limit
        if past.any() and profiled_past.any():
            # crossing the limit loses the graphs: the first point past it is not blended with those below
            table[past] = np.interp(wanted[past], sizes[profiled_past], costs[profiled_past])
    if len(sizes) > 1:
        beyond = wanted > sizes[-1]
        slope = (costs[-1] - costs[-2]) / (sizes[-1] - sizes[-2])
        table[beyond] = costs[-1] + slope * (wanted[beyond] - sizes[-1])
    return table


def cost_tables_from_curves(
    draft_curve: Sequence[tuple[int, float]],
    verify_curve: Sequence[tuple[int, float]],
    max_num_reqs: int,
    max_num_batched_tokens: int,
    capture_limit: int,
) -> CostTables:
    """The tables from the two profiled curves (sizes increasing), as ``build_cost_tables_from_curves``."""
    draft = np.maximum(_table(draft_curve, max_num_reqs + 1, capture_limit), 0.0)
    verify = np.maximum(_table(verify_curve, max_num_batched_tokens + 1, capture_limit), 1e-9)
    return CostTables(draft_s=draft, verify_s=verify)


def _verify_seconds(timer: StepTimer, requests: int, tokens: int, context: float) -> float:
    """The target's pass over ``tokens`` tokens spread over ``requests`` requests, from a step timer that
    answers at whole tokens per request: linear between the two whole widths around tokens / requests."""
    width = tokens / requests
    low = max(int(np.floor(width)), 1)
    low_s = timer(requests, low - 1, context)[1]
    if width == low:
        return low_s
    high_s = timer(requests, low, context)[1]
    return low_s + (high_s - low_s) * (width - low)


def profiled_cost_tables(
    timer: StepTimer,
    num_speculative_tokens: int,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    capture_sizes: Sequence[int] | None = None,
    context_tokens: float = PROFILE_CONTEXT_TOKENS,
    max_requests: int | None = None,
    max_verify_width: int | None = None,
) -> CostTables:
    """vLLM's start-up profile, replayed on a cost model's ``timer``.

    A dummy run of N tokens has min(N, max_num_seqs, max_num_batched_tokens // (K + 1)) requests with the
    tokens spread evenly (``GPUModelRunner._dummy_run``, vllm/v1/worker/gpu/model_runner.py:856-892); the
    verify curve is the target's pass at that shape, the draft curve the drafter's K-token proposal at that
    many requests, kept only for shapes within the capture limit (graph replays).

    ``max_requests`` / ``max_verify_width``: what the cost model answers for (a measured table's largest
    batch and K + 1); shapes past them are not replayed, and the tables extend linearly past the last one.
    """
    k = num_speculative_tokens
    sizes = (
        list(capture_sizes)
        if capture_sizes is not None
        else vllm_capture_sizes(max_num_seqs, k + 1, max_num_batched_tokens)
    )
    limit = sizes[-1] if sizes else 0
    draft: dict[int, float] = {}
    verify: list[tuple[int, float]] = []
    for tokens in profile_token_counts(sizes, max_num_batched_tokens):
        requests = max(1, min(tokens, max_num_seqs, max_num_batched_tokens // (k + 1)))
        beyond_model = (max_requests is not None and requests > max_requests) or (
            max_verify_width is not None and tokens > requests * max_verify_width
        )
        if beyond_model and len(verify) >= 2:
            break
        verify.append((tokens, _verify_seconds(timer, requests, tokens, context_tokens)))
        if tokens <= limit:
            draft[requests] = timer(requests, k, context_tokens)[0]
    return cost_tables_from_curves(sorted(draft.items()), verify, max_num_seqs, max_num_batched_tokens, limit)


def choose_budget(
    stale_survival: np.ndarray,
    scheduled_drafts: np.ndarray | None,
    num_sampling_requests: int,
    num_non_draft_tokens: int,
    tables: CostTables,
) -> int:
    """The step's verification budget b (draft tokens), as ``get_num_tokens`` picks it.

    stale_survival: float64 [B, K], each request's running product of last step's estimates
    scheduled_drafts: int64 [B], drafts each request carries (K, or fewer near its end); None: K each
    Returns the first b maximising (num_sampling_requests + sum of the b best survivals) / cost(b).
    """
    num_requests, width = stale_survival.shape
    if scheduled_drafts is None:
        scores = np.sort(stale_survival, axis=None)[::-1]
    else:
        valid = np.arange(width)[None, :] < scheduled_drafts[:, None]
        scores = np.sort(stale_survival[valid])[::-1]
    verify = tables.verify_s
    max_budget = min(int(scores.size), len(verify) - 1 - num_non_draft_tokens)
    if max_budget <= 0:
        return 0
    expected = np.empty(max_budget + 1)
    expected[0] = 0.0
    np.cumsum(scores[:max_budget], out=expected[1:])
    expected += num_sampling_requests
    draft_s = tables.draft_s[min(num_requests, len(tables.draft_s) - 1)]
    costs = draft_s + verify[num_non_draft_tokens : num_non_draft_tokens + max_budget + 1]
    return int(np.argmax(expected / costs))


def admit_top_slots(fresh_survival: np.ndarray, scheduled_drafts: np.ndarray | None, budget: int) -> np.ndarray:
    """Drafts admitted per request: the ``budget`` best (request, position) slots over the batch.

    fresh_survival: float64 [B, K], running products of this step's estimates (non-increasing along K)
    scheduled_drafts: int64 [B]; None: K each
    Returns int64 [B]. Ties go to the earlier position, then the earlier request, so the admitted slots
    are a prefix of each request even where survival stays flat.
    """
    num_requests, width = fresh_survival.shape
    total = num_requests * width if scheduled_drafts is None else int(scheduled_drafts.sum())
    if budget >= total:
        if scheduled_drafts is None:
            return np.full(num_requests, width, dtype=np.int64)
        return scheduled_drafts.astype(np.int64, copy=True)
    if budget <= 0:
        return np.zeros(num_requests, dtype=np.int64)
    scores = fresh_survival
    if scheduled_drafts is not None:
        scores = np.where(np.arange(width)[None, :] < scheduled_drafts[:, None], fresh_survival, -np.inf)
    # the b-th best score splits the slots: every one above it is admitted, and the ties at it in
    # position-major order (earlier position, then earlier request) fill what the budget leaves
    flat = scores.ravel()
    threshold = np.partition(flat, flat.size - budget)[flat.size - budget]
    admitted = np.count_nonzero(scores >= threshold, axis=1)
    if admitted.sum() == budget:  # no tie at the threshold outside the budget (the usual case)
        return admitted.astype(np.int64)
    admitted = np.count_nonzero(scores > threshold, axis=1)
    left = budget - int(admitted.sum())
    if left:
        ties = np.flatnonzero((scores == threshold).T.ravel())[:left]
        admitted += np.bincount(ties % num_requests, minlength=num_requests)
    return admitted.astype(np.int64)
