"""A one-knob family of (target, draft) distribution pairs, and their exact expected acceptance.

The rows live in *tempered* log-probability space: they are the distributions p_T and q_T that the
rejection kernel sees after dividing the logits by the temperature T. A logit row handed to the kernel
is T times a row of this family (or the row itself at T = 0, where only the argmax matters). So a rate
stated at any T > 0 yields the same p_T and q_T: how acceptance changes with temperature is carried
by the rates the caller states per temperature, not invented here.

One row of the family at knob ``theta`` in [0, 1]:

- target: a peaked distribution like a language model's. A "bulk" softmax(2 n), n ~ N(0, 1)^V
  (heavy-tailed: a few tokens carry most of the bulk's mass), mixed with extra mass ``c`` on the
  bulk's top token: p = (1 - c) softmax(2 n) + c e_top. The row's confidence c = sigmoid(mu(theta) +
  1.5 xi), xi ~ N(0, 1) per row, so some rows are near-certain and others spread out.
- draft: a noisy copy of the target, log q = log p + sigma(theta) eps, eps ~ N(0, 1)^V (a drafter that
  ranks the same tokens with errors of about sigma nats).

Raising theta raises the target's confidence and lowers the draft's noise together, so every
acceptance measure below rises from about 1/V (theta = 0: a confident-but-wrong, near-random draft) to
1 (theta = 1: both one-hot on the same token). The base noise (n, eps, xi, and the uniforms that place
the draft samples) is fixed per (V, rows, seed), so the expected acceptance of a bank is a
deterministic function of theta that rises with it (in steps of at most 1/rows where one row's argmax
changes) -- what calibration solves.

Expected acceptance of one row under standard verification (float64, exact for the row):

- T = 0 (greedy rule, both drafting modes): 1[argmax q = argmax p];
- greedy drafting, T > 0: p(argmax q) -- the draft is the drafter's argmax, q is one-hot;
- probabilistic drafting, T > 0: sum_x min(p(x), q(x)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

__all__ = [
    "DraftSampleMethod",
    "FamilyBase",
    "PairRows",
    "draft_samples",
    "expected_acceptance",
    "family_base",
    "knob_parameters",
    "pair_rows",
]

DraftSampleMethod = Literal["greedy", "probabilistic"]

# Spread of the bulk logits: with V = 4096 the top 1% of tokens hold about half the bulk's mass.
_BULK_LOGIT_SCALE = 2.0
# Row-to-row spread of the target's confidence, in logits of c.
_CONFIDENCE_SPREAD = 1.5
# mu(theta) runs from "top token barely favoured" to "top token near-certain" (c = sigmoid(10)).
_CONFIDENCE_LOGIT_LOW = -4.0
_CONFIDENCE_LOGIT_HIGH = 10.0
# sigma(theta) = 5 (1 - theta)^3 + 20 (1 - theta)^12: a drafter with nats-scale ranking errors over
# most of the range; the steep second term only pushes the low end towards acceptance ~ 1/V.
_DRAFT_NOISE_SCALE = 5.0
_DRAFT_NOISE_LOW_END = 20.0


@dataclass(frozen=True)
class FamilyBase:
    """The fixed random base of a bank: everything except the knob. float64 on ``device``.

    bulk_log_probs      float64 [N, V]  log softmax(2 n)
    top_token           int64   [N, 1]  argmax n, the token that receives the extra mass
    confidence_noise    float64 [N, 1]  xi
    draft_noise         float64 [N, V]  eps
    sample_uniforms     float64 [N, S]  stratified uniforms (s + u) / S that place S draft samples per row
    """

    bulk_log_probs: torch.Tensor
    top_token: torch.Tensor
    confidence_noise: torch.Tensor
    draft_noise: torch.Tensor
    sample_uniforms: torch.Tensor

    @property
    def num_rows(self) -> int:
        return self.bulk_log_probs.shape[0]


@dataclass(frozen=True)
class PairRows:
    """Rows of the family at one knob, rounded to float32 as the kernel will read them.

    target_log_probs  float32 [N, V]  log p (normalised)
    draft_logits      float32 [N, V]  log q up to a constant
    """

    target_log_probs: torch.Tensor
    draft_logits: torch.Tensor


def family_base(vocab_size: int, num_rows: int, samples_per_row: int, *, seed: int, device: torch.device) -> FamilyBase:
    """Draw the base noise: with a CPU generator, then moved to ``device``; on CUDA the two [rows, V]
    draws come from counter-based streams on the GPU instead (``_normals``), the same on every GPU."""
    generator = torch.Generator().manual_seed(seed)
    shape = (num_rows, vocab_size)
    on_device = _normals_on_device(device)
    if on_device:
        from spectune.kernels import philox_normals  # Triton: loaded where used

    def normals(stream: int) -> torch.Tensor:
        if on_device:
            return philox_normals(shape, seed, stream, device)
        return torch.randn(shape, generator=generator, dtype=torch.float64)

    # One [rows, V] float64 buffer at a time besides the results (0.5 GB each at V = 128256): the bulk
    # scaled in place (by a power of two: exact, and its argmax the noise's), then the draft noise.
    bulk_logits = normals(0).mul_(_BULK_LOGIT_SCALE)
    bulk_log_probs = torch.log_softmax(bulk_logits, dim=-1).to(device)
    top_token = bulk_logits.argmax(dim=-1, keepdim=True).to(device)
    del bulk_logits
    draft_noise = normals(1)
    confidence_noise = torch.randn((num_rows, 1), generator=generator, dtype=torch.float64)
    offsets = torch.rand((num_rows, samples_per_row), generator=generator, dtype=torch.float64)
    strata = torch.arange(samples_per_row, dtype=torch.float64)
    return FamilyBase(
        bulk_log_probs=bulk_log_probs,
        top_token=top_token,
        confidence_noise=confidence_noise.to(device),
        draft_noise=draft_noise.to(device),
        sample_uniforms=((strata + offsets) / samples_per_row).to(device),
    )


def _normals_on_device(device: torch.device) -> bool:
    """Whether ``family_base`` draws its bulk noise on ``device`` (CUDA; the tests also try the CPU,
    under Triton's interpreter)."""
    return device.type == "cuda"


def knob_parameters(knob: float) -> tuple[float, float]:
    """(confidence location mu, draft noise sigma) at knob theta in [0, 1]."""
    confidence_logit = _CONFIDENCE_LOGIT_LOW + (_CONFIDENCE_LOGIT_HIGH - _CONFIDENCE_LOGIT_LOW) * knob
    remaining = 1.0 - knob
    noise = _DRAFT_NOISE_SCALE * remaining**3 + _DRAFT_NOISE_LOW_END * remaining**12
    return confidence_logit, noise


def pair_rows(base: FamilyBase, knob: float) -> PairRows:
    """Target and draft rows of the family at ``knob`` (theta in [0, 1])."""
    if not 0.0 <= knob <= 1.0 or math.isnan(knob):
        raise ValueError(f"knob must be in [0, 1], got {knob}")
    confidence_logit, noise = knob_parameters(knob)
    logit_c = confidence_logit + _CONFIDENCE_SPREAD * base.confidence_noise
    # log((1 - c) bulk + c e_top), with log(1 - c) = logsigmoid(-logit_c) to stay finite near c = 1.
    target = torch.nn.functional.logsigmoid(-logit_c) + base.bulk_log_probs
    top = torch.logaddexp(target.gather(1, base.top_token), torch.nn.functional.logsigmoid(logit_c))
    target = target.scatter(1, base.top_token, top)
    draft = target + noise * base.draft_noise
    return PairRows(target_log_probs=target.float(), draft_logits=draft.float())


def expected_acceptance(rows: PairRows, *, greedy_rule: bool, draft_sample_method: DraftSampleMethod) -> torch.Tensor:
    """Exact acceptance probability of each row under standard verification: float64 [N].

    ``greedy_rule``: the request has temperature 0 (accept iff the draft is the target's argmax; the
    draft is the drafter's argmax in both drafting modes).
    """
    target = rows.target_log_probs.double()
    draft = rows.draft_logits.double()
    draft_argmax = draft.argmax(dim=-1, keepdim=True)
    if greedy_rule:
        return (draft_argmax == target.argmax(dim=-1, keepdim=True)).squeeze(1).double()
    target_probs = torch.softmax(target, dim=-1)
    if draft_sample_method == "greedy":
        return target_probs.gather(1, draft_argmax).squeeze(1)
    return torch.minimum(target_probs, torch.softmax(draft, dim=-1)).sum(dim=-1)


def draft_samples(
    rows: PairRows, base: FamilyBase, *, greedy_rule: bool, draft_sample_method: DraftSampleMethod
) -> torch.Tensor:
    """Draft tokens per row: int64 [N, S] samples of q, or [N, 1] argmax when q is one-hot (or T = 0).

    Each sample is marginally a draw from q. The S samples of a row are stratified along the tokens
    sorted by their acceptance probability min(1, p/q), so their mean acceptance matches the row's
    sum min(p, q) far more closely than S independent draws would.
    """
    draft = rows.draft_logits.double()
    if greedy_rule or draft_sample_method == "greedy":
        return draft.argmax(dim=-1, keepdim=True)
    draft_probs = torch.softmax(draft, dim=-1)
    target_probs = torch.softmax(rows.target_log_probs.double(), dim=-1)
    order = (target_probs / draft_probs).argsort(dim=-1)
    cumulative = draft_probs.gather(1, order).cumsum(dim=-1)
    # Scale by the row total so rounding in the cumulative sum can never push a uniform past the end.
    uniforms = base.sample_uniforms * cumulative[:, -1:]
    positions = torch.searchsorted(cumulative, uniforms, right=True).clamp_(max=draft.shape[1] - 1)
    return order.gather(1, positions)
