"""``calibrate``: read the files, check they agree on K, pool the windows, bin them by batch size."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spectune.calibrate._bench import BenchRun, read_bench_result
from spectune.calibrate._bench_split import runs_of_one_model, runs_of_one_temperature
from spectune.calibrate._bench_table import BenchTable, bench_table
from spectune.calibrate._estimate import AcceptanceEstimate, estimate_from_counts, estimate_from_lengths
from spectune.calibrate._formats import LOG_FORMATS, LogFormat, detect_format
from spectune.calibrate._inputs import SkippedInput, unique_inputs
from spectune.calibrate._per_request import read_per_request_jsonl
from spectune.calibrate._prometheus import read_scrape, windows_between_scrapes
from spectune.calibrate._repeats import MAX_RELATIVE_SPREAD, repeated_table
from spectune.calibrate._servers_check import select_servers
from spectune.calibrate._sglang_log import infer_sglang_num_positions, read_sglang_log
from spectune.calibrate._sweep import is_measurement_tree, read_measurement_tree
from spectune.calibrate._vllm_log import read_vllm_log
from spectune.calibrate._windows import MAX_COUNT, CountWindow, LengthWindow, SourceWindows
from spectune.config import MAX_NUM_SPECULATIVE_TOKENS
from spectune.errors import DocumentError, Problem, SpectuneError

__all__ = ["DEFAULT_BIN_EDGES", "Calibration", "calibrate"]

# Lower edges of the running-request bins: 1, 2-3, 4-7, ... (a bin ends where the next begins).
DEFAULT_BIN_EDGES: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class Calibration:
    """What the files say about a drafter's acceptance: overall and per running-request bin."""

    log_format: LogFormat
    files: tuple[str, ...]
    num_positions: int
    overall: AcceptanceEstimate
    bins: tuple[AcceptanceEstimate, ...]
    skipped: tuple[Problem, ...]  # lines not used, as warnings
    notes: tuple[str, ...]  # statements for the profile: assumptions, rounding, what was left out
    model_name: str | None = None
    bench: BenchTable | None = None  # vllm bench serve results: the step-time table as well
    repeated_inputs: tuple[SkippedInput, ...] = ()  # files not read: the same file or content as another
    servers: tuple[str, ...] = ()  # the --server labels calibrated from, where a log holds several


