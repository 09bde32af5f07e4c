"""Imports every command module so that each registers itself on ``app``."""

from spectune.cli import _validate  # noqa: F401
from spectune.cli import _calibrate  # noqa: F401
from spectune.cli import _simulate  # noqa: F401
from spectune.cli import _study  # noqa: F401
from spectune.cli import _export  # noqa: F401
