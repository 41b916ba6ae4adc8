"""The audit lane: one JSON line per request, through a bounded queue that never blocks the hot path.

Owns the queue, the drop counter (``audit_dropped``: lines lost to a full queue or a failed write, reported in the
daemon log at most once a minute), the writer task and rotation at 16 MiB (``audit.log`` -> ``audit.log.1``).
The lines name keys, paths and models, so the directory is 0700 and its files 0600: made so, and tightened at
open when an earlier version left them readable by others.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from pathlib import Path

import orjson

from blazar import tasks

ROTATE_BYTES = 16 * 1024 * 1024
QUEUE_MAX = 10_000
REPORT_SECS = 60.0

DIR_MODE = 0o700
FILE_MODE = 0o600

log = logging.getLogger("blazar.audit")


def _owner_only(path: Path) -> None:
    """Take the group's and others' permission bits off ``path`` if it has any (a file an earlier version made
    0644, a directory 0755); one that is absent is left to be created owner-only."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            path.chmod(mode & 0o700)
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning(
            "audit: cannot make %s owner-only (%s); it may be readable by others", path, e.strerror or e
        )


class AuditLog:
    def __init__(self, directory: Path, rotate_bytes: int = ROTATE_BYTES, queue_max: int = QUEUE_MAX) -> None:
        directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        self.path = directory / "audit.log"
        for path in (directory, self.path, self.path.with_name("audit.log.1")):
            _owner_only(path)
        self.rotate_bytes = rotate_bytes
        self.dropped = 0
        self._reported = 0
        self._reported_at = -REPORT_SECS
        self._queue: asyncio.Queue[bytes] = asyncio.Queue(queue_max)
        self._task: asyncio.Task[None] | None = None

    def emit(self, line: dict[str, object]) -> None:
        """Queue one line; when the queue is full the line is dropped and counted (``audit_dropped``)."""
        try:
            self._queue.put_nowait(orjson.dumps(line) + b"\n")
        except asyncio.QueueFull:
            self.dropped += 1

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while True:
            first = await self._queue.get()
            batch = [first]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            self._write(b"".join(batch), len(batch))
            self._report()

    def _report(self, now: float | None = None) -> None:
        """Say in the daemon log how many lines were lost since the last report, at most once a minute."""
        now = time.monotonic() if now is None else now
        if self.dropped > self._reported and now - self._reported_at >= REPORT_SECS:
            log.warning(
                "audit: %d line(s) dropped since the last report (audit_dropped %d in all); the audit log missed"
                " requests, never the requests themselves",
                self.dropped - self._reported,
                self.dropped,
            )
            self._reported, self._reported_at = self.dropped, now

    def _write(self, data: bytes, lines: int = 0) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
            with os.fdopen(fd, "ab") as f:
                f.write(data)
                size = f.tell()
            if size >= self.rotate_bytes:
                os.replace(self.path, self.path.with_name("audit.log.1"))
        except OSError as e:
            self.dropped += lines
            log.error("audit: cannot write %s (%s); %d line(s) dropped", self.path, e.strerror or e, lines)

    async def close(self) -> None:
        await tasks.stop(self._task)
        self._task = None
        rest = []
        while not self._queue.empty():
            rest.append(self._queue.get_nowait())
        if rest:
            self._write(b"".join(rest), len(rest))
        self._report(now=time.monotonic() + REPORT_SECS)  # whatever is left unsaid, once
