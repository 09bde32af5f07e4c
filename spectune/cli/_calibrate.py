"""``spectune calibrate``: an acceptance profile from a real deployment's logs or metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from spectune._files import check_output_file, write_atomic
from spectune.calibrate import DEFAULT_BIN_EDGES, LOG_FORMATS, AcceptanceEstimate, Calibration, calibrate, calibration_profile, profile_yaml
from spectune.cli._app import app, handle_errors
from spectune.config import parse_mapping_text, validate_source
from spectune.errors import SpectuneError


def _bin_edges(text: str | None, no_bins: bool) -> tuple[int, ...] | None:
    if no_bins:
        return None
    if text is None:
        return DEFAULT_BIN_EDGES
    try:
        return tuple(int(piece) for piece in text.split(",") if piece.strip())
    except ValueError:
        raise SpectuneError(f"--bin-edges must be whole numbers separated by commas, got {text!r}") from None


@app.command(name="calibrate")
@handle_errors
def calibrate_command(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="vLLM logs, two or more Prometheus scrapes of /metrics (earlier first), vLLM per-request JSON lines, or SGLang logs.",
            show_default=False,
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the acceptance profile (YAML).", show_default=False)],
    name: Annotated[str | None, typer.Option(help="Profile name (default: the first file's name).")] = None,
    log_format: Annotated[
        str | None, typer.Option("--format", help=f"Force the input format ({', '.join(LOG_FORMATS)}); default: detected per file.")
    ] = None,
    num_speculative_tokens: Annotated[
        int | None,
        typer.Option("--num-speculative-tokens", "-k", help="K, where the source does not state it (old vLLM logs, SGLang)."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Prometheus model_name label to calibrate, when scrapes hold several.")] = None,
    method: Annotated[str | None, typer.Option(help="Drafting method to record in the profile (e.g. eagle3).")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature of the measured traffic, if known.")] = None,
    bin_edges: Annotated[
        str | None, typer.Option(help="Lower edges of running-request bins, e.g. 1,4,16,64 (default: powers of two).")
    ] = None,
    no_bins: Annotated[bool, typer.Option("--no-bins", help="Do not bin windows by running requests.")] = False,
) -> None:
    """Turn real speculative-decoding metrics into an acceptance profile for simulations and studies."""
    if temperature is not None and not 0.0 <= temperature <= 10.0:  # NaN fails too
        raise SpectuneError(f"--temperature: must be a number in [0, 10], got {temperature}")
    check_output_file(out)  # before reading the inputs
    calibration = calibrate(
        files,
        log_format=log_format,  # type: ignore[arg-type] -- checked by calibrate
        num_speculative_tokens=num_speculative_tokens,
        model_name=model,
        bin_edges=_bin_edges(bin_edges, no_bins),
    )
    profile = calibration_profile(calibration, name=name or files[0].stem, method=method, temperature=temperature)
    header = f"Written by 'spectune calibrate' from {', '.join(calibration.files)}.\nRates are fractions; see 'notes' for how they were obtained."
    text = profile_yaml(profile, header=header)
    validate_source(parse_mapping_text(text, str(out)), expect="acceptance_profile")  # it must pass 'spectune validate'
    write_atomic(out, text)
    for problem in calibration.skipped:
        typer.echo(str(problem), err=True)
    _print_summary(calibration, out)


def _plus_minus(value: float, error: float | None) -> str:
    return f"{value:.4f}" if error is None else f"{value:.4f} ± {error:.4f}"


def _position_table(estimate: AcceptanceEstimate) -> Table:
    measured = estimate.per_position_measured
    table = Table(title="Per-position acceptance" + ("" if measured else " (assumed: only the mean length was measured)"))
    table.add_column("position", justify="right")
    table.add_column("conditional ± s.e.", justify="right")
    table.add_column("unconditional ± s.e.", justify="right")
    unconditional = estimate.unconditional_rates
    for i, rate in enumerate(estimate.conditional_rates):
        conditional = _plus_minus(rate, estimate.conditional_stderr[i] if estimate.conditional_stderr else None)
        shown = "-" if unconditional is None else _plus_minus(unconditional[i], estimate.unconditional_stderr[i])  # type: ignore[index]
        table.add_row(str(i), conditional, shown)
    return table


def _bins_table(bins: tuple[AcceptanceEstimate, ...]) -> Table:
    table = Table(title="By running requests")
    for heading in ("running", "windows", "drafts", "mean length ± s.e.", "conditional rates"):
        table.add_column(heading, justify="right")
    for b in bins:
        span = str(b.min_running) if b.min_running == b.max_running else f"{b.min_running}-{b.max_running}"
        drafts = "-" if b.num_drafts is None else str(b.num_drafts)
        rates = ", ".join(f"{r:.3f}" for r in b.conditional_rates)
        table.add_row(span, str(b.num_windows), drafts, _plus_minus(b.mean_acceptance_length, b.mean_acceptance_length_stderr), rates)
    return table


def _print_summary(calibration: Calibration, out: Path) -> None:
    console = Console(width=110, highlight=False)
    overall = calibration.overall
    console.print(f"{calibration.log_format}: {overall.num_windows} windows from {len(calibration.files)} file(s), K={calibration.num_positions}")
    if overall.num_drafts is not None:
        console.print(f"drafts {overall.num_drafts}, draft tokens {overall.num_draft_tokens}, accepted {overall.num_accepted_tokens}")
    console.print(_position_table(overall))
    console.print(f"mean acceptance length: {_plus_minus(overall.mean_acceptance_length, overall.mean_acceptance_length_stderr)} tokens/step")
    if overall.unconditional_rounding_error is not None and max(overall.unconditional_rounding_error) == 0.0:
        console.print("rounding of the logged rates: none left (the rates pin every window's counts exactly)")
    elif overall.unconditional_rounding_error is not None:
        console.print(
            f"rounding of the logged rates: at most ±{max(overall.unconditional_rounding_error):.5f} (unconditional), "
            f"±{max(overall.conditional_rounding_error or (0.0,)):.5f} (conditional)"
        )
    if not overall.per_position_measured:
        console.print("only the mean acceptance length was measured; per-position rates are assumed (see the profile's notes)")
    if calibration.bins:
        console.print(_bins_table(calibration.bins))
    if calibration.skipped:
        console.print(f"{len(calibration.skipped)} line(s) skipped (listed above)")
    console.print(f"wrote {out}")
