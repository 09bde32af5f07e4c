"""Load hardware/model/cost configs the way the simulation document will: through the located loader."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field, ValidationInfo, model_validator

from spectune.config import (
    DOCUMENT_KINDS,
    CostModelConfig,
    DrafterSpec,
    HardwareConfig,
    TargetModelSpec,
    deployment_problems,
    load_document,
)
from spectune.config._base import SpectuneModel, check_rules
from spectune.config._documents import LoadedDocument


class DeploymentDocument(SpectuneModel):
    """A stand-in for the lead's ``kind: simulation`` document: the four parts this package owns."""

    kind: Literal["cost_test"] = Field(description="Document kind.")
    hardware: HardwareConfig = Field(description="Hardware.")
    target_model: TargetModelSpec = Field(description="Target model.")
    drafter: DrafterSpec | None = Field(default=None, description="Drafter.")
    cost_model: CostModelConfig = Field(default_factory=CostModelConfig, description="Cost model.")

    @model_validator(mode="after")
    def _fits(self, info: ValidationInfo) -> DeploymentDocument:
        check_rules(deployment_problems(self.hardware, self.target_model, self.drafter))
        return self


@pytest.fixture
def deployment_document() -> type[DeploymentDocument]:
    """The stand-in document model (for its JSON Schema)."""
    return DeploymentDocument


@pytest.fixture
def load_deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write ``text`` (YAML, dedented) to a file in ``tmp_path`` and load it as a deployment document."""
    monkeypatch.setitem(DOCUMENT_KINDS, "cost_test", DeploymentDocument)

    def load(text: str, name: str = "deployment.yaml") -> LoadedDocument:
        path = tmp_path / name
        path.write_text("kind: cost_test\n" + textwrap.dedent(text))
        return load_document(path)

    return load


@pytest.fixture
def write_file(tmp_path: Path):
    """Write a dedented text file under ``tmp_path`` and return its path."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path

    return write
