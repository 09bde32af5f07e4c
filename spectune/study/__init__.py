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
    simulation_document,
    space_from_document,
)
from spectune.study._objective import Evaluator, StudyObjective
from spectune.study._outcome import StudyOutcome, TrialRecord, load_outcome, outcome_of
from spectune.study._pareto import pareto_front
from spectune.study._policies import POLICY_PREFERENCE, PolicyScore, PolicyVerdict
from spectune.study._provenance import (
    BucketProvenance,
    Mark,
    provenance_notes,
    recommendation_provenance,
    study_context,
)
from spectune.study._recommend import (
    MAX_REFINEMENT,
    BucketChoice,
    ComboScore,
    TieSet,
    bucket_tie_set,
    choose_in_bucket,
    format_ks,
    is_tie,
    merge_schedule,
    monotone_ks,
    precision_requests,
)
from spectune.study._recommendation import Recommendation, recommend
from spectune.study._records import Evaluation, SearchState, as_metrics, comparison_noise, evaluate_metrics
from spectune.study._runner import EXHAUSTIVE_LIMIT, StudyProgress, StudyRun, resolve_strategy, run_study
from spectune.study._sampler import SpectuneSampler, Strategy, search_space
from spectune.study._space import (
    OFF,
    POLICY_LABELS,
    REFINE_FACTOR,
    Candidate,
    Combo,
    Constraint,
    Point,
    StudySpace,
    bucket_ranges,
)
from spectune.study._storage import (
    JournalRepair,
    default_out_dir,
    describe_storage,
    locate_study,
    open_storage,
    open_study,
    repair_journal,
    resolve_storage,
)
from spectune.study._structured import (
    REFINE_BUDGET,
    next_k,
    next_ks,
    structured_converged,
    structured_next_point,
    structured_next_points,
)

__all__ = [
    "EXHAUSTIVE_LIMIT",
    "MAX_REFINEMENT",
    "OFF",
    "REFINE_BUDGET",
    "REFINE_FACTOR",
    "BucketChoice",
    "BucketProvenance",
    "Candidate",
    "Combo",
    "ComboScore",
    "Constraint",
    "Evaluation",
    "Evaluator",
    "JournalRepair",
    "Mark",
    "Point",
    "POLICY_LABELS",
    "POLICY_PREFERENCE",
    "PolicyScore",
    "PolicyVerdict",
    "Recommendation",
    "SearchState",
    "SimulationEvaluator",
    "SpectuneSampler",
    "Strategy",
    "StudyObjective",
    "StudyOutcome",
    "StudyProgress",
    "StudyRun",
    "StudySpace",
    "TieSet",
    "TrialRecord",
    "as_metrics",
    "bucket_ranges",
    "bucket_tie_set",
    "choose_in_bucket",
    "default_out_dir",
    "describe_storage",
    "document_fingerprint",
    "sglang_candidate_steps",
    "comparison_noise",
    "evaluate_metrics",
    "format_ks",
    "is_tie",
    "load_outcome",
    "locate_study",
    "merge_schedule",
    "monotone_ks",
    "next_k",
    "next_ks",
    "open_storage",
    "open_study",
    "outcome_of",
    "pareto_front",
    "precision_requests",
    "provenance_notes",
    "recommend",
    "recommendation_provenance",
    "repair_journal",
    "resolve_storage",
    "resolve_strategy",
    "run_study",
    "search_space",
    "simulation_document",
    "space_from_document",
    "structured_converged",
    "structured_next_point",
    "structured_next_points",
    "study_context",
]
