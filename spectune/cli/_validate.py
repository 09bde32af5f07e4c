"""``spectune validate`` and ``spectune schema``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from spectune.cli._errors import handle_errors
from spectune.config import (
    DEFAULT_VLLM_VERSION,
    DOCUMENT_KINDS,
    VLLM_VERSIONS,
    document_json_schema,
    find_documents,
    is_trtllm_options,
    load_trtllm_options,
    read_mapping,
    unknown_vllm_version,
    validate_source,
)
from spectune.errors import DocumentError, Problem


@handle_errors
def validate(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Files (.yaml, .yml, .json) or directories to check, recursively.", show_default=False),
    ],
    strict: Annotated[bool, typer.Option("--strict", help="Treat warnings (deprecations, advice) as errors.")] = False,
    vllm_version: Annotated[
        str,
        typer.Option(
            "--vllm-version",
            help=f"The vLLM release whose rules speculative configs are held to ({', '.join(VLLM_VERSIONS)}).",
        ),
    ] = DEFAULT_VLLM_VERSION,
) -> None:
    """Check speculative configs and spectune documents; one line per problem, exit 1 if any is invalid."""
    unknown = unknown_vllm_version(vllm_version)
    if unknown is not None:
        raise DocumentError([Problem("--vllm-version", None, "", unknown)])
    files, problems = find_documents(paths)
    missing_paths = len(problems)
    invalid = warnings = 0
    for file in files:
        try:
            source = read_mapping(file)  # read once: a pipe cannot be read twice
            if is_trtllm_options(source):  # TensorRT-LLM's options: its own rules, no spectune notices
                load_trtllm_options(source)
                continue
            document = validate_source(source, vllm_version=vllm_version)
        except DocumentError as err:
            problems.extend(err.problems)
            invalid += 1
            continue
        problems.extend(document.notices)
        warnings += len(document.notices)
        if strict and document.notices:
            invalid += 1
    for problem in problems:
        typer.echo(str(problem))
    errors = sum(1 for p in problems[missing_paths:] if p.severity == "error")
    summary = (
        f"{_count(len(files), 'file')} checked: {len(files) - invalid} valid, {invalid} invalid "
        f"({_count(errors, 'error')}, {_count(warnings, 'warning')})"
    )
    if missing_paths:
        summary += f"; {_count(missing_paths, 'path')} with nothing to check"
    typer.echo(summary)
    if invalid or missing_paths:
        raise typer.Exit(code=1)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


@handle_errors
def schema(
    kind: Annotated[
        str | None,
        typer.Option(help=f"One document kind ({', '.join(sorted(DOCUMENT_KINDS))}); default: all kinds."),
    ] = None,
) -> None:
    """Print the JSON Schema (draft 2020-12) of spectune documents."""
    if kind is not None and kind not in DOCUMENT_KINDS:
        raise DocumentError(
            [Problem("--kind", None, "", f"must be one of {', '.join(sorted(DOCUMENT_KINDS))}, got {kind!r}")]
        )
    typer.echo(json.dumps(document_json_schema(kind), indent=2, sort_keys=True))
