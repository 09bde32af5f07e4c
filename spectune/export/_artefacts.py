"""Writing every artefact of a study into one folder."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from spectune.errors import SpectuneError
from spectune.export._report import report_html
from spectune.export._sglang import sglang_flags
from spectune.export._tables import trials_csv
from spectune.export._vllm import SyntheticForm, recommended_speculative_config, vllm_speculative_config, vllm_synthetic_config
from spectune.study import Recommendation, StudyOutcome

__all__ = ["bucket_comments", "json_text", "recommended_yaml", "write_artefacts"]

_NUMBER = r"-?[0-9][0-9.eE+-]*"
_FLAT_LIST = re.compile(rf"\[\s*({_NUMBER}(?:\s*,\s*{_NUMBER})*)\s*\]")


def json_text(data: Any) -> str:
    """Indented JSON with lists of numbers on one line (schedule rows read as [1, 16, 5])."""
    text = json.dumps(data, indent=2)
    return _FLAT_LIST.sub(lambda m: "[" + ", ".join(part.strip() for part in m.group(1).split(",")) + "]", text) + "\n"


def recommended_yaml(outcome: StudyOutcome) -> str:
    """The recommendation as a bare speculative config (what ``spectune validate`` and vLLM read)."""
    recommendation = outcome.recommendation
    if recommendation is None:
        raise SpectuneError(f"study {outcome.space.name!r} has no completed trial yet; nothing to recommend")
    config = recommended_speculative_config(recommendation)
    data = config.model_dump(mode="json", exclude_unset=True)
    header = [
        f"# Recommended by spectune study {outcome.space.name!r} ({outcome.num_evaluations} simulations).",
        f"# {recommendation.combo.label}; aggregate {recommendation.aggregate_throughput_tokens_per_s:,.0f} output tokens/s "
        "(weighted geometric mean over batch-size buckets).",
        *bucket_comments(recommendation),
        *(f"# note: {note}" for note in recommendation.notes),
    ]
    return "\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


def bucket_comments(recommendation: Recommendation) -> list[str]:
    """One comment line per bucket: its K, how far that K is from the bucket's best, and its tie set."""
    lines = []
    for choice in recommendation.choices:
        ties = choice.ties
        head = f"# batch size {choice.first_batch_size}-{choice.last_batch_size}: K {choice.num_speculative_tokens}"
        if ties is None:
            lines.append(f"{head} ({choice.note or 'not simulated'})")
            continue
        best = ties.best.point.num_speculative_tokens
        if best == choice.num_speculative_tokens:
            distance = "the best simulated"
        else:
            distance = f"{ties.shortfall(choice.num_speculative_tokens):.1%} below the best simulated (K {best})"
        lines.append(f"{head}, {distance}; tied: {ties.describe()}")
    return lines


def write_artefacts(outcome: StudyOutcome, out_dir: Path, *, vllm_synthetic_form: SyntheticForm = "current") -> list[Path]:
    """Write recommended.yaml, vllm.json, vllm-synthetic.json, sglang.txt, trials.csv, report.html.

    Without any completed trial only trials.csv and report.html are written. Returns the paths written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    recommendation = outcome.recommendation
    if recommendation is not None:
        files["recommended.yaml"] = recommended_yaml(outcome)
        files["vllm.json"] = json_text(vllm_speculative_config(recommendation))
        synthetic = vllm_synthetic_config(recommendation, vllm_synthetic_form)
        if synthetic is not None:
            files["vllm-synthetic.json"] = json_text(synthetic)
        files["sglang.txt"] = sglang_flags(recommendation)
    files["trials.csv"] = trials_csv(outcome)
    files["report.html"] = report_html(outcome)
    written = []
    for name, text in files.items():
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
