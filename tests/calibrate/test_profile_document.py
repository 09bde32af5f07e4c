"""The measured-acceptance fields of profile documents: one entry per rate, and a measurement that agrees."""

import pytest

from spectune.config import parse_mapping_text, validate_source
from spectune.errors import DocumentError

BASE = """kind: acceptance_profile
name: measured
conditional_rates: [0.8, 0.7]
"""


def _load(extra: str):
    return validate_source(parse_mapping_text(BASE + extra, "profile.yaml"))


def test_measured_fields_load():
    document = _load(
        "conditional_rates_stderr: [0.01, 0.02]\nunconditional_rates_measured: [0.8, 0.56]\n"
        "mean_acceptance_length_measured: 2.36\nmean_acceptance_length_stderr: 0.02\nnum_windows: 4\n"
        "counts: {num_drafts: 100, num_draft_tokens: 200, num_accepted_tokens: 136, accepted_per_position: [80, 56]}\n"
    )
    assert document.notices == []
    assert document.model.num_windows == 4


def test_per_position_list_of_the_wrong_length_is_located():
    with pytest.raises(DocumentError) as err:
        _load("num_windows: 3\nunconditional_rates_stderr: [0.01, 0.02, 0.03]\n")
    assert "profile.yaml:5: unconditional_rates_stderr: must have one entry per rate (2), got 3" in str(err.value)


def test_per_position_counts_of_the_wrong_length_are_an_error():
    with pytest.raises(DocumentError, match=r"counts.accepted_per_position: must have one entry per rate \(2\), got 1"):
        _load(
            "counts: {num_drafts: 100, num_draft_tokens: 200, num_accepted_tokens: 80, accepted_per_position: [80]}\n"
        )


def test_stderr_outside_zero_one_is_an_error():
    with pytest.raises(DocumentError, match=r"conditional_rates_stderr\[1\]: must be <= 1"):
        _load("conditional_rates_stderr: [0.01, 2.0]\n")


def test_rates_edited_away_from_the_measurement_get_a_warning():
    document = _load("unconditional_rates_measured: [0.8, 0.40]\n")
    assert [str(n) for n in document.notices] == [
        "profile.yaml:4: warning: unconditional_rates_measured: position 1: 0.4 differs from what the rates give (0.560000); "
        "the rates no longer match the measurement"
    ]


def test_bins_carry_the_same_fields():
    document = _load(
        "bins:\n  - min_running: 1\n    max_running: 4\n    conditional_rates: [0.9]\n"
        "    conditional_rates_stderr: [0.01]\n    mean_acceptance_length_measured: 1.9\n    num_windows: 2\n"
    )
    assert document.model.bins[0].conditional_rates_stderr == [0.01]
