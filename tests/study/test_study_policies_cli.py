"""``search.policies`` as a user meets it: ``spectune study run`` on a tiny real study, the files it writes
for vLLM and SGLang, ``spectune export`` of an adaptive winner, resuming, and located errors."""

import html
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from study_doubles import SyntheticEvaluator
from typer.testing import CliRunner

from spectune.cli import app
from spectune.config import SglangAdaptive, load_document
from spectune.study import document_fingerprint, run_study, space_from_document

runner = CliRunner()
ALL = "[static, k_table, adaptive_verification, adaptive_verification_table, sglang_adaptive]"


def _with_policies(text: str, policies: str, *, samplings: str | None = None) -> str:
    search = "  num_speculative_tokens: {min: 1, max: 2}\n"
    extra = f"  policies: {policies}\n" + (f"  draft_sample_methods: {samplings}\n" if samplings else "")
    assert search in text
    return text.replace(search, search + extra)


@pytest.fixture(scope="module")
def ran(tmp_path_factory, tiny_study):
    folder = tmp_path_factory.mktemp("policies")
    document = folder / "tiny.yaml"
    document.write_text(_with_policies(tiny_study(max_k=2), ALL, samplings="[greedy, probabilistic]"))
    out = folder / "out"
    result = runner.invoke(app, ["study", "run", str(document), "--out", str(out)])
    return document, out, result


def test_a_study_over_policies_simulates_each_runtime_and_says_what_it_skipped(ran):
    document, out, result = ran
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    # eagle3 x {greedy, probabilistic} x {none, vllm_adaptive} + eagle3/standard/greedy/sglang_adaptive
    assert lines[0].startswith("study tiny: 2 batch sizes x 5 combos x K 1-2 (+ K=0) = 22 points; sampler exhaustive")
    assert lines[1] == (
        "skipped eagle3/standard/probabilistic/sglang_adaptive: SGLang's EAGLE chain drafts greedily; it has no "
        "probabilistic draft sampling"
    )
    notes = [line for line in lines if line.startswith("note: ")]
    assert any(n.startswith("note: policies: ") for n in notes), result.output
    # the recommendation line names the winning policy, as the report's header does
    recommended = next(line for line in lines if line.startswith("Recommendation: "))
    assert re.match(r"Recommendation: (the K table|static K = \d+|adaptive verification[^:]*): eagle3/", recommended)
    assert any(n.startswith("note: SGLang adaptive steps (K <= ") and n.endswith("sglang.txt serves it") for n in notes)
    trials = (out / "trials.csv").read_text().splitlines()
    header = trials[0].split(",")
    assert header[header.index("draft_sample_method") + 1] == "runtime"
    runtimes = {row.split(",")[header.index("runtime")] for row in trials[1:]}
    assert runtimes == {"", "none", "vllm_adaptive", "sglang_adaptive"}  # "": the shared K = 0 points


def test_sglang_gets_its_adaptive_flags_and_a_config_file_it_reads_back(ran):
    _, out, result = ran
    assert result.exit_code == 0, result.output
    flags = (out / "sglang.txt").read_text().splitlines()[-1].split()
    assert flags[flags.index("--speculative-adaptive-config") + 1] == "sglang-adaptive.json"
    assert "--speculative-adaptive" in flags and flags[flags.index("--speculative-eagle-topk") + 1] == "1"
    steps = int(flags[flags.index("--speculative-num-steps") + 1])
    assert flags[flags.index("--speculative-num-draft-tokens") + 1] == str(steps + 1)
    data = json.loads((out / "sglang-adaptive.json").read_text())
    config = SglangAdaptive.from_sglang_json(data)
    assert config.to_sglang_json() == data
    slots = {key: slot.candidate_steps for key, slot in config.slots.items()}
    assert min(slots) == 1 and all(steps in ([0], [1], [1, 2]) for steps in slots.values())
    assert max(max(s) for s in slots.values()) == steps


