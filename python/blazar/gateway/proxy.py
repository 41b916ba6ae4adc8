"""Dispatch to an engine child over its pooled connections: whole bodies and natively relayed streams.

It owns the upstream call, the header-phase bound and failure mapping (a dead child is reaped and answered with
502 so the next request respawns it). It never touches a stream per chunk: each engine read goes from the event
loop to the native link (``blazar.supervisor.links``), which decodes, translates and writes it to the client.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import aiohttp
import orjson
from granian.rsgi import ProtocolClosed  # type: ignore[attr-defined]

from blazar._native import LinkError, StreamError
from blazar.errors import BlazarError
from blazar.gateway.http import ClientWatch, HttpError, Request
from blazar.gateway.watch import Stall
from blazar.paths import EMBED_SUFFIXES
from blazar.supervisor import Child, Supervisor
from blazar.supervisor.links import EngineConn
from blazar.supervisor.signals import STALLED, WEDGED, EngineStopped, EngineWedged

log = logging.getLogger("blazar.proxy")

T = TypeVar("T")


async def _open(sup: Supervisor, child: Child, path: str, body: bytes) -> tuple[EngineConn, int]:
    """POST to the child over a pooled connection and wait (bounded) for its response head: (conn, status).

    A connection the engine closed before answering (typically a pooled keep-alive connection it was closing as
    the request went out) is retried once on a fresh connection, while the engine runs (``Links.exchange``). If
    the engine had read the request and then dropped the connection, the retry repeats that work once;
    llama-server cancels the abandoned task. A dead engine is never retried: it is reaped and answered with 502.

    No head within ``child_header_timeout_secs``: an engine that still answers its health check is working on a
    long whole answer, and only this request ends (504); one that does not is wedged, is stopped, and
    ``EngineWedged`` lets ``core`` retry the request once on a fresh engine."""
    try:
        async with asyncio.timeout(float(sup.cfg.child_header_timeout_secs)):
            return await child.links.exchange(path, body, child.alive)
    except TimeoutError:
        raise await no_head_in_time(sup, child) from None
    except (LinkError, OSError) as e:
        if child.stopped_for == WEDGED:  # another request found it wedged: this one never got a byte either
            raise EngineWedged(child.model, sup.cfg.child_header_timeout_secs) from None
        raise _stopped_on_purpose(sup, child) or await _engine_failed(sup, child, e) from None


def _stopped_on_purpose(sup: Supervisor, child: Child) -> EngineStopped | None:
    """``EngineStopped`` when ``child`` was unloaded, evicted or restarted on purpose (not for a removed model, nor
    at shutdown), so the request that never got an answer from it runs once more."""
    if child.stopped_for is None or child.model_gone or sup.stopping:
        return None
    return EngineStopped(child.model, child.stopped_for)


TICK_SECS = 5.0
"""How often a relayed stream's timer runs (``_Ticker``); more often when ``sentinel_stall_secs`` is under 10 s."""

WEDGED_GRACE_SECS = 2.0
"""How long a wedged engine (no response headers in time) gets between SIGTERM and SIGKILL: it is stuck, and the
request that found it waits for a fresh one."""


async def no_head_in_time(sup: Supervisor, child: Child) -> BlazarError:
    """The error for a request whose engine sent no response head within ``child_header_timeout_secs``. An
    engine that still answers ``/health`` is working on a long whole answer: a 504 for this request alone (its
    connection is closed, so the engine drops the work). One that does not is wedged: it is stopped, and
    ``EngineWedged`` lets the request be retried. The requests that time out on one engine together share one
    check (a second probe could catch the engine answering as it is being stopped), and the check is shielded:
    a client that leaves meanwhile must not leave the engine probed but not stopped, or never killed."""
    secs = sup.cfg.child_header_timeout_secs
    if child.stopped_for != WEDGED:
        check = child.wedge_check
        if check is None or check.done():
            check = child.wedge_check = asyncio.ensure_future(_is_wedged(sup, child))
            check.add_done_callback(_retrieved)  # its waiters may all have left; its failure is logged below
        try:
            wedged = await asyncio.shield(check)
        except Exception:
            log.exception("checking whether the engine for %s is wedged failed", child.key)
            return HttpError(
                502,
                f"engine for '{child.model}' sent no response headers within {secs}s (child_header_timeout_secs),"
                " and checking it failed; see the daemon log",
                "engine_error",
            )
        if not wedged:
            fix = (
                "an embedding comes only when its whole input is embedded; send shorter input, or raise"
                if child.key.endswith(EMBED_SUFFIXES)
                else "a whole (non-streamed) answer comes only when it is complete; stream the response, ask for"
                " fewer tokens, or raise"
            )
            return HttpError(
                504,
                f"engine for '{child.model}' is running but sent no response headers within {secs}s"
                f" (child_header_timeout_secs): {fix} child_header_timeout_secs",
                "engine_error",
            )
    return EngineWedged(child.model, secs)


