"""A new study's attributes are written with the document hash last: a worker that starts meanwhile and
sees the hash sees the space and the simulator version too (else it takes the study for another one's)."""

import optuna
from study_doubles import fingerprint, make_space

from spectune.study._storage import ATTR_DOCUMENT_SHA256, ATTR_SIMULATOR_VERSION, ATTR_SPACE, prepare_study


class _RecordingStorage(optuna.storages.InMemoryStorage):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[str] = []

    def set_study_user_attr(self, study_id: int, key: str, value: object) -> None:
        self.written.append(key)
        super().set_study_user_attr(study_id, key, value)


def test_the_document_hash_is_written_after_everything_it_vouches_for():
    storage = _RecordingStorage()
    prepare_study(storage, make_space(), fingerprint(), storage_label="memory")
    assert storage.written[-1] == ATTR_DOCUMENT_SHA256
    assert {ATTR_SPACE, ATTR_SIMULATOR_VERSION} <= set(storage.written[:-1])
