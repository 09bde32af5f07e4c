"""``spectune calibrate``: an acceptance profile from a real deployment's logs or metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from spectune._files import check_output_file, write_atomic
from spectune.calibrate import (
    DEFAULT_BIN_EDGES,
    MAX_FIT_MEAN_ERROR,
    MAX_RELATIVE_SPREAD,
    AcceptanceEstimate,
    BenchTable,
    Calibration,
    EngineLog,
    LogFormat,
    RepeatedStep,
    calibrate,
    calibration_profile,
    measured_step_csv,
    profile_yaml,
    read_engine_log,
)
from spectune.cli._errors import handle_errors
from spectune.config import (
    AcceptanceProfile,
    default_drafter,
    load_document,
    parse_mapping_text,
    read_step_time_table,
    validate_source,
)
from spectune.cost import StepSample, fit_roofline, fitted_cost_model
from spectune.errors import Problem, SpectuneError

_EXAMPLES = 3  # windows named per kind of warning


def _bin_edges(text: str | None, no_bins: bool) -> tuple[int, ...] | None:
    if no_bins:
        return None
    if text is None:
        return DEFAULT_BIN_EDGES
    try:
        return tuple(int(piece) for piece in text.split(",") if piece.strip())
    except ValueError:
        raise SpectuneError(f"--bin-edges must be whole numbers separated by commas, got {text!r}") from None


@handle_errors
def calibrate_command(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="vLLM logs, two or more Prometheus scrapes of /metrics (earlier first), vLLM per-request JSON lines, SGLang logs, "
            "or vllm bench serve --save-result JSON files (a directory stands for the *.json files under it).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Where to write the acceptance profile (YAML).", show_default=False)
    ],
    name: Annotated[str | None, typer.Option(help="Profile name (default: the first file's name).")] = None,
    log_format: Annotated[
        LogFormat | None, typer.Option("--format", help="Force the input format; default: detected per file.")
    ] = None,
    num_speculative_tokens: Annotated[
        int | None,
        typer.Option(
            "--num-speculative-tokens", "-k", help="K, where the source does not state it (old vLLM logs, SGLang)."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="The model to calibrate, when the input holds several: a Prometheus model_name label, or a "
            "vllm bench serve result's model_id."
        ),
    ] = None,
    server: Annotated[
        list[str] | None,
        typer.Option(
            "--server",
            help="vLLM logs holding several servers (docker compose logs, two processes in one file): the server to "
            "calibrate, by the label the refusal lists (e.g. vllm-1, or pid=4242); repeat to pool replicas on purpose.",
        ),
    ] = None,
    method: Annotated[str | None, typer.Option(help="Drafting method to record in the profile (e.g. eagle3).")] = None,
    temperature: Annotated[
        float | None,
        typer.Option(
            help="Sampling temperature of the measured traffic, if known; with bench results that record "
            "several, the runs to calibrate."
        ),
    ] = None,
    bin_edges: Annotated[
        str | None, typer.Option(help="Lower edges of running-request bins, e.g. 1,4,16,64 (default: powers of two).")
    ] = None,
    no_bins: Annotated[bool, typer.Option("--no-bins", help="Do not bin windows by running requests.")] = False,
    fit_roofline: Annotated[
        Path | None,
        typer.Option(
            help="vLLM logs: also fit the roofline's bandwidth fraction and step overhead to the engine lines, for the "
            "deployment of this simulation or study document (hardware, target, drafter)."
        ),
    ] = None,
    cost_model_out: Annotated[
        Path | None,
        typer.Option(
            "--cost-model",
            help="With --fit-roofline: where to write the cost_model section (default: cost-model.yaml beside --out).",
        ),
    ] = None,
    max_fit_error: Annotated[
        float,
        typer.Option(
            help="With --fit-roofline: the largest mean relative step-time error of a fit that is written (a fraction; "
            "see docs/calibration.md). A worse fit is refused: the roofline does not describe those windows."
        ),
    ] = MAX_FIT_MEAN_ERROR,
    kv_cache_tokens: Annotated[
        int | None,
        typer.Option(
            help="With --fit-roofline: the server's KV cache size in tokens, when the log lacks vLLM's startup line."
        ),
    ] = None,
    step_times: Annotated[
        Path | None,
        typer.Option(
            help="vllm bench serve results: where to write the measured step-time table (default: step-times.csv beside --out)."
        ),
    ] = None,
    max_spread: Annotated[
        float,
        typer.Option(
            help="vllm bench sweep / measure.sh trees: the largest MAD of a cell's repeats, as a fraction of their median."
        ),
    ] = MAX_RELATIVE_SPREAD,
) -> None:
    """Turn real speculative-decoding metrics into an acceptance profile for simulations and studies."""
    if temperature is not None and not 0.0 <= temperature <= 10.0:  # NaN fails too
        raise SpectuneError(f"--temperature: must be a number in [0, 10], got {temperature}")
    if not 0.0 < max_fit_error <= 10.0:  # NaN fails too
        raise SpectuneError(f"--max-fit-error: must be a fraction in (0, 10], got {max_fit_error}")
    if not 0.0 < max_spread <= 1.0:  # NaN fails too
        raise SpectuneError(f"--max-spread: must be a fraction in (0, 1], got {max_spread}")
    check_output_file(out)  # before reading the inputs
    for target in (out, step_times or out.parent / "step-times.csv"):
        _make_folder(target)
    calibration = calibrate(
        files,
        log_format=log_format,
        num_speculative_tokens=num_speculative_tokens,
        model_name=model,
        bin_edges=_bin_edges(bin_edges, no_bins),
        servers=tuple(server or ()),
        temperature=temperature,
        max_spread=max_spread,
    )
    for repeated in calibration.repeated_inputs:
        typer.echo(str(repeated), err=True)
    if calibration.bench is not None:
        _write_bench_results(calibration, out, step_times, name or files[0].stem, method, temperature)
        return
    profile = calibration_profile(calibration, name=name or files[0].stem, method=method, temperature=temperature)
    _write_profile(calibration, profile, out)
    for problem in calibration.skipped:
        typer.echo(str(problem), err=True)
    _print_summary(calibration, out)
    if fit_roofline is not None:
        if calibration.log_format != "vllm-log":
            raise SpectuneError(f"--fit-roofline reads vLLM server logs, got {calibration.log_format} input")
        _fit_roofline(
            calibration,
            fit_roofline,
            cost_model_out or out.parent / "cost-model.yaml",
            kv_cache_tokens,
            max_fit_error,
            out,
        )


def _make_folder(path: Path) -> None:
    """The file's folder, created as ``study run --out`` creates its own, before any input is read."""
    check_output_file(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpectuneError(f"cannot create {path.parent}: {err.strerror or err}") from None


def _write_profile(calibration: Calibration, profile: AcceptanceProfile, out: Path) -> None:
    header = f"Written by 'spectune calibrate' from {', '.join(calibration.files)}.\nRates are fractions; see 'notes' for how they were obtained."
    text = profile_yaml(profile, header=header)
    validate_source(parse_mapping_text(text, str(out)), expect="acceptance_profile")  # it must pass 'spectune validate'
    write_atomic(out, text)


def _write_bench_results(
    calibration: Calibration,
    out: Path,
    step_times: Path | None,
    name: str,
    method: str | None,
    temperature: float | None,
) -> None:
    table = calibration.bench
    if table is None:
        return
    console = Console(width=110, highlight=False)
    console.print(
        f"vllm-bench: {len(table.runs)} runs, K in {{{', '.join(map(str, sorted({r.num_speculative_tokens for r in table.runs})))}}}"
    )
    console.print(_step_table(table))
    for problem in calibration.skipped:
        typer.echo(str(problem), err=True)
    for point in table.single_concurrency:
        typer.echo(
            f"warning: K={point.num_speculative_tokens} was measured at one concurrency only ({point.concurrency}); left out of the "
            "table, which needs two batch sizes per K to interpolate",
            err=True,
        )
    table_path = step_times if step_times is not None else out.parent / "step-times.csv"
    if table.points:
        write_atomic(table_path, measured_step_csv(table))
        read_step_time_table(table_path)  # the table must load as written
        console.print(f"wrote {table_path}")
    if calibration.num_positions == 0:
        console.print("no run had speculative decoding on: no acceptance profile written")
        return
    profile = calibration_profile(calibration, name=name, method=method, temperature=temperature)
    _write_profile(calibration, profile, out)
    console.print(_position_table(calibration.overall))
    if calibration.bins:
        console.print(_bins_table(calibration.bins, by="concurrency"))
    console.print(f"wrote {out}")


def _step_table(table: BenchTable) -> Table:
    points = (*table.points, *table.single_concurrency)
    repeated = bool(points) and all(isinstance(p, RepeatedStep) for p in points)
    title = "Measured step times (mean TPOT x tokens after the first / drafts)"
    result = Table(title=title + ("; median of the repeats, MAD" if repeated else ""))
    headings = ("concurrency", "K", "runs", "mean batch", "step ms", *(("MAD ms",) if repeated else ()))
    for heading in (*headings, "acceptance length", "mean ITL / step"):
        result.add_column(heading, justify="right")
    for point in points:
        itl = "-" if point.mean_itl_ms is None else f"{point.mean_itl_ms / point.step_time_ms:.2f}"
        mad = [f"{point.step_time_mad_ms:.3f}"] if isinstance(point, RepeatedStep) and repeated else []
        result.add_row(
            str(point.concurrency),
            str(point.num_speculative_tokens),
            str(len(point.files)),
            f"{point.mean_batch_size:.1f}",
            f"{point.step_time_ms:.3f}",
            *mad,
            f"{point.acceptance_length:.3f}",
            itl,
        )
    return result


def _plus_minus(value: float, error: float | None) -> str:
    return f"{value:.4f}" if error is None else f"{value:.4f} ± {error:.4f}"


def _position_table(estimate: AcceptanceEstimate) -> Table:
    measured = estimate.per_position_measured
    table = Table(
        title="Per-position acceptance" + ("" if measured else " (assumed: only the mean length was measured)")
    )
    table.add_column("position", justify="right")
    table.add_column("conditional ± s.e.", justify="right")
    table.add_column("unconditional ± s.e.", justify="right")
    unconditional = estimate.unconditional_rates
    for i, rate in enumerate(estimate.conditional_rates):
        conditional = _plus_minus(rate, estimate.conditional_stderr[i] if estimate.conditional_stderr else None)
        shown = "-" if unconditional is None else _plus_minus(unconditional[i], estimate.unconditional_stderr[i])  # type: ignore[index]
        table.add_row(str(i), conditional, shown)
    return table


def _bins_table(bins: tuple[AcceptanceEstimate, ...], by: str = "running") -> Table:
    table = Table(title="By running requests" if by == "running" else "By concurrency")
    for heading in (by, "windows" if by == "running" else "runs", "drafts", "mean length ± s.e.", "conditional rates"):
        table.add_column(heading, justify="right")
    for b in bins:
        span = str(b.min_running) if b.min_running == b.max_running else f"{b.min_running}-{b.max_running}"
        drafts = "-" if b.num_drafts is None else str(b.num_drafts)
        rates = ", ".join(f"{r:.3f}" for r in b.conditional_rates)
        table.add_row(
            span,
            str(b.num_windows),
            drafts,
            _plus_minus(b.mean_acceptance_length, b.mean_acceptance_length_stderr),
            rates,
        )
    return table


def _print_summary(calibration: Calibration, out: Path) -> None:
    console = Console(width=110, highlight=False)
    overall = calibration.overall
    console.print(
        f"{calibration.log_format}: {overall.num_windows} windows from {len(calibration.files)} file(s), K={calibration.num_positions}"
    )
    if overall.num_drafts is not None:
        console.print(
            f"drafts {overall.num_drafts}, draft tokens {overall.num_draft_tokens}, accepted {overall.num_accepted_tokens}"
        )
    console.print(_position_table(overall))
    console.print(
        f"mean acceptance length: {_plus_minus(overall.mean_acceptance_length, overall.mean_acceptance_length_stderr)} tokens/step"
    )
    if overall.unconditional_rounding_error is not None and max(overall.unconditional_rounding_error) == 0.0:
        console.print("rounding of the logged rates: none left (the rates pin every window's counts exactly)")
    elif overall.unconditional_rounding_error is not None:
        console.print(
            f"rounding of the logged rates: at most ±{max(overall.unconditional_rounding_error):.5f} (unconditional), "
            f"±{max(overall.conditional_rounding_error or (0.0,)):.5f} (conditional)"
        )
    if not overall.per_position_measured:
        console.print(
            "only the mean acceptance length was measured; per-position rates are assumed (see the profile's notes)"
        )
    if calibration.bins:
        console.print(_bins_table(calibration.bins))
    if calibration.skipped:
        console.print(f"{len(calibration.skipped)} line(s) skipped (listed above)")
    console.print(f"wrote {out}")


def _deployment(path: Path) -> tuple[Any, Any, Any, Any]:
    """(hardware, target, drafter, cost_model) of a simulation or study document (a study: its first candidate)."""
    model = load_document(path).model
    if getattr(model, "kind", None) == "simulation":
        return model.hardware, model.target_model, model.effective_drafter(), model.cost_model
    if getattr(model, "kind", None) == "study":
        candidate = model.candidates[0]
        drafter = candidate.drafter or default_drafter(candidate.speculative.method, model.target_model)
        return model.hardware, model.target_model, drafter, model.cost_model
    raise SpectuneError(
        f"--fit-roofline: {path} must be a simulation or study document, got kind {getattr(model, 'kind', None)!r}"
    )


def _summarise_left_out(logs: list[EngineLog]) -> None:
    """One warning per kind of window left out, with its count and the first few, not one line per window."""
    grouped: dict[str, list[Problem]] = {}
    for log in logs:
        for kind, problems in log.skipped_by_kind().items():
            grouped.setdefault(kind, []).extend(problems)
    for kind, problems in grouped.items():
        examples = "; ".join(f"{p.file}:{p.line}" for p in problems[:_EXAMPLES])
        more = f" and {len(problems) - _EXAMPLES} more" if len(problems) > _EXAMPLES else ""
        typer.echo(
            f"warning: {len(problems)} window(s) left out of the fit ({kind}): {problems[0].message.split(': ', 1)[-1]} "
            f"(at {examples}{more})",
            err=True,
        )


def _fit_roofline(
    calibration: Calibration,
    document: Path,
    out: Path,
    kv_cache_tokens: int | None,
    max_fit_error: float,
    profile_out: Path,
) -> None:
    hardware, target, drafter, base = _deployment(document)
    logs = [
        read_engine_log(Path(file), kv_cache_tokens=kv_cache_tokens, servers=calibration.servers)
        for file in calibration.files
    ]
    _summarise_left_out(logs)
    steps = [
        StepSample(w.num_running, w.num_speculative_tokens, w.context_tokens, w.step_time_s, f"{w.file}:{w.line}")
        for log in logs for w in log.windows
    ]  # fmt: skip
    fit = fit_roofline(steps, hardware, target, drafter)
    if fit.mean_relative_error > max_fit_error:
        raise SpectuneError(
            f"--fit-roofline: the fitted roofline misses the {fit.num_steps} measured step times by {fit.mean_relative_error:.1%} "
            f"on average (max {fit.max_relative_error:.1%} at {fit.worst}), above the bound of {max_fit_error:.0%} "
            f"(--max-fit-error): it does not describe this deployment, so {out} was not written (the acceptance profile "
            f"{profile_out} was). Check that {document} is the deployment that served the log (GPU, model, "
            "tensor parallelism, drafter)"
        )
    config = fitted_cost_model(fit, source=", ".join(calibration.files), base=base)
    header = (
        f"# Fitted by 'spectune calibrate --fit-roofline {document}' to {fit.num_steps} decode windows of {', '.join(calibration.files)}.\n"
        f"# Paste into a simulation or study document of the same deployment ({target.name} on {hardware.gpu.name}).\n"
    )
    data = {
        "cost_model": {"method": "roofline"} | config.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    }
    write_atomic(out, header + yaml.safe_dump(data, sort_keys=False))
    console = Console(width=110, highlight=False)
    console.print(
        f"roofline fitted to {fit.num_steps} decode windows: achievable_bandwidth_fraction {fit.achievable_bandwidth_fraction:.4f} "
        f"(was {hardware.gpu.achievable_bandwidth_fraction:g}), overhead_s {fit.overhead_s * 1e3:.3f} ms (was {base.overhead_s * 1e3:g} ms); "
        f"step-time error mean {fit.mean_relative_error:.1%}, max {fit.max_relative_error:.1%} ({fit.worst})"
    )
    console.print(f"wrote {out}")
