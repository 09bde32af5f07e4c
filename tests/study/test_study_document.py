"""The study document: what it accepts, what it refuses (FILE:LINE: field: message), what it tries."""

import textwrap
from pathlib import Path

import pytest

from spectune.config import SimulationDocument, load_document
from spectune.errors import DocumentError
from spectune.study import document_fingerprint, space_from_document
from spectune.study._document import simulation_document

REPO = Path(__file__).resolve().parents[2]

STUDY = """\
kind: study
name: tiny
workload:
  num_requests: 16
  prompt_tokens: 64
  output_tokens: 16
  temperature: 0.7
  vocab_size: 128
  max_num_seqs: 64
hardware: h100-sxm
target_model: llama-3.1-8b
candidates:
  - name: eagle3
    speculative: {method: eagle3, model: RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3}
    acceptance: {unconditional_rates: [0.73, 0.52, 0.35]}
  - speculative: {method: ngram}
    acceptance: {conditional_rates: [0.42, 0.6]}
search:
  num_speculative_tokens: {min: 1, max: 3}
  rejection_sample_methods: [standard, block]
  draft_sample_methods: [greedy, probabilistic]
schedule:
  batch_sizes: [1, 8]
constraints: ["tpot_p99_ms <= 50"]
"""


def _load(tmp_path, text=STUDY, name="study.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path, load_document(path)


def _problems(tmp_path, text):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(DocumentError) as err:
        load_document(path)
    return [str(p) for p in err.value.problems], str(path)


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "studies").glob("*.yaml")))
def test_every_shipped_study_validates_without_warnings(name):
    document = load_document(REPO / "studies" / name)
    assert document.kind == "study" and document.notices == []


def test_the_benchmark_study_has_at_least_200_configurations():
    space = space_from_document(load_document(REPO / "studies" / "tuner-quality.yaml").model)
    assert space.size >= 200


def test_the_shipped_quickstart_is_a_realistic_space():
    space = space_from_document(load_document(REPO / "studies" / "quickstart.yaml").model)
    assert [c.method for c in space.candidates] == ["eagle3", "ngram"]
    assert space.k_values == (0, 1, 2, 3, 4, 5, 6) and len(space.batch_sizes) == 4


def test_invalid_combinations_are_skipped_not_refused(tmp_path):
    _, loaded = _load(tmp_path)
    document = loaded.model
    labels = [f"{c.label}/{r}/{s}" for c, r, s in document.combinations()]
    assert labels == [
        "eagle3/standard/greedy", "eagle3/standard/probabilistic", "eagle3/block/greedy", "eagle3/block/probabilistic",
        "ngram/standard/greedy",
    ]  # fmt: skip
    skipped = dict(document.skipped_combinations())
    assert set(skipped) == {"ngram/standard/probabilistic", "ngram/block/greedy", "ngram/block/probabilistic"}
    assert "without a distribution" in skipped["ngram/standard/probabilistic"]


def test_a_rule_set_in_the_candidate_pins_it(tmp_path):
    text = STUDY.replace("{method: eagle3, model:", "{method: eagle3, rejection_sample_method: block, model:")
    _, loaded = _load(tmp_path, text)
    rules = {(c.label, r) for c, r, _ in loaded.model.combinations()}
    assert rules == {("eagle3", "block"), ("ngram", "standard")}


