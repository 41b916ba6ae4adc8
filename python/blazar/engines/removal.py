"""The engines tree on disk and taking engines out of it: the per-kind lock, sweeping leftovers, ``rm`` and ``prune``.

Removal is aside-first: the tag dir is renamed to ``.aside-<tag>-<id>`` beside it, then the row is deleted, then
the aside dir is discarded. If the row cannot be deleted the dir is renamed back, so there is never a live row over
a deleted dir; a discard that fails leaves only an ``.aside-*`` dir, swept on the next install or removal. Files
of engines registered from elsewhere (``engine add``) are never deleted, only their rows. An engine a running
child was started from is not removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil

from blazar.engines import registry
from blazar.engines.manifest import version_key
from blazar.engines.registry import EngineRow
from blazar.errors import EngineError
from blazar.paths import DataDir
from blazar.store import Store

log = logging.getLogger(__name__)

ASIDE_PREFIX = ".aside-"
STAGING_PREFIX = ".staging-"


def kind_dir(data: DataDir, kind: str) -> Path:
    return data.engines / kind


def downloads_dir(data: DataDir) -> Path:
    return data.engines / ".downloads"


@contextlib.contextmanager
def kind_lock(data: DataDir, kind: str) -> Iterator[None]:
    """Exclusive hold on ``kind``'s tree for one install or removal; a second blazar is told to wait."""
    locks = data.engines / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with (locks / f"{kind}.lock").open("a") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EngineError(
                f"another blazar command is installing or removing {kind} engines; wait for it to finish"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def sweep(data: DataDir, kind: str) -> None:
    """Discard staging and aside dirs a crashed install or removal left (call with the kind lock held)."""
    root = kind_dir(data, kind)
    if not root.is_dir():
        return
    for p in root.iterdir():
        if p.name.startswith((ASIDE_PREFIX, STAGING_PREFIX)) and p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)


def owned_dir(data: DataDir, row: EngineRow) -> Path | None:
    """The tag dir Blazar made for ``row`` (install or build), or ``None`` for a binary registered from elsewhere."""
    tag_dir = kind_dir(data, row.kind) / row.tag
    try:
        inside = row.path.resolve().is_relative_to(tag_dir.resolve())
    except OSError:
        inside = False
    return tag_dir if inside else None


def _users(data: DataDir, tag_dir: Path) -> list[int]:
    """PIDs from ``run/*.pid`` whose process runs a program from ``tag_dir`` (its executable or its argv[0])."""
    pids: list[int] = []
    roots = {tag_dir.resolve(), Path(os.path.abspath(tag_dir))}
    for pid_file in data.run.glob("*.pid") if data.run.is_dir() else []:
        try:
            pid = int(pid_file.read_text().strip())
            proc = psutil.Process(pid)
            programs = [proc.exe(), *proc.cmdline()[:1]]
        except (ValueError, OSError, psutil.Error):
            continue
        paths = {Path(os.path.abspath(p)) for p in programs if p}
        if any(p.is_relative_to(r) for p in paths for r in roots):
            pids.append(pid)
    return pids


def discard(path: Path) -> None:
    """Move ``path`` aside and delete it; an aside dir that cannot be deleted is left for ``sweep``."""
    aside = path.with_name(f"{ASIDE_PREFIX}{path.name}-{uuid.uuid4().hex[:8]}")
    os.rename(path, aside)
    try:
        shutil.rmtree(aside)
    except OSError as e:
        log.warning("could not delete %s (%s); it will be swept later", aside, e)


def remove(store: Store, data: DataDir, kind: str, tag: str, *, force: bool = False) -> EngineRow:
    """``engine rm``: aside the tag dir, delete the row, discard the dir; restore the dir if the row stays."""
    registry.check_kind(kind)
    row = registry.get(store, kind, tag)
    if row is None:
        tags = registry.tags_of(store, kind)
        raise EngineError(f"no {kind} engine tagged '{tag}' (installed tags: {', '.join(tags) or 'none'})")
    if row.active and not force:
        raise EngineError(
            f"{kind} {tag} is the active {kind} engine; activate another first"
            f" (blazar engine use --kind {kind} TAG) or pass --force"
        )
    with kind_lock(data, kind):
        sweep(data, kind)
        tag_dir = owned_dir(data, row)
        if tag_dir is not None:
            users = _users(data, tag_dir)
            if users:
                raise EngineError(
                    f"{kind} {tag} is serving (pid {', '.join(map(str, users))}); stop it first"
                    " (stop blazar serve, or let its idle timeout evict it) and retry"
                )
        aside: Path | None = None
        if tag_dir is not None and tag_dir.exists():
            aside = tag_dir.with_name(f"{ASIDE_PREFIX}{tag}-{uuid.uuid4().hex[:8]}")
            os.rename(tag_dir, aside)
        try:
            registry.delete(store, kind, tag)
        except BaseException:
            if aside is not None and tag_dir is not None:
                os.rename(aside, tag_dir)
            raise
        if aside is not None:
            try:
                shutil.rmtree(aside)
            except OSError as e:
                log.warning(
                    "removed %s %s but could not delete %s (%s); it will be swept later", kind, tag, aside, e
                )
    return row


def prune_plan(rows: list[EngineRow], kind: str | None, keep: int) -> list[EngineRow]:
    """The non-active rows to remove: all but the ``keep`` newest non-active tags of each kind."""
    if keep < 0:
        raise EngineError(f"--keep must be 0 or more, not {keep}")
    out: list[EngineRow] = []
    kinds = sorted({r.kind for r in rows if kind is None or r.kind == kind})
    for k in kinds:
        idle = [r for r in rows if r.kind == k and not r.active]
        idle.sort(key=lambda r: (r.created_at or "", version_key(r.version or "")), reverse=True)
        out += idle[keep:]
    return out


def prune(store: Store, data: DataDir, *, kind: str | None = None, keep: int = 1) -> list[EngineRow]:
    """``engine prune``: remove non-active tags, keeping the ``keep`` newest of each kind (rollback targets)."""
    if kind is not None:
        registry.check_kind(kind)
    removed: list[EngineRow] = []
    for row in prune_plan(registry.list_all(store), kind, keep):
        removed.append(remove(store, data, row.kind, row.tag))
    return removed
