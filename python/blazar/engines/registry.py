"""The installed-engine registry over the ``engines`` table: add, list, activate, roll back, delete, look up.

It owns the rows only; building binaries lives in ``build.py``, installing in ``installer.py``, removing files in
``removal.py`` and routing in ``lanes.py``. Each activation stamps ``activated_at``, which is what
``rollback`` walks back through.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from blazar.engines import KINDS
from blazar.errors import EngineError
from blazar.store import Store


@dataclass(frozen=True, slots=True)
class EngineRow:
    kind: str
    tag: str
    version: str | None
    path: Path
    source: str
    accel: str
    sha256: str | None
    active: bool
    lane_class: str = "mainstream"
    """``mainstream`` (official builds) or ``fork`` (a capability fork: only gets what mainstream lacks)."""
    architectures: tuple[str, ...] | None = None
    """Architectures this engine advertises (from the manifest or ``--arch``); ``None`` = not declared."""
    activated_at: str | None = None
    created_at: str | None = None
    asset_url: str | None = None
    """The release archive it was installed from (``engine install``), else None."""
    asset_sha256: str | None = None
    """The sha256 that archive was verified against (GitHub's published digest, or the manifest's)."""


_COLS = (
    "kind, tag, version, path, source, accel, sha256, active, lane_class, architectures_json, activated_at,"
    " created_at, asset_url, asset_sha256"
)
LANE_CLASSES: tuple[str, ...] = ("mainstream", "fork")


def _arches(raw: object) -> tuple[str, ...] | None:
    if raw is None:
        return None
    items = json.loads(str(raw))
    return tuple(str(i) for i in items) if isinstance(items, list) else None


def _row(r: tuple[object, ...]) -> EngineRow:
    (
        kind,
        tag,
        version,
        path,
        source,
        accel,
        sha,
        active,
        lane_class,
        arches,
        activated,
        created,
        url,
        asset_sha,
    ) = r
    return EngineRow(
        kind=str(kind),
        tag=str(tag),
        version=None if version is None else str(version),
        path=Path(str(path)),
        source=str(source),
        accel=str(accel),
        sha256=None if sha is None else str(sha),
        active=bool(active),
        lane_class=str(lane_class),
        architectures=_arches(arches),
        activated_at=None if activated is None else str(activated),
        created_at=None if created is None else str(created),
        asset_url=None if url is None else str(url),
        asset_sha256=None if asset_sha is None else str(asset_sha),
    )


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise EngineError(f"unknown engine kind '{kind}' (known kinds: {', '.join(KINDS)})")
    return kind


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


def check_tag(tag: str) -> None:
    """An engine tag names a directory and a row: letters, digits, '.', '_', '+' and '-', not starting with a
    dot or dash, at most 64 characters."""
    if not _TAG.fullmatch(tag):
        raise EngineError(
            f"engine tag {tag!r} is not valid: use letters, digits, '.', '_', '+' and '-' (at most 64, starting with"
            " a letter or digit)"
        )


def check_binary(path: Path) -> Path:
    """``path`` resolved, when it is an executable file; else an EngineError saying what it is not."""
    path = path.resolve()
    if not path.is_file():
        raise EngineError(f"engine binary {path} does not exist or is not a file")
    if not os.access(path, os.X_OK):
        raise EngineError(f"engine binary {path} is not executable (chmod +x it)")
    return path


def add(
    store: Store,
    *,
    kind: str,
    tag: str,
    path: Path,
    source: str,
    version: str | None = None,
    accel: str = "cpu",
    activate: bool = True,
    lane_class: str = "mainstream",
    architectures: tuple[str, ...] | None = None,
    asset_url: str | None = None,
    asset_sha256: str | None = None,
) -> EngineRow:
    """Record an engine binary (replacing a row with the same kind and tag) and optionally make it active."""
    check_kind(kind)
    if lane_class not in LANE_CLASSES:
        raise EngineError(f"lane class must be one of {', '.join(LANE_CLASSES)}, not '{lane_class}'")
    check_tag(tag)
    path = check_binary(path)
    digest = sha256_file(path)
    now = datetime.now(UTC).isoformat()
    with store.transaction():
        store.conn.execute("DELETE FROM engines WHERE kind = ? AND tag = ?", (kind, tag))
        if activate:
            store.conn.execute("UPDATE engines SET active = 0 WHERE kind = ?", (kind,))
        store.conn.execute(
            "INSERT INTO engines (kind, tag, version, path, source, accel, sha256, active, created_at,"
            " lane_class, architectures_json, activated_at, asset_url, asset_sha256)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                kind,
                tag,
                version,
                str(path),
                source,
                accel,
                digest,
                int(activate),
                now,
                lane_class,
                None if architectures is None else json.dumps(list(architectures)),
                now if activate else None,
                asset_url,
                asset_sha256,
            ),
        )
    found = get(store, kind, tag)
    assert found is not None
    return found


def get(store: Store, kind: str, tag: str) -> EngineRow | None:
    for r in store.conn.execute(f"SELECT {_COLS} FROM engines WHERE kind = ? AND tag = ?", (kind, tag)):
        return _row(r)
    return None


def list_all(store: Store) -> list[EngineRow]:
    return [_row(r) for r in store.conn.execute(f"SELECT {_COLS} FROM engines ORDER BY kind, created_at")]


def beside(store: Store, kind: str, *names: str) -> tuple[Path | None, list[EngineRow]]:
    """A program that ships with engines of ``kind`` (llama.cpp's ``llama-quantize``; its RPC server, under its
    names newest first) beside an installed engine of that kind, the active one first; and the engines looked in,
    for the caller's message."""
    engines = sorted((r for r in list_all(store) if r.kind == kind), key=lambda r: not r.active)
    for row in engines:
        for name in names:
            path = Path(row.path).with_name(name)
            if path.is_file():
                return path, engines
    return None, engines