@pytest.mark.parametrize(
    ("old", "new", "line", "expected"),
    [
        ("{method: eagle3, model:", "{method: eagle3, num_speculative_tokens: 3, model:", 14,
         "candidates[0].speculative.num_speculative_tokens: searched by the study: set search.num_speculative_tokens instead, got 3"),
        ("  num_requests: 16\n", "  num_requests: 16\n  concurrency: 8\n", 5,
         "workload.concurrency: set by the study: each of schedule.batch_sizes is simulated as a closed loop at that "
         "concurrency; remove it, got 8"),
        ('["tpot_p99_ms <= 50"]', '["p99 <= 50"]', 24,
         "constraints[0]: METRIC must be one of throughput_tokens_per_s, tpot_p50_ms, tpot_p99_ms, itl_p50_ms, itl_p99_ms, "
         "ttft_p50_ms, ttft_p99_ms, got 'p99' (in 'p99 <= 50')"),
        ('["tpot_p99_ms <= 50"]', '["tpot_p99_ms < 50"]', 24,
         "constraints[0]: the operator must be '<=' or '>=', got '<' (in 'tpot_p99_ms < 50')"),
        ('["tpot_p99_ms <= 50"]', '["tpot_p99_ms <= fifty"]', 24,
         "constraints[0]: NUMBER must be a finite number, got 'fifty' (in 'tpot_p99_ms <= fifty')"),
        ('["tpot_p99_ms <= 50"]', '["tpot_p99_ms"]', 24,
         "constraints[0]: must look like 'METRIC <= NUMBER' or 'METRIC >= NUMBER' with METRIC one of "
         "throughput_tokens_per_s, tpot_p50_ms, tpot_p99_ms, itl_p50_ms, itl_p99_ms, ttft_p50_ms, ttft_p99_ms, got 'tpot_p99_ms'"),
        ("batch_sizes: [1, 8]", "batch_sizes: [8, 1]", 23, "schedule.batch_sizes[1]: must be > 8 (strictly increasing), got 1"),
        ("batch_sizes: [1, 8]", "batch_sizes: [1, 128]", 23, "schedule.batch_sizes[1]: must be <= workload.max_num_seqs (64), got 128"),
        ("{min: 1, max: 3}", "{min: 4, max: 3}", 19, "search.num_speculative_tokens.min: must be <= max (3), got 4"),
        ("  - speculative: {method: ngram}", "  - name: eagle3\n    speculative: {method: ngram}", 16,
         "candidates[1].name: names must be distinct (give each a name), got 'eagle3' twice"),
        ("rejection_sample_methods: [standard, block]", "rejection_sample_methods: [standard, fly]", 20,
         "search.rejection_sample_methods[1]: must be one of 'standard', 'block', got 'fly'"),
    ],
)  # fmt: skip
def test_bad_study_documents_get_located_messages(tmp_path, old, new, line, expected):
    assert old in STUDY
    problems, path = _problems(tmp_path, STUDY.replace(old, new))
    assert f"{path}:{line}: {expected}" in problems, problems


def test_a_space_with_no_valid_combination_is_refused(tmp_path):
    text = STUDY.replace(
        "  - name: eagle3\n    speculative: {method: eagle3, model: RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3}\n"
        "    acceptance: {unconditional_rates: [0.73, 0.52, 0.35]}\n",
        "",
    ).replace("[standard, block]", "[block]")
    problems, path = _problems(tmp_path, text)
    assert any(
        p.startswith(f"{path}:") and "search: no valid (method, rule, draft sampling) combination" in p
        for p in problems
    )


def test_fingerprint_follows_what_changes_results_only(tmp_path):
    _, base = _load(tmp_path, STUDY, "a.yaml")
    _, budget = _load(tmp_path, STUDY + "trials: {n_trials: 7, sampler: tpe}\nstorage: other.journal\n", "b.yaml")
    _, rates = _load(tmp_path, STUDY.replace("[0.42, 0.6]", "[0.42, 0.61]"), "c.yaml")
    assert document_fingerprint(base.model) == document_fingerprint(budget.model)
    assert document_fingerprint(base.model)["document_sha256"] != document_fingerprint(rates.model)["document_sha256"]


def test_profile_path_is_hashed_by_content_not_location(tmp_path):
    profile = (REPO / "configs" / "profiles" / "ngram-code.yaml").read_text()
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "ngram.yaml").write_text(profile)
    text = STUDY.replace("acceptance: {conditional_rates: [0.42, 0.6]}", "acceptance: {profile: ngram.yaml}")
    _, one = _load(tmp_path / "one", text)
    _, two = _load(tmp_path / "two", text)
    assert document_fingerprint(one.model) == document_fingerprint(two.model)