def test_every_policy_is_shown_per_batch_size_and_the_configs_validate(ran):
    _, out, result = ran
    assert result.exit_code == 0, result.output
    comments = [
        line for line in (out / "recommended.yaml").read_text().splitlines() if line.startswith("# policies at")
    ]
    assert [c.split(":")[0] for c in comments] == ["# policies at batch sizes 1-2", "# policies at batch sizes 3-16"]
    for comment in comments:
        parts = comment.split(": ", 1)[1].split("; ")
        # e.g. "static K: K 2, 314 tokens/s; the K table: K 2, 314 tokens/s; adaptive verification: K <= 2, ..."
        assert [p.split(": ")[0] for p in parts] == [
            "static K",
            "the K table",
            "adaptive verification",
            "adaptive verification over a K table",
            "SGLang adaptive steps",
        ], comment
        assert all(re.fullmatch(r"[^:]+: K (<= )?[0-2], [\d,]+ tokens/s", p) for p in parts), comment
    report = (out / "report.html").read_text()
    assert "<h3>Policies per batch size" in report
    check = runner.invoke(app, ["validate", "--strict", str(out / "recommended.yaml"), str(out / "vllm.json")])
    assert check.exit_code == 0, check.output


def test_a_study_without_policies_resumes_under_policies_k_table_simulating_nothing(tmp_path, tiny_study):
    plain = tmp_path / "tiny.yaml"
    plain.write_text(tiny_study(max_k=2))
    first = runner.invoke(app, ["study", "run", str(plain), "--out", str(tmp_path / "out")])
    assert first.exit_code == 0, first.output
    plain.write_text(_with_policies(tiny_study(max_k=2), "[k_table]"))
    again = runner.invoke(app, ["study", "run", str(plain), "--out", str(tmp_path / "out")])
    assert again.exit_code == 0, again.output
    assert again.output.splitlines()[1].startswith("6 complete trials (6 simulations), 0 new in this run")


class _AdaptiveAhead(SyntheticEvaluator):
    """The closed-form double with adaptive verification 6 % ahead of every K (a planted winner)."""

    def __call__(self, point):
        metrics = super().__call__(point)
        if point.combo is not None and point.combo.runtime == "vllm_adaptive":
            metrics["throughput_tokens_per_s"] *= 1.06
        return metrics


def test_export_of_an_adaptive_verification_winner_sets_the_flag_for_vllm_and_measure_sh(tmp_path, tiny_study):
    path = tmp_path / "tiny.yaml"
    path.write_text(_with_policies(tiny_study(max_k=2), "[k_table, adaptive_verification]"))
    document = load_document(path, expect="study").model
    storage = str(tmp_path / "study.journal")
    run_study(space_from_document(document), _AdaptiveAhead(), document_fingerprint(document), storage=storage)
    out = tmp_path / "out"
    result = runner.invoke(app, ["export", "tiny", "--storage", storage, "--out", str(out)])
    assert result.exit_code == 0, result.output
    vllm = json.loads((out / "vllm.json").read_text())
    assert vllm["enable_adaptive_verification"] is True
    assert "num_speculative_tokens_per_batch_size" not in vllm  # one K max for every batch size
    header = (out / "recommended.yaml").read_text().splitlines()[1]
    assert header.startswith(
        f"# adaptive verification (K <= {vllm['num_speculative_tokens']}): eagle3/standard/greedy/"
    )
    assert '"enable_adaptive_verification": true' in (out / "measure.sh").read_text()
    assert "Adaptive verification is on in every server" in (out / "measure.sh").read_text()
    assert not (out / "trtllm.yaml").exists()  # TensorRT-LLM has no adaptive verification
    sglang = (out / "sglang.txt").read_text()
    assert "SGLang has no adaptive verification" in sglang
    check = runner.invoke(app, ["validate", "--strict", str(out / "recommended.yaml"), str(out / "vllm.json")])
    assert check.exit_code == 0, check.output


