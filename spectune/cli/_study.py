"""``spectune study run`` and ``spectune study show``."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from spectune._interrupt import interrupted
from spectune.cli._errors import handle_errors
from spectune.cli._interpreter import use_interpreter_if_asked
from spectune.errors import SpectuneError

if TYPE_CHECKING:
    from spectune._spawn import WorkerPool
    from spectune.config import StudyDocument
    from spectune.study import StudyOutcome, StudyProgress, StudySpace

StorageOption = Annotated[
    str | None,
    typer.Option(
        "--storage",
        help="Journal file path or database URL (postgresql+psycopg://USER:PASSWORD@HOST/DB). "
        "Default: the document's storage, else OUT/study.journal.",
        show_default=False,
    ),
]

SamplerName = Literal["auto", "structured", "exhaustive", "tpe"]


def _console() -> Console:
    """Standard output; piped, it has no terminal width to respect, so tables are not wrapped at 80 columns."""
    return Console(soft_wrap=True, highlight=False, width=None if sys.stdout.isatty() else 160)


def _table(rows: list[dict[str, str]]) -> Table:
    """Rows of strings as a table; the 'note' column only when some row has a note."""
    optional = ("note", "marks")  # shown only when some row has one
    columns = [c for c in rows[0] if c not in optional or any(r.get(c) for r in rows)] if rows else []
    table = Table(show_edge=True)
    for column in columns:
        table.add_column(column, justify="left" if column in (*optional, "config", "tie set") else "right")
    for row in rows:
        table.add_row(*(row[c] for c in columns))
    return table


def print_summary(console: Console, outcome: StudyOutcome) -> None:
    """The recommendation, its per-bucket table and the vLLM flag."""
    from spectune.export import pareto_rows, summary_rows, vllm_serve_command
    from spectune.study import provenance_notes, recommendation_provenance

    recommendation = outcome.recommendation
    if recommendation is None:
        console.print(f"study {outcome.space.name}: no completed trial yet")
        return
    # With policies searched, the line names the winning one as the report does (e.g. "static K = 6: ...").
    policy = (
        f"{recommendation.verdict.winner.describe()}: "
        if len(outcome.space.policies) > 1 and recommendation.verdict
        else ""
    )
    console.print(
        f"Recommendation: [bold]{escape(policy + recommendation.combo.label)}[/bold] (aggregate "
        f"{recommendation.aggregate_throughput_tokens_per_s:,.0f} output tokens/s over batch sizes)"
    )
    console.print(_table(summary_rows(outcome)))
    if "tpot_p99" in outcome.space.objectives:
        console.print("Pareto fronts (throughput vs p99 TPOT) per batch size:")
        console.print(_table(pareto_rows(outcome)))
    if outcome.partial_note is not None:
        console.print(f"note: {outcome.partial_note}", markup=False)
    for note in recommendation.notes:
        console.print(f"note: {note}", markup=False)
    for note in provenance_notes(recommendation_provenance(recommendation, outcome.completed)):
        console.print(f"mark: {note}", markup=False)
    console.print(vllm_serve_command(recommendation), markup=False)


def _progress_callback(
    enabled: bool, console: Console
) -> tuple[Callable[[StudyProgress], None] | None, Callable[[], None]]:
    """(progress callback for run_study, function that removes the bar); no bar when not enabled."""
    if not enabled:
        return None, lambda: None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("trials"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True
    )
    task = bar.add_task("trials", total=None)
    bar.start()

    def update(progress: StudyProgress) -> None:
        bar.update(task, completed=progress.complete, total=progress.total)

    return update, bar.stop


class _GracefulStop:
    """First Ctrl-C: finish the running trials, then stop (and still report). Second: stop now."""

    def __init__(self) -> None:
        self.requested = False
        self._previous = signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        import optuna

        self.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # Optuna logs a trial that a second Ctrl-C interrupts with its traceback; the one-line notice suffices.
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        typer.echo("stopping after the running trials (Ctrl-C again to stop now)", err=True)

    def __call__(self) -> bool:
        return self.requested

    def restore(self) -> None:
        # After a first Ctrl-C the command is ending: a second one has nothing left to stop, and would
        # otherwise interrupt the interpreter's exit.
        signal.signal(signal.SIGINT, signal.SIG_IGN if self.requested else self._previous)


def _exit_130_when_interrupted(command: Callable[..., None]) -> Callable[..., None]:
    """A Ctrl-C that lands outside the study (while the document loads or the artefacts are written):
    one line and exit 130, as during it, not Click's 'Aborted!' with exit 1."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            command(*args, **kwargs)
        except KeyboardInterrupt:
            raise typer.Exit(code=interrupted()) from None

    return wrapper


