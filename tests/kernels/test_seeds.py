"""The per-(request, step) seed mix (``kernels/_seeds.py``): as written, and its forms agree (the
Triton form's seeds are checked through the step writer, ``test_step_writer.py``)."""

import numpy as np
import torch

from spectune.kernels import kernel_seeds, kernel_seeds_torch, seed_bases


def test_kernel_seeds_mix_request_and_step_as_written():
    """Each (request seed, step) gets ((seed·A + step·B) mod 2^64, xor-shifted right by 31) >> 1."""
    seeds = np.array([0, 1, 2**62 - 1, 123456789012345, 2**40 + 7], dtype=np.int64)
    steps = np.array([0, 5, 3, 2**20, 1], dtype=np.int64)
    expected = []
    for seed, step in zip(seeds.tolist(), steps.tolist()):
        mixed = (seed * 0x9E3779B97F4A7C15 + step * 0xBF58476D1CE4E5B9) % 2**64
        mixed ^= mixed >> 31
        expected.append(mixed >> 1)
    got = kernel_seeds(seeds, steps)
    assert got.dtype == np.int64 and got.tolist() == expected
    assert kernel_seeds(seeds[1:2], steps[1:2]).tolist() == expected[1:2]  # a request's seed alone or in a batch


def test_the_torch_form_equals_the_numpy_form(device):
    """int64 arithmetic with logical shifts made by masks (torch) against uint64 (numpy)."""
    generator = np.random.default_rng(7)
    request_seeds = generator.integers(-(2**63), 2**63 - 1, size=64, dtype=np.int64)
    request_seeds[:3] = [0, 2**63 - 1, -(2**63)]
    ids = generator.integers(0, 64, size=300)
    steps_done = generator.integers(0, 10**6, size=300)
    steps_done[:2] = [0, 2**40]
    expected = kernel_seeds(request_seeds[ids], steps_done)
    seeds = torch.empty(300, dtype=torch.int64, device=device)
    bases = torch.from_numpy(seed_bases(request_seeds)).to(device)
    kernel_seeds_torch(bases, torch.from_numpy(ids).to(device), torch.from_numpy(steps_done).to(device), seeds)
    assert np.array_equal(seeds.cpu().numpy(), expected)
    assert (expected >= 0).all() and len(set(expected.tolist())) > 290
