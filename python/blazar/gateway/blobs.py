"""Ollama's blob endpoints: ``HEAD /api/blobs/sha256:<hex>`` (is it here?) and ``POST`` (upload it), which
``ollama create -f Modelfile`` uses for a Modelfile whose ``FROM`` (or ``ADAPTER``) is a local GGUF file: the
client uploads the file as a blob, then names it in ``/api/create``'s ``files`` (or ``adapters``).

An upload is streamed to ``blobs/`` in the data directory (no body limit: weights are large), hashed on the way
in a worker thread in 4 MiB steps, and kept only when its sha256 is the one its path names (else 400, and
nothing is left). A client silent for ``request_body_timeout_secs`` is dropped. ``create`` imports a blob into the
catalog as a hard link and then removes it from ``blobs/``, so the weights are on disk once.

It owns the blob files; the catalog and the LoRA registry take them over.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import IO, Any

from granian.rsgi import ProtocolClosed  # type: ignore[attr-defined]

from blazar.gateway.http import ClientGone, HttpError, Request, declared_length
from blazar.paths import alive
from blazar.supervisor import Supervisor

Response = tuple[int, list[tuple[str, str]], bytes]

BLOBS = "/api/blobs/"
_DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")
FLUSH_BYTES = 4 << 20
"""Bytes gathered from the client before one write-and-hash step in a worker thread."""


def hex_of(digest: Any, what: str = "the blob's digest") -> str:
    """The hex of an Ollama blob digest (``sha256:<64 hex>``); 400 otherwise."""
    m = _DIGEST.match(digest) if isinstance(digest, str) else None
    if m is None:
        raise HttpError(400, f"{what} must be sha256:<64 lowercase hex digits>, got {str(digest)[:80]!r}")
    return m.group(1)


def path_of(sup: Supervisor, hexd: str) -> Path:
    return sup.data.root / "blobs" / f"sha256-{hexd}"


def missing(hexd: str) -> HttpError:
    return HttpError(
        400,
        f"blob sha256:{hexd} is not on this server: upload it first with POST /api/blobs/sha256:{hexd}",
        "not_found_error",
    )


async def exists(sup: Supervisor, req: Request, proto: Any) -> Response:
    """``HEAD /api/blobs/sha256:<hex>``: 200 when the blob is here, else 404. There is no GET: a blob is never
    read back (Ollama has none either), so the router answers it with a 405 naming HEAD and POST."""
    hexd = hex_of(req.path[len(BLOBS) :])
    if not path_of(sup, hexd).is_file():
        raise HttpError(404, f"blob sha256:{hexd} is not on this server", "not_found_error")
    return 200, [], b""


async def push(sup: Supervisor, req: Request, proto: Any) -> Response:
    """``POST /api/blobs/sha256:<hex>``: the body, kept as that blob when its sha256 matches (201); 200 when the
    blob is here already (its body is not read, as in Ollama)."""
    req.require_full_access("uploading blobs")
    hexd = hex_of(req.path[len(BLOBS) :])
    dest = path_of(sup, hexd)
    if dest.is_file():
        return 200, [], b""
    dest.parent.mkdir(parents=True, exist_ok=True)
    declared = declared_length(req.headers)
    promised = _PROMISED[0]
    if declared is not None and declared > shutil.disk_usage(dest.parent).free - RESERVE_BYTES - promised:
        others = f" beside the {promised} bytes of the uploads in flight" if promised else ""
        raise HttpError(
            507, f"the blob ({declared} bytes) does not fit on this server's disk{others}", "blazar_error"
        )
    sweep(dest.parent)
    partial = dest.parent / f".partial-{os.getpid()}-{hexd[:16]}-{secrets.token_hex(4)}"
    _PROMISED[0] += declared or 0
    try:
        got, size = await _receive(
            proto, partial, float(sup.cfg.request_body_timeout_secs), watch_disk=declared is None
        )
        if declared is not None and size < declared:  # a client that half-closed still reads the answer
            raise HttpError(400, f"the upload ended after {size} of its {declared} bytes; nothing was kept")
        if got != hexd:
            raise HttpError(
                400,
                f"digest mismatch: the body's sha256 is {got}, not the {hexd} its path names; nothing was kept",
            )
        os.replace(partial, dest)
    except OSError as e:
        raise HttpError(507, f"the blob could not be stored: {e.strerror or e}", "blazar_error") from None
    finally:
        _PROMISED[0] -= declared or 0
        if partial.exists():  # a multi-GB file's blocks are freed off the event loop
            await asyncio.to_thread(partial.unlink, missing_ok=True)
    return 201, [], b""


RESERVE_BYTES = 512 << 20
"""Disk an upload leaves free: one that would not is refused before a byte is written (507)."""
_PROMISED = [0]
"""Bytes the uploads in flight in this process declared (their Content-Length): counted as used, so two
uploads that each fit alone are not both let in to fill the disk."""


def sweep(folder: Path) -> None:
    """Remove the partial uploads of processes that are gone (a daemon killed mid-upload)."""
    for old in folder.glob(".partial-*"):
        pid = old.name.split("-")[1]
        if pid.isdigit() and not alive(int(pid)):
            old.unlink(missing_ok=True)


PRUNE_AFTER_SECS = 24 * 3600
"""A blob no create took over within this long is removed when the daemon starts (Ollama prunes the blobs no
model uses at start-up): an upload whose create failed or never came does not hold its disk for ever."""


def prune(folder: Path, now: float | None = None) -> list[str]:
    """Remove the blobs uploaded more than ``PRUNE_AFTER_SECS`` ago; their names. A model created from one keeps
    its bytes in its own hard link; a client that creates from it again uploads it again (Ollama's client asks
    with HEAD first)."""
    cutoff = (time.time() if now is None else now) - PRUNE_AFTER_SECS
    gone = []
    for blob in folder.glob("sha256-*"):
        with contextlib.suppress(FileNotFoundError):
            if blob.stat().st_mtime < cutoff:
                blob.unlink()
                gone.append(blob.name)
    return gone


async def _receive(proto: Any, partial: Path, idle: float, watch_disk: bool = False) -> tuple[str, int]:
    """Stream the request body into ``partial``, flushed to disk before it is renamed: its sha256 hex and size
    (a client that hangs up ends Granian's body early: the size tells). With ``watch_disk`` (a body of no declared
    length, which was not checked against the disk beforehand) each step must leave ``RESERVE_BYTES`` free
    beside the uploads in flight, else 507."""
    sha = hashlib.sha256()
    chunks: list[bytes] = []
    held = size = 0
    stream = proto.__aiter__()
    with partial.open("wb") as f:
        while True:
            try:
                chunk = await asyncio.wait_for(anext(stream), idle)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise HttpError(
                    408,
                    f"the upload sent nothing for {idle:g} s (request_body_timeout_secs); nothing was kept",
                    "request_timeout",
                ) from None
            except ProtocolClosed:
                raise ClientGone("before its upload ended") from None
            chunks.append(chunk)
            held += len(chunk)
            size += len(chunk)
            if held >= FLUSH_BYTES:
                if (
                    watch_disk
                    and shutil.disk_usage(partial.parent).free - held < RESERVE_BYTES + _PROMISED[0]
                ):
                    raise HttpError(
                        507,
                        f"the blob does not fit on this server's disk: after {size - held} bytes, the next ones"
                        f" would leave under {RESERVE_BYTES >> 20} MiB free; nothing was kept",
                        "blazar_error",
                    )
                await asyncio.to_thread(_write, f, sha, b"".join(chunks))
                chunks.clear()
                held = 0
        await asyncio.to_thread(_write, f, sha, b"".join(chunks), True)
    return sha.hexdigest(), size


def _write(f: IO[bytes], sha: Any, data: bytes, last: bool = False) -> None:
    f.write(data)
    sha.update(data)
    if last:  # on disk before the rename: a blob that exists is one whose bytes were verified
        f.flush()
        os.fsync(f.fileno())


def take(sup: Supervisor, hexd: str) -> Path:
    """The path of blob ``hexd`` for an import (400 when it was never uploaded)."""
    path = path_of(sup, hexd)
    if not path.is_file():
        raise missing(hexd)
    return path