@handle_errors
@_exit_130_when_interrupted
def run(
    study: Annotated[Path, typer.Argument(help="The study document (kind: study).", show_default=False)],
    storage: StorageOption = None,
    n_trials: Annotated[
        int | None,
        typer.Option(
            "--n-trials", help="Complete trials the study ends with (overrides the document).", show_default=False
        ),
    ] = None,
    workers: Annotated[
        int, typer.Option("--workers", help="Worker processes on this machine: 1 to 4 a CPU core (at least 8).")
    ] = 1,
    out: Annotated[
        Path | None, typer.Option("--out", help="Output folder. Default: runs/<study name>/.", show_default=False)
    ] = None,
    sampler: Annotated[
        SamplerName | None,
        typer.Option("--sampler", help="The search strategy (overrides the document).", show_default=False),
    ] = None,
    progress: Annotated[
        bool | None,
        typer.Option(
            "--progress/--no-progress", help="Progress bar (default: when stderr is a terminal).", show_default=False
        ),
    ] = None,
) -> None:
    """Run (or resume) a study; print the recommendation and write its artefacts to OUT."""
    from spectune._spawn import start_workers

    document = _load_study(study, n_trials, workers)
    # Started now, the workers start up while this process loads its own libraries and prepares the study (_spawn).
    pool = start_workers(workers, document.simulation.device) if workers > 1 else None
    try:
        plan = _plan_run(document, study, storage=storage, out=out, sampler=sampler, workers=workers)
        console = _console()
        _print_plan(console, document, plan)
        _search_and_report(
            console,
            document,
            plan,
            n_trials=n_trials if n_trials is not None else document.trials.n_trials,
            workers=workers,
            progress=sys.stderr.isatty() if progress is None else progress,
            pool=pool,
        )
    finally:
        if pool is not None:
            pool.close()


@dataclass(frozen=True)
class _RunPlan:
    """Where a study run reads and writes and how it searches, settled before its first trial."""

    space: StudySpace
    sampler: SamplerName
    storage_url: str
    out_dir: Path


def _load_study(study: Path, n_trials: int | None, workers: int) -> StudyDocument:
    """The validated study document; every refusal of the arguments comes before a worker is spawned."""
    from spectune._spawn import workers_error
    from spectune.config import load_document

    if n_trials is not None and n_trials < 1:
        raise SpectuneError(
            f"--n-trials: must be >= 1, got {n_trials} (to write a study's artefacts without new trials, use 'spectune export')"
        )
    loaded = load_document(study, expect="study")
    refusal = workers_error(workers)
    if refusal is not None:
        raise SpectuneError(refusal)
    for notice in loaded.notices:
        typer.echo(str(notice), err=True)
    document: StudyDocument = loaded.model  # expect="study" refused every other kind
    use_interpreter_if_asked(document.simulation)
    return document


def _plan_run(
    document: StudyDocument,
    study: Path,
    *,
    storage: str | None,
    out: Path | None,
    sampler: SamplerName | None,
    workers: int,
) -> _RunPlan:
    """The search space, sampler, storage and output folder; the folder is checked now, not after the study."""
    from spectune.export import check_output_dir
    from spectune.study import default_out_dir, resolve_storage, space_from_document

    gpu_notice = shared_gpu_notice(document.simulation.device, workers)
    if gpu_notice is not None:
        typer.echo(gpu_notice, err=True)
    out_dir = default_out_dir(document.name, out)
    check_output_dir(out_dir)
    storage_url = resolve_storage(
        document.name, option=storage, document_storage=document.storage, document_dir=study.parent, out=out
    )
    return _RunPlan(space_from_document(document), sampler or document.trials.sampler, storage_url, out_dir)


def _print_plan(console: Console, document: StudyDocument, plan: _RunPlan) -> None:
    """One line: the space's size, the strategy and the storage; then each combination the document skips."""
    from spectune.study import describe_storage, resolve_strategy

    space = plan.space
    ks = space.k_values
    console.print(
        f"study {space.name}: {len(space.batch_sizes)} batch sizes x {len(space.combos)} combos x K {ks[1]}-{ks[-1]} "
        f"(+ K=0) = {space.size} points; sampler {resolve_strategy(space, plan.sampler)}; "
        f"storage {describe_storage(plan.storage_url)}"
    )
    for label, reason in document.skipped_combinations():
        console.print(f"skipped {label}: {reason}", markup=False)


def _search_and_report(
    console: Console,
    document: StudyDocument,
    plan: _RunPlan,
    *,
    n_trials: int | None,
    workers: int,
    progress: bool,
    pool: WorkerPool | None,
) -> None:
    """Run the trials, then report and write the artefacts; a first Ctrl-C still reports, exiting 130."""
    import optuna

    from spectune.study import SimulationEvaluator, document_fingerprint, run_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    update, close = _progress_callback(progress, Console(stderr=True))
    started = time.monotonic()
    stop = _GracefulStop()
    try:
        finished = run_study(
            plan.space, SimulationEvaluator(document, workers), document_fingerprint(document),
            storage=plan.storage_url, strategy=plan.sampler, n_trials=n_trials, workers=workers, seed=document.seed,
            keep_combos=document.trials.keep_combos, progress=update, should_stop=stop, device=document.simulation.device, pool=pool,
            **({} if document.trials.refine_budget is None else {"refine_budget": document.trials.refine_budget}),
        )  # fmt: skip
        close()
        _report(console, plan.storage_url, plan.space.name, finished.completed_trials, started, plan.out_dir)
    except KeyboardInterrupt:
        close()
        typer.echo(
            "interrupted: a trial that was running is failed and re-run next time; run the same command to resume",
            err=True,
        )
        raise typer.Exit(code=130) from None
    finally:
        stop.restore()
        close()
    if stop.requested:
        console.print("stopped early (Ctrl-C): run the same command to resume the study")
        raise typer.Exit(code=130)


