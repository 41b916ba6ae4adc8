"""Unpacking release archives (``.tar.gz``/``.tgz``/``.tar.xz``/``.zip``) safely and finding the engine binary.

It owns path safety (no absolute paths, no ``..``, no links out of the tree), an unpacked-size bound, keeping
executable bits from zip entries, and locating the binary by name. It never downloads or runs anything.
"""

from __future__ import annotations

import os
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from blazar.errors import EngineError

MAX_UNPACKED_FACTOR = 8
"""An archive may unpack to at most this many times its cap (a bound against archive bombs)."""


def archive_kind(name: str) -> str:
    lower = name.lower().split("?", 1)[0]
    if lower.endswith((".tar.gz", ".tgz", ".tar.xz", ".tar.bz2", ".tar")):
        return "tar"
    if lower.endswith(".zip"):
        return "zip"
    raise EngineError(f"{name} is not an archive Blazar can unpack (.tar.gz, .tgz, .tar.xz or .zip)")


def _safe_name(name: str, archive: Path) -> PurePosixPath:
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts:
        raise EngineError(f"{archive.name} holds an unsafe path '{name}'; refusing to unpack it")
    return p


def _unzip(archive: Path, into: Path, limit: int) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        if sum(i.file_size for i in infos) > limit:
            raise EngineError(f"{archive.name} unpacks to more than {limit} bytes; refusing it")
        for info in infos:
            rel = _safe_name(info.filename, archive)
            target = into.joinpath(*rel.parts)
            mode = info.external_attr >> 16
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if stat.S_ISLNK(mode):
                link = zf.read(info).decode("utf-8", errors="replace")
                resolved = (target.parent / link).resolve()
                if PurePosixPath(link).is_absolute() or not resolved.is_relative_to(into.resolve()):
                    raise EngineError(f"{archive.name} links '{info.filename}' outside itself; refusing it")
                os.symlink(link, target)
                continue
            with zf.open(info) as src, target.open("wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            if mode & 0o111:
                target.chmod(0o755)


def _untar(archive: Path, into: Path, limit: int) -> None:
    with tarfile.open(archive) as tf:
        members = tf.getmembers()
        if sum(m.size for m in members if m.isfile()) > limit:
            raise EngineError(f"{archive.name} unpacks to more than {limit} bytes; refusing it")
        for m in members:
            _safe_name(m.name, archive)
        extract_tar(tf, into, archive, members)


def extract_tar(
    tf: tarfile.TarFile, into: Path, archive: Path, members: list[tarfile.TarInfo] | None = None
) -> None:
    """``extractall`` with tarfile's ``data`` filter, or, on a CPython before 3.11.4 that lacks it (Debian 12's
    3.11.2), the same rules applied here: no absolute paths or ``..``, no link that leads out of ``into``, no
    device or FIFO, and no setuid, setgid or group/other write bits."""
    if hasattr(tarfile, "data_filter"):
        tf.extractall(into, members=members, filter="data")
        return
    root = into.resolve()
    chosen = tf.getmembers() if members is None else members
    for m in chosen:
        rel = _safe_name(m.name, archive)
        target = root.joinpath(*rel.parts)
        if m.issym():
            link = PurePosixPath(m.linkname)
            if link.is_absolute() or not (target.parent / link).resolve().is_relative_to(root):
                raise EngineError(f"{archive.name} links '{m.name}' outside itself; refusing it")
        elif m.islnk():
            _safe_name(m.linkname, archive)
        elif not (m.isfile() or m.isdir()):
            raise EngineError(f"{archive.name} holds a special file '{m.name}'; refusing to unpack it")
        m.mode &= 0o755
        m.uid, m.gid, m.uname, m.gname = os.getuid(), os.getgid(), "", ""  # owned by who unpacks it
    tf.extractall(into, members=chosen)


def unpack(archive: Path, into: Path, *, max_bytes: int, name: str | None = None) -> None:
    """Unpack ``archive`` into the existing directory ``into``; ``name`` (the URL's file name) picks the format."""
    limit = max_bytes * MAX_UNPACKED_FACTOR
    try:
        if archive_kind(name or archive.name) == "zip":
            _unzip(archive, into, limit)
        else:
            _untar(archive, into, limit)
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as e:
        raise EngineError(f"cannot unpack {name or archive.name}: {e}") from None


def find_binary(root: Path, binary: str) -> Path:
    """The shallowest regular file called ``binary`` (or ``binary.exe``) under ``root``."""
    names = {binary, f"{binary}.exe"}
    found = sorted(
        (p for p in root.rglob("*") if p.name in names and p.is_file() and not p.is_symlink()),
        key=lambda p: (len(p.relative_to(root).parts), str(p)),
    )
    if not found:
        files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        shown = ", ".join(files[:8]) + (", ..." if len(files) > 8 else "")
        raise EngineError(f"the release archive holds no '{binary}' (it holds: {shown or 'nothing'})")
    path = found[0]
    path.chmod(path.stat().st_mode | 0o755)
    return path
