"""How many rounds the structured search takes, and at what cost in points, on the test suite's doubles.

A study's wall time on a GPU follows its rounds (a round's points run side by side, the next round
needs their results), and its work follows its points. This runs the search on the closed-form
evaluator of ``tests/study/study_doubles.py`` at several noise levels, once a round at a time (every
point it needs at once: ``structured_next_points``) and once a point at a time
(``structured_next_point``, which learns each result before the next probe), and prints the rounds,
the points of each, and whether both recommend the same table.

    python benchmarks/search_rounds.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "study"))
from study_doubles import SyntheticEvaluator, make_space  # noqa: E402

from spectune.study import (  # noqa: E402
    SearchState,
    StudySpace,
    evaluate_metrics,
    recommend,
    structured_converged,
    structured_next_point,
    structured_next_points,
)

KEEP_COMBOS = 2


def search(space: StudySpace, evaluator: SyntheticEvaluator, *, rounds: bool) -> tuple[int, int, object]:
    """(steps taken, points evaluated, the recommended schedule)."""
    state = SearchState(space)
    taken = 0
    while not structured_converged(state, keep_combos=KEEP_COMBOS):
        points = (
            structured_next_points(state, keep_combos=KEEP_COMBOS)
            if rounds
            else [structured_next_point(state, keep_combos=KEEP_COMBOS)]
        )
        taken += 1
        for point in points:
            state.completed[point] = evaluate_metrics(space, point, evaluator(point), len(state.completed))
    return taken, len(state.completed), recommend(space, state.completed).schedule


def main() -> None:
    for buckets in ((1, 4, 16, 64, 256), (1, 2, 4, 8, 16, 32, 64, 128, 256)):
        space = make_space(batch_sizes=buckets, max_k=8)
        for noise in (0.0, 0.004, 0.01, 0.02):
            _, one_points, one_table = search(space, SyntheticEvaluator(noise=noise), rounds=False)
            rounds, points, table = search(space, SyntheticEvaluator(noise=noise), rounds=True)
            print(
                f"{len(buckets)} buckets, noise {noise}: {rounds} rounds, {points} points "
                f"({points / one_points:.2f}x the {one_points} of one at a time); same table: {table == one_table}"
            )


if __name__ == "__main__":
    main()
