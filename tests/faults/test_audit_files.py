"""The audit log's files are owner-only: they hold key names, paths and models.

Real files and modes: a new audit directory and file, ones an earlier version left world-readable (0755, 0644),
and the file rotation makes. The process umask is set to 022 (the usual one) so a mode the code does not ask for
shows.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from blazar.gateway.audit import AuditLog


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def write_lines(audit: AuditLog, *lines: dict[str, object]) -> None:
    async def main() -> None:
        audit.start()
        for line in lines:
            audit.emit(line)
        await audit.close()

    asyncio.run(main())


def test_a_new_audit_directory_and_file_are_owner_only(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "data" / "audit")
    write_lines(audit, {"key": "team", "path": "/v1/chat/completions", "model": "smollm2:latest"})
    assert audit.path.read_bytes().count(b"\n") == 1
    assert mode(audit.path.parent) == 0o700
    assert mode(audit.path) == 0o600


def test_files_an_earlier_version_left_readable_are_tightened_at_open(tmp_path: Path) -> None:
    directory = tmp_path / "audit"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    old = directory / "audit.log"
    old.write_text('{"key": "team"}\n')
    old.chmod(0o644)
    rotated = directory / "audit.log.1"
    rotated.write_text('{"key": "ops"}\n')
    rotated.chmod(0o644)
    audit = AuditLog(directory)
    assert (mode(directory), mode(old), mode(rotated)) == (0o700, 0o600, 0o600)
    write_lines(audit, {"n": 1})
    assert old.read_text() == '{"key": "team"}\n{"n":1}\n' and mode(old) == 0o600


def test_rotation_keeps_both_files_owner_only(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "audit", rotate_bytes=64)
    write_lines(audit, {"pad": "x" * 80})  # over the bound: rotated to audit.log.1
    rotated = audit.path.with_name("audit.log.1")
    assert rotated.is_file() and not audit.path.exists()
    assert mode(rotated) == 0o600
    write_lines(audit, {"n": 2})  # the next file, made after the rotation
    assert mode(audit.path) == 0o600 and mode(audit.path.parent) == 0o700
