"""The audit lane: lines written in order; lines lost to a full queue or a failed write counted and reported in
the daemon log (at most once a minute), never blocking or failing a request."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from blazar.gateway.audit import AuditLog
from tests.conftest import until


def _lines(audit: AuditLog) -> int:
    """The lines in the audit file so far (the writer runs on the test's loop: never a line half written)."""
    return len(audit.path.read_bytes().splitlines()) if audit.path.is_file() else 0


def test_lines_are_written_and_losses_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "blazar.audit")

    async def main() -> AuditLog:
        audit = AuditLog(tmp_path / "audit", queue_max=2)
        for i in range(5):  # the writer has not run yet: three do not fit
            audit.emit({"n": i})
        audit.start()
        await until(lambda: _lines(audit) == 2, "the writer to write the two queued lines")
        audit.emit({"n": 5})  # the queue is empty again: this one fits
        await until(lambda: _lines(audit) == 3, "the writer to write the line emitted since")
        await audit.close()
        return audit

    audit = asyncio.run(main())
    lines = [json.loads(line) for line in audit.path.read_text().splitlines()]
    assert lines == [{"n": 0}, {"n": 1}, {"n": 5}] and audit.dropped == 3
    [report] = [r.getMessage() for r in caplog.records]
    assert report.startswith("audit: 3 line(s) dropped since the last report (audit_dropped 3 in all)")


def test_a_write_that_fails_is_counted_and_the_writer_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> AuditLog:
        audit = AuditLog(tmp_path / "audit")
        audit.path.mkdir()  # where the file goes, a folder: every write fails
        audit.start()
        audit.emit({"n": 1})
        await until(lambda: audit.dropped == 1, "the writer to fail its first write")
        audit.path.rmdir()
        audit.emit({"n": 2})
        await until(audit.path.is_file, "the writer to write the next line")
        await audit.close()
        return audit

    audit = asyncio.run(main())
    assert audit.dropped == 1 and json.loads(audit.path.read_text()) == {"n": 2}
    assert any("audit: cannot write" in r.getMessage() for r in caplog.records)