def shared_gpu_notice(device: str, workers: int, pipe_dir: Path | None = None) -> str | None:
    """A warning when several workers would share a CUDA device without MPS, else None.

    Without MPS (NVIDIA's Multi-Process Service) a GPU time-slices between processes: a simulated step
    is a few short kernels and one read-back, so each worker's step waits for the others' slices and N
    workers can finish later than one (docs/studies.md has the H200's numbers). Under MPS their kernels
    share the GPU at once. The control daemon's pipe is looked for where CUDA looks for it."""
    if workers < 2:
        return None
    import torch

    from spectune.simulator._backend import resolve_device

    resolved = resolve_device(device)
    if resolved.type != "cuda":
        return None
    gpus = torch.cuda.device_count() if resolved.index is None else 1  # a bare cuda spreads the workers
    if workers <= gpus:
        return None
    pipes = pipe_dir if pipe_dir is not None else Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))
    if (pipes / "control").exists():
        return None
    return (
        f"note: --workers {workers} share {'one GPU' if gpus == 1 else f'{gpus} GPUs'}, and no MPS control daemon was found (no {pipes}/control): the GPU "
        "time-slices between the workers' processes, so each waits for the others' slices and the study can take "
        "longer than with --workers 1; start MPS first (nvidia-cuda-mps-control -d; see docs/studies.md)"
    )


def _report(console: Console, storage_url: str, name: str, new_trials: int, started: float, out_dir: Path) -> None:
    """What the study holds now, its recommendation, and its artefacts written to ``out_dir``."""
    from spectune.export import write_artefacts
    from spectune.study import load_outcome

    outcome = load_outcome(storage_url, name)
    complete = sum(1 for t in outcome.trials if t.state == "COMPLETE")
    console.print(
        f"{complete} complete trials ({outcome.num_evaluations} simulations), {new_trials} new in this run "
        f"({time.monotonic() - started:.0f} s)"
    )
    print_summary(console, outcome)
    change = write_artefacts(outcome, out_dir)
    if change.removed:
        console.print(f"removed {out_dir}/: {', '.join(p.name for p in change.removed)} (an earlier export's)")
    console.print(f"wrote {out_dir}/: {', '.join(p.name for p in change.written)}")
    _refuse_if_nothing_feasible(outcome)


def _refuse_if_nothing_feasible(outcome: StudyOutcome) -> None:
    """A study whose every bucket misses the SLOs answers no question: exit 1, naming the constraints."""
    recommendation = outcome.recommendation
    if recommendation is None or not outcome.space.constraints:
        return
    evaluations = [c.evaluation for c in recommendation.choices if c.evaluation is not None]
    if evaluations and not any(e.feasible for e in evaluations):
        labels = ", ".join(repr(c.label) for c in outcome.space.constraints)
        raise SpectuneError(
            f"no simulated config meets the constraints {labels} at any batch size: loosen them (the artefacts "
            "written hold the least violating configs, not a config that meets them)"
        )


@handle_errors
def show(
    study: Annotated[str, typer.Argument(help="A study document, or a study name.", show_default=False)],
    storage: StorageOption = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Where the study's default journal lives (runs/<name>/).", show_default=False),
    ] = None,
) -> None:
    """Print a study's trials so far and its recommendation (from its storage alone)."""
    from spectune.study import load_outcome, locate_study

    name, storage_url = locate_study(study, storage=storage, out=out)
    outcome = load_outcome(storage_url, name)
    states: dict[str, int] = {}
    for trial in outcome.trials:
        states[trial.state.lower()] = states.get(trial.state.lower(), 0) + 1
    console = _console()
    counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items())) or "no trials"
    console.print(
        f"study {name} in {outcome.storage_label}: {counts}; {outcome.num_evaluations} simulations of {outcome.space.size} points"
    )
    print_summary(console, outcome)


@handle_errors
def repair(
    journal: Annotated[Path, typer.Argument(help="The study's journal file.", show_default=False)],
) -> None:
    """Keep every readable record of a damaged journal file, after backing it up to JOURNAL.bak.

    Stop every worker on the journal first.
    """
    from spectune.study import repair_journal

    result = repair_journal(str(journal))
    if result.backup is None:
        typer.echo(f"{journal}: all {result.kept} records are readable; nothing to repair")
        return
    for number, reason in result.dropped:
        typer.echo(f"{journal}:{number}: dropped ({reason})")
    typer.echo(f"kept {result.kept} records, dropped {len(result.dropped)} lines; the original is at {result.backup}")
