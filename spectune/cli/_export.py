"""``spectune export``: write a study's artefacts again, from its storage alone."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from spectune._files import SAFE_NAME_RULE, is_safe_name
from spectune.cli._errors import handle_errors
from spectune.cli._study import StorageOption, _refuse_if_nothing_feasible
from spectune.config import DEFAULT_VLLM_VERSION, FIELDS_ADDED_FOR_VLLM_0_33, VLLM_VERSIONS, unknown_vllm_version
from spectune.errors import SpectuneError

if TYPE_CHECKING:
    from spectune.study import Recommendation


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
    vllm_version: Annotated[
        str, typer.Option("--vllm-version", help=f"The vLLM release to write for ({', '.join(VLLM_VERSIONS)}).")
    ] = DEFAULT_VLLM_VERSION,
) -> None:
    """Write recommended.yaml, vllm.json, vllm-synthetic.json, sglang.txt, trials.csv and report.html."""
    from spectune.export import check_output_dir, write_artefacts  # Optuna, for this command only
    from spectune.study import default_out_dir, load_outcome, locate_study

    _check_vllm_version(vllm_version, vllm_synthetic_form)

    if out is None and not Path(study).is_file() and not is_safe_name(study):
        raise SpectuneError(
            f"study name {study!r}: the default --out runs/<name> needs one folder name: {SAFE_NAME_RULE} "
            "(give --out, or the study document)"
        )
    name, storage_url = locate_study(study, storage=storage, out=None)  # --out is where to write, not where it ran
    out_dir = default_out_dir(name, out)
    check_output_dir(out_dir)
    outcome = load_outcome(storage_url, name)
    if vllm_version == "0.32" and outcome.recommendation is not None:
        _refuse_fields_newer_than_0_32(outcome.recommendation)
    change = write_artefacts(outcome, out_dir, vllm_synthetic_form=vllm_synthetic_form)
    if change.removed:
        typer.echo(f"removed {out_dir}/: {', '.join(p.name for p in change.removed)} (an earlier export's)")
    typer.echo(f"wrote {out_dir}/: {', '.join(p.name for p in change.written)}")
    if outcome.partial_note is not None:
        typer.echo(f"note: {outcome.partial_note}")
    # As `study run` does: a script that exports must not take the least violating configs for an answer.
    _refuse_if_nothing_feasible(outcome)


def _check_vllm_version(version: str, synthetic_form: str) -> None:
    """The export writes what the named release accepts: 0.33.0 refuses the legacy scalar synthetic form."""
    unknown = unknown_vllm_version(version)
    if unknown is not None:
        raise SpectuneError(f"--vllm-version: {unknown}")
    if synthetic_form == "legacy" and version != "0.32":
        raise SpectuneError(
            f"--vllm-synthetic-form legacy: vLLM {version} refuses the scalar synthetic_acceptance_rate; write the "
            "current form (the default), or name the release that reads it with --vllm-version 0.32"
        )


def _refuse_fields_newer_than_0_32(recommendation: Recommendation) -> None:
    from spectune.export._vllm import vllm_speculative_config

    config = vllm_speculative_config(recommendation)
    newer = [name for name in FIELDS_ADDED_FOR_VLLM_0_33 if config.get(name) is not None]
    if newer:
        raise SpectuneError(
            f"--vllm-version 0.32: the recommended config sets {', '.join(newer)}, which vLLM 0.32 does not read "
            "(added in 0.33.0); export for 0.33.0, or drop the field from the study's candidate"
        )