def calibrate(
    paths: Sequence[Path],
    *,
    log_format: LogFormat | None = None,
    num_speculative_tokens: int | None = None,
    model_name: str | None = None,
    bin_edges: Sequence[int] | None = DEFAULT_BIN_EDGES,
    servers: Sequence[str] = (),
    temperature: float | None = None,
    max_spread: float = MAX_RELATIVE_SPREAD,
) -> Calibration:
    """Read vLLM/SGLang logs, Prometheus scrapes or per-request JSON lines into pooled acceptance estimates.

    All files must hold one format (detected per file unless ``log_format`` is given). Prometheus
    scrapes are taken in the order given, earlier first. ``num_speculative_tokens`` (K) is needed
    where the source does not state it (vLLM's older log line, SGLang without ``accept rate``) and
    checked where it does. ``bin_edges`` are the lower edges of the running-request bins (None: no
    bins). Bench results are kept to one ``model_name`` (their ``model_id``) and one ``temperature``
    where they record several. A file or content given twice is read once (``repeated_inputs``). A vLLM log that holds
    several servers (see ``_servers.py``) is refused unless ``servers`` names the ones to pool. Folders of
    ``vllm bench sweep`` or ``measure.sh`` results are read by record, repeats pooled to a median whose MAD
    must stay within ``max_spread`` of it (``_repeats``). Raises ``DocumentError`` naming file and line for
    unusable or contradictory input.
    """
    if not paths:
        raise SpectuneError("no input files given")
    if is_measurement_tree(paths):
        tree = read_measurement_tree(paths)
        if not tree.records:
            reasons = "; ".join(f"{p.file}: {p.message}" for p in tree.skipped[:3])
            raise DocumentError([Problem(", ".join(map(str, paths)), None, "", f"no usable bench records ({reasons})")])
        table = repeated_table(tree.records, max_relative_spread=max_spread)
        return _calibrate_bench_table([Path(file) for file in tree.files], bin_edges, table, tree.skipped)
    paths, repeated = unique_inputs(expand_directories(paths), by_content=False)
    _check_options(log_format, num_speculative_tokens, bin_edges)
    formats = {str(path): log_format or detect_format(path) for path in paths}
    if len(set(formats.values())) > 1:
        listing = ", ".join(f"{file}: {fmt}" for file, fmt in formats.items())
        raise SpectuneError(f"the files hold different formats ({listing}); calibrate from one source at a time")
    chosen: LogFormat = next(iter(formats.values()))
    if chosen != "vllm-prometheus":
        paths, copies = unique_inputs(paths)
        repeated += copies
        formats = {str(path): formats[str(path)] for path in paths}
    if servers and chosen != "vllm-log":
        raise SpectuneError(f"--server picks servers in vLLM logs, got {chosen} input")
    if chosen == "vllm-bench":
        runs = runs_of_one_model([read_bench_result(path) for path in paths], model_name)
        runs = runs_of_one_temperature(runs, temperature)
        return replace(_calibrate_bench(runs, bin_edges), repeated_inputs=tuple(repeated), model_name=model_name)
    sources, num_positions = _read(chosen, list(paths), num_speculative_tokens, model_name, servers)
    skipped = tuple(problem for source in sources for problem in source.skipped)
    notes = [note for source in sources for note in source.notes]
    count_windows = [w for source in sources for w in source.count_windows]
    length_windows = [w for source in sources for w in source.length_windows]
    if not count_windows and not length_windows:
        reasons = "; ".join(f"line {p.line}: {p.message}" for p in skipped[:3]) or "no window had drafts"
        raise DocumentError([Problem(", ".join(formats), None, "", f"no usable lines ({reasons})")])
    estimate = estimate_from_counts if count_windows else estimate_from_lengths
    windows: list[Any] = count_windows or length_windows  # one kind of window: estimate takes that kind
    overall = estimate(windows, num_positions)
    bins = tuple(estimate(group, num_positions) for group in _binned(windows, bin_edges)) if bin_edges else ()
    return Calibration(
        log_format=chosen,
        files=tuple(formats),
        num_positions=num_positions,
        overall=overall,
        bins=bins,
        skipped=skipped,
        notes=tuple(dict.fromkeys(notes)),
        model_name=model_name,
        repeated_inputs=tuple(repeated),
        servers=tuple(servers),
    )


def expand_directories(paths: Sequence[Path]) -> list[Path]:
    """Files as given; a directory stands for the ``*.json`` files under it (vllm bench serve's --result-dir)."""
    expanded: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.json") if p.is_file())
            if not found:
                raise DocumentError(
                    [
                        Problem(
                            str(path),
                            None,
                            "",
                            "directory holds no *.json files (vllm bench serve --save-result writes them)",
                        )
                    ]
                )
            expanded.extend(found)
        else:
            expanded.append(path)
    return expanded


def _calibrate_bench(runs: list[BenchRun], bin_edges: Sequence[int] | None) -> Calibration:
    """Step times and acceptance from bench results read one file a run."""
    return _calibrate_bench_table([Path(run.file) for run in runs], bin_edges, bench_table(runs))


def _calibrate_bench_table(
    paths: list[Path],
    bin_edges: Sequence[int] | None,
    table: BenchTable,
    skipped: tuple[Problem, ...] = (),
) -> Calibration:
    """Step times and acceptance from a bench table; acceptance binned by each run's concurrency."""
    windows = table.profile_windows()
    notes = [
        "From vllm bench serve results: exact counter differences over each run, binned by --max-concurrency. "
        "If the server ran with rejection_sample_method: synthetic, these rates are the forced ones, not the drafter's."
    ]
    ks = sorted({run.num_speculative_tokens for run in table.runs} - {0, table.profile_k or 0})
    if ks:
        notes.append(
            f"Only the K={table.profile_k} runs are pooled here; runs at K={', '.join(map(str, ks))} have fewer positions."
        )
    if not windows:
        overall = AcceptanceEstimate(0, 0, False, (), 1.0, None, None)
        return Calibration("vllm-bench", tuple(map(str, paths)), 0, overall, (), skipped, tuple(notes), bench=table)
    k = table.profile_k or 0
    for window in windows:
        _check_counts(window, k)
    concurrencies = sorted({w.num_running for w in windows if w.num_running is not None})
    bins = (
        tuple(estimate_from_counts(group, k) for group in _binned(windows, concurrencies))
        if bin_edges is not None
        else ()
    )
    return Calibration(
        log_format="vllm-bench",
        files=tuple(map(str, paths)),
        num_positions=k,
        overall=estimate_from_counts(windows, k),
        bins=bins,
        skipped=skipped,
        notes=tuple(notes),
        bench=table,
    )


