from pathlib import Path

import pytest

from spectune.config import load_document
from spectune.errors import DocumentError, Problem


@pytest.fixture
def problems_of(tmp_path: Path):
    """Write ``text`` to a file and return (file name, problems) from loading it (empty if valid)."""

    def load(text: str, name: str = "doc.yaml") -> tuple[str, list[Problem]]:
        path = tmp_path / name
        path.write_text(text)
        try:
            document = load_document(path)
        except DocumentError as err:
            return str(path), err.problems
        return str(path), document.notices

    return load
