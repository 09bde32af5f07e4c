"""How the synthesized drafter's confidence ranks its accepted drafts: vLLM's feature on the bank rows.

vLLM 0.33.0's acceptance estimate (``vllm/v1/worker/gpu/spec_decode/acceptance_estimator.py``,
``_predict_kernel``) scores a draft position by logit(max q): the log-odds of the top probability of the
draft distribution at the request's temperature (raw logits at T = 0), clamped to +-40. On a bank of
synthesized rows each row has that feature and an exact acceptance probability (``expected_acceptance``):
``bank_confidence`` gives both per row, which is all a simulation needs to draw a draft's feature given
its outcome exactly as the rows would give it (``BankFeatures``, ``spectune/simulator/_acceptance_estimate.py``).
The ROC AUC of the feature -- the chance that an accepted draft outscores a rejected one, each row counting
as accepted with its acceptance probability -- says how much signal the synthesizer's logits give an
estimate. It is a property of the pair family, not a measurement of any real drafter.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from spectune.workload._calibration import (
    BANK_ROWS,
    BANK_SEED,
    DRAFT_SAMPLES_PER_ROW,
    cached_family_base,
    calibrate_knob,
)
from spectune.workload._pair_family import DraftSampleMethod, expected_acceptance, pair_rows
from spectune.workload._synthesizer import LogitSynthesizer

__all__ = [
    "MAX_LOG_ODDS",
    "bank_confidence",
    "calibrated_confidence",
    "draft_confidence_auc",
    "draft_log_odds",
    "weighted_auc",
]

MAX_LOG_ODDS = 40.0


def draft_log_odds(draft_logits: torch.Tensor) -> torch.Tensor:
    """vLLM's feature per row: logit(max softmax(row)) = -log(sum over the other tokens of e^(z - max)),
    clamped to +-40. draft_logits: float [N, V] (already divided by the temperature) -> float64 [N]."""
    rows = draft_logits.double()
    shifted = rows - rows.max(dim=-1, keepdim=True).values
    others = (shifted.exp().sum(dim=-1) - 1.0).clamp_min(0.0)
    return (-others.log()).clamp(-MAX_LOG_ODDS, MAX_LOG_ODDS)


def weighted_auc(scores: np.ndarray, accept_probability: np.ndarray, row_weight: np.ndarray | None = None) -> float:
    """ROC AUC of ``scores`` (float [N]) where row i is a positive with weight w_i p_i and a negative with
    weight w_i (1 - p_i) (w: ``row_weight``, default 1; ties count half); 0.5 when one class has no weight."""
    weight = np.ones_like(accept_probability) if row_weight is None else row_weight
    order = np.argsort(scores, kind="stable")
    ordered = scores[order]
    positive, negative = (weight * accept_probability)[order], (weight * (1.0 - accept_probability))[order]
    total = positive.sum() * negative.sum()
    if total <= 0.0:
        return 0.5
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])  # each run of tied scores
    positive, negative = np.add.reduceat(positive, starts), np.add.reduceat(negative, starts)
    below = np.cumsum(negative) - negative  # negative weight strictly below each run
    return float(positive @ (below + 0.5 * negative) / total)


def bank_confidence(
    synthesizer: LogitSynthesizer, position: int, temperature_index: int
) -> tuple[np.ndarray, np.ndarray]:
    """(vLLM's feature, the exact acceptance probability under the simulated drafting) of each row of one
    (position, temperature) bank of ``synthesizer``: float64 [bank_rows] each, row i of both the same row
    (read-only: they are memoised per bank)."""
    calibration = synthesizer.calibrations[temperature_index, position]
    return _confidence(
        synthesizer.vocab_size,
        synthesizer.bank_rows,
        synthesizer.draft_samples_per_row,
        synthesizer.bank_seed,
        str(synthesizer.device),
        calibration.knob,
        synthesizer.temperature_values[temperature_index] == 0.0,
        synthesizer.draft_sample_method,
    )


def calibrated_confidence(
    rate: float,
    temperature: float,
    *,
    measured_with: DraftSampleMethod,
    draft_sample_method: DraftSampleMethod,
    vocab_size: int,
    bank_rows: int = BANK_ROWS,
    draft_samples_per_row: int = DRAFT_SAMPLES_PER_ROW,
    bank_seed: int = BANK_SEED,
    device: str | torch.device = "cpu",
) -> tuple[np.ndarray, np.ndarray]:
    """``bank_confidence`` of the bank a ``LogitSynthesizer`` with these arguments calibrates to ``rate`` at
    ``temperature`` (the same rows), without building its banks."""
    device = str(torch.empty(0, device=device).device)  # as the synthesizer names it ('cuda' -> 'cuda:0')
    calibration = calibrate_knob(
        rate,
        temperature=temperature,
        measured_with=measured_with,
        vocab_size=vocab_size,
        bank_rows=bank_rows,
        draft_samples_per_row=draft_samples_per_row,
        bank_seed=bank_seed,
        device=device,
    )
    return _confidence(
        vocab_size,
        bank_rows,
        draft_samples_per_row,
        bank_seed,
        device,
        calibration.knob,
        temperature == 0.0,
        draft_sample_method,
    )


def draft_confidence_auc(synthesizer: LogitSynthesizer, position: int, temperature_index: int) -> float:
    """The AUC of vLLM's feature against acceptance over one (position, temperature) bank of
    ``synthesizer``, as the simulated drafting accepts its rows."""
    return weighted_auc(*bank_confidence(synthesizer, position, temperature_index))


@functools.lru_cache(maxsize=256)
def _confidence(
    vocab_size: int,
    bank_rows: int,
    samples_per_row: int,
    bank_seed: int,
    device: str,
    knob: float,
    greedy_rule: bool,
    draft_sample_method: DraftSampleMethod,
) -> tuple[np.ndarray, np.ndarray]:
    """(features, acceptance) of the family's rows at ``knob``: two float64 [N] arrays, whatever V, the same
    for every simulation of a process that meets the same bank (a study's do)."""
    base = cached_family_base(vocab_size, bank_rows, samples_per_row, bank_seed, device)
    rows = pair_rows(base, knob)
    accept = expected_acceptance(rows, greedy_rule=greedy_rule, draft_sample_method=draft_sample_method)
    features = draft_log_odds(rows.draft_logits).cpu().numpy()
    probabilities = accept.cpu().numpy()
    features.flags.writeable = probabilities.flags.writeable = False
    return features, probabilities