def _retrieved(fut: asyncio.Future[bool]) -> None:
    if not fut.cancelled():
        fut.exception()


def _logged(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("checking a quiet stream's engine failed", exc_info=fut.exception())


async def _stream_stuck(sup: Supervisor, child: Child) -> None:
    """A stream from ``child`` has been quiet for ``child_header_timeout_secs``: an engine that still answers
    ``/health`` is slow and keeps going; one that does not is wedged and stopped, which ends the stream."""
    if await _is_wedged(sup, child, STALLED):
        log.warning("engine for %s sent nothing mid-stream for %ss and failed its health check; it was stopped",
                    child.key, sup.cfg.child_header_timeout_secs)  # fmt: skip


async def _is_wedged(sup: Supervisor, child: Child, why: str = WEDGED) -> bool:
    """Whether ``child`` fails its health check now; a wedged one is stopped (``why``) before this returns."""
    if await child.responsive():
        return False
    await sup.evict(child.key, why, grace=WEDGED_GRACE_SECS, only=child, crash=True)
    return True


async def _engine_failed(sup: Supervisor, child: Child, exc: BaseException) -> HttpError:
    dead = await sup.reap(child)
    if child.stopped_for is not None:
        return HttpError(
            503,
            f"engine for '{child.model}' was stopped while serving the request ({child.stopped_for})",
            "engine_error",
        )
    if dead:
        code = child.proc.returncode if child.proc else None
        workers = sup.cfg.model_override(child.model).rpc_workers
        lost = (  # llama.cpp's RPC client aborts the engine when a worker's connection breaks
            f"; a worker it offloads to may have gone (`blazar worker check {workers[0].address}` asks one)"
            if workers
            else ""
        )
        return HttpError(
            502,
            f"engine for '{child.model}' died while serving the request (exit {code});"
            f" the next request restarts it; see {sup.data.log_name(child.key)}{lost}",
            "engine_error",
        )
    # a unix socket's connection error names its path
    why = sup.data.redact(str(exc)) or type(exc).__name__
    return HttpError(502, f"engine for '{child.model}' failed: {why}", "engine_error")


def engine_error(status: int, body: bytes) -> HttpError:
    """Carry an engine's error answer to the client with the engine's own message: a non-2xx one, or a 200 whose
    body is an error object (answered 502)."""
    import orjson

    message = body.decode(errors="replace")[:2000] or f"engine answered HTTP {status}"
    try:
        data: Any = orjson.loads(body)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            message = err["message"]
        elif isinstance(err, str):
            message = err
    except orjson.JSONDecodeError:
        pass
    fault = next((f for f in _CLIENT_FAULTS if f in message.lower()), None)
    if fault is not None:
        if status >= 500:
            status = 400  # the request asked for what this model cannot do: the caller's to change, not a 5xx
        message += _CLIENT_FAULTS[fault]
    kind = "invalid_request_error" if 400 <= status < 500 else "engine_error"
    return HttpError(status, message, kind, source="engine")


_CLIENT_FAULTS = {
    "input is not supported": "",  # audio / video / image parts for a model without them (llama-server: 500)
    "is too large to process": (  # an embedding input over the physical batch (500), which names its size
        "; an input is embedded in one batch of late_chunking_max_tokens (within a slot's context): raise"
        " late_chunking_max_tokens in config.toml, or send a shorter input (Ollama's /api/embed truncates it"
        " unless truncate is false)"
    ),
    "infill is not supported": "",  # a suffix for a model without fill-in-the-middle tokens (501)
    "exceeds the available context size": (  # a prompt over one slot's context, past Blazar's estimate (400)
        "; each of the model's parallel slots holds ctx_size / parallel tokens: send a shorter conversation, or"
        " raise ctx_size (or lower parallel) for the model in config.toml, or Ollama's options.num_ctx"
    ),
}
"""llama-server answers these requests with a 5xx, though nothing failed: the request asked for what the model
cannot do. Blazar passes the engine's message with a 400, and what Blazar's own settings change where the engine
names a setting no request can."""


async def forward_whole(
    sup: Supervisor, child: Child, path: str, body: bytes, client: Any = None
) -> tuple[int, bytes]:
    """One request, one whole response body: (status, body).

    With ``client`` (the caller's RSGI protocol), a client that hangs up before the answer is ready stops the
    engine's work: the upstream connection is closed, which llama-server takes as a cancel, so the slot is free
    for the next request instead of generating for nobody; raises ClientGone.
    """
    with sup.lease(child):
        work = _read_whole(sup, child, path, body)
        status, data = await (work if client is None else unless_gone(work, client))
    if status >= 400:
        raise engine_error(status, data)
    return status, data


async def ask(
    sup: Supervisor, req: Request, child: Child, path: str, body: dict[str, Any], field: str, kind: type
) -> Any:
    """POST ``body`` to one of llama-server's utility endpoints (``/tokenize``, ``/detokenize``,
    ``/apply-template``) and return the answer's ``field``; 502 when it is missing or not a ``kind``."""
    _s, data = await forward_whole(sup, child, path, orjson.dumps(body), req.client)
    value = orjson.loads(data).get(field)
    if not isinstance(value, kind):
        raise HttpError(502, f"engine did not return '{field}' from {path}", "engine_error")
    return value


async def _read_whole(sup: Supervisor, child: Child, path: str, body: bytes) -> tuple[int, bytes]:
    conn, status = await _open(sup, child, path, body)
    try:
        data = await child.links.body(conn)
    except LinkError as e:
        raise await _engine_failed(sup, child, e) from None
    finally:
        child.links.release(
            conn
        )  # closed unless the response ended cleanly (a cancel closes it: the engine stops)
    return status, data


WATCH_AFTER_SECS = 0.5
"""A whole answer starts watching for its client's departure only after this long. Granian's disconnect watch
costs two extra event-loop wake-ups per request (measured: epoll_wait 2.3 -> 4.3 and context switches 4.5 -> 7.5
per request at c=16), which a fast answer should not pay; a slow one (a real generation) amortises it, and a
client that leaves early costs the engine at most this much work."""


async def unless_gone(work: Coroutine[Any, Any, T], client: Any, after: float | None = None) -> T:
    """``work``'s result, unless the client disconnects first: then ``work`` is cancelled and ClientGone raised.

    ``work`` runs in the calling task; after ``after`` seconds (default ``WATCH_AFTER_SECS``: a quick answer costs
    no watch) the client's disconnect future is watched with a done callback that cancels that task: no extra Tasks
    and no ``asyncio.wait`` per request.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task(loop)
    assert task is not None
    watching: list[ClientWatch] = []
    delay = WATCH_AFTER_SECS if after is None else after
    timer = loop.call_later(delay, lambda: watching.append(ClientWatch(client, task)))
    try:
        return await work
    except asyncio.CancelledError:
        gone = ClientWatch.gone(watching, "before its answer was ready; the engine stopped working on it")
        if gone is None:
            raise
        raise gone from None
    finally:
        timer.cancel()
        for watch in watching:
            watch.close()


async def get_whole(sup: Supervisor, child: Child, path: str) -> tuple[int, bytes, str]:
    """A GET to the child (``/props`` and the like): (status, body, content-type); non-2xx is an HttpError."""
    return await _through_aiohttp(sup, child, "GET", path, None, None)


FORM_TIMEOUT_SECS = 3600.0
"""How long a whisper-server transcription may take (it answers only when the whole file is done)."""


async def post_form(
    sup: Supervisor, child: Child, path: str, body: bytes, content_type: str, client: Any = None
) -> tuple[int, bytes, str]:
    """A POST of a body that is not JSON (a whisper-server transcription's multipart form): (status, body,
    content-type); non-2xx is an HttpError. Bounded by ``FORM_TIMEOUT_SECS`` (a 504 that says so); with
    ``client``, a client that leaves closes the connection (the engine's work is dropped) and ClientGone is
    raised."""
    with sup.lease(child):
        work = _through_aiohttp(sup, child, "POST", path, body, content_type, FORM_TIMEOUT_SECS)
        return await (work if client is None else unless_gone(work, client))


async def _through_aiohttp(
    sup: Supervisor,
    child: Child,
    method: str,
    path: str,
    body: bytes | None,
    content_type: str | None,
    timeout: float | None = None,
) -> tuple[int, bytes, str]:
    """One request over aiohttp; ``timeout`` (seconds) replaces the header bound and its wedge check."""
    http = child.http or sup.http
    if http.closed:  # the child was stopped (reaped, evicted) since this request got it
        raise await _engine_failed(sup, child, ConnectionError("its connection was closed")) from None
    headers = {"authorization": f"Bearer {child.api_key}"}
    if content_type is not None:
        headers["content-type"] = content_type
    try:
        async with http.request(
            method,
            child.base_url + path,
            data=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout or float(sup.cfg.child_header_timeout_secs)),
        ) as resp:
            data = await resp.read()
    except TimeoutError:  # before OSError, which it is
        if timeout is not None:
            raise HttpError(
                504,
                f"engine for '{child.model}' did not answer within {timeout:.0f}s; send less work",
                "engine_error",
            ) from None
        raise await no_head_in_time(sup, child) from None
    except (aiohttp.ClientError, OSError) as e:
        if child.stopped_for == WEDGED:  # stopped under this request by another that found it wedged
            raise EngineWedged(child.model, sup.cfg.child_header_timeout_secs) from None
        raise _stopped_on_purpose(sup, child) or await _engine_failed(sup, child, e) from None
    if resp.status >= 400:
        raise engine_error(resp.status, data)
    return resp.status, data, resp.headers.get("content-type", "application/json")


class _Ticker:
    """While a stream is relayed, a timer every few seconds (never per token): the link writes what the dialect
    owes a quiet client (Anthropic's ``ping`` after 10 s without output), an engine quiet for ``stall.secs`` is
    reported once, and one quiet for ``bound`` seconds (``child_header_timeout_secs``, the bound its response
    head had) gets ``stuck`` called, once per ``bound`` of silence: the health check that stops a wedged engine,
    which ends the stream with the dialect's error event instead of pings for ever."""

    __slots__ = ("bound", "check", "conn", "every", "handle", "loop", "next", "stall", "stuck")

    def __init__(
        self,
        conn: EngineConn,
        stall: Stall | None,
        stuck: Callable[[], Awaitable[None]] | None = None,
        bound: float = 0.0,
    ) -> None:
        self.conn, self.stall = conn, stall
        self.stuck, self.bound, self.next = stuck, bound, bound
        self.check: asyncio.Future[None] | None = None
        self.every = TICK_SECS if stall is None else min(TICK_SECS, max(stall.secs / 2, 0.05))
        self.loop = asyncio.get_running_loop()
        self.handle = self.loop.call_later(self.every, self.tick)

    def tick(self) -> None:
        quiet = self.conn.link.tick()
        if quiet is None:
            return
        if self.stall is not None and quiet >= self.stall.secs:
            stall, self.stall = self.stall, None
            stall.report(quiet)
        if self.stuck is not None and self.bound > 0:
            if quiet < self.bound:  # output came since the last check
                self.next = self.bound
            elif quiet >= self.next and (self.check is None or self.check.done()):
                self.next = quiet + self.bound
                self.check = asyncio.ensure_future(self.stuck())
                self.check.add_done_callback(_logged)
        self.handle = self.loop.call_later(self.every, self.tick)

    def cancel(self) -> None:
        self.handle.cancel()


async def forward_stream(
    sup: Supervisor,
    child: Child,
    path: str,
    body: bytes,
    proto: Any,
    headers: list[tuple[str, str]],
    translator: Any,
    content_type: str,
    stall: Stall | None = None,
    scrub: Callable[[str], str] | None = None,
) -> bool:
    """Relay the child's SSE stream through ``translator`` (a native ``StreamTranslator``) to the client; whether
    the client went away before its end. ``scrub`` rewrites the message of an error that ends the stream
    (``Request.scrub``: the names a scoped key may not see).

    After the response head, Python is not involved until the stream ends but for a timer every few seconds
    (``_Ticker``): the engine connection's reads go to the native link, which decodes, translates and writes to
    the client's transport (``Links.relay``). An engine that dies mid-stream ends the client's stream with the
    dialect's error event; one quiet for ``stall.secs`` is reported while the client waits.
    """
    with sup.lease(child):
        conn, status = await _open(sup, child, path, body)
        try:
            if status >= 400:
                try:
                    data = await child.links.body(conn)
                except LinkError as e:
                    raise await _engine_failed(sup, child, e) from None
                raise engine_error(status, data)

            async def failed(e: LinkError) -> str:
                message = (await _engine_failed(sup, child, e)).message
                return scrub(message) if scrub is not None else message

            bound = float(sup.cfg.child_header_timeout_secs)
            stuck = functools.partial(_stream_stuck, sup, child)
            return await relay(
                conn, proto, headers, translator, content_type, child.model, failed, stall, stuck, bound
            )
        finally:
            child.links.release(conn)  # a stream the client left is unfinished: closed, so the engine stops


async def relay(
    conn: EngineConn,
    proto: Any,
    headers: list[tuple[str, str]],
    translator: Any,
    content_type: str,
    who: str,
    failed: Callable[[LinkError], Awaitable[str]],
    stall: Stall | None,
    stuck: Callable[[], Awaitable[None]] | None = None,
    bound: float = 0.0,
) -> bool:
    """Send the response head and relay the stream whose head ``conn`` read, natively, to its end; a connection
    that fails ends the client's stream with the dialect's error event carrying ``failed``'s message. ``who``
    names the model in logs; ``stuck`` is called once the stream has been quiet for ``bound`` seconds (see
    ``_Ticker``). The caller releases ``conn`` (to its ``pool``)."""
    transport = proto.response_stream(
        200, [*headers, ("content-type", content_type), ("cache-control", "no-cache")]
    )
    ticker = _Ticker(conn, stall, stuck, bound)
    try:
        try:
            gone = await conn.pool.relay(conn, translator, transport.send_bytes)
        finally:
            ticker.cancel()
        if gone is not None:
            await gone  # raises the client's ProtocolClosed
            raise ProtocolClosed
        tail = translator.finish()
        if tail:
            await transport.send_bytes(tail)
    except LinkError as e:
        await _send_quietly(transport, translator.abort(await failed(e)))
    except StreamError as e:
        await _send_quietly(transport, translator.abort(f"engine sent a malformed stream: {e}"))
    except ProtocolClosed:  # the client went away: granian raises on send
        log.info("client disconnected mid-stream from %s", who)
        return True
    except Exception:
        log.exception("stream relay for '%s' failed", who)
        await _send_quietly(transport, translator.abort("blazar failed while relaying the stream"))
    finally:
        # Granian ends the response when the transport is freed; the link dropped its reference when the relay
        # ended, and no exception traceback may keep this frame (and so the stream) alive.
        del transport
    return False


async def _send_quietly(transport: Any, data: bytes) -> None:
    try:
        if data:
            await transport.send_bytes(data)
    except Exception:
        log.debug("client gone before the closing error could be sent")
