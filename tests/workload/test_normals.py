"""The GPU's base-noise normals (``spectune.kernels.philox_normals``), run under Triton's interpreter: standard normal,
independent across elements and streams, a function of (seed, stream, index) alone."""

import math

import numpy as np
import pytest
import torch

from spectune.kernels import philox_normals
from spectune.kernels._philox import philox4x32_numpy
from spectune.workload import _pair_family

N = 1 << 17


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def test_normals_are_standard_normal(device):
    """Kolmogorov-Smirnov at the 1% level (a Box-Muller radius 5% off fails it), and the first four
    moments."""
    x = np.sort(philox_normals((N,), seed=7, stream=0, device=torch.device(device)).cpu().numpy())
    cdf = _normal_cdf(x)
    steps = np.arange(1, N + 1) / N
    ks = max(np.max(steps - cdf), np.max(cdf - (steps - 1 / N)))
    assert ks < 1.63 / math.sqrt(N)
    assert abs(x.mean()) < 4 / math.sqrt(N) and abs(x.var() - 1) < 4 * math.sqrt(2 / N)
    assert abs((x**3).mean()) < 4 * math.sqrt(15 / N) and abs((x**4).mean() - 3) < 4 * math.sqrt(96 / N)
    assert np.isfinite(x).all()


def test_normals_are_philox_box_muller(device):
    """Element i of stream s is Box-Muller of the Philox4x32-10 words at counter (i lo, i hi, s, 0)
    under the seed (the numpy reference; libm and the GPU's log and cos may differ in the last bit)."""
    seed, stream, index = 2**40 + 3, 5, np.array([0, 1, 2, 1023, 1024, 99_999], dtype=np.uint64)
    got = (
        philox_normals((100_000,), seed=seed, stream=stream, device=torch.device(device))
        .cpu()
        .numpy()[index.astype(np.int64)]
    )
    w0, w1, w2, w3 = philox4x32_numpy(
        np.full(len(index), seed, dtype=np.uint64), index & np.uint64(0xFFFFFFFF), index >> np.uint64(32),
        np.full(len(index), stream, dtype=np.uint64), np.zeros(len(index), dtype=np.uint64),
    )  # fmt: skip
    u1 = ((w0 >> np.uint64(5)).astype(np.float64) * 2.0**26 + (w1 >> np.uint64(6)).astype(np.float64) + 1.0) * 2.0**-53
    u2 = ((w2 >> np.uint64(5)).astype(np.float64) * 2.0**26 + (w3 >> np.uint64(6)).astype(np.float64)) * 2.0**-53
    np.testing.assert_allclose(got, np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2), rtol=1e-12, atol=1e-13)


def test_elements_and_streams_are_independent(device):
    """No correlation between neighbours, between streams or between seeds beyond chance (4 sigma)."""
    cpu = torch.device(device)
    a = philox_normals((N,), seed=7, stream=0, device=cpu).cpu().numpy()
    others = [
        a[1:],  # the next element
        philox_normals((N,), seed=7, stream=1, device=cpu).cpu().numpy(),
        philox_normals((N,), seed=8, stream=0, device=cpu).cpu().numpy(),
    ]
    for other in others:
        n = min(len(a), len(other))
        assert abs(np.corrcoef(a[:n], other[:n])[0, 1]) < 4 / math.sqrt(n)
    assert abs(np.corrcoef(a[:-1] ** 2, a[1:] ** 2)[0, 1]) < 4 / math.sqrt(N)


def test_numbers_depend_on_seed_stream_and_index_alone(device):
    """Drawn again, or as a prefix of a larger draw in another shape, the same numbers bit for bit."""
    cpu = torch.device(device)
    whole = philox_normals((4, 1000), seed=3, stream=1, device=cpu)
    assert torch.equal(whole, philox_normals((4, 1000), seed=3, stream=1, device=cpu))
    assert torch.equal(whole.flatten()[:1500], philox_normals((1500,), seed=3, stream=1, device=cpu))
    assert not torch.equal(whole, philox_normals((4, 1000), seed=3, stream=0, device=cpu))


def test_bad_seed_or_stream_is_refused(device):
    with pytest.raises(ValueError, match="seed must be in"):
        philox_normals((4,), seed=-1, stream=0, device=torch.device(device))
    with pytest.raises(ValueError, match="stream in"):
        philox_normals((4,), seed=0, stream=2**32, device=torch.device(device))


def test_a_base_drawn_on_the_device_is_a_family_base(device, monkeypatch):
    """The CUDA path of ``family_base`` (tried on the CPU): log-probabilities that normalise, the top
    token the bulk's argmax, and the bulk and draft noise from different streams."""
    monkeypatch.setattr(_pair_family, "_normals_on_device", lambda on: True)
    base = _pair_family.family_base(256, 64, 16, seed=5, device=torch.device(device))
    assert torch.allclose(base.bulk_log_probs.exp().sum(dim=-1).cpu(), torch.ones(64, dtype=torch.float64))
    assert torch.equal(base.top_token, base.bulk_log_probs.argmax(dim=-1, keepdim=True))
    bulk = philox_normals((64, 256), seed=5, stream=0, device=torch.device(device))
    assert torch.allclose(base.bulk_log_probs, torch.log_softmax(2.0 * bulk, dim=-1))
    assert torch.equal(base.draft_noise, philox_normals((64, 256), seed=5, stream=1, device=torch.device(device)))
