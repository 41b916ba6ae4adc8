"""Writing config.toml safely: one process-wide lock, a timestamped ``.bak`` of the old file, an atomic replace.

It owns ``PERSIST_LOCK`` (a ``threading.Lock`` plus an ``fcntl.flock`` on ``<config>.lock`` beside the file, so
the daemon and the CLI never interleave), the backup naming and pruning (``config_backups`` copies, oldest removed
first), the refusal of a file its owner made read-only (decided from the mode bits: root writes a 0444 file
anyway), and the temp-file + fsync + ``os.replace`` write. It must not decide what the new text is or validate it
(callers parse, edit and load it as a ``Config`` first), and it must not log or render file contents: config files
hold API-key secrets. If any step fails before ``os.replace`` the old file is untouched and the ``.bak`` this write
made is removed again, so a client retrying a failing write cannot pile up copies of the secrets.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path

from blazar.config.model import DEFAULT_CONFIG_BACKUPS
from blazar.errors import BlazarError

__all__ = [
    "LOCK_WAIT_SECS",
    "PERSIST_LOCK",
    "ConfigReadOnly",
    "ConfigWriteError",
    "backups",
    "config_lock",
    "lock_path",
    "read_config_bytes",
    "write_config",
]

PERSIST_LOCK = threading.Lock()
"""Held by every config write in this process; the flock on ``<config>.lock`` covers other processes."""

LOCK_WAIT_SECS = 10.0
_FILE_MODE = 0o600  # config files hold secrets: owner only


class ConfigWriteError(BlazarError):
    """The config file could not be locked, backed up or written; the old file is intact."""

    status = 500


class ConfigReadOnly(ConfigWriteError):
    """The config file's owner made it read-only (no owner write bit); it is left as it is (409)."""

    status = 409


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _bak_pattern(path: Path) -> re.Pattern[str]:
    return re.compile(re.escape(path.name) + r"\.\d{8}T\d{12}Z(?:-\d+)?\.bak")


def backups(path: Path) -> list[Path]:
    """This config file's ``.bak`` copies, oldest first."""
    pattern = _bak_pattern(path)
    try:
        found = [p for p in path.parent.iterdir() if pattern.fullmatch(p.name)]
    except FileNotFoundError:
        return []
    return sorted(found, key=lambda p: p.name)


@contextmanager
def config_lock(path: Path, wait_secs: float = LOCK_WAIT_SECS) -> Iterator[None]:
    """Hold ``PERSIST_LOCK`` and an exclusive flock on ``<path>.lock`` (created, with the parent dir, if absent)."""
    with PERSIST_LOCK:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, _FILE_MODE)
        except OSError as exc:
            raise ConfigWriteError(
                f"cannot create lock file {lock_path(path)}: {exc.strerror or exc}; is the directory writable?"
            ) from None
        try:
            deadline = time.monotonic() + wait_secs
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                        raise ConfigWriteError(
                            f"cannot lock {lock_path(path)}: {exc.strerror or exc}"
                        ) from None
                    if time.monotonic() >= deadline:
                        raise ConfigWriteError(
                            f"another blazar process has held {lock_path(path)} for {wait_secs:g} s; "
                            "retry when it has finished writing the config"
                        ) from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock


def read_config_bytes(path: Path) -> bytes | None:
    """The file's exact bytes, or ``None`` when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ConfigWriteError(f"config file {path} is a directory, not a TOML file") from None
    except OSError as exc:
        raise ConfigWriteError(f"cannot read config file {path}: {exc.strerror or exc}") from None


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return  # not every file system lets a directory be opened; the data itself is already synced
    try:
        with suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (which must not exist) holding ``data``, owner-only, synced."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _backup(path: Path, old: bytes, now: datetime) -> Path:
    stamp = now.strftime("%Y%m%dT%H%M%S") + f"{now.microsecond:06d}Z"
    for n in range(100):
        bak = path.with_name(f"{path.name}.{stamp}{'' if n == 0 else f'-{n}'}.bak")
        try:
            _write_new(bak, old)
            return bak
        except FileExistsError:
            continue
    raise ConfigWriteError(f"cannot choose a free backup name for {path}; remove old {path.name}.*.bak files")


def _refuse_read_only(path: Path) -> None:
    """Raise ``ConfigReadOnly`` when ``path`` exists without its owner's write bit.

    The mode bits decide, not a failed open: root may write a 0444 file, and the replace would not open it at
    all (a rename needs only the directory), so a file someone made read-only on purpose would come back 0600.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigWriteError(f"cannot read the mode of config file {path}: {exc.strerror or exc}") from None
    if stat.S_ISREG(mode) and not mode & stat.S_IWUSR:
        raise ConfigReadOnly(
            f"{path} is read-only (mode {stat.S_IMODE(mode):04o}) and blazar will not replace a file its owner"
            f" made read-only, so nothing was changed; to let blazar edit it, run `chmod u+w {path}` and retry"
        )


def _remove_backup(bak: Path | None) -> None:
    """Remove the ``.bak`` a write made when the write itself failed: the old file is still there, unchanged."""
    if bak is not None:
        with suppress(OSError):
            bak.unlink()


def _prune(path: Path, keep: int) -> None:
    for old in backups(path)[:-keep] if keep > 0 else backups(path):
        with suppress(OSError):  # a stale backup is harmless
            old.unlink()


def write_config(
    path: Path, text: str, old: bytes | None, *, keep_backups: int = DEFAULT_CONFIG_BACKUPS
) -> Path | None:
    """Replace ``path`` with ``text`` atomically; call it under ``config_lock(path)``.

    ``old`` is the file's current bytes (``None``: it does not exist); they are copied to
    ``<name>.<UTC stamp>.bak`` first (not with ``keep_backups`` 0). The new text goes to a temp file in the same
    directory, is fsynced and renamed over ``path``; the directory is fsynced after, and the backups beyond the
    newest ``keep_backups`` are removed. Returns the backup's path (``None`` without one). A file without its
    owner's write bit is refused (``ConfigReadOnly``) before anything is made. On any failure the temp file and
    this write's backup are removed, the old file is byte-identical, and ``ConfigWriteError`` names the step.
    """
    directory = path.parent
    bak: Path | None = None
    _refuse_read_only(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if old is not None and keep_backups > 0:
            bak = _backup(path, old, datetime.now(UTC))
    except OSError as exc:
        raise ConfigWriteError(
            f"cannot back up {path} before writing it: {exc.strerror or exc}; nothing was changed"
        ) from None
    tmp: str | None = None
    replaced = False
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        try:
            os.fchmod(fd, _FILE_MODE)
            data = text.encode("utf-8")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        tmp, replaced = None, True
    except OSError as exc:
        hint = (
            "; if the file or its directory is immutable (lsattr -d shows an 'i'), chattr -i it first"
            if exc.errno == errno.EPERM
            else ""
        )
        raise ConfigWriteError(
            f"cannot write {path}: {exc.strerror or exc}; the old file is unchanged{hint}"
        ) from None
    finally:
        if tmp is not None:
            with suppress(OSError):
                os.unlink(tmp)
        if not replaced:
            _remove_backup(bak)
    _fsync_dir(directory)
    _prune(path, keep_backups)
    return bak
