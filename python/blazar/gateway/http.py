"""Request and response plumbing over RSGI: reading a bounded body, JSON bodies, error bodies per dialect.

It owns no routing and no engine I/O.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Any

import orjson

MAX_BODY_BYTES = 50 * 1024 * 1024
"""The seed's DefaultBodyLimit: 50 MiB."""

_PROC_HEX = os.urandom(4).hex()
_SEQ = itertools.count(1)

JSON_HEADERS = [("content-type", "application/json")]


def new_trace_id() -> str:
    return f"plm-{_PROC_HEX}-{next(_SEQ)}"


def accept_trace_id(value: str | None) -> str:
    """Echo a caller's trace id when it is short and printable, else assign one."""
    if value and len(value) <= 128 and value.isascii() and value.isprintable() and " " not in value:
        return value
    return new_trace_id()


class HttpError(Exception):
    """An error the gateway answers with; ``kind`` is the OpenAI-style error type."""

    def __init__(
        self, status: int, message: str, kind: str = "invalid_request_error", source: str = "blazar"
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.source = source


def openai_error_body(status: int, message: str, kind: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "code": status}})


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: str
    headers: Any  # granian RSGIHeaders: a read-only mapping with .get()
    body: bytes
    trace_id: str
    extra_headers: list[tuple[str, str]] = field(default_factory=list)

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object, or an HttpError 400 that says what is wrong with it."""
        if not self.body:
            raise HttpError(400, "request body is empty; send a JSON object")
        try:
            data = orjson.loads(self.body)
        except orjson.JSONDecodeError as e:
            raise HttpError(400, f"request body is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise HttpError(400, f"request body must be a JSON object, got {type(data).__name__}")
        return data


def require_str(body: dict[str, Any], key: str) -> str:
    v = body.get(key)
    if not isinstance(v, str) or not v:
        got = "missing" if key not in body else f"{type(v).__name__} {orjson.dumps(v).decode()[:60]}"
        raise HttpError(400, f"'{key}' is required and must be a non-empty string (got {got})")
    return v


def check_type(body: dict[str, Any], key: str, types: tuple[type, ...], what: str) -> None:
    if key in body and body[key] is not None:
        v = body[key]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            raise HttpError(400, f"'{key}' must be {what}, got {type(v).__name__}")
