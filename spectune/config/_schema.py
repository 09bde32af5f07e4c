"""The JSON Schema of every document kind (draft 2020-12), as ``spectune schema`` prints it."""

from __future__ import annotations

from typing import Any, Union

from pydantic import TypeAdapter

from spectune.config._documents import DOCUMENT_KINDS

__all__ = ["document_json_schema"]

SCHEMA_ID = "https://spectune.dev/schemas/spectune.schema.json"


def document_json_schema(kind: str | None = None) -> dict[str, Any]:
    """The schema of one kind, or of any spectune document (``anyOf`` over the kinds) when ``kind`` is None."""
    if kind is not None:
        schema = DOCUMENT_KINDS[kind].model_json_schema()
    else:
        models = tuple(DOCUMENT_KINDS[name] for name in sorted(DOCUMENT_KINDS))
        document: Any = Union[models] if len(models) > 1 else models[0]  # noqa: UP007 -- a Union of a tuple of types
        schema = TypeAdapter(document).json_schema()
        schema["title"] = "spectune document"
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}
