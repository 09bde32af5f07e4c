"""Acceptance profile documents."""

import pytest

from spectune.config import AcceptanceProfile

PROFILE = "kind: acceptance_profile\nname: llama-eagle3\n"


def test_unconditional_rates_convert_and_extend_by_repeating_the_last(problems_of, tmp_path):
    profile = AcceptanceProfile.model_validate(
        {"kind": "acceptance_profile", "name": "x", "unconditional_rates": [0.7296, 0.5208, 0.3545]}
    )
    assert profile.conditional() == pytest.approx([0.7296, 0.7138, 0.6807], abs=1e-4)
    assert profile.conditional(5)[3:] == pytest.approx([0.6807, 0.6807], abs=1e-4)
    assert profile.conditional(2) == pytest.approx([0.7296, 0.7138], abs=1e-4)
    assert profile.mean_acceptance_length() == pytest.approx(2.605, abs=1e-3)


@pytest.mark.parametrize(
    ("body", "line", "field", "fragment"),
    [
        ("conditional_rates: [0.7, 1.2]\n", 3, "conditional_rates[1]", "must be in [0, 1], got 1.2"),
        ("unconditional_rates: [0.5, 0.7]\n", 3, "unconditional_rates[1]", "non-increasing"),
        ("conditional_rates: [0.7]\nunconditional_rates: [0.7]\n", 4, "unconditional_rates", "exactly one of"),
        ("conditional_rates: []\n", 3, "conditional_rates", "at least 1 items"),
        (
            "conditional_rates: [0.7]\ncounts: {num_drafts: 10, num_draft_tokens: 30, num_accepted_tokens: 31}\n",
            4,
            "counts.num_accepted_tokens",
            "must be <= num_draft_tokens (30), got 31",
        ),
        (
            "conditional_rates: [0.7]\ncounts:\n  num_drafts: 10\n  num_draft_tokens: 20\n  num_accepted_tokens: 9\n"
            "  accepted_per_position: [7, 3]\n",
            8,
            "counts.accepted_per_position",
            "must sum to num_accepted_tokens (9), got 10",
        ),
        (
            "conditional_rates: [0.7]\nbins:\n  - {min_running: 8, max_running: 4, conditional_rates: [0.6]}\n",
            5,
            "bins[0].max_running",
            "must be >= min_running (8), got 4",
        ),
    ],
)
def test_bad_profiles_are_located(problems_of, body, line, field, fragment):
    file, problems = problems_of(PROFILE + body)
    matching = [p for p in problems if p.field == field]
    assert matching, [str(p) for p in problems]
    assert matching[0].line == line and fragment in matching[0].message, str(matching[0])


def test_geometric_decay_extends_at_the_fitted_ratio_from_the_last_measured_rate():
    from spectune.config import AcceptanceRates
    from spectune.config._extrapolation import fitted_decay

    measured = [0.8, 0.72, 0.648]  # ratio 0.9 per position
    rates = AcceptanceRates(conditional_rates=measured, extrapolation="geometric_decay")
    assert abs(fitted_decay(measured) - 0.9) < 1e-12
    extended = rates.conditional(6)
    assert extended[:3] == measured
    assert [round(r, 9) for r in extended[3:]] == [round(0.648 * 0.9**j, 9) for j in (1, 2, 3)]
    assert AcceptanceRates(conditional_rates=measured).conditional(5)[3:] == [0.648, 0.648]
    # rising rates are not extrapolated upwards; one position has nothing to fit
    assert AcceptanceRates(conditional_rates=[0.5, 0.7], extrapolation="geometric_decay").conditional(4)[2:] == [
        0.7,
        0.7,
    ]
    assert AcceptanceRates(conditional_rates=[0.6], extrapolation="geometric_decay").conditional(3) == [0.6, 0.6, 0.6]


def test_a_bin_extrapolates_by_its_sources_rule():
    from spectune.config._simulation import AcceptanceSource

    source = AcceptanceSource(
        conditional_rates=[0.8, 0.72],
        extrapolation="geometric_decay",
        bins=[{"min_running": 1, "max_running": 8, "conditional_rates": [0.9, 0.81]}],
    )
    assert [round(r, 9) for r in source.rates_for_batch(4).conditional(3)] == [0.9, 0.81, round(0.81 * 0.9, 9)]
