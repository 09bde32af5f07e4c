"""A journal written by an earlier spectune still reads, exports and resumes.

``data/quickstart-8-trials.journal`` is the quickstart run for 8 trials by spectune 8284216 (metrics as
string-keyed dicts, points as label strings); ``.csv`` and ``.yaml`` beside it are what that version
exported from it, ``.study.yaml`` the document it ran.
"""

import json
import shutil
from pathlib import Path

from study_doubles import SyntheticEvaluator

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