@pytest.mark.parametrize(
    ("policies", "message"),
    [
        (
            "[k_table, adaptive]",
            "search.policies[1]: must be one of 'static', 'k_table', 'adaptive_verification', "
            "'adaptive_verification_table', 'sglang_adaptive', got 'adaptive'",
        ),
        ("[k_table, k_table]", "search.policies: must not repeat a value, got ['k_table', 'k_table']"),
        (
            "[sglang_adaptive]",
            "search.policies: must hold a vLLM policy too (static, k_table, adaptive_verification or "
            "adaptive_verification_table): sglang_adaptive is compared with the vLLM recommendation, got "
            "['sglang_adaptive']",
        ),
        ("[]", "search.policies: must have at least 1 items, got 0"),
    ],
)
def test_bad_policies_get_one_located_line_and_exit_1(tmp_path, tiny_study, policies, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(_with_policies(tiny_study(max_k=2), policies))
    result = runner.invoke(app, ["study", "run", str(bad), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert result.output.strip() == f"{bad}:18: {message}"


def test_a_candidate_cannot_pin_adaptive_verification_the_study_searches(tmp_path, tiny_study):
    bad = tmp_path / "bad.yaml"
    text = tiny_study(max_k=2).replace(
        "speculative: {method: eagle3,", "speculative: {method: eagle3, enable_adaptive_verification: true,"
    )
    bad.write_text(text)
    result = runner.invoke(app, ["study", "run", str(bad), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"{bad}:14: candidates[0].speculative.enable_adaptive_verification: searched by the study: add "
        "'adaptive_verification' to search.policies instead, got True"
    )


STUDIES = Path(__file__).resolve().parents[2] / "studies"


@pytest.mark.parametrize("name", ["quickstart.yaml", "quickstart-measured.yaml", "tuner-quality.yaml"])
def test_a_study_in_studies_without_policies_hashes_and_searches_as_with_policies_k_table(tmp_path, monkeypatch, name):
    text = (STUDIES / name).read_text()
    assert "policies:" not in text
    # beside the original (its relative paths, which the hash may hold, read the same), in a copy of the repo
    for folder in ("studies", "configs", "examples"):
        shutil.copytree(STUDIES.parent / folder, tmp_path / folder)
    explicit = tmp_path / "studies" / f"pinned-{name}"
    explicit.write_text(text.replace("\nsearch:\n", "\nsearch:\n  policies: [k_table]\n", 1))
    monkeypatch.chdir(tmp_path)  # a step-time table's path is hashed as given: give both the same one
    original = load_document(Path("studies") / name, expect="study").model
    pinned = load_document(Path("studies") / explicit.name, expect="study").model
    assert pinned.search.policies == ["k_table"]
    assert document_fingerprint(pinned) == document_fingerprint(original)
    labels = [c.label for c in space_from_document(original).combos]
    assert labels == [c.label for c in space_from_document(pinned).combos]
    assert all(label.count("/") == 2 for label in labels)  # 'candidate/rule/sampling', as before runtimes


def test_where_nothing_measures_confidence_auc_every_output_says_how_the_answer_moves_with_it(ran):
    _, out, result = ran
    assert result.exit_code == 0, result.output
    # the tiny study's acceptance sets no confidence_auc: its best adaptive entry is simulated on the synthesized
    # rows' own ranking, then at 0.6 and 0.95
    shape = (
        r"confidence_auc is not measured for eagle3: the simulation ranks drafts by the synthesized drafter's "
        r"logits \(AUC (0\.\d\d) on its rows(, 0\.\d\d-0\.\d\d by draft position)?\): adaptive verification"
        r"( over a K table)? \(K <= \d\) against (the K table|static K = \d): [+-]\d+\.\d% at \1 \(synthesized"
        r"(; within the noise)?\), [+-]\d+\.\d% at 0\.6( \(within the noise\))?, [+-]\d+\.\d% at 0\.95"
        r"( \(within the noise\))?: (.+ stays recommended|the answer flips: .+)"
    )
    notes = [line.removeprefix("note: ") for line in result.output.splitlines() if line.startswith("note: confidence")]
    assert len(notes) == 1, result.output
    matched = re.fullmatch(shape, notes[0])
    assert matched and 0.6 < float(matched.group(1)) < 0.95, notes[0]  # the bounds the synthesized rows are held to
    assert f"# note: {notes[0]}" in (out / "recommended.yaml").read_text().splitlines()
    report = (out / "report.html").read_text()
    assert html.escape(notes[0]) in report and "(confidence_auc)</h3>" in report and "<th>confidence_auc</th>" in report
    synthesized = f"<td>{matched.group(1)} (synthesized)</td>"
    assert synthesized in report and "<td>0.6</td>" in report and "<td>0.95</td>" in report
    trials = (out / "trials.csv").read_text().splitlines()
    header = trials[0].split(",")
    assert header[header.index("requests_factor") + 1] == "confidence_auc"
    values = Counter(row.split(",")[header.index("confidence_auc")] for row in trials[1:])
    assert set(values) == {"", "0.6", "0.95"} and values["0.6"] == values["0.95"] >= 1
