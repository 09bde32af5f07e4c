"""The committed JSON Schema is what ``spectune schema`` prints now."""

import json
from pathlib import Path

from spectune.config import document_json_schema

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schemas" / "spectune.schema.json"


def test_committed_schema_is_current():
    committed = json.loads(SCHEMA_FILE.read_text())
    assert committed == document_json_schema(), (
        "schemas/spectune.schema.json is stale; regenerate it with: spectune schema > schemas/spectune.schema.json"
    )
