"""One server per calibration: a vLLM log holding several is refused, or narrowed to the ones named."""

from __future__ import annotations

from collections.abc import Sequence

from spectune.calibrate._windows import SourceWindows
from spectune.errors import DocumentError, Problem

__all__ = ["select_servers"]


def select_servers(sources: list[SourceWindows], servers: Sequence[str]) -> None:
    """Keep only the windows of ``servers`` (labels as ``_servers.py`` makes them), in place.

    With no ``servers``, a file whose windows come from more than one server is refused, naming each
    server with its lines: their rates pooled would describe neither. Several ``servers`` are pooled
    on purpose (replicas of one deployment). A label found in no file is refused with those found.
    """
    found = {label for source in sources for label in source.servers}
    if servers:
        missing = [label for label in servers if label not in found]
        if missing:
            listing = "; ".join(f"{s.file}: {', '.join(s.servers.values()) or 'one unnamed server'}" for s in sources)
            raise DocumentError(
                [
                    Problem(
                        sources[0].file,
                        None,
                        "--server",
                        f"no server {', '.join(map(repr, missing))} in the logs ({listing})",
                    )
                ]
            )
        for source in sources:
            source.count_windows = [w for w in source.count_windows if w.server in servers]
        return
    for source in sources:
        if len(source.servers) > 1:
            listing = "; ".join(source.servers.values())
            first = min(w.line or 0 for w in source.count_windows if w.server != source.count_windows[0].server)
            raise DocumentError(
                [
                    Problem(
                        source.file,
                        first or None,
                        "",
                        f"the log interleaves {len(source.servers)} servers ({listing}); their rates pooled would match "
                        "neither. Calibrate each on its own with --server LABEL (repeat --server to pool replicas of "
                        "one deployment on purpose)",
                    )
                ]
            )
