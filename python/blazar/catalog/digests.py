"""The weights' digests (see ``catalog``'s docstring for what each kind of model's digest is) and the split GGUF
shard naming they depend on. Pure reads of files; ``catalog`` re-exports these names."""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from blazar.catalog.model_dir import hash_dir

CopyProgress = Callable[[int, int], None]
"""Called as (bytes_done, bytes_total) while copying, or while hashing a file that was linked."""

HASH_BLOCK = 1 << 20
"""Bytes per read when hashing a file that is already in place."""

_SHARD = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def split_set(first: Path) -> list[Path] | None:
    """The shard paths of the split GGUF whose first shard is ``first``, in order; None for any other file."""
    m = _SHARD.match(first.name)
    if m is None or int(m["no"]) != 1 or int(m["count"]) < 1:
        return None
    count = m["count"]
    return [first.with_name(f"{m['prefix']}-{i:05d}-of-{count}.gguf") for i in range(1, int(count) + 1)]


class DigestCancelled(Exception):
    """Hashing was cancelled (the gateway is shutting down); nothing was recorded."""


def sha256_file(
    path: Path, progress: CopyProgress | None = None, cancel: threading.Event | None = None
) -> str:
    """The hex sha256 of ``path``, read once in ``HASH_BLOCK`` pieces; OSError if it cannot be read."""
    h = hashlib.sha256()
    buf = bytearray(HASH_BLOCK)
    view = memoryview(buf)
    done = 0
    with path.open("rb", buffering=0) as f:
        total = os.fstat(f.fileno()).st_size
        while n := f.readinto(buf):
            if cancel is not None and cancel.is_set():
                raise DigestCancelled(f"hashing {path} was cancelled")
            h.update(view[:n])
            done += n
            if progress:
                progress(done, total)
    return h.hexdigest()


def split_digest(shard_sha256s: Sequence[str]) -> str:
    """A split GGUF's digest: the sha256 of its shards' hex sha256s in shard order, one per line."""
    return hashlib.sha256("".join(f"{s}\n" for s in shard_sha256s).encode("ascii")).hexdigest()


def model_digest(path: Path, cancel: threading.Event | None = None) -> str:
    """The digest of the weights a catalog row points at: its file, its split set when ``path`` is shard 1, or
    its model directory (``model_dir.dir_digest``)."""
    if path.is_dir():
        return hash_dir(path, lambda p, c: sha256_file(p, cancel=c), cancel)
    shards = split_set(path)
    if shards is None:
        return sha256_file(path, cancel=cancel)
    return split_digest([sha256_file(s, cancel=cancel) for s in shards])
