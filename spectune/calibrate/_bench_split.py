"""``vllm bench serve`` results that must not share one table: runs of different models or temperatures.

A step-time table describes one model on one GPU, and an acceptance profile one drafter at one
temperature: runs of two models pooled give step times and rates that neither serves. K needs no rule
here: the table is keyed by K, and the profile takes the largest K's runs only (``_bench_table.py``).
Each rule refuses with the groups found and their files, or keeps the group the user names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spectune.calibrate._bench import BenchRun
from spectune.errors import DocumentError, Problem

__all__ = ["runs_of_one_model", "runs_of_one_temperature"]


def _groups(runs: Sequence[BenchRun], key: Callable[[BenchRun], object]) -> dict[object, list[BenchRun]]:
    grouped: dict[object, list[BenchRun]] = {}
    for run in runs:
        grouped.setdefault(key(run), []).append(run)
    return grouped


def _listing(grouped: dict[object, list[BenchRun]], name: Callable[[object], str]) -> str:
    return "; ".join(
        f"{name(value)}: {len(group)} run(s), {', '.join(r.file for r in group[:2])}{', ...' if len(group) > 2 else ''}"
        for value, group in grouped.items()
    )


def _model_name(value: object) -> str:
    return repr(value) if value is not None else "no model_id"


def _temperature_name(value: object) -> str:
    return f"temperature {value:g}" if isinstance(value, float) else "no temperature"


def runs_of_one_model(runs: Sequence[BenchRun], model: str | None) -> list[BenchRun]:
    """The runs of ``model`` (its ``model_id``), or all runs when they name one model; ``DocumentError`` otherwise."""
    grouped = _groups(runs, lambda run: run.model_id)
    name = _model_name
    if model is not None:
        if model not in grouped:
            raise DocumentError(
                [Problem(runs[0].file, None, "--model", f"no run has model_id {model!r} ({_listing(grouped, name)})")]
            )
        return grouped[model]
    if len(grouped) > 1:
        raise DocumentError(
            [
                Problem(
                    runs[0].file,
                    None,
                    "model_id",
                    f"the results hold runs of {len(grouped)} models ({_listing(grouped, name)}); a step-time table and a "
                    "profile describe one model: calibrate each with --model MODEL_ID (or give only its files)",
                )
            ]
        )
    return list(runs)


def runs_of_one_temperature(runs: Sequence[BenchRun], temperature: float | None) -> list[BenchRun]:
    """The runs at ``temperature`` where the files record one; ``DocumentError`` for a mix with no choice made.

    Runs that record no temperature are kept: nothing says they differ (``--temperature`` then only labels them).
    """
    grouped = _groups(runs, lambda run: run.temperature)
    recorded = [value for value in grouped if value is not None]
    name = _temperature_name
    if temperature is not None and recorded:
        chosen = [run for run in runs if run.temperature is None or run.temperature == temperature]
        if not any(run.temperature == temperature for run in chosen):
            raise DocumentError(
                [
                    Problem(
                        runs[0].file,
                        None,
                        "--temperature",
                        f"no run was measured at {temperature:g} ({_listing(grouped, name)})",
                    )
                ]
            )
        return chosen
    if len(recorded) > 1:
        raise DocumentError(
            [
                Problem(
                    runs[0].file,
                    None,
                    "temperature",
                    f"the results mix {len(recorded)} temperatures ({_listing(grouped, name)}); acceptance depends on "
                    "temperature: calibrate each with --temperature T (or give only its files)",
                )
            ]
        )
    return list(runs)
