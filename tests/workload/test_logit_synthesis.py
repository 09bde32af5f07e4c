"""The logit synthesizer: shapes and contracts, and per-position acceptance through the real kernels.

Acceptance is measured by verifying the generated rows with ``spectune.kernels.reference`` (the
PyTorch twin of the Triton kernels: same semantics, same random streams), and once, at a small size,
with the Triton kernels themselves under the CPU interpreter. Conditional acceptance at position i is
(#requests accepting >= i+1) / (#requests accepting >= i).
"""

import math

import pytest
import torch

from spectune.kernels import rejection_sample as triton_rejection_sample
from spectune.kernels.reference import rejection_sample as reference_rejection_sample
from spectune.workload import LogitSynthesizer

RATES = [0.9, 0.75, 0.6]


def accepted_drafts(inputs, seeds: torch.Tensor, kernel=reference_rejection_sample) -> torch.Tensor:
    """Accepted drafts per request (int64 [R]) under standard verification by ``kernel``."""
    _, num_tokens = kernel(
        inputs.target_logits, inputs.draft_tokens, inputs.draft_logits, temperature=inputs.temperature, seed=seeds
    )
    return num_tokens.long() - 1


def measured_conditional_rates(accepted: torch.Tensor, k: int) -> tuple[list[float], list[int]]:
    """(accepted >= i+1) / (accepted >= i) per position, and the requests that reached each position."""
    reached = [int((accepted >= i).sum()) for i in range(k)]
    passed = [int((accepted >= i + 1).sum()) for i in range(k)]
    return [p / r for p, r in zip(passed, reached, strict=True)], reached


def measure(synthesizer: LogitSynthesizer, num_requests: int, chunk: int = 4000, kernel=reference_rejection_sample):
    """Conditional rates and reach counts per temperature, over batches that mix every temperature evenly."""
    on = synthesizer.device
    generator = torch.Generator(device=on).manual_seed(1234)
    num_temperatures = len(synthesizer.temperature_values)
    accepted, indices = [], []
    for start in range(0, num_requests, chunk):
        size = min(chunk, num_requests - start)
        index = torch.arange(start, start + size, dtype=torch.int64, device=on) % num_temperatures
        seeds = torch.arange(start, start + size, dtype=torch.int64, device=on) + 7_000_000
        accepted.append(accepted_drafts(synthesizer.generate(index, generator), seeds, kernel))
        indices.append(index)
    accepted, index = torch.cat(accepted), torch.cat(indices)
    k = synthesizer.num_speculative_tokens
    return [measured_conditional_rates(accepted[index == t], k) for t in range(num_temperatures)]


# 16k requests per temperature: the last position is reached by ~10.8k, so +-0.02 is >= 4 standard
# errors everywhere. Each batch mixes T = 0 and T = 0.8 requests, as a temperature mix would.
@pytest.mark.parametrize("vocab_size", [256, pytest.param(4096, marks=pytest.mark.slow)])
@pytest.mark.parametrize("draft_sample_method", ["greedy", "probabilistic"])
def test_measured_acceptance_reproduces_the_rates_at_two_temperatures(vocab_size, draft_sample_method):
    synthesizer = LogitSynthesizer(
        RATES,
        [0.0, 0.8],
        vocab_size=vocab_size,
        draft_sample_method=draft_sample_method,
        measured_with=draft_sample_method,
    )
    for temperature, (rates, reached) in zip(synthesizer.temperature_values, measure(synthesizer, 32_000), strict=True):
        for position, (rate, wanted, count) in enumerate(zip(rates, RATES, reached, strict=True)):
            stderr = math.sqrt(wanted * (1 - wanted) / count)
            assert 0.02 >= 4 * stderr
            assert rate == pytest.approx(wanted, abs=0.02), (
                f"T={temperature} position {position}: measured {rate:.4f} over {count} requests, wanted {wanted}"
            )


@pytest.mark.slow
def test_triton_kernel_under_the_interpreter_reproduces_the_rates(device):
    """One small case through the Triton kernels (interpreted on the CPU, compiled on a GPU)."""
    rates = [0.8, 0.6]
    synthesizer = LogitSynthesizer(
        rates, [1.0], vocab_size=256, draft_sample_method="probabilistic", measured_with="probabilistic", device=device
    )
    [(measured, reached)] = measure(synthesizer, 12_000, kernel=triton_rejection_sample)
    assert min(reached) > 9000  # +-0.02 is >= 4 standard errors at both positions
    assert measured == pytest.approx(rates, abs=0.02)


def test_the_other_drafting_mode_accepts_what_the_family_predicts():
    """Rates measured with greedy drafts, simulated with probabilistic drafts: acceptance follows the prediction."""
    synthesizer = LogitSynthesizer(
        RATES, [1.0], vocab_size=256, draft_sample_method="probabilistic", measured_with="greedy"
    )
    predicted = synthesizer.expected_conditional_rates(0)
    assert all(p > r + 0.01 for p, r in zip(predicted, RATES, strict=True)), predicted
    [(rates, _)] = measure(synthesizer, 16_000)
    assert rates == pytest.approx(predicted, abs=0.02)


