"""``spectune validate`` agrees with vLLM 0.33.0's own checks on every file of the recorded corpus.

The verdicts in ``tests/data/vllm-0.33.0-verdicts.json`` were made by ``tools/vllm_oracle.py``, which runs
vLLM 0.33.0's ``SpeculativeConfig``, its K-table lookup and its runner choice on each corpus file (see
that script). vLLM is never installed here: the test reads the recorded verdicts only.

- vLLM refuses (``error``): spectune exits 1 and one of its error lines names a field vLLM's message is
  about.
- vLLM serves (``ok``): spectune exits 0.
- vLLM serves otherwise than written (``warning``: the V1 runner fallback, the lossy FLy rule): spectune
  exits 0 and warns on a field vLLM's warning is about.
- Whenever vLLM serves a config, spectune resolves the same method and K.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spectune.cli import app
from spectune.config import load_document

DATA = Path(__file__).resolve().parents[1] / "data"
CORPUS = DATA / "vllm-corpus"
RECORD = json.loads((DATA / "vllm-0.33.0-verdicts.json").read_text())
VERDICTS: dict[str, dict[str, object]] = RECORD["verdicts"]
runner = CliRunner()
_LINE = re.compile(r"^(?P<file>.+?):(?P<line>\d+)?: (?P<warning>warning: )?(?P<field>[A-Za-z_][\w]*)[\w.\[\]]*: ")


def _blamed(output: str, *, warnings: bool) -> set[str]:
    """Top-level fields that spectune's error (or warning) lines name."""
    fields = set()
    for line in output.splitlines():
        match = _LINE.match(line)
        if match and bool(match["warning"]) == warnings:
            fields.add(match["field"])
    return fields


def test_the_record_covers_the_whole_corpus_and_is_vllm_0_33_0():
    assert RECORD["vllm_version"] == "0.33.0"
    assert sorted(VERDICTS) == sorted(path.name for path in CORPUS.glob("*.json"))
    assert len(VERDICTS) > 100
    kinds = {str(v["verdict"]) for v in VERDICTS.values()}
    assert kinds == {"ok", "warning", "error"}


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_spectune_validate_gives_vllms_verdict(name):
    verdict = VERDICTS[name]
    result = runner.invoke(app, ["validate", str(CORPUS / name)])
    assert "Traceback" not in result.output
    vllm_fields = set(verdict["fields"])  # type: ignore[call-overload]
    context = f"vLLM 0.33.0: {verdict['verdict']} {vllm_fields}: {verdict['message']}\nspectune:\n{result.output}"
    if verdict["verdict"] == "error":
        assert result.exit_code == 1, context
        assert _blamed(result.output, warnings=False) & vllm_fields, context
    else:
        assert result.exit_code == 0, context
    if verdict["verdict"] == "warning":
        assert _blamed(result.output, warnings=True) & vllm_fields, context


@pytest.mark.parametrize("name", sorted(n for n, v in VERDICTS.items() if v["verdict"] != "error"))
def test_spectune_resolves_the_method_and_k_that_vllm_serves(name):
    """Method inference (from the name, also over an explicit draft_model or mtp) and K defaults as vLLM's."""
    verdict = VERDICTS[name]
    model = load_document(CORPUS / name).model
    assert (model.method, model.num_speculative_tokens) == (verdict["method"], verdict["num_speculative_tokens"])


def test_the_readme_and_the_config_docs_give_the_corpus_size():
    repo = DATA.parents[1]
    size = len(VERDICTS)
    assert f"agrees with vLLM 0.33.0's own checks on {size} configs" in (repo / "README.md").read_text()
    assert f"each of the {size}\n  configs" in (repo / "docs" / "configs.md").read_text()
