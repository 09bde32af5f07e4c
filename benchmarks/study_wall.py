"""Where a study's wall time goes: its rounds, their longest simulation, and the workers' busy time.

A structured search asks for points in rounds (a round's points are the steps no other step waits
for; the next round needs their results), so a study takes at least the sum over its rounds of the
round's longest simulation, however many workers run it. This reads a finished study's storage and
prints, per round (trials that started within ``--gap`` seconds of the round's first), its points
and its longest simulation, then the totals: wall (first start to last completion), the critical
path (the sum of each round's longest), and the trials' summed duration over the wall (the mean
number of trials in flight; trials simulated side by side in lockstep each count the whole call).
Rounds are read from start times, so read them from a one-worker run: with many workers a round's
trials start as workers come free, the rounds found overlap, and their critical path overstates.
``--replay STUDY`` instead replays the structured search in whole rounds -- every point it needs at
once, then the next round with their results -- on the journal's results, simulating (here, with the
study's device) any point the journal lacks, and prints each round's points and its longest
simulation in simulated steps: the critical path a study with a worker per point would follow,
whatever the timing of the run that wrote the journal; and the work, every simulation's steps (what
a study on fewer workers than a round's points waits for).

    python benchmarks/study_wall.py runs/decision/study.journal
    python benchmarks/study_wall.py runs/decision/study.journal --replay studies/decision.yaml
"""

from __future__ import annotations

import argparse
from pathlib import Path

import optuna


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("storage", help="a journal file path or database URL")
    parser.add_argument("--gap", type=float, default=0.3, help="seconds after a round's first start that still join it")
    parser.add_argument("--quiet", action="store_true", help="totals only")
    parser.add_argument(
        "--trials",
        action="store_true",
        help="also each trial: its start and end after the first start, its point, its simulation's steps and "
        "own wall time (a trial in a lockstep group lasts as long as the group)",
    )
    parser.add_argument("--replay", type=Path, help="the study document: replay its structured search in rounds")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.replay is not None:
        replay(args.storage, args.replay)
        return
    storage: str | optuna.storages.BaseStorage = args.storage
    if Path(args.storage).exists():
        storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(args.storage))
    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    trials = sorted(
        (t for t in study.trials if t.datetime_start is not None and t.datetime_complete is not None),
        key=lambda t: t.datetime_start,
    )
    if not trials:
        raise SystemExit(f"{args.storage}: no finished trial")
    origin = trials[0].datetime_start
    rounds: list[list[optuna.trial.FrozenTrial]] = []
    for trial in trials:
        if rounds and (trial.datetime_start - rounds[-1][0].datetime_start).total_seconds() < args.gap:
            rounds[-1].append(trial)
        else:
            rounds.append([trial])
    critical = busy = 0.0
    for number, members in enumerate(rounds):
        durations = [(t.datetime_complete - t.datetime_start).total_seconds() for t in members]
        critical += max(durations)
        busy += sum(durations)
        if not args.quiet:
            start = (members[0].datetime_start - origin).total_seconds()
            sizes = sorted({t.params.get("batch_size") for t in members})
            print(
                f"round {number:3d} at {start:7.2f} s: {len(members):2d} points, batch sizes {sizes}, longest {max(durations):6.2f} s"
            )
    if args.trials:
        for trial in trials:
            result = trial.user_attrs.get("spectune.result") or {}
            start, end = ((t - origin).total_seconds() for t in (trial.datetime_start, trial.datetime_complete))
            simulated = result.get("wall_time_s")
            print(
                f"{start:7.2f} {end:7.2f}  B={trial.params.get('batch_size')} K={trial.params.get('num_speculative_tokens')} "
                f"{trial.params.get('combo')}: steps {result.get('simulated_steps')}, simulation "
                + ("-" if simulated is None else f"{simulated:.2f} s")
            )
    wall = (max(t.datetime_complete for t in trials) - origin).total_seconds()
    print(
        f"{len(trials)} trials in {len(rounds)} rounds: wall {wall:.1f} s, critical path {critical:.1f} s, "
        f"mean trials in flight {busy / wall:.2f}"
    )


def replay(storage: str, study: Path) -> None:
    """The structured search in whole rounds on the results ``storage`` holds (see the module's doc)."""
    from collections import Counter

    from spectune.config import load_document
    from spectune.study import (
        SearchState,
        SimulationEvaluator,
        as_metrics,
        evaluate_metrics,
        load_outcome,
        space_from_document,
        structured_converged,
        structured_next_points,
        structured_single_k_points,
    )

    document = load_document(study, expect="study").model
    space = space_from_document(document)
    known = {
        t.point.key: t.metrics
        for t in load_outcome(storage, space.name).trials
        if t.state == "COMPLETE" and t.point is not None and t.metrics is not None
    }
    keep = document.trials.keep_combos
    simulate = SimulationEvaluator(document)
    state = SearchState(space)
    rounds = critical = points = work = 0
    while not structured_converged(state, keep_combos=keep):
        needed = structured_next_points(state, keep_combos=keep)
        state.single_k |= structured_single_k_points(state, keep_combos=keep)  # as the trials record it
        lacking = sum(p.key not in known for p in needed)
        results = [(p, known[p.key] if p.key in known else simulate(p)) for p in needed]
        for point, metrics in results:
            state.completed[point] = evaluate_metrics(space, point, metrics, len(state.completed))
        steps, longest = max((as_metrics(m).simulated_steps or 0, p.key) for p, m in results)
        sizes = dict(sorted(Counter(p.batch_size for p in needed).items()))
        print(
            f"round {rounds:3d}: {len(needed):2d} points {sizes}, longest {steps} steps ({longest}); {lacking} simulated here"
        )
        rounds, critical, points = rounds + 1, critical + steps, points + len(needed)
        work += sum(as_metrics(m).simulated_steps or 0 for _, m in results)
    print(f"{points} points in {rounds} rounds, critical path {critical} simulated steps, work {work} simulated steps")


if __name__ == "__main__":
    main()
