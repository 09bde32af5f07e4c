"""``spectune warm-up``: compile the Triton kernels a document's simulations can launch, before they run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from spectune.cli._errors import handle_errors
from spectune.errors import DocumentError, Problem, SpectuneError

if TYPE_CHECKING:
    import torch

    from spectune.config._documents import LoadedDocument


@handle_errors
def warm_up_command(
    document_path: Annotated[
        Path,
        typer.Argument(metavar="FILE", help="A `kind: simulation` or `kind: study` document.", show_default=False),
    ],
) -> None:
    """Compile every Triton kernel a simulation or study can launch on its CUDA device, before it runs.

    Each kernel variant the document's simulations can launch (for a study, every point's) is compiled
    into Triton's cache (TRITON_CACHE_DIR, shared by the machine's processes) and none is launched, so
    that a later `spectune study run FILE` or `spectune simulate FILE` finds them there instead of
    compiling each where it first meets it. Run it on a fresh machine, or after spectune or Triton
    changed. Exit 1 where the document does not simulate on a CUDA device of this machine.
    """
    from spectune.config import load_document

    loaded = load_document(document_path)
    if loaded.kind not in ("simulation", "study"):
        line = loaded.source.positions.line_of(("kind",))
        raise DocumentError(
            [Problem(loaded.source.file, line, "kind", f"must be simulation or study, got {loaded.kind!r}")]
        )
    for notice in loaded.notices:
        typer.echo(str(notice), err=True)
    device = _cuda_device(loaded)

    import torch

    from spectune.kernels import interpreted, sm_count
    from spectune.simulator import kernel_variants, warm_up
    from spectune.study import simulation_documents

    if interpreted():
        raise SpectuneError(
            "TRITON_INTERPRET=1 is set: Triton's interpreter compiles nothing; unset it to warm up the compiled kernels"
        )
    documents = [loaded.model] if loaded.kind == "simulation" else simulation_documents(loaded.model)
    variants = kernel_variants(documents, device, sm_count(device))
    plans = {(c.method, c.draft_logits, c.vocab, c.plan) for c in variants.calls}
    typer.echo(
        f"{document_path}: {len(documents)} simulation{'s' if len(documents) > 1 else ''} on {device} "
        f"({torch.cuda.get_device_name(device)}) can launch {len(variants.calls)} kinds of rejection-sampling "
        f"call ({len(plans)} launch plans), {len(variants.step_writers)} of the step writer and "
        f"{len(variants.base_noise)} of the base noise"
    )
    report = warm_up(variants, device)
    names = sorted(set(report.compiled) | set(report.cached))
    width = max([len("kernel"), *map(len, names)])
    typer.echo(f"  {'kernel':<{width}}  compiled  in cache")
    for name in names:
        typer.echo(f"  {name:<{width}}  {report.compiled.get(name, 0):>8}  {report.cached.get(name, 0):>8}")
    compiled, cached = sum(report.compiled.values()), sum(report.cached.values())
    typer.echo(
        f"warm-up: {compiled + cached} kernel variants ready in {report.seconds:.1f} s ({compiled} compiled, "
        f"{cached} already in Triton's cache at {report.cache_dir})"
    )


def _cuda_device(loaded: LoadedDocument) -> torch.device:
    """The CUDA device the document simulates on; a located error where it simulates on none here."""
    import torch

    from spectune.simulator._backend import resolve_device

    source, asked = loaded.source, loaded.model.simulation.device
    line = source.positions.line_of(("simulation", "device"))
    if not torch.cuda.is_available():
        message = f"warm-up compiles the Triton kernels for a CUDA device, but this machine has none (got {asked!r})"
        raise DocumentError([Problem(source.file, line, "simulation.device", message)])
    try:
        device = resolve_device(asked)
    except SpectuneError as err:  # a cuda:N this machine lacks; the message names the field
        raise DocumentError([Problem(source.file, line, "", str(err))]) from None
    if device.type != "cuda":
        message = f"the document simulates on the CPU, where no kernel is compiled: nothing to warm up (got {asked!r})"
        raise DocumentError([Problem(source.file, line, "simulation.device", message)])
    return device