def test_each_point_becomes_a_closed_loop_simulation_at_its_batch_size(tmp_path):
    _, loaded = _load(
        tmp_path, STUDY.replace("  batch_sizes: [1, 8]", "  batch_sizes: [1, 8]\n  requests_per_batch_size: 3")
    )
    document = loaded.model
    space = space_from_document(document)
    on = simulation_document(document, space.point(8, "eagle3/block/probabilistic", 2))
    assert (on.workload.concurrency, on.workload.num_requests) == (8, 16)  # 3 x 8 capped at num_requests
    assert on.speculative.num_speculative_tokens == 2
    assert (on.speculative.rejection_sample_method, on.speculative.draft_sample_method) == ("block", "probabilistic")
    assert on.speculative.model == "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"
    off = simulation_document(document, space.point(1, "ngram/standard/greedy", 0))
    assert (off.workload.concurrency, off.workload.num_requests) == (1, 3)
    floor = document.model_copy(update={"schedule": document.schedule.model_copy(update={"min_requests": 5})})
    assert simulation_document(floor, space.point(1, "ngram/standard/greedy", 0)).workload.num_requests == 5
    assert simulation_document(floor, space.point(8, "ngram/standard/greedy", 0)).workload.num_requests == 16
    # K = 0 is speculation off: plain decoding, no drafter and nothing to accept (not a drafter held at K 0)
    assert (off.speculative, off.acceptance, off.drafter, off.effective_drafter()) == (None, None, None, None)
    for copied in (on, off):  # copied from validated parts: validating it again changes nothing
        assert SimulationDocument.model_validate(copied.model_dump(), context={"notices": []}) == copied
    assert on.acceptance is document.candidates[0].acceptance and on.hardware is document.hardware


LEGACY = """\
kind: study
name: legacy
workload: {num_requests: 16, prompt_tokens: 64, output_tokens: 16, temperature: 0.7, vocab_size: 128, max_num_seqs: 64}
hardware: h100-sxm
target_model: llama-3.1-8b
candidates:
  - name: eagle3
    speculative: {method: eagle3, model: RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3, rejection_sample_method: block}
    acceptance: {unconditional_rates: [0.73, 0.52, 0.35]}
  - speculative: {method: suffix}
    acceptance: {conditional_rates: [0.42, 0.6]}
  - name: deep-suffix
    speculative: {method: suffix, suffix_decoding_max_tree_depth: 12}
    acceptance: {conditional_rates: [0.5]}
search:
  num_speculative_tokens: {min: 1, max: 3}
schedule:
  batch_sizes: [1, 8]
constraints: ["tpot_p99_ms<=50.0", "throughput_tokens_per_s >= 1e2"]
"""


def test_a_document_hashes_as_it_did_before_candidates_lost_their_k(tmp_path):
    # The sha256 spectune 8284216 computed for LEGACY (a study resumes only under the same hash): a
    # suffix candidate's base then held vLLM's default K, and constraints are hashed as written.
    _, loaded = _load(tmp_path, LEGACY)
    document = loaded.model
    assert [c.speculative.num_speculative_tokens for c in document.candidates] == [None, None, None]
    assert (
        document_fingerprint(document)["document_sha256"]
        == "bd2b499d6b5aa8ce70d6739b8bc93a07e0b2b9bfd267603f8259ab50ccdbfa56"
    )
    assert [c.label for c in document.constraints] == ["tpot_p99_ms <= 50", "throughput_tokens_per_s >= 100"]


