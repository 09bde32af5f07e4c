"""The three forms a preset-backed model reads: a preset name, a preset with overrides, or every field.

``GpuSpec``, ``TargetModelSpec``, ``DrafterSpec`` and the step-time table's hardware share them, so a
bare ``gpu: h100-sxm`` (case, ``_`` and spaces forgiven: ``H100_SXM`` works), ``{preset: h100-sxm,
achievable_bandwidth_fraction: 0.9}`` and a fully explicit mapping all validate, and the JSON Schema
says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from spectune.config._base import RuleViolations

__all__ = ["expand_preset", "schema_with_name_forms"]


def _normalise_preset(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def expand_preset(data: Any, presets: Mapping[str, Mapping[str, Any]]) -> Any:
    """A preset name, or a mapping with ``preset``, becomes the preset's fields under the given overrides."""
    bare = isinstance(data, str)
    if bare:
        data = {"preset": data}
    if not isinstance(data, dict) or not isinstance(data.get("preset"), str):
        return data
    given = data["preset"]
    key = _normalise_preset(given)
    if key not in presets:
        where: tuple[str | int, ...] = () if bare else ("preset",)
        choices = ", ".join(presets)
        raise RuleViolations([(where, f"must be a preset name ({choices}) or a mapping of fields, got {given!r}")])
    overrides = {name: value for name, value in data.items() if name != "preset"}
    return {**presets[key], **overrides, "preset": key}


def schema_with_name_forms(
    core_schema: CoreSchema, handler: GetJsonSchemaHandler, names: Iterable[str], *, overrides: bool = True
) -> JsonSchemaValue:
    """JSON Schema for a model that also reads a bare name: the name, [a preset with overrides,] every field."""
    explicit = dict(handler.resolve_ref_schema(handler(core_schema)))
    forms = [{"type": "string", "enum": list(names)}]
    if overrides:
        forms.append({**explicit, "required": ["preset"]})
    forms.append(explicit)
    return {"title": explicit.get("title"), "description": explicit.get("description"), "anyOf": forms}
