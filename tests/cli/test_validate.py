"""``spectune validate`` and ``spectune schema`` as a user runs them: output lines and exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spectune.cli import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_shipped_configs_are_all_valid():
    result = runner.invoke(app, ["validate", str(REPO / "configs")])
    assert result.exit_code == 0, result.output
    assert "0 invalid" in result.output.splitlines()[-1]


def test_invalid_file_exits_1_with_one_line_per_problem(tmp_path):
    good = tmp_path / "good.json"
    good.write_text('{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}')
    bad = tmp_path / "bad.yaml"
    bad.write_text("method: eagle\nnum_speculative_tokens: 0\ndraft_sample_method: topk\n")
    result = runner.invoke(app, ["validate", str(good), str(bad)])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0] == f"{bad}:2: num_speculative_tokens: must be >= 1, got 0"
    assert lines[1] == f"{bad}:3: draft_sample_method: must be one of 'greedy', 'probabilistic', got 'topk'"
    assert lines[-1] == "2 files checked: 1 valid, 1 invalid (2 errors, 0 warnings)"
    assert "Traceback" not in result.output


def test_directory_is_searched_recursively(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.yml").write_text("method: ngram\nnum_speculative_tokens: 2\n")
    (tmp_path / "notes.txt").write_text("not a config")
    result = runner.invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 0 and result.output.startswith("1 file checked: 1 valid")


def test_missing_path_is_an_error_not_a_crash(tmp_path):
    result = runner.invoke(app, ["validate", str(tmp_path / "absent.yaml")])
    assert result.exit_code == 1
    assert f"{tmp_path / 'absent.yaml'}: no such file or directory" in result.output


def test_a_path_with_nothing_to_check_fails_without_miscounting_the_valid_files(tmp_path):
    (tmp_path / "empty").mkdir()
    good = tmp_path / "good.yaml"
    good.write_text("method: ngram\nnum_speculative_tokens: 2\n")
    result = runner.invoke(app, ["validate", str(good), str(tmp_path / "empty")])
    assert result.exit_code == 1
    assert (
        result.output.splitlines()[-1]
        == "1 file checked: 1 valid, 0 invalid (0 errors, 0 warnings); 1 path with nothing to check"
    )


def test_warnings_pass_unless_strict(tmp_path):
    path = tmp_path / "suffix.yaml"
    path.write_text("method: suffix\nnum_speculative_tokens: 8\n")
    relaxed = runner.invoke(app, ["validate", str(path)])
    assert relaxed.exit_code == 0 and f"{path}:1: warning: method:" in relaxed.output
    assert runner.invoke(app, ["validate", "--strict", str(path)]).exit_code == 1


def test_legacy_forms_fail_for_vllm_0_33_and_pass_for_0_32(tmp_path):
    path = tmp_path / "legacy.yaml"
    path.write_text(
        "method: eagle\nmodel: yuhuili/EAGLE-LLaMA3.1-Instruct-8B\nnum_speculative_tokens: 2\nrejection_sample_method: strict\n"
    )
    current = runner.invoke(app, ["validate", str(path)])
    assert current.exit_code == 1
    assert f"{path}:4: rejection_sample_method: 'strict' was removed in vLLM 0.33.0" in current.output
    assert "write rejection_sample_method: standard with draft_sample_method: greedy" in current.output
    pinned = runner.invoke(app, ["validate", "--vllm-version", "0.32", str(path)])
    assert pinned.exit_code == 0, pinned.output
    assert f"{path}:4: warning: rejection_sample_method: 'strict' is deprecated" in pinned.output


def test_a_missing_synthetic_form_offers_only_the_forms_the_named_version_reads(tmp_path):
    path = tmp_path / "synthetic.yaml"
    path.write_text("method: ngram\nnum_speculative_tokens: 2\nrejection_sample_method: synthetic\n")
    current = runner.invoke(app, ["validate", str(path)])
    assert "needs exactly one of synthetic_acceptance_rates, synthetic_acceptance_length; got none" in current.output
    pinned = runner.invoke(app, ["validate", "--vllm-version", "0.32", str(path)])
    assert "synthetic_acceptance_length, synthetic_acceptance_rate; got none" in pinned.output


def test_unknown_vllm_version_is_one_clear_line(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("method: ngram\nnum_speculative_tokens: 2\n")
    result = runner.invoke(app, ["validate", "--vllm-version", "0.20", str(path)])
    assert result.exit_code == 1
    assert result.output.strip() == "--vllm-version: must be one of 0.33.0, 0.32, got '0.20'"


def test_shipped_vllm_0_32_examples_validate_for_0_32_only():
    folder = REPO / "examples" / "vllm-0.32"
    assert runner.invoke(app, ["validate", "--vllm-version", "0.32", str(folder)]).exit_code == 0
    assert runner.invoke(app, ["validate", str(folder)]).exit_code == 1


def test_usage_errors_exit_2():
    assert runner.invoke(app, ["validate"]).exit_code == 2
    assert runner.invoke(app, ["validate", "--no-such-flag", "x"]).exit_code == 2


def test_schema_is_json_schema_of_every_kind():
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert schema["$schema"].endswith("2020-12/schema")
    titles = {entry.get("$ref", "").rsplit("/", 1)[-1] for entry in schema["anyOf"]}
    assert {"SpeculativeConfig", "AcceptanceProfile"} <= titles
    only = json.loads(runner.invoke(app, ["schema", "--kind", "speculative"]).output)
    assert only["title"] == "SpeculativeConfig" and only["additionalProperties"] is False


def test_schema_rejects_unknown_kind():
    result = runner.invoke(app, ["schema", "--kind", "banana"])
    assert result.exit_code == 1 and "must be one of" in result.output


def test_python_dash_m_runs_the_cli():
    result = subprocess.run(
        [sys.executable, "-m", "spectune", "validate", str(REPO / "configs")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


# vLLM 0.33.0 puts no method restriction on adaptive verification, despite the field's docstring
# (vllm/config/speculative.py:585-587); its one rule is vllm/config/speculative.py:1713-1722:
# use_local_argmax_reduction is refused with it, except for dspark.
ADAPTIVE_CONFIGS = {
    "eagle": '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3',
    "eagle3": '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3',
    "mtp": '{"method": "mtp", "num_speculative_tokens": 1',
    "dflash": '{"method": "dflash", "model": "z-lab/Qwen3-8B-DFlash-b16", "num_speculative_tokens": 7',
    "draft_model": '{"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4',
    "ngram": '{"method": "ngram", "num_speculative_tokens": 3',
    "dspark": '{"method": "dspark", "num_speculative_tokens": 7',
}


@pytest.mark.parametrize("method", sorted(ADAPTIVE_CONFIGS))
def test_adaptive_verification_validates_for_every_method_as_in_vllm_0_33(tmp_path, method):
    config = tmp_path / f"{method}.json"
    config.write_text(ADAPTIVE_CONFIGS[method] + ', "enable_adaptive_verification": true}')
    result = runner.invoke(app, ["validate", str(config)])
    assert result.exit_code == 0, result.output
    assert "enable_adaptive_verification" not in result.output


@pytest.mark.parametrize("method", sorted(ADAPTIVE_CONFIGS))
def test_adaptive_verification_with_local_argmax_is_refused_except_for_dspark(tmp_path, method):
    config = tmp_path / f"{method}.json"
    config.write_text(
        ADAPTIVE_CONFIGS[method] + ', "enable_adaptive_verification": true, "use_local_argmax_reduction": true}'
    )
    result = runner.invoke(app, ["validate", str(config)])
    if method == "dspark":
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[0] == (
        f"{config}:1: use_local_argmax_reduction: must be false with enable_adaptive_verification for method "
        f"'{method}' (adaptive verification estimates acceptance from the draft logits, which local argmax "
        "reduction never materializes; only dspark allows both), got true"
    )


# vLLM 0.33.0's name-based inference (vllm/config/speculative.py:1235-1244 for "ngram", :1445-1468 for
# the draft's name: "eagle-" with the dash, then "eagle3", "dflash", "dspark"; else draft_model).
@pytest.mark.parametrize(
    ("model", "method"),
    [
        ("yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "eagle"),
        ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "eagle3"),
        ("AngelSlim/Qwen3-8B_eagle3", "eagle3"),
        ("someone/eagle_head_llama", "draft_model"),
        ("ngram", "ngram"),
        ("z-lab/Qwen3-8B-DFlash-b16", "dflash"),
        ("meta-llama/Llama-3.2-1B-Instruct", "draft_model"),
    ],
)
@pytest.mark.parametrize("method_key", ["", '"method": null, '])
def test_method_inference_from_the_model_name_follows_vllm_0_33(tmp_path, model, method, method_key):
    config = tmp_path / "inferred.json"
    config.write_text(f'{{{method_key}"model": "{model}", "num_speculative_tokens": 3}}')
    result = runner.invoke(app, ["validate", str(config)])
    assert result.exit_code == 0, result.output
    assert f"inferred '{method}' from the model name" in result.output


def test_only_vllms_mtp_aliases_normalise_invented_ones_are_refused(tmp_path):
    known = tmp_path / "known.json"
    known.write_text('{"method": "glm5_next_mtp", "num_speculative_tokens": 1}')
    invented = tmp_path / "invented.json"
    invented.write_text('{"method": "llama_mtp", "num_speculative_tokens": 1}')
    result = runner.invoke(app, ["validate", str(known), str(invented)])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert any(line.startswith(f"{known}:1: warning: method:") and "MTP alias" in line for line in lines)
    assert any(line.startswith(f"{invented}:1: method: must be one of") and "'llama_mtp'" in line for line in lines)
    assert lines[-1].startswith("2 files checked: 1 valid, 1 invalid")


# vLLM 0.33.0, vllm/config/speculative.py:1995-2012: a heterogeneous-vocabulary drafter is a draft_model,
# drafts greedily, and does without local argmax reduction.
DRAFT_MODEL = '"method": "draft_model", "model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 4'


@pytest.mark.parametrize(
    ("extra", "field", "fragment"),
    [
        ('"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3',
         "use_heterogeneous_vocab", "only works with method 'draft_model', got method 'eagle3'"),
        (DRAFT_MODEL + ', "draft_sample_method": "probabilistic"',
         "draft_sample_method", "must be 'greedy' with use_heterogeneous_vocab, got 'probabilistic'"),
        (DRAFT_MODEL + ', "use_local_argmax_reduction": true',
         "use_local_argmax_reduction", "must be false with use_heterogeneous_vocab"),
    ],
)  # fmt: skip
def test_heterogeneous_vocab_rules_of_vllm_0_33_are_errors(tmp_path, extra, field, fragment):
    config = tmp_path / "hetero.json"
    config.write_text(f'{{{extra}, "use_heterogeneous_vocab": true}}')
    result = runner.invoke(app, ["validate", str(config)])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[0].startswith(f"{config}:1: {field}: {fragment}")


def test_heterogeneous_vocab_draft_model_with_greedy_drafts_validates(tmp_path):
    config = tmp_path / "hetero.json"
    config.write_text(f'{{{DRAFT_MODEL}, "use_heterogeneous_vocab": true}}')
    result = runner.invoke(app, ["validate", str(config)])
    assert result.exit_code == 0, result.output


EAGLE3 = '"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3'


# Fields new in vLLM 0.33.0 (vllm/config/speculative.py:463-490, 642) validate where vLLM takes them.
@pytest.mark.parametrize(
    "extra",
    [
        EAGLE3 + ', "disable_eagle_block_drop": true',
        EAGLE3 + ', "disable_lookahead_block_hashes": true',
        EAGLE3 + ', "draft_lm_head_quantization": "fp8"',
        '"method": "mtp", "num_speculative_tokens": 1, "draft_lm_head_quantization": "nvfp4"',
        '"method": "mtp", "num_speculative_tokens": 1, "index_share_for_mtp_iteration": true',
        '"method": "dspark", "model": "deepseek-ai/dspark_qwen3_8b_block7", "num_speculative_tokens": 7, "dspark_draft_topk": 8',
    ],
)
def test_fields_new_in_vllm_0_33_validate(tmp_path, extra):
    config = tmp_path / "new.json"
    config.write_text(f"{{{extra}}}")
    result = runner.invoke(app, ["validate", str(config)])
    assert result.exit_code == 0, result.output


# ... and are refused where vLLM refuses them (:1953-1958, :1640-1641, :1704-1711).
@pytest.mark.parametrize(
    ("extra", "field", "fragment"),
    [
        ('"method": "dflash", "model": "z-lab/Qwen3-8B-DFlash-b16", "num_speculative_tokens": 7, '
         '"draft_lm_head_quantization": "fp8"', "draft_lm_head_quantization", "only for methods eagle, eagle3, mtp"),
        (EAGLE3 + ', "draft_lm_head_quantization": "int4"', "draft_lm_head_quantization", "must be one of 'fp8', 'nvfp4'"),
        (EAGLE3 + ', "dspark_draft_topk": 8', "dspark_draft_topk", "only for method 'dspark', got method 'eagle3'"),
        (EAGLE3 + ', "index_share_for_mtp_iteration": false', "index_share_for_mtp_iteration", "only for method 'mtp'"),
        ('"method": "dspark", "num_speculative_tokens": 7, "dspark_draft_topk": 0', "dspark_draft_topk", "must be >= 1"),
    ],
)  # fmt: skip
def test_fields_new_in_vllm_0_33_are_refused_where_vllm_refuses_them(tmp_path, extra, field, fragment):
    config = tmp_path / "new.json"
    config.write_text(f"{{{extra}}}")
    result = runner.invoke(app, ["validate", str(config)])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[0].startswith(f"{config}:1: {field}: {fragment}"), result.output


def test_dashed_keys_are_read_as_vllm_serve_rewrites_them(tmp_path):
    # vllm/engine/arg_utils.py:2126-2128: every '-' in a --speculative-config key becomes '_'.
    config = tmp_path / "dashed.json"
    config.write_text('{"method": "ngram", "num-speculative-tokens": 3, "prompt-lookup-max": 4}')
    result = runner.invoke(app, ["validate", str(config)])
    assert result.exit_code == 0, result.output
    bad = tmp_path / "dashed-bad.json"
    bad.write_text('{"method": "ngram", "num-speculative-tokens": 0}')
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1, result.output
    assert "num_speculative_tokens: must be >= 1, got 0" in result.output.splitlines()[0]


def test_mtp_without_k_is_refused_as_vllm_0_33_refuses_it(tmp_path):
    # vllm/config/speculative.py:1486-1487 (None > 1 with a model) and :1946-1951 (no K without one).
    config = tmp_path / "mtp.json"
    config.write_text('{"method": "mtp"}')
    result = runner.invoke(app, ["validate", str(config)])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[0].startswith(
        f"{config}:1: num_speculative_tokens: required for method 'mtp': vLLM 0.33.0 takes no default"
    )


def _simulation(tmp_path, speculative_lines):
    text = (REPO / "configs" / "simulations" / "llama-3.1-8b-eagle3-h100.yaml").read_text()
    text = text.replace("  num_speculative_tokens: 3\n", speculative_lines)
    text = text.replace("../profiles/", f"{REPO / 'configs' / 'profiles'}/")
    path = tmp_path / "sim.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("lines", "field", "fragment"),
    [
        (
            "  num_speculative_tokens: 4\n  rejection_sample_method: fly\n",
            "rejection_sample_method",
            "does not simulate",
        ),
        ("  num_speculative_tokens: 80\n", "num_speculative_tokens", "the simulator runs K <= 64"),
    ],
)
def test_what_vllm_serves_but_spectune_cannot_simulate_validates_and_simulate_refuses(tmp_path, lines, field, fragment):
    served = tmp_path / "served.json"
    body = ", ".join(f'"{key.strip()}": {json.dumps(yaml_value)}' for key, yaml_value in _pairs(lines))
    served.write_text('{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", ' + body + "}")
    assert runner.invoke(app, ["validate", str(served)]).exit_code == 0
    path = _simulation(tmp_path, lines)
    result = runner.invoke(app, ["simulate", str(path)])
    assert result.exit_code == 1
    assert f"{path}:" in result.output and f"speculative.{field}: " in result.output and fragment in result.output
    assert "Traceback" not in result.output


def _pairs(lines):
    for line in lines.strip().splitlines():
        key, value = line.split(":", 1)
        value = value.strip()
        yield key, int(value) if value.isdigit() else value


def test_a_config_vllm_serves_on_its_v1_runner_is_simulated_as_v1_serves_it(tmp_path):
    from spectune.config import load_document

    lines = (
        "  num_speculative_tokens: 3\n  parallel_drafting: true\n  rejection_sample_method: block\n"
        "  draft_sample_method: probabilistic\n"
    )
    document = load_document(_simulation(tmp_path, lines))
    spec = document.model.speculative
    assert (spec.rejection_sample_method, spec.draft_sample_method) == ("standard", "greedy")
    [notice] = [n for n in document.notices if n.field == "speculative.parallel_drafting"]
    assert notice.severity == "warning" and "V1 runner" in notice.message and "one-hot" in notice.message
