"""Measurement trees: ``vllm bench sweep serve`` output and ``measure.sh`` results, one record per bench run.

``vllm bench sweep serve`` (vLLM 0.33.0, ``vllm/benchmarks/sweep/serve.py``) writes, per pair of serve
and bench parameter sets, a folder ``SERVE--{name}-BENCH--{name}/`` holding ``run={n}.json`` per repeat
and ``summary.json``: a JSON list of the repeats' bench records, each the ``vllm bench serve`` result
updated with ``run_number`` and the serve and bench parameters that made it (as the parameter files
spell them: ``speculative_config`` a mapping, ``max_concurrency`` a number). ``warmup.json`` holds an
unmeasured run and ``run={n}.failure.json`` a run that failed. ``measure.sh`` writes
``{protocol}/k{K}/c{C}/run={n}.json`` stamped with ``--metadata`` keys ``spectune_forced_k``,
``spectune_num_speculative_tokens``, ``spectune_drafter`` and ``spectune_protocol``.

Each record maps to a cell (concurrency, forced K): the concurrency from ``max_concurrency``, the K
from the metadata or from the serve parameters (a one-range table ``[[1, N, K]]`` forces K under the
global ``num_speculative_tokens``; no table: K is the global K; no speculative config: K = 0 without a
drafter). Under a forced K below the global one, vLLM still labels one acceptance counter per
position of the global K (``vllm/v1/spec_decode/metrics.py``, ``range(num_spec_tokens)``), so the
per-position rates past K are zeros; they are cut off here, and a non-zero one means K was not forced.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from spectune.calibrate._bench import BenchRun, bench_run_from_record
from spectune.errors import DocumentError, Problem

__all__ = ["CellRecord", "MeasurementTree", "is_measurement_tree", "read_measurement_tree"]

Protocol = Literal["as-served", "plain-k0"]
_RUN_FILE = re.compile(r"^run=(\d+)\.json$")
_SPEC_KEYS = ("speculative_config", "speculative-config")
_MAX_BYTES = 256 * 1024 * 1024  # a summary holds every repeat's per-request arrays


@dataclass(frozen=True)
class CellRecord:
    """One measured bench run, with the cell it belongs to."""

    run: BenchRun  # acceptance cut to the forced K; run.file is "file" or "file [i]" for a summary's i-th record
    location: str  # file and record index, for messages
    concurrency: int
    forced_k: int
    global_k: int  # 0: no drafter loaded
    protocol: Protocol  # as-served: forced by a one-range table; plain-k0: one server per K, K = 0 plain


@dataclass(frozen=True)
class MeasurementTree:
    """The records of a tree and the files left out, each with its reason (warnings)."""

    records: tuple[CellRecord, ...]
    skipped: tuple[Problem, ...]
    files: tuple[str, ...]


def is_measurement_tree(paths: Sequence[Path]) -> bool:
    """Whether the paths are a sweep's ``summary.json`` or measure.sh's ``run=N.json`` files, or folders of them."""
    return bool(paths) and all(path.is_dir() or _is_tree_file(path) for path in paths) and any(_tree_files(paths))


def _is_tree_file(path: Path) -> bool:
    return path.name == "summary.json" or bool(_RUN_FILE.match(path.name))


def _tree_files(paths: Sequence[Path]) -> Iterator[Path]:
    for path in paths:
        yield from (found for found in _expanded(path) if _is_tree_file(found))


def _expanded(path: Path) -> list[Path]:
    return sorted(found for found in path.rglob("*.json") if found.is_file()) if path.is_dir() else [path]


def read_measurement_tree(paths: Sequence[Path]) -> MeasurementTree:
    """Every record under the folders; ``DocumentError`` for records that cannot be used as measured."""
    records: list[CellRecord] = []
    skipped: list[Problem] = []
    problems: list[Problem] = []
    files: list[str] = []
    for path in (found for root in paths for found in _expanded(root)):
        file = str(path)
        reason = _skip_reason(path)
        if reason is not None:
            skipped.append(Problem(file, None, "", f"skipped: {reason}", severity="warning"))
            continue
        try:
            entries = _entries(path)
        except DocumentError as err:
            problems.extend(err.problems)
            continue
        files.append(file)
        for index, line, text, data in entries:
            try:
                record = _cell_record(file, index, line, text, data)
            except DocumentError as err:
                problems.extend(err.problems)
                continue
            if isinstance(record, str):
                skipped.append(Problem(file, line, _field(index, ""), f"skipped: {record}", severity="warning"))
            else:
                records.append(record)
    if problems:
        raise DocumentError(problems)
    _check_one_protocol(records)
    return MeasurementTree(tuple(records), _grouped(skipped), tuple(files))


def _grouped(skipped: Sequence[Problem]) -> tuple[Problem, ...]:
    """One warning per reason: a sweep leaves a copy of every record, which would bury the other reasons."""
    by_reason: dict[str, list[Problem]] = {}
    for problem in skipped:
        by_reason.setdefault(problem.message, []).append(problem)
    return tuple(
        group[0]
        if len(group) == 1
        else Problem(
            group[0].file, None, "", f"{group[0].message} (and {len(group) - 1} more files like it)", "warning"
        )
        for group in by_reason.values()
    )


def _skip_reason(path: Path) -> str | None:
    if path.name == "warmup.json":
        return "an unmeasured warm-up run"
    if path.name.endswith(".failure.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            detail = f" ({data.get('error_type')}: {str(data.get('error'))[:120]})" if isinstance(data, dict) else ""
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            detail = ""
        return f"a run that failed{detail}; its cell has one repeat fewer"
    if path.name in ("serve_params.json", "bench_params.json"):
        return "a vllm bench sweep parameter file"
    if _RUN_FILE.match(path.name) and (path.parent / "summary.json").is_file():
        return "a copy of a record of summary.json beside it"
    if path.name != "summary.json" and not _RUN_FILE.match(path.name):
        return "not a summary.json or run=N.json of a measurement tree"
    return None


def _entries(path: Path) -> list[tuple[int | None, int, str, Any]]:
    """(index in a summary or None, first line, JSON text, parsed value) per record of the file."""
    file = str(path)
    try:
        if path.stat().st_size > _MAX_BYTES:
            raise DocumentError([Problem(file, None, "", f"file is larger than {_MAX_BYTES} bytes")])
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DocumentError([Problem(file, None, "", f"not UTF-8 text (byte {err.start})")]) from None
    except OSError as err:
        raise DocumentError([Problem(file, None, "", f"cannot read: {err.strerror}")]) from None
    if path.name != "summary.json":
        try:
            return [(None, 1, text, json.loads(text))]
        except json.JSONDecodeError as err:
            raise DocumentError([Problem(file, err.lineno, "", f"not JSON ({err.msg})")]) from None
    return _summary_entries(file, text)


def _summary_entries(file: str, text: str) -> list[tuple[int | None, int, str, Any]]:
    """A summary's records with the line each starts on (a JSON list decoded item by item)."""
    decoder = json.JSONDecoder()
    position = len(text) - len(text.lstrip())
    if not text.startswith("[", position):
        raise DocumentError(
            [
                Problem(
                    file, 1, "", "a vllm bench sweep summary.json is a JSON list of bench records; this is not a list"
                )
            ]
        )
    position += 1
    entries: list[tuple[int | None, int, str, Any]] = []
    try:
        while True:
            position = _skip_blank(text, position)
            if text.startswith("]", position):
                break
            if entries:
                if not text.startswith(",", position):
                    raise json.JSONDecodeError("expected ',' or ']'", text, position)
                position = _skip_blank(text, position + 1)
            data, end = decoder.raw_decode(text, position)
            entries.append((len(entries), text.count("\n", 0, position) + 1, text[position:end], data))
            position = end
    except json.JSONDecodeError as err:
        raise DocumentError([Problem(file, err.lineno, "", f"not JSON ({err.msg})")]) from None
    if not entries:
        raise DocumentError([Problem(file, 1, "", "summary.json lists no records")])
    return entries


