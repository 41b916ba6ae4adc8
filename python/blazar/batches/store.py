"""Stored files and batch jobs for OpenAI's Files and Batches APIs.

A file's bytes live in ``<data_dir>/files/<id>`` (owner-only), its row in ``files``; a batch is its OpenAI Batch
object in ``batches.doc_json``. Each belongs to the key that made it (``owner``, None without auth): another key
neither sees nor touches it. This module owns those rows and files and the reading of a batch's input (JSONL,
one request per line); it never speaks HTTP and never runs a request (``gateway/batch.py`` does).
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from blazar.dialects.canonical import MAX_JSON_DEPTH, too_deep
from blazar.errors import BlazarError
from blazar.store import Store

ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/completions", "/v1/embeddings")
"""What a batch may call, as in OpenAI's Batch API (its other endpoints are not served here)."""
COMPLETION_WINDOW = "24h"
WINDOW_SECS = 24 * 3600
MAX_LINES = 50_000
"""OpenAI's bound on the requests in one batch."""
PURPOSES = ("batch", "batch_output", "user_data", "assistants", "fine-tune", "vision", "evals")
ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")
"""A batch in these states has work left (a daemon restart picks it up again)."""


class BatchError(BlazarError):
    """A request about files or batches that cannot be done; ``status`` is the HTTP status the gateway answers
    with (404 for a file or batch the asker cannot see)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


@dataclass(frozen=True, slots=True)
class FileRow:
    id: str
    owner: str | None
    filename: str
    purpose: str
    bytes: int
    created_at: int

    def object(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
        }


def _file_row(r: Any) -> FileRow:
    return FileRow(str(r[0]), _owner_of(r[1]), str(r[2]), str(r[3]), int(r[4]), int(r[5]))


def _owner_of(value: Any) -> str | None:
    return None if value is None else str(value)


def _visible(owner: str | None, asker: str | None, full: bool) -> bool:
    """A key sees what it made; a full-access key also what was made without auth; without auth (``asker``
    None) everything is visible. ``_VISIBLE_SQL`` is the same rule for a listing's query."""
    return asker is None or owner == asker or (owner is None and full)


_VISIBLE_SQL = "(:asker IS NULL OR owner = :asker OR (owner IS NULL AND :full))"


class Files:
    """Files on disk under ``root`` with their rows in the store."""

    def __init__(self, store: Store, root: Path) -> None:
        self.store = store
        self.root = root

    def path(self, file_id: str) -> Path:
        return self.root / file_id

    def add(self, owner: str | None, filename: str, purpose: str, data: bytes) -> FileRow:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        row = FileRow(new_id("file"), owner, filename, purpose, len(data), int(time.time()))
        tmp = self.root / f".{row.id}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # files may hold prompts: owner-only
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, self.path(row.id))
        with self.store.transaction() as conn:
            conn.execute(
                "INSERT INTO files (id, owner, filename, purpose, bytes, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (row.id, row.owner, row.filename, row.purpose, row.bytes, row.created_at),
            )
        return row

    def get(self, file_id: str, asker: str | None, full: bool = False) -> FileRow:
        """The file, or a 404 (also for another key's file: its existence is not disclosed)."""
        found = self.store.conn.execute(
            "SELECT id, owner, filename, purpose, bytes, created_at FROM files WHERE id = ?", (file_id,)
        ).fetchone()
        if found is None or not _visible(_owner_of(found[1]), asker, full):
            raise BatchError(404, f"no file with id '{file_id[:64]}'")
        return _file_row(found)

    def listing(self, asker: str | None, purpose: str | None, full: bool = False) -> list[FileRow]:
        rows = self.store.conn.execute(
            "SELECT id, owner, filename, purpose, bytes, created_at FROM files"
            f" WHERE {_VISIBLE_SQL} AND (:purpose IS NULL OR purpose = :purpose) ORDER BY created_at DESC, id",
            {"asker": asker, "full": full, "purpose": purpose},
        ).fetchall()
        return [_file_row(r) for r in rows]

    def read(self, row: FileRow) -> bytes:
        try:
            return self.path(row.id).read_bytes()
        except OSError as e:
            raise BatchError(500, f"file '{row.id}' cannot be read: {e.strerror or e}") from None

    def delete(self, row: FileRow) -> None:
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM files WHERE id = ?", (row.id,))
        self.path(row.id).unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class Line:
    """One request of a batch's input."""

    custom_id: str
    url: str
    body: dict[str, Any]


