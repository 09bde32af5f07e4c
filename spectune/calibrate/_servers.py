"""Which server wrote a log line, so that one file holding several servers is never pooled.

``docker compose logs`` (and ``kubectl logs --prefix``) interleave the lines of every service, each
line behind its service's prefix (``vllm-1  | ...``, ``[pod/vllm-0/vllm] ...``); two servers started
on one host and logging to one file differ only in vLLM's process tag (``(APIServer pid=123)``). Two
servers' acceptance rates pooled match neither, and an engine line of one would pair with the other's
spec-decoding line. The rule:

- lines behind different prefixes come from different servers;
- under one prefix (or none), process ids whose lines interleave are different servers running at
  once, while a process id that ends before the next begins is the same server restarted (its K is
  checked like any window's).

A server is named by its label: the prefix, with ``pid=N`` added where process ids tell servers apart
(``vllm-1``, ``pid=4242``, ``vllm-1 pid=7``). The port comes from vLLM's startup line
(``Starting vLLM API server 0 on http://0.0.0.0:8000``) and is shown beside the label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Origin", "ServerTracker", "line_origin"]

_COMPOSE_PREFIX = re.compile(r"^\s*([A-Za-z0-9][\w.-]*)\s*\|\s")
_KUBECTL_PREFIX = re.compile(r"^\s*\[(pod/[^\]\s]+)\]\s")
_PROCESS_TAG = re.compile(r"\(([A-Za-z_][\w-]*) pid=(\d+)\)")
_STARTING = re.compile(r"Starting vLLM API server\b.*?\bon https?://\S*?:(\d+)\b")


@dataclass(frozen=True)
class Origin:
    """Where a line came from: the log shipper's prefix and vLLM's process id, each None when absent."""

    prefix: str | None
    pid: str | None


def line_origin(text: str) -> Origin:
    """The prefix and process id of one log line (colour codes already removed)."""
    match = _COMPOSE_PREFIX.match(text) or _KUBECTL_PREFIX.match(text)
    tag = _PROCESS_TAG.search(text)
    return Origin(match.group(1) if match else None, tag.group(2) if tag else None)


@dataclass
class _Span:
    first_line: int
    last_line: int
    windows: int = 0
    port: str | None = None


@dataclass
class ServerTracker:
    """The origins seen in one file, with the lines they span and their windows, turned into server labels."""

    spans: dict[Origin, _Span] = field(default_factory=dict)

    def see(self, text: str, line: int, *, window: bool = False) -> Origin:
        origin = line_origin(text)
        span = self.spans.setdefault(origin, _Span(line, line))
        span.last_line = line
        span.windows += int(window)
        port = _STARTING.search(text)
        if port:
            span.port = port.group(1)
        return origin

    def labels(self) -> dict[Origin, str]:
        """Each origin's server label; origins of one server share it (see the module's rule)."""
        by_prefix: dict[str | None, list[Origin]] = {}
        for origin in self.spans:
            by_prefix.setdefault(origin.prefix, []).append(origin)
        labels: dict[Origin, str] = {}
        for prefix, origins in by_prefix.items():
            concurrent = self._interleave(origins)
            for origin in origins:
                parts = [prefix] if prefix is not None else []
                if concurrent:
                    parts.append(f"pid={origin.pid}" if origin.pid is not None else "no pid")
                labels[origin] = " ".join(parts)
        return labels

    def describe(self) -> dict[str, str]:
        """Label -> 'label (port P, lines A-B, N windows)' for the servers that logged windows."""
        grouped: dict[str, list[_Span]] = {}
        for origin, label in self.labels().items():
            grouped.setdefault(label, []).append(self.spans[origin])
        described = {}
        for label, spans in grouped.items():
            windows = sum(s.windows for s in spans)
            if not windows:
                continue
            ports = sorted({s.port for s in spans if s.port is not None})
            port = f"port {', '.join(ports)}, " if ports else ""
            lines = f"lines {min(s.first_line for s in spans)}-{max(s.last_line for s in spans)}"
            described[label] = f"{label!r} ({port}{lines}, {windows} windows)" if label else f"one server ({lines})"
        return described

    def _interleave(self, origins: list[Origin]) -> bool:
        """True when two of the process ids' line spans overlap: servers logging at the same time."""
        spans = sorted((self.spans[o].first_line, self.spans[o].last_line) for o in origins if self._has_windows(o))
        return any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False))

    def _has_windows(self, origin: Origin) -> bool:
        return self.spans[origin].windows > 0
