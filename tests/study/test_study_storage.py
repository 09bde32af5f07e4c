"""Which storage a study uses: --storage, else the document's, else OUT/study.journal."""

from pathlib import Path

import pytest
from race_doubles import accepted_count, race_two_documents

from spectune.errors import SpectuneError
from spectune.study import default_out_dir, locate_study, resolve_storage

REPO = Path(__file__).resolve().parents[2]


def test_the_option_wins_then_the_document_relative_to_itself_then_out():
    docs = Path("/studies")
    assert (
        resolve_storage("s", option="x.journal", document_storage="y.journal", document_dir=docs, out=None)
        == "x.journal"
    )
    assert (
        resolve_storage("s", option=None, document_storage="y.journal", document_dir=docs, out=None)
        == "/studies/y.journal"
    )
    url = "postgresql+psycopg://u:p@h/db"
    assert resolve_storage("s", option=None, document_storage=url, document_dir=docs, out=None) == url
    assert (
        resolve_storage("s", option=None, document_storage="/abs/y.journal", document_dir=docs, out=None)
        == "/abs/y.journal"
    )
    assert (
        resolve_storage("s", option=None, document_storage=None, document_dir=docs, out=Path("o")) == "o/study.journal"
    )
    assert (
        resolve_storage("s", option=None, document_storage=None, document_dir=None, out=None) == "runs/s/study.journal"
    )
    assert default_out_dir("s") == Path("runs/s")


def test_a_study_is_located_by_its_document_or_its_name(tmp_path):
    document = tmp_path / "study.yaml"
    text = (REPO / "studies" / "quickstart.yaml").read_text().replace("../configs/", f"{REPO}/configs/")
    document.write_text(text + "storage: here.journal\n")
    assert locate_study(str(document), storage=None, out=None) == ("quickstart", str(tmp_path / "here.journal"))
    assert locate_study("quickstart", storage=None, out=tmp_path) == ("quickstart", str(tmp_path / "study.journal"))
    with pytest.raises(SpectuneError, match="missing.yaml: no such file"):
        locate_study(str(tmp_path / "missing.yaml"), storage=None, out=None)


@pytest.mark.parametrize("attempt", range(10))
def test_two_documents_started_at_one_instant_on_one_journal_study_one_is_refused(tmp_path, attempt):
    verdicts = race_two_documents(str(tmp_path / "study.journal"))
    assert accepted_count(verdicts) == 1, verdicts
    refused = next(v for v in verdicts if v != "accepted")
    assert "study 'raced' in " in refused and "was made from a different version of this document" in refused
