"""``spectune export``: write a study's artefacts again, from its storage alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from spectune._files import SAFE_NAME_RULE, is_safe_name
from spectune.cli._errors import handle_errors
from spectune.cli._study import StorageOption, _refuse_if_nothing_feasible
from spectune.errors import SpectuneError


@handle_errors
def export(
    study: Annotated[str, typer.Argument(help="A study document, or a study name.", show_default=False)],
    storage: StorageOption = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Output folder. Default: runs/<study name>/.", show_default=False)
    ] = None,
    vllm_synthetic_form: Annotated[
        Literal["current", "legacy"],
        typer.Option(
            "--vllm-synthetic-form",
            help="vllm-synthetic.json in the current form (synthetic_acceptance_rates) or the legacy March 2026 "
            "form (synthetic_acceptance_rate).",
        ),
    ] = "current",
) -> None:
    """Write recommended.yaml, vllm.json, vllm-synthetic.json, sglang.txt, trials.csv and report.html."""
    from spectune.export import check_output_dir, write_artefacts  # Optuna, for this command only
    from spectune.study import default_out_dir, load_outcome, locate_study

    if out is None and not Path(study).is_file() and not is_safe_name(study):
        raise SpectuneError(
            f"study name {study!r}: the default --out runs/<name> needs one folder name: {SAFE_NAME_RULE} "
            "(give --out, or the study document)"
        )
    name, storage_url = locate_study(study, storage=storage, out=None)  # --out is where to write, not where it ran
    out_dir = default_out_dir(name, out)
    check_output_dir(out_dir)
    outcome = load_outcome(storage_url, name)
    change = write_artefacts(outcome, out_dir, vllm_synthetic_form=vllm_synthetic_form)
    if change.removed:
        typer.echo(f"removed {out_dir}/: {', '.join(p.name for p in change.removed)} (an earlier export's)")
    typer.echo(f"wrote {out_dir}/: {', '.join(p.name for p in change.written)}")
    if outcome.partial_note is not None:
        typer.echo(f"note: {outcome.partial_note}")
    # As `study run` does: a script that exports must not take the least violating configs for an answer.
    _refuse_if_nothing_feasible(outcome)
