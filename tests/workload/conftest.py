from pathlib import Path

import pytest
from pydantic import ValidationError

from spectune.config import LengthDistribution, WorkloadConfig, read_mapping
from spectune.config._messages import problems_from_validation_error
from spectune.config._workload import LengthsCsv, TemperatureShare
from spectune.errors import Problem


def _workload_field_names() -> set[str]:
    names = set(WorkloadConfig.model_fields)
    for model in (LengthDistribution, LengthsCsv, TemperatureShare):
        names |= set(model.model_fields)
    return names


@pytest.fixture
def load_workload(tmp_path: Path):
    """Validate ``text`` as a workload section, the way the loader validates documents that embed it.

    Returns (model or None, problems, notices); problems and notices carry file, line and dotted field.
    """

    def load(text: str, name: str = "workload.yaml") -> tuple[WorkloadConfig | None, list[Problem], list[tuple]]:
        path = tmp_path / name
        path.write_text(text)
        source = read_mapping(path)
        notices: list[tuple] = []
        try:
            model = WorkloadConfig.model_validate(source.data, context={"notices": notices, "base_dir": path.parent})
        except ValidationError as err:
            problems = problems_from_validation_error(
                err, file=str(path), positions=source.positions, known_fields=_workload_field_names()
            )
            return None, problems, notices
        return model, [], notices

    return load
