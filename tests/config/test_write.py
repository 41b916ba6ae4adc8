"""Tests for blazar.config.write: atomic replace, timestamped backups and pruning, the lock, failed writes.

They own only files under ``tmp_path``; failures are injected with monkeypatch, never by real disk faults.
"""

from __future__ import annotations

import fcntl
import os
import stat
import threading
from pathlib import Path

import pytest

from blazar.config import write
from blazar.config.write import (
    ConfigWriteError,
    backups,
    config_lock,
    lock_path,
    read_config_bytes,
    write_config,
)


def test_first_write_creates_the_file_and_dirs_without_a_backup(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "config.toml"
    with config_lock(path):
        assert write_config(path, "port = 1\n", None) is None
    assert path.read_text() == "port = 1\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert backups(path) == []
    assert lock_path(path).exists()


def test_a_write_backs_up_the_exact_old_bytes(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    old = b"# \xc3\xa9 comment\r\nport = 1\r\n"
    path.write_bytes(old)
    with config_lock(path):
        bak = write_config(path, "port = 2\n", read_config_bytes(path))
    assert bak is not None
    assert bak.read_bytes() == old
    assert bak.name.startswith("config.toml.") and bak.name.endswith("Z.bak")
    assert stat.S_IMODE(bak.stat().st_mode) == 0o600
    assert path.read_text() == "port = 2\n"
    assert backups(path) == [bak]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["config.toml", "config.toml.lock", bak.name])


def test_backups_are_pruned_to_the_newest(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("n = 0\n")
    for n in range(1, 6):
        write_config(path, f"n = {n}\n", read_config_bytes(path), keep_backups=3)
    kept = backups(path)
    assert [p.read_text() for p in kept] == ["n = 2\n", "n = 3\n", "n = 4\n"]
    unrelated = tmp_path / "config.toml.notes.bak"
    unrelated.write_text("mine")
    write_config(path, "n = 6\n", read_config_bytes(path), keep_backups=3)
    assert unrelated.exists()


def test_a_failed_replace_leaves_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"port = 1\n")

    def refuse(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(
        ConfigWriteError, match=r"cannot write .*config.toml: No space left on device; the old"
    ):
        write_config(path, "port = 2\n", read_config_bytes(path))
    assert path.read_bytes() == b"port = 1\n"
    assert [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_failed_backup_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"port = 1\n")

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(write, "_write_new", refuse)
    with pytest.raises(ConfigWriteError, match=r"cannot back up .*: Permission denied; nothing was changed"):
        write_config(path, "port = 2\n", read_config_bytes(path))
    assert path.read_bytes() == b"port = 1\n"


def test_read_config_bytes(tmp_path: Path) -> None:
    assert read_config_bytes(tmp_path / "absent.toml") is None
    with pytest.raises(ConfigWriteError, match="is a directory"):
        read_config_bytes(tmp_path)


def test_the_lock_waits_for_another_holder_then_gives_up(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.parent.mkdir(exist_ok=True)
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another open file description: as if another process held it
        with (
            pytest.raises(
                ConfigWriteError, match=r"another blazar process has held .* retry when it has finished"
            ),
            config_lock(path, wait_secs=0.0),
        ):
            pass
    finally:
        os.close(fd)
    with config_lock(path, wait_secs=0.0):
        pass  # free again


def test_the_lock_serialises_threads(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("n = 0\n")

    def bump() -> None:
        for _ in range(5):
            with config_lock(path):
                n = int(path.read_text().split("=")[1])
                write_config(path, f"n = {n + 1}\n", read_config_bytes(path), keep_backups=1)

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert path.read_text() == "n = 20\n"
    assert len(backups(path)) == 1