def test_mixed_batches_gather_each_request_from_its_own_temperature():
    synthesizer = LogitSynthesizer([0.9, 0.2], [0.0, 1.5], vocab_size=256, draft_sample_method="probabilistic")
    index = torch.tensor([0, 1, 1, 0, 1], dtype=torch.int64)
    inputs = synthesizer.generate(index, torch.Generator().manual_seed(0))
    assert inputs.temperature.tolist() == [0.0, 1.5, 1.5, 0.0, 1.5]
    # Rows at T > 0 are T times normalised log-probs, so the kernel's division by T gives log p back.
    hot = inputs.target_logits[index == 1] / 1.5
    assert torch.logsumexp(hot.double(), dim=-1).abs().max() < 1e-4
    # At T = 0 probabilistic drafting proposes the drafter's argmax.
    cold = index == 0
    assert torch.equal(inputs.draft_tokens[cold], inputs.draft_logits[cold].argmax(dim=-1))


def test_shapes_dtypes_and_fewer_positions_than_the_profile():
    synthesizer = LogitSynthesizer([0.8, 0.7, 0.6, 0.5], [1.0], vocab_size=384, draft_sample_method="greedy")
    generator = torch.Generator().manual_seed(0)
    inputs = synthesizer.generate(torch.zeros(7, dtype=torch.int64), generator)
    assert inputs.target_logits.shape == (7, 5, 384) and inputs.target_logits.dtype == torch.float32
    assert inputs.draft_tokens.shape == (7, 4) and inputs.draft_tokens.dtype == torch.int64
    assert inputs.draft_logits is None and inputs.temperature.dtype == torch.float32
    assert inputs.target_logits.is_contiguous()
    assert int(inputs.draft_tokens.min()) >= 0 and int(inputs.draft_tokens.max()) < 384
    shorter = synthesizer.generate(torch.zeros(3, dtype=torch.int64), generator, num_speculative_tokens=2)
    assert shorter.target_logits.shape == (3, 3, 384) and shorter.draft_tokens.shape == (3, 2)
    probabilistic = LogitSynthesizer([0.8], [0.0, 1.0], vocab_size=384, draft_sample_method="probabilistic")
    inputs = probabilistic.generate(torch.tensor([1, 0], dtype=torch.int64), generator)
    assert inputs.draft_logits.shape == (2, 1, 384) and inputs.draft_logits.dtype == torch.float32


def test_first_positions_keep_their_rates_when_fewer_are_drafted():
    synthesizer = LogitSynthesizer([0.9, 0.3, 0.3], [0.5], vocab_size=256, draft_sample_method="greedy")
    generator = torch.Generator().manual_seed(5)
    index = torch.zeros(8000, dtype=torch.int64)
    inputs = synthesizer.generate(index, generator, num_speculative_tokens=2)
    accepted = accepted_drafts(inputs, torch.arange(8000, dtype=torch.int64))
    rates, _ = measured_conditional_rates(accepted, 2)
    assert rates == pytest.approx([0.9, 0.3], abs=0.025)


def test_generation_is_deterministic_by_generator_seed():
    synthesizer = LogitSynthesizer([0.7, 0.5], [0.0, 1.0], vocab_size=256, draft_sample_method="probabilistic")
    index = torch.tensor([0, 1, 1, 0], dtype=torch.int64)
    first = synthesizer.generate(index, torch.Generator().manual_seed(42))
    again = synthesizer.generate(index, torch.Generator().manual_seed(42))
    other = synthesizer.generate(index, torch.Generator().manual_seed(43))
    for name in ("target_logits", "draft_tokens", "draft_logits"):
        assert torch.equal(getattr(first, name), getattr(again, name))
    assert not torch.equal(first.target_logits, other.target_logits)
    rebuilt = LogitSynthesizer([0.7, 0.5], [0.0, 1.0], vocab_size=256, draft_sample_method="probabilistic")
    assert torch.equal(rebuilt.generate(index, torch.Generator().manual_seed(42)).target_logits, first.target_logits)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a property of torch's CUDA generator")
@pytest.mark.parametrize("draft_sample_method", ["greedy", "probabilistic"])
def test_cuda_rows_of_a_larger_draw_begin_with_the_smaller_draw(draft_sample_method):
    """The simulator's kernel steps draw a member's whole slot (up to 4096 rows) and use the first m
    rows; the twin draws m: two steps in a row of each give the same rows and tokens."""
    synthesizer = LogitSynthesizer(
        RATES, [0.0, 0.7], vocab_size=256, draft_sample_method=draft_sample_method, device="cuda"
    )
    for m, slot, k in [(1, 16, 3), (13, 16, 2), (250, 256, 3), (1000, 4096, 3)]:
        index = torch.arange(slot, device="cuda") % 2
        small, large = torch.Generator("cuda").manual_seed(m), torch.Generator("cuda").manual_seed(m)
        for _ in range(2):  # the second step shows the generator moved on by the same amount
            few = synthesizer.generate_rows(index[:m], small, num_speculative_tokens=k)
            many = synthesizer.generate_rows(index, large, num_speculative_tokens=k)
            assert torch.equal(many.rows[:m], few.rows) and torch.equal(many.draft_tokens[:m], few.draft_tokens)
            assert torch.equal(many.temperature[:m], few.temperature)


