"""Pareto fronts of a study with two objectives: throughput (higher is better) and p99 TPOT (lower)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from spectune.config import or_nan
from spectune.study._records import Evaluation

__all__ = ["pareto_front"]


def pareto_front(evaluations: Iterable[Evaluation]) -> list[Evaluation]:
    """Evaluations no other one beats on both throughput (higher) and p99 TPOT (lower), slowest first.

    Evaluations without a finite throughput or p99 TPOT are on no front.
    """
    finite = [e for e in evaluations if math.isfinite(_tpot(e)) and math.isfinite(e.throughput)]
    front = []
    for e in finite:
        dominated = any(
            o.throughput >= e.throughput
            and _tpot(o) <= _tpot(e)
            and (o.throughput > e.throughput or _tpot(o) < _tpot(e))
            for o in finite
        )
        if not dominated:
            front.append(e)
    return sorted(front, key=lambda e: e.throughput)


def _tpot(evaluation: Evaluation) -> float:
    return or_nan(evaluation.metrics.tpot_p99_ms)
