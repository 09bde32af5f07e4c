"""``--set`` overrides are validated like the file, and blamed on the argument when wrong."""

from pathlib import Path

import pytest

from spectune.config import apply_overrides, read_mapping, validate_source
from spectune.config._overrides import parse_override
from spectune.errors import DocumentError

DOC = "method: eagle\nnum_speculative_tokens: 4\nmodel: yuhuili/EAGLE-LLaMA3.1-Instruct-8B\nnum_speculative_tokens_per_batch_size:\n  - [1, 16, 4]\n  - [17, 64, 2]\n"


@pytest.fixture
def source(tmp_path: Path):
    path = tmp_path / "spec.yaml"
    path.write_text(DOC)
    return read_mapping(path)


def test_values_are_parsed_as_yaml():
    assert parse_override("a.b=3") == (("a", "b"), 3)
    assert parse_override("a=0.5") == (("a",), 0.5)
    assert parse_override("a=[1, 2]") == (("a",), [1, 2])
    assert parse_override("a.b[1].c=eagle3") == (("a", "b", 1, "c"), "eagle3")
    assert parse_override("a=true") == (("a",), True)


@pytest.mark.parametrize("expression", ["noequals", "=3", "a..b=1", "[0]=1", "a=.nan", "a.3=1"])
def test_malformed_overrides_are_refused(expression):
    with pytest.raises(DocumentError) as info:
        parse_override(expression)
    assert str(info.value).startswith(f"--set {expression}")


def test_override_changes_the_value_and_leaves_the_source_alone(source):
    updated = validate_source(
        apply_overrides(source, ["method=eagle3", "num_speculative_tokens_per_batch_size[1][2]=0"])
    )
    assert updated.model.method == "eagle3"
    assert updated.model.num_speculative_tokens_per_batch_size == [(1, 16, 4), (17, 64, 0)]
    assert validate_source(source).model.method == "eagle"


def test_bad_override_is_blamed_on_the_argument(source):
    with pytest.raises(DocumentError) as info:
        validate_source(apply_overrides(source, ["num_speculative_tokens=0"]))
    assert [str(p) for p in info.value.problems] == [
        "--set num_speculative_tokens=0: num_speculative_tokens: must be >= 1, got 0"
    ]


def test_override_of_an_index_past_the_end_is_refused(source):
    with pytest.raises(DocumentError, match="out of range"):
        apply_overrides(source, ["num_speculative_tokens_per_batch_size[5][0]=1"])
