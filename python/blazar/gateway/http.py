"""Request and response plumbing over RSGI: reading a bounded body, JSON bodies, error bodies per dialect.

It owns no routing and no engine I/O.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from email import policy
from email.parser import BytesHeaderParser
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from blazar.dialects.canonical import json_object
from blazar.errors import BlazarError
from blazar.tenancy.keys import KeyCtx
from blazar.tenancy.quotas import QuotaLease

T = TypeVar("T")

if TYPE_CHECKING:
    from blazar.gateway.tenancy import Gate

MAX_BODY_BYTES = 50 * 1024 * 1024
"""The seed's DefaultBodyLimit: 50 MiB."""

_PROC_HEX = os.urandom(4).hex()
_SEQ = itertools.count(1)

JSON_HEADERS = [("content-type", "application/json")]


def new_trace_id() -> str:
    return f"plm-{_PROC_HEX}-{next(_SEQ)}"


HEADER_TOKEN_MAX = 128


def is_header_token(value: str) -> bool:
    """A caller-chosen id (trace id, session name): 1-128 printable ASCII characters without spaces."""
    return 0 < len(value) <= HEADER_TOKEN_MAX and value.isascii() and value.isprintable() and " " not in value


def accept_trace_id(value: str | None) -> str:
    """Echo a caller's trace id when it is short and printable, else assign one."""
    return value if value and is_header_token(value) else new_trace_id()