def _skip_blank(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _field(index: int | None, key: str) -> str:
    return f"[{index}]{'.' + key if key else ''}" if index is not None else key


def _cell_record(file: str, index: int | None, line: int, text: str, data: Any) -> CellRecord | str:
    """The record's cell, or why it is skipped; ``DocumentError`` for a record that must not be used."""
    location = f"{file} [{index}]" if index is not None else file
    if not isinstance(data, dict):
        return f"a {type(data).__name__}, not a bench record"
    cell = _cell_of(data)
    if isinstance(cell, str):
        return cell
    forced_k, global_k, protocol = cell
    _check_complete(file, index, line, text, data)
    normalized = _cut_to_forced_k(file, index, line, data, forced_k, global_k)
    try:
        run = bench_run_from_record(location, text, normalized)
    except DocumentError as err:
        raise DocumentError(
            [
                Problem(file, (line - 1 + p.line) if p.line else line, _field(index, p.field), p.message)
                for p in err.problems
            ]
        ) from None
    return CellRecord(run, location, run.max_concurrency, forced_k, global_k, protocol)


def _cell_of(data: dict[str, Any]) -> tuple[int, int, Protocol] | str:
    """(forced K, global K, protocol) from measure.sh's metadata or the sweep's serve parameters."""
    if "spectune_forced_k" in data:
        try:
            forced, top = int(data["spectune_forced_k"]), int(data.get("spectune_num_speculative_tokens", 0))
        except (TypeError, ValueError):
            return f"spectune_forced_k {data['spectune_forced_k']!r} is not a whole number"
        protocol = data.get("spectune_protocol", "as-served")
        if protocol not in ("as-served", "plain-k0"):
            return f"spectune_protocol {protocol!r} is neither as-served nor plain-k0"
        return forced, (top if data.get("spectune_drafter") != "none" else 0), protocol
    config = _speculative_config(data)
    if config is None:
        if "run_number" not in data:
            return "no serve parameters (speculative_config) and no measure.sh metadata: its K is unknown"
        return 0, 0, "plain-k0"
    if isinstance(config, str):
        return config
    declared = config.get("num_speculative_tokens")
    if isinstance(declared, bool) or not isinstance(declared, int) or declared < 1:
        return f"speculative_config.num_speculative_tokens must be a whole number >= 1, got {declared!r}"
    top = declared
    table = config.get("num_speculative_tokens_per_batch_size")
    if table is None:
        return top, top, "plain-k0"
    if (
        not isinstance(table, list)
        or not table
        or not all(isinstance(row, list) and len(row) == 3 and all(isinstance(v, int) for v in row) for row in table)
    ):
        return f"num_speculative_tokens_per_batch_size must be rows [start, end, K], got {str(table)[:80]}"
    ks = {row[2] for row in table}
    if len(ks) != 1 or table[0][0] != 1:
        return (
            f"num_speculative_tokens_per_batch_size {table} is not a one-range table [[1, N, K]]: the run served a mix of K, "
            "not one forced K"
        )
    return min(ks.pop(), top), top, "as-served"


def _speculative_config(data: dict[str, Any]) -> dict[str, Any] | str | None:
    """The record's speculative config (a mapping, a JSON string, or dotted keys); a str says what is wrong."""
    for key in _SPEC_KEYS:
        value = data.get(key)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                return f"{key} is not JSON: {value[:80]!r}"
        if isinstance(value, dict):
            return value
        if value is not None:
            return f"{key} must be a mapping, got {type(value).__name__}"
    dotted = {
        key.split(".", 1)[1].replace("-", "_"): value
        for key, value in data.items()
        if "." in key and key.split(".", 1)[0] in _SPEC_KEYS
    }
    return dotted or None


def _check_complete(file: str, index: int | None, line: int, text: str, data: dict[str, Any]) -> None:
    """A run with failed requests, or fewer completed than sent, timed another load than its cell's."""
    problems = []
    failed, completed, prompts = data.get("failed"), data.get("completed"), data.get("num_prompts")
    cell = f"concurrency {data.get('max_concurrency')}"
    if isinstance(failed, int | float) and not isinstance(failed, bool) and failed > 0:
        problems.append(
            Problem(
                file, line, _field(index, "failed"), f"{failed} request(s) failed in this run ({cell}); rerun the cell"
            )
        )
    if prompts is not None and completed is not None and completed != prompts:
        problems.append(
            Problem(
                file,
                line,
                _field(index, "completed"),
                f"{completed} of num_prompts {prompts} requests completed ({cell}); rerun the cell",
            )
        )
    if problems:
        raise DocumentError(problems)


def _cut_to_forced_k(
    file: str, index: int | None, line: int, data: dict[str, Any], forced_k: int, global_k: int
) -> dict[str, Any]:
    """The record with its per-position rates cut to the forced K (the rest must be zero)."""
    key = "spec_decode_per_position_acceptance_rates"
    rates = data.get(key)
    if forced_k >= global_k or not isinstance(rates, list):
        return data
    past = [(i, r) for i, r in enumerate(rates) if i >= forced_k and r]
    if past:
        i, rate = past[0]
        raise DocumentError(
            [
                Problem(
                    file,
                    line,
                    _field(index, key),
                    f"position {i} accepted {rate!r} of drafts, but the table forced K={forced_k}: the server did not "
                    "serve the table (vLLM disables it for some methods and for data parallelism; see its log)",
                )
            ]
        )
    if forced_k == 0:
        drafts = data.get("spec_decode_num_drafts")
        if drafts:
            raise DocumentError(
                [
                    Problem(
                        file,
                        line,
                        _field(index, "spec_decode_num_drafts"),
                        f"{drafts} drafts at a forced K = 0: the server did not serve the table",
                    )
                ]
            )
        return {k: v for k, v in data.items() if not k.startswith("spec_decode_")}
    return data | {key: rates[:forced_k]}


def _check_one_protocol(records: Sequence[CellRecord]) -> None:
    """One protocol and, forced, one global K: a tree that mixes them measures two different K = 0 rows."""
    if not records:
        return
    first = records[0]
    for record in records[1:]:
        if record.protocol != first.protocol:
            raise DocumentError(
                [
                    Problem(
                        record.location,
                        None,
                        "",
                        f"measured by the {record.protocol} protocol, but {first.location} by {first.protocol}: their K = 0 "
                        "rows measure different servers (with and without the drafter); calibrate one protocol at a time",
                    )
                ]
            )
        if record.protocol == "as-served" and record.global_k != first.global_k:
            raise DocumentError(
                [
                    Problem(
                        record.location,
                        None,
                        "",
                        f"served with num_speculative_tokens {record.global_k}, but {first.location} with {first.global_k}: "
                        "the K-forcing protocol keeps one global K (the lookahead every K pays depends on it)",
                    )
                ]
            )
