"""The loader refuses malformed and malicious documents with a located message, fast."""

from pathlib import Path

import pytest

from spectune.config import load_document, read_mapping
from spectune.errors import DocumentError


def _errors(path: Path) -> list[str]:
    with pytest.raises(DocumentError) as info:
        load_document(path)
    return [str(p) for p in info.value.problems]


def _write(tmp_path: Path, text: str, name: str = "doc.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_duplicate_keys_are_refused_with_both_lines(tmp_path):
    path = _write(tmp_path, "method: eagle\nnum_speculative_tokens: 3\nmethod: eagle3\n")
    assert _errors(path) == [
        f"{path}:3: method: duplicate key 'method' (first on line 1); YAML would silently keep the last"
    ]


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_empty_file_is_refused(tmp_path, text):
    path = _write(tmp_path, text)
    (message,) = _errors(path)
    assert "empty" in message and message.startswith(str(path))


@pytest.mark.parametrize(
    ("text", "got"), [("- method: eagle\n", "a list"), ("eagle\n", "a scalar ('eagle')"), ("42\n", "a scalar ('42')")]
)
def test_non_mapping_document_is_refused(tmp_path, text, got):
    path = _write(tmp_path, text)
    assert _errors(path) == [f"{path}:1: expected a mapping of fields, got {got}"]


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", ".NaN"])
def test_nan_and_inf_are_refused_at_their_line(tmp_path, value):
    path = _write(
        tmp_path,
        f"method: eagle\nnum_speculative_tokens: 3\nrejection_sample_method: synthetic\nsynthetic_acceptance_rate: {value}\n",
    )
    (message,) = _errors(path)
    assert message.startswith(f"{path}:4: synthetic_acceptance_rate: must be a finite number")


def test_json_nan_is_refused(tmp_path):
    path = _write(tmp_path, '{"method": "eagle", "num_speculative_tokens": NaN}', "doc.json")
    (message,) = _errors(path)
    assert "finite" in message and "NaN" in message


def test_json_syntax_error_names_the_line(tmp_path):
    path = _write(tmp_path, '{\n"method": "eagle",\n"num_speculative_tokens": 3,\n}\n', "doc.json")
    (message,) = _errors(path)
    assert message.startswith(f"{path}:4: JSON syntax error")


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = _write(tmp_path, "method: eagle\nnum_speculative_tokens: [3\nmodel: x\n")
    (message,) = _errors(path)
    assert "YAML syntax error" in message and message.startswith(f"{path}:")


def test_absurd_integer_is_refused(tmp_path):
    path = _write(tmp_path, "method: eagle\nnum_speculative_tokens: 1" + "0" * 40 + "\n")
    (message,) = _errors(path)
    assert message.startswith(f"{path}:2: num_speculative_tokens: integer out of range")


def test_exponent_floats_without_a_dot_are_numbers(tmp_path):
    path = _write(
        tmp_path,
        "method: mtp\nnum_speculative_tokens: 3\nrejection_sample_method: synthetic\nsynthetic_acceptance_length: 25e-1\n",
    )
    assert load_document(path).model.synthetic_acceptance_length == 2.5


def test_oversized_file_is_refused_without_parsing(tmp_path):
    path = _write(tmp_path, "a: " + "x" * (5 * 1024 * 1024) + "\n")
    (message,) = _errors(path)
    assert "limit" in message


@pytest.mark.timeout(10)
def test_alias_bomb_is_refused_quickly(tmp_path):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [{', '.join(f'*a{i - 1}' for _ in range(9))}]")
    path = _write(tmp_path, "\n".join(lines) + "\n")
    (message,) = _errors(path)
    assert "aliases included" in message


@pytest.mark.timeout(10)
@pytest.mark.parametrize("depth", [100, 100_000])
def test_deep_nesting_is_refused_quickly(tmp_path, depth):
    path = _write(tmp_path, "a: " + "[" * depth + "]" * depth + "\n")
    (message,) = _errors(path)
    assert "nested" in message


def test_missing_file_and_directory(tmp_path):
    assert _errors(tmp_path / "nope.yaml") == [f"{tmp_path / 'nope.yaml'}: no such file"]
    assert "is a directory" in _errors(tmp_path)[0]


def test_non_utf8_file_is_refused(tmp_path):
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"method: \xff\xfe\n")
    assert "not UTF-8" in _errors(path)[0]


def test_unknown_kind_lists_the_kinds(tmp_path):
    path = _write(tmp_path, "kind: banana\n")
    (message,) = _errors(path)
    assert (
        message.startswith(f"{path}:1: kind: must be one of ")
        and "acceptance_profile" in message
        and "'banana'" in message
    )


def test_positions_cover_nested_values(tmp_path):
    source = read_mapping(_write(tmp_path, "a:\n  b:\n    - 1\n    - c: 2\n"))
    assert source.positions.line_of(("a", "b", 1, "c")) == 4
    assert source.positions.line_of(("a", "b", 0)) == 3
    assert source.positions.line_of(("a", "missing", "deeper")) == 2


def test_yaml_merge_keys_are_resolved(tmp_path):
    path = _write(
        tmp_path, "base: &b {method: eagle, num_speculative_tokens: 2}\nspeculative_config:\n  <<: *b\n  model: x\n"
    )
    document = load_document(path)
    assert (document.model.method, document.model.num_speculative_tokens, document.model.model) == ("eagle", 2, "x")
