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
