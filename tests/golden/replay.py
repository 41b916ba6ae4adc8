"""Replaying one golden case without an engine: what the walker test and the recorder's self-check both run.

A case directory holds ``request.json`` (the client request), ``engine_request.json`` (the engine path and body
Blazar sent), ``engine_reply.bin`` (the engine's bytes, exactly as received), ``expected.bin`` (the client bytes
``blazar serve`` answered) and ``meta.json`` (status, content type, volatile fields, the error when there was one).

``replay`` takes the same steps as the gateway, with the engine's reply read from disk:

1. the body goes through ``Request.json`` (malformed JSON is the envelope's 400) and the dialect parser;
2. the gateway's own ``plan`` (``gateway/plan.py``), for the recording daemon's engine (``ENGINE``), must produce
   ``engine_request.json`` byte for byte (compact JSON, key order included);
3. a 2xx reply goes through the plan's native translator (``StreamTranslator`` fed in uneven pieces for a stream,
   ``translate_whole`` otherwise); an engine error, a parser error or a catalog error becomes the dialect's
   ``render_error`` body for the status and message the gateway produces.

Nothing here starts a process or opens a socket.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from blazar.catalog import names
from blazar.dialects import anthropic, ollama, openai
from blazar.dialects.canonical import CanonicalRequest
from blazar.errors import BlazarError, ModelNotFound
from blazar.gateway import plan
from blazar.gateway.app import render_error
from blazar.gateway.http import Request
from blazar.gateway.proxy import engine_error
from blazar.launch.spec import LLAMA_SERVER, LaunchSpec

HERE = Path(__file__).resolve().parent
DIALECTS = ("openai", "ollama", "anthropic")

Parser = Callable[[Any], CanonicalRequest]

ROUTES: dict[str, tuple[str, Parser, plan.Shape]] = {
    "/v1/chat/completions": ("openai", openai.parse_chat, plan.OPENAI),
    "/v1/completions": ("openai", openai.parse_completion, plan.OPENAI),
    "/api/chat": ("ollama", ollama.parse_chat, plan.OLLAMA_CHAT),
    "/api/generate": ("ollama", ollama.parse_generate, plan.OLLAMA_GENERATE),
    "/v1/messages": ("anthropic", anthropic.parse_messages, plan.ANTHROPIC),
}
"""Client path -> (error dialect, request parser, response shape), as the gateway's handlers pair them."""

SLOTS = 4
ENGINE = LaunchSpec(
    argv_template=("llama-server",), ctx_size=1024, parallel=SLOTS, kv_unified=True, can=LLAMA_SERVER
)
"""The launch spec of the recording daemon's engine: llama-server on the default ``parallel = "auto"`` (4 slots
sharing the context) and ``record.py``'s ``CTX_SIZE``."""

VOLATILE_OLLAMA_WHOLE = ["created_at", "total_duration", "load_duration"]
VOLATILE_OLLAMA_STREAM = [*VOLATILE_OLLAMA_WHOLE, "prompt_eval_duration", "eval_duration"]
VOLATILE_ANTHROPIC = ["id=msg_*"]
PING = b'event: ping\ndata: {"type":"ping"}\n\n'
KEEPALIVE = "event: ping"


def volatile_fields(dialect: str, stream: bool) -> list[str]:
    """The fields of a successful response that depend on the clock or a random id, per dialect.

    OpenAI bodies carry only what the engine sent (its ``id`` and ``created`` are in ``engine_reply.bin``), so
    nothing is volatile. Ollama stamps ``created_at`` and measures ``total_duration`` and ``load_duration`` (and,
    when streaming, the eval durations, which then come from the clock instead of the engine's ``timings``).
    Anthropic invents the message id (``msg_...``; tool-use ids come from the engine and stay compared) and, in
    streams, sends a keep-alive ping after 10 s without output, which a slow recording machine may have caught.
    """
    if dialect == "ollama":
        return list(VOLATILE_OLLAMA_STREAM if stream else VOLATILE_OLLAMA_WHOLE)
    if dialect == "anthropic":
        return [*VOLATILE_ANTHROPIC, KEEPALIVE] if stream else list(VOLATILE_ANTHROPIC)
    return []


_SCALAR = r'(?:"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)'


def normalise(data: bytes, volatile: list[str]) -> bytes:
    """``data`` with the value of every volatile field replaced by a placeholder; every other byte kept.

    Each entry names a JSON key: ``"created_at"`` matches that key with any scalar value, anywhere in the bytes
    (SSE data lines and NDJSON objects alike); ``"id=msg_*"`` matches the key only when its value is a string
    starting with ``msg_``. The placeholder is ``"<key>"``, so a volatile field that is missing on one side still
    shows up as a difference. The entry ``"event: ping"`` drops every Anthropic ping event but the first (the one
    that always follows ``message_start``): the others are keep-alives sent when the engine was silent for 10 s.
    """
    if KEEPALIVE in volatile:
        head, sep, tail = data.partition(PING)
        data = head + sep + tail.replace(PING, b"")
    text = data.decode()
    for entry in volatile:
        if entry == KEEPALIVE:
            continue
        key, _, prefix = entry.partition("=")
        value = '"' + re.escape(prefix.rstrip("*")) + r'(?:[^"\\]|\\.)*"' if prefix else _SCALAR
        text = re.sub(rf'"{re.escape(key)}":{value}', f'"{key}":"<{key}>"', text)
    return text.encode()


