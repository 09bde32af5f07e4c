"""The artefacts replace an earlier export as one set: a write that fails part-way (a full disk on the
Nth file) leaves the earlier set byte for byte, and nothing of the new one."""

import errno
from pathlib import Path

import pytest

from spectune._file_set import MANIFEST_NAME, write_new_file
from spectune.errors import SpectuneError
from spectune.export import write_artefacts


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


class _DiskFullOn:
    """A writer that fails as a full disk does on the Nth file it is asked to write (1-based)."""

    def __init__(self, nth: int) -> None:
        self.nth = nth
        self.calls = 0

    def __call__(self, path: Path, text: str) -> None:
        self.calls += 1
        if self.calls == self.nth:
            path.write_text(text[: len(text) // 2])  # what a disk that fills mid-file leaves
            raise OSError(errno.ENOSPC, "No space left on device")
        write_new_file(path, text)


def test_the_set_writes_every_artefact_and_its_manifest(outcome, tmp_path):
    change = write_artefacts(outcome, tmp_path)
    names = [path.name for path in change.written]
    assert names == [
        "recommended.yaml",
        "vllm.json",
        "vllm-synthetic.json",
        "sglang.txt",
        "sglang-adaptive.json",  # the K table as SGLang's pinned adaptive slots (eagle3)
        "trtllm.yaml",
        "trials.csv",
        "report.html",
    ]
    assert sorted(_snapshot(tmp_path)) == sorted([*names, MANIFEST_NAME])
    assert change.removed == []


@pytest.mark.parametrize("nth", range(1, 9))  # each of the 7 artefacts (no measure.sh here), then the manifest
def test_a_full_disk_on_the_nth_file_leaves_the_previous_set_byte_identical(
    outcome, two_objective_outcome, tmp_path, nth
):
    write_artefacts(outcome, tmp_path)
    (tmp_path / "notes.txt").write_text("the user's\n")
    before = _snapshot(tmp_path)
    writer = _DiskFullOn(nth)
    with pytest.raises(SpectuneError, match="No space left on device") as caught:
        write_artefacts(two_objective_outcome, tmp_path, writer=writer)
    assert writer.calls == nth  # it stopped at the failing file
    assert f"the files already in {tmp_path}/ are unchanged" in str(caught.value)
    assert _snapshot(tmp_path) == before  # no half file, no temporary folder, nothing of the other study
    after = write_artefacts(two_objective_outcome, tmp_path)  # once there is room, the new set goes in whole
    assert _snapshot(tmp_path)["recommended.yaml"] != before["recommended.yaml"]
    assert _snapshot(tmp_path)["notes.txt"] == b"the user's\n"
    assert [path.name for path in after.written][-1] == "report.html"
