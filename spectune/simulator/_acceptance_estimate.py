"""The acceptance estimate adaptive verification ranks drafts by, as vLLM 0.33.0 computes it.

Methods without DSpark's confidence head use ``OnlineAcceptanceEstimator``
(``vllm/v1/worker/gpu/spec_decode/acceptance_estimator.py``): the feature of a draft position is the
log-odds of the draft distribution's top probability, logit(max q), clamped to +-40; the estimate is
sigmoid(slope x feature + intercept[position]), from cold-start coefficients slope 0.5, intercept -0.2.
Each verified step adds its graded positions (the accepted ones and the first rejected one, among those
admitted) to the normal equations of a weighted logistic regression; every 100 steps one damped Newton
step updates the shared slope (kept >= 0) and the per-position intercepts: ridge 1e-3, each update scaled
by n / (n + 50) for the n observations behind it.

The engines hand back only each request's accepted count, not the bank rows they drew, so a draft's
feature is drawn given its outcome. ``BankFeatures`` draws it from the synthesizer's own rows: vLLM's
feature computed on the draft logits of a row picked in proportion to its acceptance probability (or to
its rejection probability), which gives (feature, outcome) exactly the joint distribution of the rows the
engines verify. ``BinormalFeatures`` draws it from a model of the drafter's ranking quality instead,
feature | accepted ~ N(mu, 1), feature | rejected ~ N(0, 1), whose ROC AUC Phi(mu / sqrt 2) is a
``confidence_auc`` the acceptance sets (measured, or a study's what-if). The estimator learns from either
exactly as from real features.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Protocol

import numpy as np

from spectune.workload import LogitSynthesizer
from spectune.workload._confidence import bank_confidence

__all__ = ["BankFeatures", "BinormalFeatures", "FeatureSampler", "OnlineAcceptanceEstimator", "binormal_separation"]

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


class FeatureSampler(Protocol):
    def draw(self, accepted: np.ndarray, running: np.ndarray) -> np.ndarray:
        """accepted: bool [B, K], whether each draft of the running requests (ids int64 [B]) would be accepted
        -> float64 [B, K] features (positions 0..K-1)."""
        ...


class BinormalFeatures:
    """Draws a draft's feature given whether it is accepted, for a ranking quality ``confidence_auc``."""

    def __init__(self, confidence_auc: float, seed: int) -> None:
        self.separation = binormal_separation(confidence_auc)
        self._rng = np.random.default_rng(seed)

    def draw(self, accepted: np.ndarray, running: np.ndarray | None = None) -> np.ndarray:
        """accepted: bool [B, K], whether each draft would be accepted -> float64 [B, K] features (every
        request and position alike: ``running`` is not read)."""
        return self.separation * accepted + self._rng.standard_normal(accepted.shape)


class BankFeatures:
    """Draws a draft's feature given whether it is accepted from ``synthesizer``'s banks, as its rows give it.

    The engines verify a draft at position j of a request at temperature t on a row of bank (t, j) picked
    uniformly and accept it with the row's probability p_i, so given that it is accepted the row is i with
    probability p_i / sum p, and given that it is rejected (1 - p_i) / sum (1 - p). Each draw picks a row so
    and returns its feature (``bank_confidence``): the features and outcomes then have the rows' joint
    distribution, and the estimate is as informative as the synthesized logits make it. The rows are picked
    by Walker's alias method, exactly and at a constant cost per draft (a binary search over the bank's
    cumulative weights costs several times more a step). An outcome no row of the bank gives (a rejection
    where every p_i is 1, an acceptance where every one is 0: the outcome came from another bin's bank, or
    from a rate) draws from all its rows alike.

    temperature_index: int64 [requests], each request's index into the synthesizer's temperatures, read at
    the request ids ``draw`` is given.
    """

    def __init__(self, synthesizer: LogitSynthesizer, temperature_index: np.ndarray, seed: int) -> None:
        num_temperatures, num_positions = len(synthesizer.temperature_values), synthesizer.num_speculative_tokens
        rows = synthesizer.bank_rows
        # per group g = (t K + j) 2 + accepted and column c: keep the column's own row with probability
        # keep[g, c], else its alias; the two rows' features beside
        shape = (num_temperatures, num_positions, 2, rows)
        keep, own, other = np.empty(shape), np.empty(shape), np.empty(shape)
        for t in range(num_temperatures):
            for j in range(num_positions):
                feature, accept = bank_confidence(synthesizer, j, t)
                for outcome, weight in enumerate((1.0 - accept, accept)):
                    keep[t, j, outcome], alias = _alias_table(weight if weight.sum() > 0.0 else np.ones(rows))
                    own[t, j, outcome], other[t, j, outcome] = feature, feature[alias]
        # each slot's two features side by side: slot s's own row at 2 s, its alias's at 2 s + 1
        self._keep, self._features = keep.ravel(), np.stack([own.ravel(), other.ravel()], axis=-1).ravel()
        self._rows = rows
        self._position_start = 2 * rows * np.arange(num_positions, dtype=np.int64)  # each position's groups
        # how far a request's temperature moves its groups (None: one temperature, every request at it)
        self._temperature_offset = 2 * num_positions * rows * temperature_index if num_temperatures > 1 else None
        self._rng = np.random.default_rng(seed)

    def draw(self, accepted: np.ndarray, running: np.ndarray) -> np.ndarray:
        """accepted: bool [B, K], whether each draft of the running requests (ids int64 [B]) would be accepted
        -> float64 [B, K] features: one uniform and two lookups per draft."""
        # one uniform gives the column (its whole part, of rows) and the coin (its fraction, independent of it)
        share = self._rng.random(accepted.shape)
        share *= self._rows
        column = share.astype(np.int64)  # the floor: share >= 0
        share -= column
        np.minimum(column, self._rows - 1, out=column)  # u x rows rounds up to rows when u is within rounding of 1
        slot = accepted * self._rows
        slot += self._position_start[: accepted.shape[1]]
        if self._temperature_offset is not None:
            slot += self._temperature_offset[running][:, None]
        slot += column
        pick = slot * 2
        pick += share >= self._keep.take(slot)  # the alias's feature where the coin says
        return self._features.take(pick)


def _alias_table(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Walker's alias table of ``weights`` (float64 [N], sum > 0), built as Vose does: column c picked
    uniformly, then row c kept with probability keep[c], else row alias[c], draws row i with probability
    w_i / sum w. -> (keep float64 [N], alias int64 [N])."""
    n = len(weights)
    scaled = (weights * (n / weights.sum())).tolist()  # Python floats: the loop runs per row
    keep, alias = [1.0] * n, list(range(n))
    small = [i for i, value in enumerate(scaled) if value < 1.0]
    large = [i for i, value in enumerate(scaled) if value >= 1.0]
    while small and large:
        low, high = small.pop(), large[-1]
        keep[low], alias[low] = scaled[low], high
        scaled[high] -= 1.0 - scaled[low]
        if scaled[high] < 1.0:
            small.append(large.pop())
    return np.array(keep), np.array(alias, dtype=np.int64)


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
        # sigmoid(slope x clamped + intercept), in place on one array: a step's estimates are host work
        estimates = np.clip(features, -_MAX_LOG_ODDS, _MAX_LOG_ODDS)
        estimates *= self.slope
        estimates += self.intercepts[: features.shape[1]]
        np.negative(estimates, out=estimates)
        np.exp(estimates, out=estimates)
        estimates += 1.0
        return np.divide(1.0, estimates, out=estimates)

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
            weighted = weight * clamped
            sums[:, :width] += (
                (weighted * clamped).sum(axis=0),
                weighted.sum(axis=0),
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