def pieces(data: bytes) -> Iterator[bytes]:
    """``data`` cut into uneven pieces (1, 2, 3, 5, 8, ... bytes, repeating): mid-line, mid-character cuts."""
    sizes = itertools.cycle((1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233))
    pos = 0
    while pos < len(data):
        size = next(sizes)
        yield data[pos : pos + size]
        pos += size


@dataclass(frozen=True)
class Case:
    """One recorded case, loaded from its directory."""

    dir: Path
    request: dict[str, Any]
    meta: dict[str, Any]
    expected: bytes
    engine_request: dict[str, Any] | None
    engine_reply: bytes | None

    @property
    def name(self) -> str:
        return f"{self.dir.parent.name}/{self.dir.name}"

    @property
    def body(self) -> bytes:
        """The request body exactly as the client sent it."""
        if "raw_body" in self.request:
            return str(self.request["raw_body"]).encode()
        return orjson.dumps(self.request["body"])


def load(case_dir: Path) -> Case:
    def opt_json(name: str) -> Any:
        p = case_dir / name
        return json.loads(p.read_text()) if p.is_file() else None

    reply = case_dir / "engine_reply.bin"
    return Case(
        dir=case_dir,
        request=json.loads((case_dir / "request.json").read_text()),
        meta=json.loads((case_dir / "meta.json").read_text()),
        expected=(case_dir / "expected.bin").read_bytes(),
        engine_request=opt_json("engine_request.json"),
        engine_reply=reply.read_bytes() if reply.is_file() else None,
    )


def case_dirs(root: Path = HERE) -> list[Path]:
    """Every case directory under ``root``, dialect by dialect, sorted."""
    return sorted(p.parent for d in DIALECTS for p in (root / d).glob("*/request.json"))


@dataclass(frozen=True)
class Outcome:
    """What replaying produced next to what was recorded, both normalised."""

    status: int
    content_type: str
    actual: bytes
    expected: bytes
    engine_request: bytes | None
    """The compact JSON of the plan's engine request (None when the request never reaches the engine)."""


def _compact(value: Any) -> bytes:
    return orjson.dumps(value)


def replay(case: Case) -> Outcome:
    """Run the case through parser, renderer and translator (or error rendering); see the module docstring."""
    path = case.request["path"]
    dialect, parse, shape = ROUTES[path]
    req = Request(case.request.get("method", "POST"), path, "", {}, case.body, "golden")
    try:
        canon = parse(req.json())
        sent = plan.plan(canon, ENGINE, shape, slots=SLOTS, body_bytes=len(case.body))
    except BlazarError as e:  # HttpError and DialectError: as the gateway's envelope renders them
        return _error(case, dialect, e.status, e.message, e.error_type, None)
    rendered = _compact({"path": sent.path, "body": sent.body})
    meta_error = case.meta.get("error")
    if case.engine_reply is None:
        # never reached the engine: the catalog refused the model (the only such error in the set)
        if meta_error is None:
            raise AssertionError(f"{case.name}: no engine_reply.bin and no recorded error")
        status, message = int(meta_error["status"]), str(meta_error["message"])
        full = names.normalize(canon.model)
        if not message.startswith(f"model '{full}' not found"):
            raise AssertionError(f"{case.name}: recorded error is not the catalog's: {message!r}")
        return _error(case, dialect, status, message, ModelNotFound(message).error_type, None)
    engine_status = int(case.meta.get("engine_status", 200))
    if engine_status >= 400:
        err = engine_error(engine_status, case.engine_reply)
        return _error(case, dialect, err.status, err.message, err.error_type, rendered)
    if canon.stream:
        translator = sent.stream(0)
        out = b"".join(translator.feed(p) for p in pieces(case.engine_reply)) + translator.finish()
        content_type = shape.stream_type
    else:
        out, _summary = sent.whole(case.engine_reply)
        content_type = "application/json"
    volatile = list(case.meta.get("volatile", []))
    return Outcome(200, content_type, normalise(out, volatile), normalise(case.expected, volatile), rendered)


def _error(
    case: Case, dialect: str, status: int, message: str, kind: str | None, rendered: bytes | None
) -> Outcome:
    body = render_error(dialect, status, message, kind)
    return Outcome(status, "application/json", body, case.expected, rendered)


def check(case: Case) -> None:
    """Assert that replaying ``case`` reproduces what was recorded; the message says which step differs."""
    got = replay(case)
    meta = case.meta
    if got.engine_request is not None or case.engine_request is not None:
        want = _compact(case.engine_request) if case.engine_request is not None else None
        assert got.engine_request == want, (
            f"{case.name}: the plan's engine request differs from engine_request.json\n"
            f"  rendered: {got.engine_request!r}\n  recorded: {want!r}"
        )
    assert got.status == meta["status"], f"{case.name}: status {got.status}, recorded {meta['status']}"
    assert got.content_type == meta["content_type"], (
        f"{case.name}: content type {got.content_type}, recorded {meta['content_type']}"
    )
    assert got.actual == got.expected, (
        f"{case.name}: client bytes differ from expected.bin (volatile fields normalised)\n"
        f"  replayed: {got.actual!r}\n  recorded: {got.expected!r}"
    )