def active(store: Store, kind: str) -> EngineRow | None:
    for r in store.conn.execute(f"SELECT {_COLS} FROM engines WHERE kind = ? AND active = 1", (kind,)):
        return _row(r)
    return None


def tags_of(store: Store, kind: str) -> list[str]:
    return [e.tag for e in list_all(store) if e.kind == kind]


def _no_such(store: Store, kind: str, tag: str) -> EngineError:
    tags = tags_of(store, kind)
    return EngineError(
        f"no {kind} engine tagged '{tag}' (installed tags: {', '.join(tags) if tags else 'none'})"
    )


def use(store: Store, kind: str, tag: str) -> EngineRow:
    """Make ``kind``/``tag`` the active engine of its kind and stamp the activation time."""
    check_kind(kind)
    if get(store, kind, tag) is None:
        raise _no_such(store, kind, tag)
    now = datetime.now(UTC).isoformat()
    with store.transaction():
        store.conn.execute("UPDATE engines SET active = 0 WHERE kind = ?", (kind,))
        store.conn.execute(
            "UPDATE engines SET active = 1, activated_at = ? WHERE kind = ? AND tag = ?", (now, kind, tag)
        )
    row = get(store, kind, tag)
    assert row is not None
    return row


def previous(store: Store, kind: str) -> EngineRow | None:
    """The most recently active tag of ``kind`` other than the active one (what ``rollback`` returns to)."""
    for r in store.conn.execute(
        f"SELECT {_COLS} FROM engines WHERE kind = ? AND active = 0 AND activated_at IS NOT NULL"
        " ORDER BY activated_at DESC, id DESC LIMIT 1",
        (kind,),
    ):
        return _row(r)
    return None


def rollback(store: Store, kind: str) -> EngineRow:
    """Activate the previously active tag of ``kind``; a second rollback returns to where the first started."""
    check_kind(kind)
    prev = previous(store, kind)
    if prev is None:
        tags = tags_of(store, kind)
        raise EngineError(
            f"no earlier active {kind} engine to roll back to (installed tags: {', '.join(tags) or 'none'});"
            f" activate one with: blazar engine use --kind {kind} TAG"
        )
    return use(store, kind, prev.tag)


def delete(store: Store, kind: str, tag: str) -> None:
    """Delete one row (the files are ``removal.remove``'s business)."""
    with store.transaction():
        store.conn.execute("DELETE FROM engines WHERE kind = ? AND tag = ?", (kind, tag))
