"""Calibration of the pair family's knob: exact bank acceptance (float64) against the requested rate."""

import pytest
import torch

from spectune.workload._calibration import cached_family_base, calibrate_knob
from spectune.workload._pair_family import draft_samples, expected_acceptance, pair_rows

V = 1024
ROWS = 256


def bank_acceptance(knob: float, temperature: float, mode: str) -> float:
    """The bank's expected acceptance, recomputed here from the rows in float64."""
    rows = pair_rows(cached_family_base(V, ROWS, 16, 0, "cpu"), knob)
    target = torch.softmax(rows.target_log_probs.double(), dim=-1)
    draft = torch.softmax(rows.draft_logits.double(), dim=-1)
    draft_argmax = draft.argmax(dim=-1, keepdim=True)
    if temperature == 0.0:
        return float((draft_argmax.squeeze(1) == target.argmax(dim=-1)).double().mean())
    if mode == "greedy":
        return float(target.gather(1, draft_argmax).mean())
    return float(torch.minimum(target, draft).sum(dim=-1).mean())


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("measured_with", ["greedy", "probabilistic"])
@pytest.mark.parametrize("rate", [0.05, 0.35, 0.7, 0.93])
def test_bank_acceptance_at_the_knob_equals_the_rate(temperature, measured_with, rate):
    calibration = calibrate_knob(
        rate, temperature=temperature, measured_with=measured_with, vocab_size=V, bank_rows=ROWS
    )
    # The bank's acceptance jumps by up to 1/rows where a row's argmax changes (T = 0, or one-hot drafts).
    tolerance = 1.0 / ROWS if temperature == 0.0 or measured_with == "greedy" else 2e-4
    assert bank_acceptance(calibration.knob, temperature, measured_with) == pytest.approx(rate, abs=tolerance)
    assert calibration.expected(measured_with) == pytest.approx(rate, abs=tolerance)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_acceptance_rises_with_the_knob_from_about_one_over_v_to_one(temperature):
    knobs = [i / 10 for i in range(11)]
    for mode in ("greedy", "probabilistic"):
        values = [bank_acceptance(knob, temperature, mode) for knob in knobs]
        assert values[0] < 5.0 / V and values[-1] > 0.999, (mode, values)
        assert all(b >= a - 1e-9 for a, b in zip(values, values[1:], strict=False)), (mode, values)


def test_other_mode_is_read_off_the_same_pairs():
    greedy = calibrate_knob(0.6, temperature=1.0, measured_with="greedy", vocab_size=V, bank_rows=ROWS)
    probabilistic = calibrate_knob(0.6, temperature=1.0, measured_with="probabilistic", vocab_size=V, bank_rows=ROWS)
    assert greedy.expected_probabilistic == pytest.approx(bank_acceptance(greedy.knob, 1.0, "probabilistic"), abs=1e-9)
    # The documented direction of the family at mid-range rates: sampled drafts overlap the target
    # by more than the one-hot draft's target probability, so the same rate needs a weaker pair.
    assert greedy.expected_probabilistic > 0.6 + 0.01
    assert probabilistic.knob < greedy.knob and probabilistic.expected_greedy < 0.6 - 0.01


def test_every_positive_temperature_shares_one_knob_and_zero_has_its_own():
    at = {
        t: calibrate_knob(0.6, temperature=t, measured_with="greedy", vocab_size=V, bank_rows=ROWS)
        for t in (0.0, 0.3, 1.7)
    }
    assert at[0.3].knob == at[1.7].knob
    assert at[0.0].knob != at[0.3].knob
    assert at[0.0].expected_greedy == at[0.0].expected_probabilistic  # argmax agreement either way


def test_rates_outside_the_family_clamp_to_its_ends():
    low = calibrate_knob(0.0, temperature=1.0, measured_with="probabilistic", vocab_size=V, bank_rows=ROWS)
    high = calibrate_knob(1.0, temperature=1.0, measured_with="greedy", vocab_size=V, bank_rows=ROWS)
    assert low.knob == 0.0 and low.expected_probabilistic < 5.0 / V
    assert high.knob == 1.0 and high.expected_greedy > 0.999


def test_probabilistic_draft_samples_reproduce_the_overlap():
    """Stratified draft samples: the mean of min(1, p/q) at the samples matches sum min(p, q)."""
    base = cached_family_base(V, ROWS, 16, 0, "cpu")
    rows = pair_rows(base, 0.35)
    tokens = draft_samples(rows, base, greedy_rule=False, draft_sample_method="probabilistic")
    assert tokens.shape == (ROWS, 16) and tokens.dtype == torch.int64
    target = torch.softmax(rows.target_log_probs.double(), dim=-1)
    draft = torch.softmax(rows.draft_logits.double(), dim=-1)
    realised = (target.gather(1, tokens) / draft.gather(1, tokens)).clamp(max=1.0).mean()
    exact = expected_acceptance(rows, greedy_rule=False, draft_sample_method="probabilistic").mean()
    assert float(realised) == pytest.approx(float(exact), abs=0.001)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": 1.5}, r"rate must be a number in \[0, 1\], got 1.5"),
        ({"rate": float("nan")}, r"rate must be a number in \[0, 1\], got nan"),
        ({"temperature": -1.0}, "temperature must be a finite number >= 0, got -1.0"),
        ({"measured_with": "topk"}, "measured_with must be one of greedy, probabilistic, got 'topk'"),
        ({"vocab_size": 1}, "vocab_size must be an integer >= 2, got 1"),
        ({"bank_rows": 0}, "bank_rows must be an integer >= 1, got 0"),
    ],
)
def test_bad_calibration_arguments_are_named(kwargs, message):
    arguments = {"rate": 0.5, "temperature": 1.0, "measured_with": "greedy", "vocab_size": V} | kwargs
    rate = arguments.pop("rate")
    with pytest.raises(ValueError, match=message):
        calibrate_knob(rate, **arguments)
