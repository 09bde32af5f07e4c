"""Writing every artefact of a study into one folder, as one set.

The folder is the user's (``--out``): it may hold their own files and the study's journal. The
artefacts are a file set (``spectune._file_set``): written in full into a temporary folder first, so a
full disk leaves the previous export whole, then renamed into place; an artefact an earlier export
left that this one does not write (another study's recommendation, say) is removed, so the folder
never mixes two exports. Only files spectune wrote there, unchanged since, are ever overwritten or
removed: a same-named file of the user's is refused, before a study runs.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from spectune._file_set import MANIFEST_NAME, FileSetChange, FileWriter, foreign_files, replace_file_set, write_new_file
from spectune._files import check_output_file
from spectune.errors import SpectuneError
from spectune.export._measure import measure_script
from spectune.export._report import report_html
from spectune.export._sglang import SGLANG_ADAPTIVE_CONFIG_NAME, sglang_export
from spectune.export._tables import policy_rows, trials_csv
from spectune.export._trtllm import trtllm_yaml
from spectune.export._vllm import (
    SyntheticForm,
    recommended_speculative_config,
    vllm_speculative_config,
    vllm_synthetic_config,
)
from spectune.study import Recommendation, StudyOutcome, provenance_notes, recommendation_provenance

__all__ = [
    "ARTEFACT_NAMES",
    "bucket_comments",
    "policy_comments",
    "check_output_dir",
    "json_text",
    "recommended_yaml",
    "write_artefacts",
]

ARTEFACT_NAMES = (
    "recommended.yaml",
    "vllm.json",
    "vllm-synthetic.json",
    "sglang.txt",
    SGLANG_ADAPTIVE_CONFIG_NAME,
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
        f"# {_policy_head(recommendation)}{recommendation.combo.label}; aggregate {recommendation.aggregate_throughput_tokens_per_s:,.0f} output tokens/s "
        "(weighted geometric mean over batch-size buckets).",
        *([f"# {outcome.partial_note}"] if outcome.partial_note is not None else []),
        *bucket_comments(recommendation),
        *policy_comments(recommendation),
        *(f"# note: {note}" for note in recommendation.notes),
        *(f"# mark: {note}" for note in provenance_notes(recommendation_provenance(recommendation, outcome.completed))),
    ]
    return "\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


def _policy_head(recommendation: Recommendation) -> str:
    """'<policy>: ' where the study compared policies (nothing otherwise, as before policies)."""
    if len(recommendation.space.policies) < 2 or recommendation.verdict is None:
        return ""
    return f"{recommendation.verdict.winner.describe()}: "


def policy_comments(recommendation: Recommendation) -> list[str]:
    """Where policies were compared: per bucket, what each gives (``policy_rows``)."""
    return [
        "# policies at batch sizes "
        + row["batch sizes"]
        + ": "
        + "; ".join(f"{k}: {v}" for k, v in row.items() if k != "batch sizes")
        for row in policy_rows(recommendation)
    ]


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
    outcome: StudyOutcome,
    out_dir: Path,
    *,
    vllm_synthetic_form: SyntheticForm = "current",
    writer: FileWriter = write_new_file,
) -> FileSetChange:
    """Write recommended.yaml, vllm.json, vllm-synthetic.json, sglang.txt, sglang-adaptive.json, trtllm.yaml,
    measure.sh, trials.csv, report.html (sglang-adaptive.json where sglang.txt uses SGLang's adaptive steps,
    trtllm.yaml where TensorRT-LLM can take the table).

    Without any completed trial only trials.csv and report.html are written. ``writer`` writes each new
    file (into a temporary folder inside ``out_dir``). Returns the paths written and those of an
    earlier export removed; ``SpectuneError`` leaves the earlier export whole.
    """
    check_output_dir(out_dir)
    files: dict[str, str] = {}
    recommendation = outcome.recommendation
    if recommendation is not None:
        files["recommended.yaml"] = recommended_yaml(outcome)
        if not recommendation.speculation_off_everywhere:  # serve plainly: no drafter behind a table of 0 rows
            files["vllm.json"] = json_text(vllm_speculative_config(recommendation))
        synthetic = vllm_synthetic_config(recommendation, vllm_synthetic_form)
        if synthetic is not None:
            files["vllm-synthetic.json"] = json_text(synthetic)
        sglang = sglang_export(recommendation)
        files["sglang.txt"] = sglang.flags
        if sglang.adaptive_config is not None:
            files[SGLANG_ADAPTIVE_CONFIG_NAME] = json_text(sglang.adaptive_config.to_sglang_json())
        if (trtllm := trtllm_yaml(recommendation)) is not None:
            files["trtllm.yaml"] = trtllm
        script = measure_script(outcome)
        if script is not None:
            files["measure.sh"] = script
    files["trials.csv"] = trials_csv(outcome)
    files["report.html"] = report_html(outcome)
    return replace_file_set(out_dir, files, names=ARTEFACT_NAMES, writer=writer)


def check_output_dir(out_dir: Path) -> None:
    """``SpectuneError`` (naming only ``--out``) unless every artefact can be written into ``out_dir``.

    Checked before a study runs: the name is UTF-8 (it is written into messages and report.html), the
    folder is a folder or can be made one, a file can really be created there (a probe: ``os.access``
    answers from the mode bits, which do not stop root, and misses ACLs, security modules and full
    inode tables), and no artefact name is taken by a file spectune did not write.
    """
    try:
        str(out_dir).encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(out_dir).decode("utf-8", errors="backslashreplace")
        raise SpectuneError(
            f"--out {shown}: the folder name is not UTF-8 text; spectune writes it into its messages and "
            "report.html: give a UTF-8 name"
        ) from None
    if out_dir.exists() and not out_dir.is_dir():
        raise SpectuneError(f"--out {out_dir}: exists and is not a folder")
    for name in (*ARTEFACT_NAMES, MANIFEST_NAME):
        try:
            check_output_file(out_dir / name)
        except SpectuneError as err:
            raise SpectuneError(f"--out {out_dir}: {err}") from None
    _probe_writable(out_dir)
    foreign = foreign_files(out_dir, ARTEFACT_NAMES)
    if foreign:
        names = ", ".join(path.name for path in foreign)
        raise SpectuneError(
            f"--out {out_dir}: {names}: not written by spectune (or changed since; {MANIFEST_NAME} there "
            "lists what spectune wrote), and an artefact of that name would replace it: move or delete it, or "
            "choose another --out"
        )


def _probe_writable(out_dir: Path) -> None:
    """Create and remove a file in ``out_dir``, or in the nearest folder above it that exists."""
    existing = out_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        descriptor, probe = tempfile.mkstemp(prefix=".spectune-probe-", dir=existing)
    except OSError as err:
        where = "" if existing == out_dir else f" (cannot create it in {existing})"
        raise SpectuneError(f"--out {out_dir}: cannot write there{where}: {err.strerror or err}") from None
    os.close(descriptor)
    os.unlink(probe)
