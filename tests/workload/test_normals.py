"""The GPU's base-noise normals (``_normals``), run under Triton's interpreter: standard normal,
independent across elements and streams, a function of (seed, stream, index) alone."""

import math

import numpy as np
import pytest
import torch

from spectune.workload import _pair_family
from spectune.workload._normals import philox_normals

N = 1 << 17


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def test_normals_are_standard_normal():
    """Kolmogorov-Smirnov at the 1% level (a Box-Muller radius 5% off fails it), and the first four
    moments."""
    x = np.sort(philox_normals((N,), seed=7, stream=0, device=torch.device("cpu")).numpy())
    cdf = _normal_cdf(x)
    steps = np.arange(1, N + 1) / N
    ks = max(np.max(steps - cdf), np.max(cdf - (steps - 1 / N)))
    assert ks < 1.63 / math.sqrt(N)
    assert abs(x.mean()) < 4 / math.sqrt(N) and abs(x.var() - 1) < 4 * math.sqrt(2 / N)
    assert abs((x**3).mean()) < 4 * math.sqrt(15 / N) and abs((x**4).mean() - 3) < 4 * math.sqrt(96 / N)
    assert np.isfinite(x).all()


def test_elements_and_streams_are_independent():
    """No correlation between neighbours, between streams or between seeds beyond chance (4 sigma)."""
    cpu = torch.device("cpu")
    a = philox_normals((N,), seed=7, stream=0, device=cpu).numpy()
    others = [
        a[1:],  # the next element
        philox_normals((N,), seed=7, stream=1, device=cpu).numpy(),
        philox_normals((N,), seed=8, stream=0, device=cpu).numpy(),
    ]
    for other in others:
        n = min(len(a), len(other))
        assert abs(np.corrcoef(a[:n], other[:n])[0, 1]) < 4 / math.sqrt(n)
    assert abs(np.corrcoef(a[:-1] ** 2, a[1:] ** 2)[0, 1]) < 4 / math.sqrt(N)


def test_numbers_depend_on_seed_stream_and_index_alone():
    """Drawn again, or as a prefix of a larger draw in another shape, the same numbers bit for bit."""
    cpu = torch.device("cpu")
    whole = philox_normals((4, 1000), seed=3, stream=1, device=cpu)
    assert torch.equal(whole, philox_normals((4, 1000), seed=3, stream=1, device=cpu))
    assert torch.equal(whole.flatten()[:1500], philox_normals((1500,), seed=3, stream=1, device=cpu))
    assert not torch.equal(whole, philox_normals((4, 1000), seed=3, stream=0, device=cpu))


def test_bad_seed_or_stream_is_refused():
    with pytest.raises(ValueError, match="seed must be in"):
        philox_normals((4,), seed=-1, stream=0, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="stream in"):
        philox_normals((4,), seed=0, stream=2**32, device=torch.device("cpu"))


def test_a_base_drawn_on_the_device_is_a_family_base(monkeypatch):
    """The CUDA path of ``family_base`` (tried on the CPU): log-probabilities that normalise, the top
    token the bulk's argmax, and the bulk and draft noise from different streams."""
    monkeypatch.setattr(_pair_family, "_normals_on_device", lambda device: True)
    base = _pair_family.family_base(256, 64, 16, seed=5, device=torch.device("cpu"))
    assert torch.allclose(base.bulk_log_probs.exp().sum(dim=-1), torch.ones(64, dtype=torch.float64))
    assert torch.equal(base.top_token, base.bulk_log_probs.argmax(dim=-1, keepdim=True))
    bulk = philox_normals((64, 256), seed=5, stream=0, device=torch.device("cpu"))
    assert torch.allclose(base.bulk_log_probs, torch.log_softmax(2.0 * bulk, dim=-1))
    assert torch.equal(base.draft_noise, philox_normals((64, 256), seed=5, stream=1, device=torch.device("cpu")))
