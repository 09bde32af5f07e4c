"""``simulation.engine`` says how the kernels verify, not what a study computes: it stays out of a
study's identity, so journals written before the option existed (or with another engine) resume."""

from pathlib import Path

import pytest

from spectune.config import load_document
from spectune.study import document_fingerprint

QUICKSTART = Path(__file__).resolve().parents[2] / "studies" / "quickstart.yaml"


def _with(document, **simulation):
    return document.model_copy(update={"simulation": document.simulation.model_copy(update=simulation)})


@pytest.mark.parametrize("engine", ["step", "ahead"])
def test_the_engine_is_not_part_of_a_studys_identity(engine):
    document = load_document(QUICKSTART, expect="study").model
    assert document.simulation.engine == "auto"
    assert document_fingerprint(_with(document, engine=engine)) == document_fingerprint(document)
    # what the simulations compute still is
    assert document_fingerprint(_with(document, bank_rows=128)) != document_fingerprint(document)
