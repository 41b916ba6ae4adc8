"""Unpacking tarballs on a CPython without tarfile's ``data`` filter (before 3.11.4, as Debian 12's 3.11.2): the
same refusals, made by ``archive.extract_tar`` itself. A fresh machine with that Python had `blazar engine build`
end in a TypeError traceback."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from blazar.engines import archive, build
from blazar.errors import EngineError


def _tar(path: Path, *members: tuple[tarfile.TarInfo, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tf.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


def _file(name: str, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info


def _link(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


@pytest.fixture(params=["with the data filter", "without it"])
def python(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "without it" and hasattr(tarfile, "data_filter"):
        monkeypatch.delattr(tarfile, "data_filter")
    return str(request.param)


def test_a_tree_unpacks_with_its_executable_bits_and_no_setuid(tmp_path: Path, python: str) -> None:
    tarball = _tar(
        tmp_path / "t.tar.gz",
        (_file("src/llama-server", 0o4755), b"#!/bin/sh\n"),
        (_file("src/README"), b"hi"),
        (_link("src/run", "llama-server"), b""),
    )
    out = tmp_path / "out"
    out.mkdir()
    archive.unpack(tarball, out, max_bytes=1 << 20)
    assert (out / "src" / "README").read_bytes() == b"hi"
    assert (out / "src" / "llama-server").stat().st_mode & 0o7777 == 0o755  # executable, setuid cleared
    assert (out / "src" / "run").resolve() == (out / "src" / "llama-server").resolve()
    source = tmp_path / "build-out"
    source.mkdir()
    assert build._extract(tarball, source) == source  # the build lane's sdist path takes the same route
    assert (source / "src" / "README").is_file()


@pytest.mark.parametrize(
    "member",
    [
        (_file("../escape"), b"x"),
        (_file("/etc/escape"), b"x"),
        (_link("src/out", "../../outside"), b""),
        (_link("src/abs", "/etc/passwd"), b""),
    ],
    ids=["dotdot", "absolute", "link-out", "link-absolute"],
)
def test_what_leads_out_of_the_tree_is_refused(
    tmp_path: Path, python: str, member: tuple[tarfile.TarInfo, bytes]
) -> None:
    tarball = _tar(tmp_path / "bad.tar.gz", (_file("src/ok"), b"ok"), member)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises((EngineError, tarfile.TarError)):
        archive.unpack(tarball, out, max_bytes=1 << 20)
    try:  # the build lane refuses it, or (the data filter, for an absolute path) puts it inside the tree
        build._extract(tarball, tmp_path / "b")
    except EngineError as e:
        assert "cannot unpack" in str(e) or "unsafe path" in str(e) or "outside itself" in str(e), e
    assert not (tmp_path / "escape").exists() and not (tmp_path / "outside").exists()
    assert not Path("/etc/escape").exists()


def test_a_device_file_is_refused(tmp_path: Path, python: str) -> None:
    fifo = tarfile.TarInfo("src/pipe")
    fifo.type = tarfile.FIFOTYPE
    tarball = _tar(tmp_path / "dev.tar.gz", (fifo, b""))
    with pytest.raises((EngineError, tarfile.TarError)):
        archive.unpack(tarball, tmp_path, max_bytes=1 << 20)