def test_rows_look_like_a_language_model_and_a_noisy_drafter():
    """Peaked targets (the top token usually holds most of the mass) and drafts that mostly agree."""
    synthesizer = LogitSynthesizer(
        [0.7], [1.0], vocab_size=4096, draft_sample_method="probabilistic", measured_with="greedy"
    )
    inputs = synthesizer.generate(torch.zeros(4000, dtype=torch.int64), torch.Generator().manual_seed(0))
    target = torch.softmax(inputs.target_logits[:, 0].double(), dim=-1)
    draft = torch.softmax(inputs.draft_logits[:, 0].double(), dim=-1)
    top_mass = target.max(dim=-1).values
    assert 0.5 < float(top_mass.median()) < 0.99 and float((top_mass < 0.3).double().mean()) > 0.05
    agree = (target.argmax(dim=-1) == draft.argmax(dim=-1)).double().mean()
    assert 0.6 < float(agree) < 0.99
    assert float((target - draft).abs().sum(dim=-1).median()) > 0.05  # q is not a copy of p


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"conditional_rates": []}, "conditional_rates must have at least one rate"),
        ({"conditional_rates": [0.5, 1.2]}, r"conditional_rates\[1\] must be in \[0, 1\], got 1.2"),
        ({"temperatures": []}, "temperatures must list at least one temperature"),
        ({"temperatures": [0.5, 0.5]}, r"temperatures must be distinct, got \[0.5, 0.5\]"),
        ({"temperatures": [-0.1]}, r"temperatures\[0\] must be a finite number >= 0, got -0.1"),
        ({"draft_sample_method": "beam"}, "draft_sample_method must be one of greedy, probabilistic, got 'beam'"),
        ({"measured_with": "beam"}, "measured_with must be one of greedy, probabilistic, got 'beam'"),
        ({"vocab_size": 0}, "vocab_size must be an integer >= 2, got 0"),
    ],
)
def test_bad_construction_arguments_are_named(arguments, message):
    given = {"conditional_rates": [0.5], "temperatures": [1.0], "vocab_size": 256, "draft_sample_method": "greedy"}
    given |= arguments
    with pytest.raises(ValueError, match=message):
        LogitSynthesizer(given.pop("conditional_rates"), given.pop("temperatures"), **given)


def test_bad_generate_arguments_are_named():
    synthesizer = LogitSynthesizer([0.5, 0.5], [0.0, 1.0], vocab_size=256, draft_sample_method="greedy")
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match=r"temperature_index must be in \[0, 1\], got 2"):
        synthesizer.generate(torch.tensor([0, 2]), generator)
    with pytest.raises(ValueError, match=r"temperature_index must be an int64 tensor \[R\], got torch.int32 \[2\]"):
        synthesizer.generate(torch.tensor([0, 1], dtype=torch.int32), generator)
    with pytest.raises(ValueError, match=r"num_speculative_tokens must be an integer in \[1, 2\], got 3"):
        synthesizer.generate(torch.tensor([0]), generator, num_speculative_tokens=3)
    with pytest.raises(ValueError, match=r"temperature_index must be in \[0, 1\], got 5"):
        synthesizer.expected_conditional_rates(5)


def test_out_buffers_are_overwritten_with_what_a_fresh_call_returns():
    synthesizer = LogitSynthesizer([0.7, 0.5], [0.0, 1.0], vocab_size=256, draft_sample_method="probabilistic")
    index = torch.tensor([1, 0, 1], dtype=torch.int64)
    buffers = synthesizer.generate(index, torch.Generator().manual_seed(1))
    fresh = synthesizer.generate(index, torch.Generator().manual_seed(2))
    reused = synthesizer.generate(index, torch.Generator().manual_seed(2), out=buffers)
    assert reused.target_logits.data_ptr() == buffers.target_logits.data_ptr()
    assert reused.draft_logits.data_ptr() == buffers.draft_logits.data_ptr()
    for name in ("target_logits", "draft_tokens", "draft_logits", "temperature"):
        assert torch.equal(getattr(reused, name), getattr(fresh, name))
    with pytest.raises(
        ValueError,
        match=r"out.target_logits must be a contiguous float32 tensor \[2, 3, 256\] on cpu, "
        r"got torch.float32 \[3, 3, 256\] on cpu",
    ):
        synthesizer.generate(index[:2], torch.Generator().manual_seed(2), out=buffers)
