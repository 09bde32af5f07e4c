"""The twin's Philox4x32-10 gives Random123's known answers and Triton's exact bits."""

import numpy as np
import pytest
import torch

from spectune.kernels._philox import philox4x32, uint32_to_uniform


def _words(seed, c0, c1, c2, c3):
    as_tensor = lambda value: torch.tensor(value, dtype=torch.int64)  # noqa: E731
    return [int(w) for w in philox4x32(as_tensor(seed), *(as_tensor(c) for c in (c0, c1, c2, c3)))]


@pytest.mark.parametrize(
    ("key", "counter", "expected"),
    [  # Random123 kat_vectors for philox4x32_10
        ((0, 0), (0, 0, 0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF,) * 4, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0xA4093822, 0x299F31D0),
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ],
)
def test_known_answer_vectors(key, counter, expected):
    seed = key[1] << 32 | key[0]
    if seed >= 2**63:
        seed -= 2**64  # the same 64 bits as an int64
    assert _words(seed, *counter) == list(expected)


def test_uniforms_match_triton_rand_bit_for_bit(device):
    import triton
    import triton.language as tl

    @triton.jit
    def _rand_kernel(seed_ptr, out_ptr, N: tl.constexpr):
        offsets = tl.arange(0, N)
        seed = tl.load(seed_ptr + offsets)
        tl.store(out_ptr + offsets, tl.rand(seed, offsets.to(tl.int64) * 977 + (1 << 33)))

    n = 256
    seeds = torch.randint(-(2**62), 2**62, (n,), generator=torch.Generator().manual_seed(0))
    seeds[:3] = torch.tensor([0, -7, 2**40 + 5])
    out = torch.empty(n, dtype=torch.float32, device=device)
    _rand_kernel[(1,)](seeds.to(device), out, N=n)
    offsets = torch.arange(n, dtype=torch.int64) * 977 + (1 << 33)
    words = philox4x32(seeds, offsets & 0xFFFFFFFF, offsets >> 32, torch.tensor(0), torch.tensor(0))
    expected = uint32_to_uniform(words[0])
    assert torch.equal(out.cpu(), expected)
    assert float(expected.min()) >= 0.0 and float(expected.max()) < 1.0


def test_the_twins_row_draws_and_host_uniforms_equal_the_generic_philox():
    from spectune.kernels._philox import philox4x32_rows, uint32_to_uniform_numpy

    seeds = torch.randint(-(2**62), 2**62, (37,), generator=torch.Generator().manual_seed(1))
    seeds[:2] = torch.tensor([0, -1])
    rows = torch.arange(7)[None, None, :]
    purposes = torch.arange(2)[None, :, None]
    zero = torch.zeros((), dtype=torch.int64)
    expected = philox4x32(seeds[:, None, None], zero, rows, purposes, zero)
    got = philox4x32_rows(seeds.numpy(), 7, 2)
    for word, want in zip(got, expected):
        assert word.shape == (37, 2, 7)
        assert np.array_equal(word.view(np.int64), want.numpy())
    assert np.array_equal(uint32_to_uniform_numpy(got[1]), uint32_to_uniform(expected[1]).numpy())