class HttpError(BlazarError):
    """An error the gateway answers with as it is; ``kind`` is the OpenAI-style error type, ``source`` who made
    it (``engine`` for an engine's own error passed on), ``headers`` what the answer carries."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        source: str = "blazar",
        headers: tuple[tuple[str, str], ...] = (),
    ):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.source = source
        self.headers = headers


def _not_json(body: bytes, e: orjson.JSONDecodeError) -> str:
    """Why ``body`` did not parse; bytes that are not UTF-8 are named as such (orjson calls them "str is not
    valid UTF-8: surrogates not allowed", which speaks of Python strings)."""
    try:
        body.decode()
    except UnicodeDecodeError as u:
        return (
            f"request body is not valid UTF-8 (byte {u.start} is 0x{body[u.start]:02x}); "
            "send JSON encoded as UTF-8"
        )
    return f"request body is not valid JSON: {e}"


class ClientGone(Exception):
    """The client closed the connection before it was answered: nobody is left to answer. ``when`` says at what
    point, for the log line."""

    def __init__(self, when: str) -> None:
        super().__init__(when)
        self.when = when


class ClientWatch:
    """``task`` watching its client's connection (Granian's ``client_disconnect()``): a client that leaves has
    the task cancelled, which ``gone`` then turns into ClientGone. ``close`` ends the watch; a callback already
    queued when it ends cancels nothing."""

    __slots__ = ("finished", "gone_fut", "left", "task")

    def __init__(self, client: Any, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.left = self.finished = False
        self.gone_fut = client.client_disconnect()
        self.gone_fut.add_done_callback(self._on_gone)

    def _on_gone(self, fut: Any) -> None:
        if not self.finished and not fut.cancelled():
            self.left = True
            self.task.cancel()

    def close(self) -> None:
        self.finished = True
        self.gone_fut.remove_done_callback(self._on_gone)
        self.gone_fut.cancel()

    @staticmethod
    def gone(watching: list[ClientWatch], when: str) -> ClientGone | None:
        """For a cancelled task: ClientGone (``when``) if a watch in ``watching`` cancelled it, its cancellation
        taken back; None for any other cancellation, which goes on."""
        if not watching or not watching[0].left:
            return None
        watching[0].task.uncancel()
        return ClientGone(when)


CLIENT_CLOSED = 499
"""The status the access log and audit lane record for a request whose client went away (nginx's convention)."""


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
    t0: float = 0.0
    engine_s: float = 0.0
    """Seconds spent waiting on others, not Blazar's overhead: engines (start-up, upstream calls, a queue for their
    slots) and the client (its body)."""
    summary: dict[str, object] | None = None
    """The native translator's end-of-response summary (text, tool calls, usage, timings), when there was one."""
    key: KeyCtx | None = None
    """The caller's API key, when auth is active."""
    quota_lease: QuotaLease | None = None
    reserved: int = 0
    """Tokens its key's tpm and daily_tokens hold for it until it finishes (``Quotas.check``)."""
    renames: dict[str, str] | None = None
    """Model names (and their on-disk forms) the caller may not see, each with the name it asked for: the engine
    it runs on is another model's (``routing.claim_local``); its errors say the name it knows (``scrub``)."""
    body_read: bool = False
    """The envelope read its body (an error answered before that closes the connection: ``app``)."""
    client_left: bool = False
    """The client went away inside its streamed answer: logged and audited as 499."""
    dispatched: bool = False
    """Its request was sent to an engine (or a remote), which read the prompt: an answer cut off before its usage
    report is still charged (``Gate.finish``)."""
    dispatched_at: float = 0.0
    """When it was sent (``perf_counter``; the last send of a retried request): a stream's time to first token
    counts from its arrival through this to the translator's first token (``metrics``)."""
    dialect: str = ""
    """The caller's dialect (``openai``, ``ollama``, ``anthropic``), as its route says."""
    scraper: bool = False
    """It came with the config's ``metrics_token`` (``/metrics`` only), not a key."""
    route: str = ""
    """Its route's path pattern (``/v1/models/{model}``; ``other`` for no route): a bounded metrics label."""
    model: str | None = None
    queue_depth: int = 0
    gate: Gate = field(default=None)  # type: ignore[assignment]  # set by the app before any handler runs
    client: Any = None
    """The RSGI protocol of the client's connection (its ``client_disconnect()`` says when the client leaves)."""

    def require_full_access(self, what: str, *, or_else: str = "") -> None:
        """A 403 for a key limited to some models, where ``what`` reaches every model or key (the catalog's
        changes, the status page, /metrics, the breakers). No key means keys are off (or /metrics' scraper)."""
        if self.key is not None and not self.key.full_access:
            raise HttpError(
                403,
                f"key '{self.key.name}' is limited to some models; {what} needs a full-access key (one without a"
                f" models list){or_else}",
                "permission_error",
            )

    async def waiting(self, awaitable: Awaitable[T]) -> T:
        """``await awaitable``, its time counted as waiting on others (``engine_s``: an engine, or the client's
        body), not Blazar's overhead, however it ends: an engine that dies or wedges under a request, or a body
        that times out, is their time too."""
        t0 = time.perf_counter()
        try:
            return await awaitable
        finally:
            self.engine_s += time.perf_counter() - t0

    def dispatch(self) -> None:
        """The request is being sent to its engine (or remote)."""
        self.dispatched = True
        self.dispatched_at = time.perf_counter()

    def first_token_ms(self) -> float | None:
        """A stream's time to first token from its arrival (its queue, engine load and Blazar's own time in);
        None for a whole answer, or a stream that sent no token."""
        ttft = self.summary.get("ttft_ms") if self.summary else None
        if not isinstance(ttft, int | float) or not self.dispatched_at:
            return None
        return (self.dispatched_at - self.t0) * 1000 + ttft

    def token_gap_ms(self) -> float | None:
        """A stream's mean time per output token (the gaps between its tokens); None without two tokens."""
        gaps = self.summary.get("tpot_ms") if self.summary else None
        mean = gaps.get("mean") if isinstance(gaps, dict) else None
        return float(mean) if isinstance(mean, int | float) else None

    def overhead_ms(self) -> float:
        return max(0.0, (time.perf_counter() - self.t0 - self.engine_s) * 1000)

    def scrub(self, message: str) -> str:
        """``message`` naming the models of ``renames`` by the name the caller asked for."""
        for hidden, shown in (self.renames or {}).items():
            message = message.replace(hidden, shown)
        return message

    def mark_overhead(self) -> None:
        """Set ``x-blazar-overhead-ms`` now (a stream's headers leave before the response is complete); a request
        retried on a fresh engine sets it again."""
        self.set_header("x-blazar-overhead-ms", f"{self.overhead_ms():.3f}")

    def set_header(self, name: str, value: str) -> None:
        """Set the response header ``name`` in ``extra_headers``, replacing it rather than adding a second."""
        for i, (have, _) in enumerate(self.extra_headers):
            if have == name:
                self.extra_headers[i] = (name, value)
                return
        self.extra_headers.append((name, value))

    def response_header(self, name: str) -> str | None:
        """The value of response header ``name`` in ``extra_headers``, if set."""
        return next((value for have, value in self.extra_headers if have == name), None)

    def json(self) -> Any:
        """The body parsed as JSON (any value; dialect parsers say what shape they need)."""
        if not self.body:
            raise HttpError(400, "request body is empty; send a JSON object")
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError as e:
            raise HttpError(400, _not_json(self.body, e)) from None

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object, or a 400 that says what is wrong with it, worded as the dialect parsers
        word it (JSON type names: "got an array of 2", never Python's "list")."""
        return json_object(self.json())


# ---- multipart/form-data (file uploads, audio) -----------------------------------------------------


def _boundary(content_type: str | None, expect: str) -> bytes:
    if not content_type or not content_type.lower().startswith("multipart/form-data"):
        raise HttpError(400, f"upload the file as multipart/form-data with {expect}")
    msg = BytesHeaderParser(policy=policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1", "replace")
    )
    boundary = msg.get_param("boundary")
    if not isinstance(boundary, str) or not boundary or len(boundary) > 200:
        raise HttpError(400, f"upload the file as multipart/form-data with {expect}")
    return boundary.encode("latin-1", "replace")


MAX_PARTS = 256
"""Parts a multipart/form-data body may have (a transcription's form has a handful)."""


def parse_multipart(
    content_type: str | None, body: bytes, expect: str
) -> dict[str, tuple[str | None, bytes]]:
    """The fields of a ``multipart/form-data`` body: name -> (filename, bytes), each part's bytes exactly as
    sent (the first of a repeated name; an array field's, ``name[]``, joined by commas). Parts are found with ``bytes.find`` (a 50 MiB upload in milliseconds); a body cut off before its
    closing boundary, or a part that is itself multipart, is refused (``expect``: what to send instead)."""
    delim = b"--" + _boundary(content_type, expect)
    unreadable = HttpError(
        400, f"the multipart/form-data body could not be read (is it complete?); send {expect}"
    )
    at = body.find(delim)
    if at < 0 or (at > 0 and body[at - 2 : at] != b"\r\n"):
        raise unreadable
    fields: dict[str, tuple[str | None, bytes]] = {}
    pos = at + len(delim)
    parts = 0
    while True:
        if body[pos : pos + 2] == b"--":
            return fields
        parts += 1
        if parts > MAX_PARTS:  # each part's head is parsed in Python: bounded, as the form's fields are few
            raise HttpError(
                400, f"the multipart/form-data body has more than {MAX_PARTS} parts; send {expect}"
            )
        if body[pos : pos + 2] != b"\r\n":
            raise unreadable
        head_end = body.find(b"\r\n\r\n", pos + 2)
        if head_end < 0:
            raise unreadable
        start = head_end + 4
        end = body.find(b"\r\n" + delim, start)
        if end < 0:
            raise unreadable
        part = BytesHeaderParser(policy=policy.HTTP).parsebytes(body[pos + 2 : head_end + 2])
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str) and name not in fields:
            if part.get_content_maintype() == "multipart":
                raise HttpError(400, f"the multipart field '{name[:40]}' must hold a file, not more parts")
            fields[name] = (part.get_filename(), body[start:end])
        elif isinstance(name, str) and name.endswith("[]"):  # an array, sent one value per part
            fields[name] = (fields[name][0], fields[name][1] + b"," + body[start:end])
        pos = end + 2 + len(delim)


def declared_length(headers: Any) -> int | None:
    """The request's ``content-length``, None when it sent none (a chunked body); 400 when it is not a number."""
    value = headers.get("content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        raise HttpError(400, f"invalid content-length header {value!r}") from None
