"""trials.csv and the self-contained HTML report."""

import csv
import io
import re

from spectune.export._report import report_html
from spectune.export._svg import nice_ticks
from spectune.export._tables import TRIAL_COLUMNS, trials_csv
from spectune.study import pareto_front


def test_trials_csv_has_one_row_per_trial_and_marks_k0_as_off(outcome):
    rows = list(csv.DictReader(io.StringIO(trials_csv(outcome))))
    assert tuple(rows[0]) == TRIAL_COLUMNS
    assert [int(r["number"]) for r in rows] == [t.number for t in outcome.trials]
    off = [r for r in rows if r["num_speculative_tokens"] == "0"]
    assert len(off) == len(outcome.space.batch_sizes) and all(
        r["candidate"] == "off" and r["method"] == "" for r in off
    )
    for row in rows:
        point = outcome.space.point(
            int(row["batch_size"]),
            f"{row['candidate']}/{row['rejection_sample_method']}/{row['draft_sample_method']}",
            int(row["num_speculative_tokens"]),
        )
        assert (
            abs(float(row["throughput_tokens_per_s"]) - outcome.completed[point].throughput)
            <= 1e-5 * outcome.completed[point].throughput
        )


def test_report_is_self_contained_with_one_k_chart_per_batch_size(outcome):
    html = report_html(outcome)
    assert "<script" not in html and not re.search(r"\b(src|href)=", html)
    assert re.findall(r"https?://[^\"' ]+", html) == ["http://www.w3.org/2000/svg"] * html.count("<svg")
    assert html.count("<svg") == len(outcome.space.batch_sizes)
    assert "Pareto" not in html
    assert outcome.recommendation.combo.label in html


def test_report_draws_pareto_fronts_with_two_objectives(two_objective_outcome):
    html = report_html(two_objective_outcome)
    assert html.count("<svg") == 2 * len(two_objective_outcome.space.batch_sizes)
    assert "tpot_p99_ms &lt;= 20" in html


def test_nice_ticks_cover_the_range_with_round_steps():
    assert nice_ticks(0, 7) == [0, 2, 4, 6, 8]
    assert nice_ticks(0, 1234) == [0, 500, 1000, 1500]
    ticks = nice_ticks(0.0, 0.37)
    assert ticks[0] == 0 and ticks[-1] >= 0.37


def test_pareto_rows_list_each_buckets_front_fastest_first(two_objective_outcome):
    from spectune.export import pareto_rows

    rows = pareto_rows(two_objective_outcome)
    for batch_size in two_objective_outcome.space.batch_sizes:
        front = pareto_front([e for p, e in two_objective_outcome.completed.items() if p.batch_size == batch_size])
        mine = [r for r in rows if r["batch size"] == str(batch_size)]
        assert len(mine) == len(front) >= 1
        speeds = [float(r["tokens/s"].replace(",", "")) for r in mine]
        assert speeds == sorted(speeds, reverse=True)


def test_summary_rows_recommended_yaml_and_report_show_each_buckets_tie_set(outcome):
    from spectune.export import summary_rows
    from spectune.export._artefacts import recommended_yaml

    recommendation = outcome.recommendation
    rows = summary_rows(outcome)
    yaml_text = recommended_yaml(outcome)
    html = report_html(outcome)
    for row, choice in zip(rows, recommendation.choices):
        ties = choice.ties
        assert choice.num_speculative_tokens in ties.ks
        assert row["tie set"] == ties.describe() and re.fullmatch(
            r"K [0-9,\u2013 ]+( alone)? within [0-9.]+%( \(K [0-9] not simulated\))?", row["tie set"]
        )
        line = next(
            x
            for x in yaml_text.splitlines()
            if x.startswith(f"# batch size {choice.first_batch_size}-{choice.last_batch_size}: ")
        )
        best = ties.best.point.num_speculative_tokens
        if best == choice.num_speculative_tokens:
            assert "the best simulated" in line
        else:
            below = (ties.best.throughput - choice.evaluation.throughput) / ties.best.throughput
            assert f"{below:.1%} below the best simulated (K {best})" in line
        assert line.endswith(f"tied: {ties.describe()}")
        assert f"tied: {ties.describe()}</text>" in html  # the shaded band's label
    # one error bar per simulated point of every curve (the K = 0 point is drawn once per combo curve)
    drawn = sum(len([k for k in outcome.space.k_values if outcome.space.point(b, c.label, k) in outcome.completed])
                for b in outcome.space.batch_sizes for c in outcome.space.combos)  # fmt: skip
    assert html.count('stroke-width="1" fill="none"/>') == drawn
    assert html.count('fill-opacity="0.12"') == len(outcome.space.batch_sizes)
