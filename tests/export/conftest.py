import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "study"))

from study_doubles import SyntheticEvaluator, fingerprint, make_space  # noqa: E402

from spectune.study import load_outcome, run_study
from spectune.study._space import Constraint


def finished_outcome(tmp_path: Path, **space_options):
    """A study run to the end with the closed-form double (exhaustive), read back from its journal."""
    space = make_space(**space_options)
    storage = str(tmp_path / "study.journal")
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=storage, strategy="exhaustive")
    return load_outcome(storage, space.name)


@pytest.fixture(scope="session")
def outcome(tmp_path_factory):
    return finished_outcome(tmp_path_factory.mktemp("study"), batch_sizes=(1, 8, 64, 256), max_k=5)


@pytest.fixture(scope="session")
def two_objective_outcome(tmp_path_factory):
    return finished_outcome(
        tmp_path_factory.mktemp("study2"),
        batch_sizes=(4, 64),
        max_k=4,
        objectives=("throughput", "tpot_p99"),
        constraints=(Constraint(metric="tpot_p99_ms", op="<=", bound=20.0),),
    )
