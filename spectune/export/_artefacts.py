"""Writing every artefact of a study into one folder.

Each file is written atomically (a temporary file in the folder, then ``os.replace``), so a crash
leaves the previous file or the new one and a symbolic link in the folder is replaced, never written
through. An artefact an earlier export left that this one does not write (another study's
recommendation, say) is removed, so the folder never mixes two exports.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from spectune._files import check_output_file, write_atomic
from spectune.errors import SpectuneError
from spectune.export._measure import measure_script
from spectune.export._report import report_html
from spectune.export._sglang import sglang_flags
from spectune.export._tables import trials_csv
from spectune.export._trtllm import trtllm_yaml
from spectune.export._vllm import (
    SyntheticForm,
    recommended_speculative_config,
    vllm_speculative_config,
    vllm_synthetic_config,
)
from spectune.study import Recommendation, StudyOutcome, provenance_notes, recommendation_provenance

__all__ = ["ARTEFACT_NAMES", "bucket_comments", "check_output_dir", "json_text", "recommended_yaml", "write_artefacts"]

ARTEFACT_NAMES = (
    "recommended.yaml",
    "vllm.json",
    "vllm-synthetic.json",
    "sglang.txt",
    "trtllm.yaml",
    "measure.sh",
    "trials.csv",
    "report.html",
)

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
        *(f"# mark: {note}" for note in provenance_notes(recommendation_provenance(recommendation, outcome.completed))),
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


def write_artefacts(
    outcome: StudyOutcome, out_dir: Path, *, vllm_synthetic_form: SyntheticForm = "current"
) -> list[Path]:
    """Write recommended.yaml, vllm.json, vllm-synthetic.json, sglang.txt, trtllm.yaml, measure.sh, trials.csv,
    report.html (trtllm.yaml where TensorRT-LLM can take the table).

    Without any completed trial only trials.csv and report.html are written. Returns the paths written.
    """
    check_output_dir(out_dir)
    files: dict[str, str] = {}
    recommendation = outcome.recommendation
    if recommendation is not None:
        files["recommended.yaml"] = recommended_yaml(outcome)
        files["vllm.json"] = json_text(vllm_speculative_config(recommendation))
        synthetic = vllm_synthetic_config(recommendation, vllm_synthetic_form)
        if synthetic is not None:
            files["vllm-synthetic.json"] = json_text(synthetic)
        files["sglang.txt"] = sglang_flags(recommendation)
        if (trtllm := trtllm_yaml(recommendation)) is not None:
            files["trtllm.yaml"] = trtllm
        script = measure_script(outcome)
        if script is not None:
            files["measure.sh"] = script
    files["trials.csv"] = trials_csv(outcome)
    files["report.html"] = report_html(outcome)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in ARTEFACT_NAMES:
            stale = out_dir / name
            if name not in files and (stale.is_symlink() or stale.is_file()):
                stale.unlink()  # an earlier export's; left beside these files it would pass for this study's
    except OSError as err:
        raise SpectuneError(f"--out {out_dir}: {err.strerror or err}") from None
    written = []
    for name, text in files.items():
        path = out_dir / name
        write_atomic(path, text)
        written.append(path)
    return written


def check_output_dir(out_dir: Path) -> None:
    """``SpectuneError`` unless every artefact can be written into ``out_dir`` (checked before a study runs)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise SpectuneError(f"--out {out_dir}: exists and is not a folder")
    for name in ARTEFACT_NAMES:
        try:
            check_output_file(out_dir / name)
        except SpectuneError as err:
            raise SpectuneError(f"--out {out_dir}: {err}") from None
