"""The acceptance estimate adaptive verification ranks drafts by, as vLLM 0.33.0 computes it.

Methods without DSpark's confidence head use ``OnlineAcceptanceEstimator``
(``vllm/v1/worker/gpu/spec_decode/acceptance_estimator.py``): the feature of a draft position is the
log-odds of the draft distribution's top probability, logit(max q), clamped to +-40; the estimate is
sigmoid(slope x feature + intercept[position]), from cold-start coefficients slope 0.5, intercept -0.2.
Each verified step adds its graded positions (the accepted ones and the first rejected one, among those
admitted) to the normal equations of a weighted logistic regression; every 100 steps one damped Newton
step updates the shared slope (kept >= 0) and the per-position intercepts: ridge 1e-3, each update scaled
by n / (n + 50) for the n observations behind it.

Where spectune's synthesized draft rows do not carry vLLM's feature (one-hot drafts, the twin's count-only
path), ``BinormalFeatures`` draws it from a model of the drafter's ranking quality: feature | accepted ~
N(mu, 1), feature | rejected ~ N(0, 1), whose ROC AUC is Phi(mu / sqrt 2): the profile's
``confidence_auc``. The estimator then learns from those features exactly as from real ones.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from spectune.config import DEFAULT_CONFIDENCE_AUC

__all__ = ["DEFAULT_CONFIDENCE_AUC", "BinormalFeatures", "OnlineAcceptanceEstimator", "binormal_separation"]

_MAX_LOG_ODDS = 40.0
_INIT_SLOPE = 0.5
_INIT_INTERCEPT = -0.2
_REFIT_INTERVAL = 100
_DAMPING_OBSERVATIONS = 50.0
_RIDGE = 1e-3
_MAX_SEPARATION = 8.0  # AUC 1 as Phi(8 / sqrt 2) = 1 - 6e-9: perfect for any simulation's length


def binormal_separation(confidence_auc: float) -> float:
    """mu such that Phi(mu / sqrt 2) = ``confidence_auc`` (0 at chance, capped for AUC 1)."""
    if confidence_auc >= 1.0:
        return _MAX_SEPARATION
    return min(math.sqrt(2.0) * NormalDist().inv_cdf(confidence_auc), _MAX_SEPARATION)


class BinormalFeatures:
    """Draws a draft's feature given whether it is accepted, for a ranking quality ``confidence_auc``."""

    def __init__(self, confidence_auc: float, seed: int) -> None:
        self.separation = binormal_separation(confidence_auc)
        self._rng = np.random.default_rng(seed)

    def draw(self, accepted: np.ndarray) -> np.ndarray:
        """accepted: bool [B, K], whether each draft would be accepted -> float64 [B, K] features."""
        return self.separation * accepted + self._rng.standard_normal(accepted.shape)


class OnlineAcceptanceEstimator:
    """vLLM's online logistic estimate over ``num_positions`` draft positions (numpy, one batch a step)."""

    def __init__(self, num_positions: int) -> None:
        self.slope = _INIT_SLOPE
        self.intercepts = np.full(num_positions, _INIT_INTERCEPT)
        self.num_positions = num_positions
        # the steps since the last refit, by width: (features, predictions, accepted, admitted) each; folded
        # into the normal equations at the refit, all steps of one width in one pass
        self._pending: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = {}
        self._steps_since_refit = 0

    def predict(self, features: np.ndarray) -> np.ndarray:
        """features: float64 [B, K] -> acceptance estimates float64 [B, K] (positions 0..K-1)."""
        width = features.shape[1]
        clamped = np.clip(features, -_MAX_LOG_ODDS, _MAX_LOG_ODDS)
        return 1.0 / (1.0 + np.exp(-(self.slope * clamped + self.intercepts[:width])))

    def observe(
        self, features: np.ndarray, predictions: np.ndarray, num_accepted: np.ndarray, num_admitted: np.ndarray
    ) -> None:
        """Fold one verified step into the regression, refitting every 100 steps.

        features, predictions: float64 [B, K] (the estimates made when the drafts were scored)
        num_accepted, num_admitted: int64 [B], drafts accepted (bonus excluded) and drafts verified
        The arrays are kept until the refit, not copied: the caller must not write to them.
        """
        self._pending.setdefault(features.shape[1], []).append((features, predictions, num_accepted, num_admitted))
        self._steps_since_refit += 1
        if self._steps_since_refit >= _REFIT_INTERVAL:
            self._steps_since_refit = 0
            self._refit()

    def _normal_equations(self) -> tuple[np.ndarray, ...]:
        """Per position, from the pending steps: sum w f^2, sum w f, sum w (the matrix, an arrowhead), sum r f,
        sum r (the gradient) and the observations, where w = p (1 - p) and r = label - p over the graded
        positions (the accepted drafts and the first rejected one, among those admitted)."""
        sums = np.zeros((6, self.num_positions))
        for width, steps in self._pending.items():
            features, predictions, accepted, admitted = (np.concatenate(part) for part in zip(*steps))
            position = np.arange(width)[None, :]
            observed = (position <= accepted[:, None]) & (position < admitted[:, None])
            label = position < accepted[:, None]
            clamped = np.clip(features, -_MAX_LOG_ODDS, _MAX_LOG_ODDS)
            weight = np.where(observed, predictions * (1.0 - predictions), 0.0)
            residual = np.where(observed, label - predictions, 0.0)
            sums[:, :width] += (
                (weight * clamped * clamped).sum(axis=0),
                (weight * clamped).sum(axis=0),
                weight.sum(axis=0),
                (residual * clamped).sum(axis=0),
                residual.sum(axis=0),
                observed.sum(axis=0),
            )
        self._pending.clear()
        return tuple(sums)

    def _refit(self) -> None:
        # One Newton step on (X^T W X + ridge I) d = X^T r, whose matrix is an arrowhead: a shared slope
        # row and column, a diagonal of per-position intercepts; eliminate the intercepts, solve the slope.
        a_sums, b, c_sums, g0, g1, counts = self._normal_equations()
        c = c_sums + _RIDGE
        a = a_sums.sum() + _RIDGE
        slope_step = (g0.sum() - (b * g1 / c).sum()) / (a - (b * b / c).sum())
        total = counts.sum()
        slope_step *= total / (total + _DAMPING_OBSERVATIONS)
        if not math.isfinite(slope_step) or self.slope + slope_step < 0.0:
            slope_step = 0.0
        self.slope += slope_step
        intercept_step = (g1 - b * slope_step) / c
        intercept_step *= counts / (counts + _DAMPING_OBSERVATIONS)
        self.intercepts += np.where(np.isfinite(intercept_step), intercept_step, 0.0)
