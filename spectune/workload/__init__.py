"""Requests of a workload, and the per-step logits whose acceptance reproduces an acceptance profile.

- ``generate_requests(workload, seed=...)``: a ``RequestTable`` of arrival times, prompt and output
  lengths and temperatures, deterministic by seed.
- ``LogitSynthesizer``: banks of target/draft logit rows calibrated so that the rejection kernel
  accepts draft position i with the profile's conditional rate i at each temperature; ``generate``
  gathers one step's ``SpeculationInputs``. ``calibrate_knob`` exposes the calibration itself.

Modelling assumption (details in ``_synthesizer`` and ``_pair_family``): one family of target/draft
pairs with a single knob explains a drafter's acceptance; rates fix the knob under the drafting mode
they were measured with, and the other mode's acceptance is read off the same pairs.
"""

from spectune.workload._calibration import KnobCalibration, calibrate_knob, clear_calibration_cache
from spectune.workload._confidence import draft_confidence_auc, draft_log_odds, weighted_auc
from spectune.workload._pair_family import DraftSampleMethod
from spectune.workload._requests import RequestTable, draw_lengths, generate_requests
from spectune.workload._synthesizer import BankStep, LogitSynthesizer, SpeculationInputs

__all__ = [
    "BankStep",
    "DraftSampleMethod",
    "KnobCalibration",
    "LogitSynthesizer",
    "RequestTable",
    "SpeculationInputs",
    "calibrate_knob",
    "clear_calibration_cache",
    "draft_confidence_auc",
    "draft_log_odds",
    "draw_lengths",
    "generate_requests",
    "weighted_auc",
]