def read_input(data: bytes, endpoint: str) -> tuple[list[Line], list[dict[str, Any]]]:
    """The requests of a batch input (JSONL: ``custom_id``, ``method`` POST, ``url`` = the batch's endpoint,
    ``body`` an object), and OpenAI-style errors (``code``, ``message``, ``line``, 1-based) for the lines that
    are not; any error fails the whole batch before a request runs, as OpenAI's validation does."""
    lines: list[Line] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()

    def bad(n: int, code: str, message: str) -> None:
        if len(errors) < 100:
            errors.append({"code": code, "message": message, "param": None, "line": n})

    for n, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            bad(n, "invalid_json_line", "this line is not valid JSON")
            continue
        if not isinstance(obj, dict):
            bad(n, "invalid_request", "each line must be a JSON object")
            continue
        custom_id, method, url, body = (
            obj.get("custom_id"),
            obj.get("method"),
            obj.get("url"),
            obj.get("body"),
        )
        if not isinstance(custom_id, str) or not custom_id:
            bad(n, "missing_required_parameter", "'custom_id' must be a non-empty string")
        elif custom_id in seen:
            bad(n, "duplicate_custom_id", f"custom_id '{custom_id}' is used by an earlier line")
        elif method != "POST":
            bad(n, "invalid_method", "'method' must be \"POST\"")
        elif url != endpoint:
            bad(n, "mismatched_url", f"'url' must be the batch's endpoint, {endpoint}")
        elif not isinstance(body, dict):
            bad(n, "invalid_request", "'body' must be a JSON object")
        elif body.get("stream") is True:
            bad(n, "invalid_request", "'stream' must not be true: a batch's answers are whole")
        elif too_deep(body):
            bad(n, "invalid_request", f"'body' is nested deeper than {MAX_JSON_DEPTH} levels")
        else:
            seen.add(custom_id)
            lines.append(Line(custom_id, url, body))
    if not lines and not errors:
        bad(0, "empty_file", "the input file holds no request")
    if len(lines) > MAX_LINES:
        bad(
            0,
            "too_many_requests",
            f"a batch may hold at most {MAX_LINES} requests; this one has {len(lines)}",
        )
    return lines, errors


class Batches:
    """Batch objects in the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def add(self, owner: str | None, doc: dict[str, Any]) -> None:
        with self.store.transaction() as conn:
            conn.execute(
                "INSERT INTO batches (id, owner, status, doc_json, created_at) VALUES (?, ?, ?, ?, ?)",
                (doc["id"], owner, doc["status"], orjson.dumps(doc).decode(), doc["created_at"]),
            )

    def save(self, doc: dict[str, Any]) -> None:
        with self.store.transaction() as conn:
            conn.execute(
                "UPDATE batches SET status = ?, doc_json = ? WHERE id = ?",
                (doc["status"], orjson.dumps(doc).decode(), doc["id"]),
            )

    def get(
        self, batch_id: str, asker: str | None, full: bool = False, kind: str | None = None
    ) -> tuple[str | None, dict[str, Any]]:
        """(owner, the batch object), or a 404 (also for another key's batch, and with ``kind`` for one of the
        other API: OpenAI's ids start ``batch-``, Anthropic's ``msgbatch-``)."""
        found = self.store.conn.execute(
            "SELECT owner, doc_json FROM batches WHERE id = ?", (batch_id,)
        ).fetchone()
        if (
            found is None
            or not _visible(_owner_of(found[0]), asker, full)
            or (kind is not None and not batch_id.startswith(kind + "-"))
        ):
            raise BatchError(404, f"no batch with id '{batch_id[:64]}'")
        doc: dict[str, Any] = orjson.loads(str(found[1]))
        return _owner_of(found[0]), doc

    def listing(self, asker: str | None, full: bool = False, kind: str = "batch") -> list[dict[str, Any]]:
        """The batches of one API (``kind``, the ids' prefix) the asker may see, newest first."""
        rows = self.store.conn.execute(
            f"SELECT doc_json FROM batches WHERE {_VISIBLE_SQL} AND substr(id, 1, :n) = :prefix"
            " ORDER BY created_at DESC, id DESC",
            {"asker": asker, "full": full, "n": len(kind) + 1, "prefix": kind + "-"},
        ).fetchall()
        return [orjson.loads(str(r[0])) for r in rows]

    def exists(self, batch_id: str) -> bool:
        return (
            self.store.conn.execute("SELECT 1 FROM batches WHERE id = ?", (batch_id,)).fetchone() is not None
        )

    def delete(self, batch_id: str) -> None:
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM batches WHERE id = ?", (batch_id,))

    def active(self) -> list[str]:
        """Ids of the batches with work left, oldest first."""
        marks = ",".join("?" * len(ACTIVE))
        rows = self.store.conn.execute(
            f"SELECT id FROM batches WHERE status IN ({marks}) ORDER BY created_at, id", ACTIVE
        ).fetchall()
        return [str(r[0]) for r in rows]


def new_batch(
    input_file_id: str, endpoint: str, metadata: dict[str, str] | None, kind: str = "batch"
) -> dict[str, Any]:
    """A fresh OpenAI Batch object, ``validating`` (Anthropic's Message Batches are stored as one too, with
    ``kind`` ``msgbatch``)."""
    now = int(time.time())
    return {
        "id": new_id(kind),
        "object": "batch",
        "endpoint": endpoint,
        "errors": None,
        "input_file_id": input_file_id,
        "completion_window": COMPLETION_WINDOW,
        "status": "validating",
        "output_file_id": None,
        "error_file_id": None,
        "created_at": now,
        "in_progress_at": None,
        "expires_at": now + WINDOW_SECS,
        "finalizing_at": None,
        "completed_at": None,
        "failed_at": None,
        "expired_at": None,
        "cancelling_at": None,
        "cancelled_at": None,
        "request_counts": {"total": 0, "completed": 0, "failed": 0},
        "metadata": metadata,
    }
