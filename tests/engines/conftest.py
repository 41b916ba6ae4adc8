"""Fixtures for the engine tests: a 127.0.0.1 file server (Range, early close), archives, manifests, snapshots."""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from blazar.engines import registry
from blazar.engines.manifest import Manifest, load_manifest
from blazar.paths import DataDir
from blazar.store import Store

PLATFORM = "linux-x86_64"

OK_SCRIPT = (
    '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "version: {v} (fake)"; exit 0; fi\nexec sleep 60\n'
)
BAD_VERSION_SCRIPT = '#!/bin/sh\necho "illegal instruction" >&2\nexit 1\n'
NEVER_HEALTHY_SCRIPT = (
    '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "version: 9"; exit 0; fi\nexec sleep 60\n'
)


@dataclass
class FileServer:
    """Serves files under ``root`` over HTTP/1.1 with Range support; ``truncate[name]`` cuts one reply short."""

    root: Path
    port: int = 0
    truncate: dict[str, int] = field(default_factory=dict)
    ranges: list[str | None] = field(default_factory=list)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"


def _handler(srv: FileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            name = self.path.lstrip("/")
            path = srv.root / name
            if not path.is_file():
                self.send_error(404)
                return
            data = path.read_bytes()
            rng = self.headers.get("Range")
            srv.ranges.append(rng)
            start = 0
            m = re.fullmatch(r"bytes=(\d+)-", rng or "")
            if m:
                start = int(m.group(1))
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            cut = srv.truncate.pop(name, None)
            if cut is not None:
                self.wfile.write(body[:cut])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def file_server(tmp_path: Path) -> Iterator[FileServer]:
    root = tmp_path / "srv"
    root.mkdir()
    srv = FileServer(root)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(srv))
    httpd.daemon_threads = True
    srv.port = int(httpd.server_address[1])
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    httpd.shutdown()
    httpd.server_close()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_archive(dest: Path, top: str, files: dict[str, bytes | Path]) -> Path:
    """A .tar.gz or .zip (by ``dest``'s name) holding ``top/<name>`` for each file, all executable."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staged = dest.parent / f".stage-{dest.name}"
    staged.mkdir()
    for name, content in files.items():
        p = staged / name
        if isinstance(content, Path):
            p.write_bytes(content.read_bytes())
        else:
            p.write_bytes(content)
        p.chmod(0o755)
    if dest.name.endswith(".zip"):
        with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
            for p in sorted(staged.iterdir()):
                zf.write(p, f"{top}/{p.name}")
    else:
        with tarfile.open(dest, "w:gz", compresslevel=1) as tf:
            tf.add(staged, arcname=top)
    for p in staged.iterdir():
        p.unlink()
    staged.rmdir()
    return dest


def script_archive(srv: FileServer, version: str, script: str = OK_SCRIPT) -> Path:
    """A small tar.gz whose ``llama-server`` is a shell script, served by ``srv``."""
    return make_archive(
        srv.root / f"llama-{version}-bin-ubuntu-x64.tar.gz",
        f"llama-{version}",
        {"llama-server": script.format(v=version).encode(), "libfake.so": b"\0"},
    )


def release(
    srv: FileServer, archive: Path, version: str, *, sha256: str | None = "auto", size: int | None = None
) -> dict[str, object]:
    sha = sha256_of(archive) if sha256 == "auto" else sha256
    asset = {"platform": PLATFORM, "accel": "cpu", "url": srv.url(archive.name), "sha256": sha, "size": size}
    return {"version": version, "assets": [asset]}


def write_manifest(path: Path, lanes: dict[str, dict[str, object]]) -> Manifest:
    path.write_text(json.dumps({"schema": 1, "lanes": lanes}))
    return load_manifest(path)


def llama_lane(*releases: dict[str, object], **extra: object) -> dict[str, object]:
    return {"source": "official", "binary": "llama-server", "releases": list(releases), **extra}


@pytest.fixture
def data(tmp_path: Path) -> DataDir:
    return DataDir(tmp_path / "data").ensure()


@pytest.fixture
def store(data: DataDir) -> Iterator[Store]:
    s = Store.open(data.db)
    yield s
    s.close()


def snapshot(store: Store, data: DataDir) -> tuple[object, ...]:
    """The installed set: every row, and every path under engines/ except the download cache and locks."""
    rows = tuple(registry.list_all(store))
    files = sorted(
        str(p.relative_to(data.engines))
        for p in data.engines.rglob("*")
        if p.relative_to(data.engines).parts[0] not in (".downloads", ".locks")
    )
    return rows, tuple(files)