def _check_options(log_format: str | None, num_speculative_tokens: int | None, bin_edges: Sequence[int] | None) -> None:
    if log_format is not None and log_format not in LOG_FORMATS:
        raise SpectuneError(f"--format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    if num_speculative_tokens is not None and not 1 <= num_speculative_tokens <= MAX_NUM_SPECULATIVE_TOKENS:
        raise SpectuneError(
            f"--num-speculative-tokens must be in [1, {MAX_NUM_SPECULATIVE_TOKENS}], got {num_speculative_tokens}"
        )
    if bin_edges is not None and (
        any(edge < 0 for edge in bin_edges) or any(b <= a for a, b in zip(bin_edges, bin_edges[1:], strict=False))
    ):
        raise SpectuneError(f"--bin-edges must be increasing whole numbers >= 0, got {','.join(map(str, bin_edges))}")


def _read(
    log_format: LogFormat,
    paths: list[Path],
    num_speculative_tokens: int | None,
    model_name: str | None,
    servers: Sequence[str],
) -> tuple[list[SourceWindows], int]:
    if log_format == "vllm-prometheus":
        if len(paths) < 2:
            raise SpectuneError(
                f"Prometheus counters are cumulative: give two scrapes of /metrics (before and after), got {len(paths)} file"
            )
        sources = [windows_between_scrapes([read_scrape(path) for path in paths], model_name=model_name)]
    elif log_format == "vllm-log":
        sources = [read_vllm_log(path, num_speculative_tokens=num_speculative_tokens) for path in paths]
        select_servers(sources, servers)
    elif log_format == "vllm-per-request":
        sources = [read_per_request_jsonl(path) for path in paths]
    else:
        return _read_sglang(paths, num_speculative_tokens)
    windows = [w for source in sources for w in source.count_windows]
    return sources, _common_num_positions(windows, num_speculative_tokens)


def _read_sglang(paths: list[Path], num_speculative_tokens: int | None) -> tuple[list[SourceWindows], int]:
    sources, candidates = [], set()
    for path in paths:
        source, rates = read_sglang_log(path)
        sources.append(source)
        candidates.add(
            infer_sglang_num_positions(source.file, rates, num_speculative_tokens) if rates else num_speculative_tokens
        )
    if None in candidates or len(candidates) != 1:
        raise SpectuneError(
            "SGLang logs do not state K (--speculative-num-steps) unambiguously"
            + (
                f" (the files suggest K in {sorted(k for k in candidates if k is not None)})"
                if len(candidates) > 1
                else ""
            )
            + "; give it with --num-speculative-tokens"
        )
    num_positions = next(k for k in candidates if k is not None)
    for window in (w for source in sources for w in source.length_windows):
        _check_sglang_length(window, num_positions)
    for source in sources:
        source.notes.append(
            "SGLang logs only the mean acceptance length: per-position rates are not measured; they are assumed "
            "from vLLM's base-rate/decay model (decay >= 0.85) so that the mean length matches at this K."
        )
    return sources, num_positions


def _check_sglang_length(window: LengthWindow, num_positions: int) -> None:
    if window.mean_acceptance_length > num_positions + 1 + window.rounding:
        raise DocumentError(
            [
                Problem(
                    window.file,
                    window.line,
                    "accept len",
                    f"{window.mean_acceptance_length:g} tokens per step exceeds K + 1 = {num_positions + 1}; is K right? "
                    "(SGLang trees, --speculative-eagle-topk > 1, can accept more than steps + 1)",
                )
            ]
        )


def _common_num_positions(windows: list[CountWindow], given: int | None) -> int:
    """The K every window shares; ``DocumentError`` at the first window that differs."""
    first: CountWindow | None = None
    first_k: int | None = None
    for window in windows:
        k = window.num_positions or given or _k_from_totals(window)
        if given is not None and k != given:
            raise DocumentError(
                [
                    Problem(
                        window.file,
                        window.line,
                        "K",
                        f"the source has {k} draft positions, but K={given} was given (--num-speculative-tokens)",
                    )
                ]
            )
        if k is not None:
            _check_counts(window, k)
        if first is None:
            first, first_k = window, k
            continue
        has_rates = window.accepted_per_position is not None
        if k != first_k or has_rates != (first.accepted_per_position is not None):
            seen = f"{k} draft positions" if has_rates else f"no per-position data (K={k})"
            before = f"{first_k} positions" if first.accepted_per_position is not None else "no per-position data"
            raise DocumentError(
                [
                    Problem(
                        window.file,
                        window.line,
                        "K",
                        f"K changed between windows: {seen} here, {before} at {first.file}:{first.line} (the first window); "
                        "calibrate each K from its own files (split the log where the server restarted)",
                    )
                ]
            )
    if first is not None and first_k is None:
        raise DocumentError(
            [Problem(first.file, first.line, "K", "the source does not state K; give it with --num-speculative-tokens")]
        )
    return first_k or 0  # 0 only when no window was usable, which the caller reports


def _check_counts(window: CountWindow, k: int) -> None:
    """Counts every format must satisfy: accepted <= draft tokens, drafts <= draft tokens <= K x drafts
    (a draft proposes 1 to K tokens), per-position counts non-increasing from at most the drafts, all
    within [0, 2^53]. Whatever breaks one is blamed on the window's file and line."""
    drafts_low, drafts_high = window.num_drafts_bounds or (window.num_drafts, window.num_drafts)
    per_position = window.accepted_per_position or ()
    counts = {
        "num_drafts": window.num_drafts,
        "num_draft_tokens": window.num_draft_tokens,
        "num_accepted_tokens": window.num_accepted_tokens,
    }
    problems = [
        f"{name} must be a whole number in [0, 2^53], got {value}"
        for name, value in counts.items()
        if not 0 <= value <= MAX_COUNT
    ]
    if not problems:
        if window.num_accepted_tokens > window.num_draft_tokens:
            problems.append(
                f"accepted tokens ({window.num_accepted_tokens}) exceed draft tokens ({window.num_draft_tokens})"
            )
        if not drafts_low <= window.num_draft_tokens <= k * drafts_high:
            problems.append(
                f"draft tokens ({window.num_draft_tokens}) must lie between the drafts ({window.num_drafts}) and K x drafts "
                f"({k} x {drafts_high} = {k * drafts_high})"
            )
        if per_position and (
            len(per_position) != k
            or per_position[0] > drafts_high
            or min(per_position) < 0
            or any(later > earlier for earlier, later in zip(per_position, per_position[1:], strict=False))
        ):
            problems.append(
                f"per-position accepted counts {list(per_position)} must be K={k} non-increasing counts from at most the drafts ({drafts_high})"
            )
    if problems:
        raise DocumentError(
            [Problem(window.file, window.line, "", f"inconsistent counts: {problem}") for problem in problems]
        )


def _k_from_totals(window: CountWindow) -> int | None:
    """K as draft tokens per draft, when that is whole (counters without per-position series)."""
    if window.num_drafts and window.num_draft_tokens % window.num_drafts == 0:
        return window.num_draft_tokens // window.num_drafts
    return None


def _binned(windows: Sequence[CountWindow] | Sequence[LengthWindow], lower_edges: Sequence[int]) -> list[list[Any]]:
    """Windows with a running-request count, grouped by the bin its count falls in; empty bins dropped.

    Bin i holds counts in [lower_edges[i], lower_edges[i + 1]); counts below the first edge form their own bin.
    """
    groups: dict[int, list[Any]] = {}
    for window in windows:
        if window.num_running is None:
            continue
        index = sum(1 for edge in lower_edges if edge <= window.num_running) - 1
        groups.setdefault(index, []).append(window)
    return [groups[index] for index in sorted(groups)]
