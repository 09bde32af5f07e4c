"""Test-wide setup.

Kernel tests run the real Triton kernels. On the CPU (the default, and CI) they run under Triton's
interpreter, which must be switched on before any module with ``@triton.jit`` is imported -- hence
here, at the top of the root conftest. ``SPECTUNE_TEST_DEVICE=cuda`` runs the same tests compiled on
a GPU instead.
"""

import os

TEST_DEVICE = os.environ.get("SPECTUNE_TEST_DEVICE", "cpu")
if TEST_DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def device() -> str:
    """The device kernel tests put their tensors on: 'cpu' (interpreter) or 'cuda'."""
    return TEST_DEVICE


@pytest.fixture(autouse=True, scope="session")
def _interpreter_debug_checks():
    """Make tl.device_assert and int32-overflow checks fire under the interpreter (they are no-ops otherwise)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        from triton.runtime import interpreter  # private API; triton is pinned to 3.6.0

        interpreter.interpreter_builder.options = interpreter.InterpreterOptions(debug=True)
    yield


_TINY_STUDY = """\
kind: study
name: NAME
workload:
  num_requests: 8
  prompt_tokens: 64
  output_tokens: 64
  temperature: 0.7
  vocab_size: 128
  max_num_seqs: 16
hardware: h100-sxm
target_model: llama-3.1-8b
candidates:
  - name: eagle3
    speculative: {method: eagle3, model: RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3}
    acceptance: {unconditional_rates: [0.73, 0.52, 0.35]}
search:
  num_speculative_tokens: {min: 1, max: MAX_K}
schedule:
  batch_sizes: [1, 4]
  requests_per_batch_size: 3
"""


@pytest.fixture(scope="session")
def tiny_study():
    """The text of a study small enough to run through the CLI in seconds: eagle3 at batch sizes 1 and 4,
    K 1..max_k (and K = 0), 3 requests per unit of batch size."""

    def text(name: str = "tiny", max_k: int = 1) -> str:
        return _TINY_STUDY.replace("NAME", name).replace("MAX_K", str(max_k))

    return text
