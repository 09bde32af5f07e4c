"""``spectune simulate``: run one simulation document and print its serving metrics."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from spectune.cli._errors import handle_errors
from spectune.cli._interpreter import use_interpreter_if_asked
from spectune.config import apply_overrides, read_mapping, validate_source
from spectune.cost import build_cost_model


@handle_errors
def simulate(
    document_path: Annotated[
        Path, typer.Argument(metavar="FILE", help="A `kind: simulation` document.", show_default=False)
    ],
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="FIELD=VALUE",
            help="Override a field (repeatable), e.g. speculative.num_speculative_tokens=5.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the table.")] = False,
    baseline: Annotated[
        bool | None,
        typer.Option("--baseline/--no-baseline", help="Also simulate without speculation (default: the document's)."),
    ] = None,
    progress: Annotated[
        bool | None, typer.Option("--progress/--no-progress", help="Progress bar (default: when stderr is a terminal).")
    ] = None,
) -> None:
    """Simulate a speculative config on a deployment and workload; print throughput, latency and acceptance."""
    from spectune.simulator import simulate as run_simulation  # torch is imported only when simulating

    source = apply_overrides(read_mapping(document_path), overrides or [])
    loaded = validate_source(source, expect="simulation")
    for notice in loaded.notices:
        typer.echo(str(notice), err=True)
    document = loaded.model
    use_interpreter_if_asked(document.simulation)
    show_progress = sys.stderr.isatty() if progress is None else progress
    if show_progress:
        with Progress(
            TextColumn("[bold]simulating[/] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        ) as bar:
            task = bar.add_task(document.name, total=document.workload.num_requests)
            result = run_simulation(
                document, baseline=baseline, progress=lambda done, total: bar.update(task, completed=done)
            )
    else:
        result = run_simulation(document, baseline=baseline)
    fit = _step_time_fit(document)
    if as_json:
        typer.echo(json.dumps({**_finite(result.to_dict()), "step_time_fit": fit}, indent=2))
        return
    Console().print(_table(document, result))
    if fit is not None:
        typer.echo(f"measured step-time table, {fit}")


def _step_time_fit(document: Any) -> str | None:
    """How well the measured table predicts its own points (leave-one-out), or None with the roofline."""
    if document.cost_model.method != "measured":
        return None
    cost = build_cost_model(document.hardware, document.target_model, document.effective_drafter(), document.cost_model)
    report = cost.fit_report()
    return report.summary() if report is not None else None


def _finite(values: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN: undefined numbers (e.g. p99 with no samples) become null."""
    return {k: (None if isinstance(v, float) and v != v else v) for k, v in values.items()}


def _table(document: Any, result: Any) -> Table:
    spec = document.speculative
    config = (
        "no speculation"
        if spec is None
        else f"{spec.method} K={spec.num_speculative_tokens} {spec.rejection_sample_method}/{spec.draft_sample_method}"
    )
    title = f"{document.name}: {config} · {document.target_model.name} on {document.hardware.num_gpus}× {document.hardware.gpu.name}"
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("metric", style="bold")
    table.add_column("value")
    speedup = f"   speedup vs no speculation {result.speedup_vs_no_spec:.2f}×" if result.speedup_vs_no_spec else ""
    table.add_row(
        "throughput",
        f"{result.throughput_tokens_per_s:,.0f} tok/s (± {result.throughput_stderr_tokens_per_s:,.0f}){speedup}",
    )
    tpot_speedup = f"   TPOT speedup {result.tpot_speedup_vs_no_spec:.2f}×" if result.tpot_speedup_vs_no_spec else ""
    table.add_row("TPOT p50 / p99", f"{result.tpot_p50_ms:.2f} / {result.tpot_p99_ms:.2f} ms{tpot_speedup}")
    table.add_row("ITL p50 / p99", f"{result.itl_p50_ms:.2f} / {result.itl_p99_ms:.2f} ms")
    table.add_row("TTFT p50 / p99", f"{result.ttft_p50_ms:.1f} / {result.ttft_p99_ms:.1f} ms")
    if result.mean_acceptance_length is not None:
        per_position = ", ".join(f"{rate:.3f}" for rate in result.acceptance_per_position)
        table.add_row("acceptance length", f"{result.mean_acceptance_length:.2f}  (per position: {per_position})")
    shares = ", ".join(f"{name} {share:.0%}" for name, share in result.step_time_share.items() if share >= 0.005)
    table.add_row("step time (mean)", f"{result.mean_step_ms:.2f} ms  ({shares})")
    replicas = f" per replica, {result.num_replicas} replicas" if result.num_replicas > 1 else ""
    table.add_row("batch size (mean)", f"{result.mean_batch_size:.1f}{replicas}")
    if result.kv_cache_tokens is not None:
        bound = (
            f"  [yellow]bound the batch in {result.kv_cache_bound_steps:,} steps, {result.num_preemptions:,} "
            "preemptions[/]"
            if result.kv_cache_bound_steps
            else ""
        )
        table.add_row(
            "KV cache", f"{result.kv_cache_tokens:,} tokens, peak {result.kv_cache_peak_usage:.0%} used{bound}"
        )
    truncated = "  [yellow]stopped at simulation.max_steps[/]" if result.truncated else ""
    table.add_row(
        "simulated",
        f"{result.num_requests:,} requests, {result.output_tokens:,} tokens, {result.simulated_time_s:.2f} s, "
        f"{result.simulated_steps:,} steps{truncated}",
    )
    table.add_row(
        "wall time",
        f"{result.wall_time_s:.2f} s (rejection sampling {result.kernel_wall_time_s:.2f} s, logit synthesis "
        f"{result.synthesis_wall_time_s:.2f} s)",
    )
    return table
