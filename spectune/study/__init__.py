"""Optuna studies over speculative configs: the search space, the samplers, storage, the recommendation.

A study simulates points -- (batch-size bucket, method/rule/sampling combo, K) -- and recommends one
combo with its best K per bucket as vLLM's ``num_speculative_tokens_per_batch_size`` rows. Its state
lives in an Optuna storage (a journal file, or PostgreSQL for many machines), so it resumes after any
interruption and many workers can share it.
"""

from spectune.study._document import (
    SimulationEvaluator,
    document_fingerprint,
    sglang_candidate_steps,
    simulation_documents,
    space_from_document,
)
from spectune.study._objective import Evaluator
from spectune.study._outcome import StudyOutcome, load_outcome
from spectune.study._pareto import pareto_front
from spectune.study._policies import PolicyScore
from spectune.study._provenance import provenance_notes, recommendation_provenance
from spectune.study._recommend import BucketChoice, merge_schedule
from spectune.study._recommendation import Recommendation, recommend
from spectune.study._records import Evaluation, SearchState, as_metrics, evaluate_metrics
from spectune.study._runner import StudyProgress, resolve_strategy, run_study
from spectune.study._space import OFF, POLICY_LABELS, Point, StudySpace
from spectune.study._storage import default_out_dir, describe_storage, locate_study, repair_journal, resolve_storage
from spectune.study._structured import (
    structured_converged,
    structured_next_point,
    structured_next_points,
    structured_single_k_points,
)

__all__ = [
    "BucketChoice",
    "Evaluation",
    "Evaluator",
    "OFF",
    "POLICY_LABELS",
    "Point",
    "PolicyScore",
    "Recommendation",
    "SearchState",
    "SimulationEvaluator",
    "StudyOutcome",
    "StudyProgress",
    "StudySpace",
    "as_metrics",
    "default_out_dir",
    "describe_storage",
    "document_fingerprint",
    "evaluate_metrics",
    "load_outcome",
    "locate_study",
    "merge_schedule",
    "pareto_front",
    "provenance_notes",
    "recommend",
    "recommendation_provenance",
    "repair_journal",
    "resolve_storage",
    "resolve_strategy",
    "run_study",
    "sglang_candidate_steps",
    "simulation_documents",
    "space_from_document",
    "structured_converged",
    "structured_next_point",
    "structured_next_points",
    "structured_single_k_points",
]
