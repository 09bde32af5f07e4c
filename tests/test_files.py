"""Bounded reads and atomic writes (``spectune._files``)."""

import os
import stat

import pytest

from spectune._files import iter_bounded_lines, read_bounded, write_atomic
from spectune.errors import DocumentError, SpectuneError


def test_read_bounded_takes_exactly_the_limit_and_refuses_one_byte_more(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_bounded(path, 100) == b"x" * 100
    with pytest.raises(DocumentError, match="holds more than 99 bytes"):
        read_bounded(path, 99)


def test_iter_bounded_lines_stops_at_a_long_line_and_at_the_total(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"a\n" + b"b" * 50 + b"\nc\n")
    with pytest.raises(DocumentError) as err:
        list(iter_bounded_lines(path, max_line_bytes=20, max_bytes=1000))
    assert str(err.value) == f"{path}:2: line longer than 20 bytes; refusing it"
    assert [n for n, _ in iter_bounded_lines(path, max_line_bytes=100, max_bytes=1000)] == [1, 2, 3]
    with pytest.raises(DocumentError, match=f"{path}:2: holds more than 10 bytes"):
        list(iter_bounded_lines(path, max_line_bytes=100, max_bytes=10))


def test_write_atomic_replaces_a_symlink_instead_of_writing_through_it(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("keep\n")
    link = tmp_path / "out" / "a.json"
    link.parent.mkdir()
    link.symlink_to(target)
    write_atomic(link, "new\n")
    assert target.read_text() == "keep\n"
    assert not link.is_symlink() and link.read_text() == "new\n"
    assert os.listdir(link.parent) == ["a.json"]


def test_write_atomic_gives_the_permissions_write_text_would(tmp_path):
    mask = os.umask(0o027)
    try:
        write_atomic(tmp_path / "a", "x")
        (tmp_path / "b").write_text("x")
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == stat.S_IMODE((tmp_path / "b").stat().st_mode) == 0o640


def test_write_atomic_refuses_a_folder_and_a_path_under_a_file(tmp_path):
    (tmp_path / "dir").mkdir()
    with pytest.raises(SpectuneError, match="it is a folder"):
        write_atomic(tmp_path / "dir", "x")
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpectuneError, match=f"{tmp_path / 'file'} is not a folder"):
        write_atomic(tmp_path / "file" / "a", "x")
