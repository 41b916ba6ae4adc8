"""The installed-engine registry over the ``engines`` table: add, list, activate, look up.

It owns the rows only; building binaries lives in ``build.py`` and routing in ``lanes.py``.
"""

from __future__ import annotations

import hashlib
import os
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


_COLS = "kind, tag, version, path, source, accel, sha256, active"


def _row(r: tuple[object, ...]) -> EngineRow:
    kind, tag, version, path, source, accel, sha, active = r
    return EngineRow(
        kind=str(kind),
        tag=str(tag),
        version=None if version is None else str(version),
        path=Path(str(path)),
        source=str(source),
        accel=str(accel),
        sha256=None if sha is None else str(sha),
        active=bool(active),
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
) -> EngineRow:
    """Record an engine binary (replacing a row with the same kind and tag) and optionally make it active."""
    check_kind(kind)
    path = path.resolve()
    if not path.is_file():
        raise EngineError(f"engine binary {path} does not exist or is not a file")
    if not os.access(path, os.X_OK):
        raise EngineError(f"engine binary {path} is not executable (chmod +x it)")
    digest = sha256_file(path)
    now = datetime.now(UTC).isoformat()
    with store.transaction():
        store.conn.execute("DELETE FROM engines WHERE kind = ? AND tag = ?", (kind, tag))
        if activate:
            store.conn.execute("UPDATE engines SET active = 0 WHERE kind = ?", (kind,))
        store.conn.execute(
            "INSERT INTO engines (kind, tag, version, path, source, accel, sha256, active, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (kind, tag, version, str(path), source, accel, digest, int(activate), now),
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


def active(store: Store, kind: str) -> EngineRow | None:
    for r in store.conn.execute(f"SELECT {_COLS} FROM engines WHERE kind = ? AND active = 1", (kind,)):
        return _row(r)
    return None


def use(store: Store, kind: str, tag: str) -> EngineRow:
    check_kind(kind)
    if get(store, kind, tag) is None:
        tags = [e.tag for e in list_all(store) if e.kind == kind]
        raise EngineError(
            f"no {kind} engine tagged '{tag}' (installed tags: {', '.join(tags) if tags else 'none'})"
        )
    with store.transaction():
        store.conn.execute("UPDATE engines SET active = 0 WHERE kind = ?", (kind,))
        store.conn.execute("UPDATE engines SET active = 1 WHERE kind = ? AND tag = ?", (kind, tag))
    row = get(store, kind, tag)
    assert row is not None
    return row
