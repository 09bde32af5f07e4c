"""A journal written by an earlier spectune still reads, exports and resumes.

``data/quickstart-8-trials.journal`` is the quickstart run for 8 trials by spectune 8284216 (metrics as
string-keyed dicts, points as label strings); ``.csv`` and ``.yaml`` beside it are what that version
exported from it, ``.study.yaml`` the document it ran.
"""

import json
import shutil
from pathlib import Path

from study_doubles import SyntheticEvaluator, fingerprint, make_space

from spectune.config import StudyMetrics, load_document
from spectune.export._artefacts import recommended_yaml
from spectune.export._tables import trials_csv
from spectune.study import document_fingerprint, load_outcome, run_study, space_from_document
from spectune.study._space import Combo

DATA = Path(__file__).parent / "data"
EAGLE = Combo("eagle3", "standard", "greedy")


def _journal(tmp_path: Path) -> str:
    journal = tmp_path / "study.journal"
    shutil.copy(DATA / "quickstart-8-trials.journal", journal)
    return str(journal)


def test_an_earlier_journal_reads_as_typed_points_and_metrics(tmp_path):
    outcome = load_outcome(_journal(tmp_path), "quickstart")
    assert [(t.point.batch_size, t.point.combo, t.point.num_speculative_tokens) for t in outcome.trials[:3]] == [
        (8, None, 0), (8, EAGLE, 4), (1, None, 0)
    ]  # fmt: skip
    first = outcome.trials[1].metrics
    assert isinstance(first, StudyMetrics) and first.throughput_tokens_per_s > 0
    assert first.num_drafts > 0 and len(first.acceptance_per_position) == 4
    assert outcome.trials[0].metrics.mean_acceptance_length is None  # K = 0: no drafts, stored as null
    assert [c.label for c in outcome.space.constraints] == ["tpot_p99_ms <= 50"]


def test_an_earlier_journal_exports_what_that_version_exported(tmp_path):
    outcome = load_outcome(_journal(tmp_path), "quickstart")
    assert trials_csv(outcome) == (DATA / "quickstart-8-trials.csv").read_text()
    assert recommended_yaml(outcome) == (DATA / "quickstart-8-trials.yaml").read_text()


def test_an_earlier_journal_resumes_from_its_document_without_simulating_its_points_again(tmp_path):
    journal = _journal(tmp_path)
    document = load_document(DATA / "quickstart-8-trials.study.yaml", expect="study").model
    records = [json.loads(line) for line in Path(journal).read_text().splitlines()]
    stored = {
        k: v
        for r in records
        for k, v in (r.get("user_attr") or {}).items()
        if k.startswith("spectune.") and "version" in k
    }
    # The document hashes as it did (a changed hash refuses to resume); the simulator version is whatever ran it.
    fingerprint = document_fingerprint(document) | {"simulator_version": stored["spectune.simulator_version"]}
    before = {t.point for t in load_outcome(journal, "quickstart").trials}
    calls = tmp_path / "calls.log"
    run_study(
        space_from_document(document),
        SyntheticEvaluator(call_log=str(calls)),
        fingerprint,
        storage=journal,
        n_trials=10,
        strategy="exhaustive",
    )
    outcome = load_outcome(journal, "quickstart")
    assert sum(t.state == "COMPLETE" for t in outcome.trials) == 10
    simulated = [line.split(" ", 1)[1] for line in calls.read_text().splitlines()]
    assert len(simulated) == 2 and not {p.key for p in before} & set(simulated)


# ``data/structured-14-trials-eef4777.journal``: a structured search of make_space(name="main-eef4777",
# batch_sizes=(1, 8, 32), max_k=4) on SyntheticEvaluator(), stopped by n_trials=14, written by spectune
# eef4777 (each batch a thread per trial, before ask/tell); ``...-resumed.yaml`` is what that version
# recommended once it resumed the journal to the search's end (9 more simulations).
def test_a_journal_written_before_ask_tell_resumes_to_the_same_recommendation_simulating_only_new_points(tmp_path):
    journal = tmp_path / "study.journal"
    shutil.copy(DATA / "structured-14-trials-eef4777.journal", journal)
    space = make_space(name="main-eef4777", batch_sizes=(1, 8, 32), max_k=4)
    before = {t.point for t in load_outcome(str(journal), space.name).trials if t.state == "COMPLETE"}
    assert len(before) == 14
    calls = tmp_path / "calls.log"
    run_study(
        space, SyntheticEvaluator(call_log=str(calls)), fingerprint(), storage=str(journal), strategy="structured"
    )
    simulated = [line.split(" ", 1)[1] for line in calls.read_text().splitlines()]
    assert not {p.key for p in before} & set(simulated)  # its points are never simulated again
    assert len(simulated) == len(set(simulated)) == 9
    outcome = load_outcome(str(journal), space.name)
    assert recommended_yaml(outcome) == (DATA / "structured-14-trials-eef4777-resumed.yaml").read_text()
