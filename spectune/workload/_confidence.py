"""How the synthesized drafter's confidence ranks its accepted drafts: vLLM's feature on the bank rows.

vLLM 0.33.0's acceptance estimate (``vllm/v1/worker/gpu/spec_decode/acceptance_estimator.py``,
``_predict_kernel``) scores a draft position by logit(max q): the log-odds of the top probability of the
draft distribution at the request's temperature (raw logits at T = 0), clamped to +-40. On a bank of
synthesized rows each row has that feature and an exact acceptance probability (``expected_acceptance``),
so the ROC AUC of the feature -- the chance that an accepted draft outscores a rejected one, each row
counting as accepted with its acceptance probability -- says how much signal the synthesizer's logits
give an estimate. It is a property of the pair family, not a measurement of any real drafter.
"""

from __future__ import annotations

import numpy as np
import torch

from spectune.workload._calibration import cached_family_base
from spectune.workload._pair_family import expected_acceptance, pair_rows
from spectune.workload._synthesizer import LogitSynthesizer

__all__ = ["MAX_LOG_ODDS", "draft_confidence_auc", "draft_log_odds", "weighted_auc"]

MAX_LOG_ODDS = 40.0


def draft_log_odds(draft_logits: torch.Tensor) -> torch.Tensor:
    """vLLM's feature per row: logit(max softmax(row)) = -log(sum over the other tokens of e^(z - max)),
    clamped to +-40. draft_logits: float [N, V] (already divided by the temperature) -> float64 [N]."""
    rows = draft_logits.double()
    shifted = rows - rows.max(dim=-1, keepdim=True).values
    others = (shifted.exp().sum(dim=-1) - 1.0).clamp_min(0.0)
    return (-others.log()).clamp(-MAX_LOG_ODDS, MAX_LOG_ODDS)


def weighted_auc(scores: np.ndarray, accept_probability: np.ndarray) -> float:
    """ROC AUC of ``scores`` (float [N]) where row i is a positive with weight p_i and a negative with
    weight 1 - p_i (ties count half); 0.5 when one class has no weight."""
    positive, negative = accept_probability, 1.0 - accept_probability
    above = (scores[:, None] > scores[None, :]) + 0.5 * (scores[:, None] == scores[None, :])
    total = positive.sum() * negative.sum()
    if total <= 0.0:
        return 0.5
    return float(positive @ above @ negative / total)


def draft_confidence_auc(synthesizer: LogitSynthesizer, position: int, temperature_index: int) -> float:
    """The AUC of vLLM's feature against acceptance over one (position, temperature) bank of
    ``synthesizer``, as the simulated drafting accepts its rows."""
    calibration = synthesizer.calibrations[temperature_index, position]
    temperature = synthesizer.temperature_values[temperature_index]
    base = cached_family_base(
        synthesizer.vocab_size,
        synthesizer.bank_rows,
        synthesizer.draft_samples_per_row,
        synthesizer.bank_seed,
        str(synthesizer.device),
    )
    rows = pair_rows(base, calibration.knob)
    accept = expected_acceptance(
        rows, greedy_rule=temperature == 0.0, draft_sample_method=synthesizer.draft_sample_method
    )
    features = draft_log_odds(rows.draft_logits)
    return weighted_auc(features.cpu().numpy(), accept.cpu().numpy())