def test_a_point_serves_its_candidates_base_with_its_k_rule_and_sampling(tmp_path):
    _, loaded = _load(tmp_path, LEGACY)
    document = loaded.model
    space = space_from_document(document)
    suffix = simulation_document(document, space.point(8, "deep-suffix/standard/greedy", 2)).speculative
    assert (suffix.method, suffix.suffix_decoding_max_tree_depth, suffix.num_speculative_tokens) == ("suffix", 12, 2)
    eagle = simulation_document(document, space.point(8, "eagle3/block/greedy", 3)).speculative
    assert (eagle.num_speculative_tokens, eagle.rejection_sample_method) == (3, "block")  # pinned by the candidate
    assert eagle.model_dump(exclude_unset=True) == {
        "method": "eagle3", "model": "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3", "num_speculative_tokens": 3,
        "rejection_sample_method": "block", "draft_sample_method": "greedy",
    }  # fmt: skip


def test_a_candidates_draft_tensor_parallelism_is_checked_with_the_study(tmp_path):
    text = STUDY.replace("{method: ngram}", "{method: ngram, draft_tensor_parallel_size: 2}")
    problems, path = _problems(tmp_path, text)
    assert (
        f"{path}:16: candidates[1].speculative.draft_tensor_parallel_size: must be 1 or the target's "
        "tensor_parallel_size (1) as vLLM requires, got 2" in problems
    ), problems


def test_a_study_of_several_replicas_is_refused_at_num_gpus(tmp_path):
    # Replicas would split each batch size among themselves, and vLLM serves no K table under data
    # parallelism: a study tunes one engine, and says so instead of labelling per-replica batches.
    text = textwrap.dedent(STUDY).replace("hardware: h100-sxm", "hardware: {gpu: h100-sxm, num_gpus: 2}")
    assert text != textwrap.dedent(STUDY)
    problems, path = _problems(tmp_path, text)
    assert any("hardware.num_gpus: a study tunes one engine" in p and "got 2" in p for p in problems), problems


def test_the_fp8_rate_enters_the_hash_only_where_a_model_has_one_byte_weights(tmp_path):
    _, loaded = _load(tmp_path)

    def fingerprint(bytes_per_parameter: float, fp8_flops: float) -> str:
        document = loaded.model
        gpu = document.hardware.gpu.model_copy(update={"dense_fp8_flops": fp8_flops})
        target = document.target_model.model_copy(update={"bytes_per_parameter": bytes_per_parameter})
        update = {"hardware": document.hardware.model_copy(update={"gpu": gpu}), "target_model": target}
        return document_fingerprint(document.model_copy(update=update))["document_sha256"]

    assert fingerprint(2.0, 1e15) == fingerprint(2.0, 2e15)  # BF16 weights never meet the FP8 rate
    assert fingerprint(1.0, 1e15) != fingerprint(1.0, 2e15)


@pytest.mark.parametrize(
    ("policies", "sha256_before"),
    [
        (None, "56c60837c9a58b2755513ece5723cd22acfc224a4658ee7d2b93d7e3ddadfcde"),
        ("[static, k_table, sglang_adaptive]", "d3dd73a64c7a571ff124ba960c41a96e4309378addec734f6b946d375fa17704"),
        ("[k_table, adaptive_verification]", "1a17c4f84ced521d55158bc46b47e5e9527ffb131ad48600bf3c341fa1dd54b3"),
    ],
)
def test_only_a_study_searching_adaptive_verification_stops_resuming_across_its_synthesized_features(
    tmp_path, policies, sha256_before
):
    # The hashes spectune a726602 computed, before adaptive verification learned from the synthesized rows
    # where no confidence_auc is set: that changed its numbers only, so only a study searching it rehashes.
    text = textwrap.dedent(STUDY)
    if policies is not None:
        text = text.replace("probabilistic]\n", f"probabilistic]\n  policies: {policies}\n", 1)
    _, loaded = _load(tmp_path, text)
    assert loaded.model.search.policies != ()
    rehashed = policies is not None and "adaptive_verification" in policies
    assert (document_fingerprint(loaded.model)["document_sha256"] != sha256_before) is rehashed
