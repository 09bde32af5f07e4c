"""The committed fixtures and example log are exactly what the seeded generator writes."""

import pytest

from .synthetic import committed_files


@pytest.mark.parametrize("path_text", sorted(committed_files().items()), ids=lambda item: item[0].name)
def test_committed_file_is_the_generators_output(path_text):
    path, text = path_text
    assert path.exists(), f"{path} is missing; run python tests/calibrate/synthetic.py"
    assert path.read_text(encoding="utf-8") == text, (
        f"{path} differs from its generator; run python tests/calibrate/synthetic.py"
    )
