"""Requests for ``remote:model``: the same canonical request, answered by another Blazar or OpenAI-compatible
server (``[[remotes]]`` in config.toml).

The client's key gates it as for any model (its scope and quotas name ``remote:model``, claimed by ``core``); the
remote's own key goes upstream and never reaches a client or a log. A remote's requests share one admission queue
(its ``parallel``). Answers go through the same native translators as an engine's, so Ollama and Anthropic
clients can use an OpenAI-only remote, and streams are relayed natively (``proxy.relay``). Failures are the
remote's: a 502 naming it (its 4xx pass through with its message, but a refusal of Blazar's own credentials is a
502 that says so), a 504 when it sends no head within ``child_header_timeout_secs``. Nothing here touches an
engine child.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
import orjson

from blazar._native import LinkError, StreamError, StreamTranslator, translate_whole
from blazar.dialects.canonical import CanonicalRequest, render_engine
from blazar.gateway import proxy, watch
from blazar.gateway.http import HttpError, Request
from blazar.gateway.tenancy import visible
from blazar.supervisor import Supervisor
from blazar.supervisor.links import EngineConn
from blazar.supervisor.remotes import LISTING, Pool, Remote, Target

Response = tuple[int, list[tuple[str, str]], bytes]

log = logging.getLogger("blazar.remote")

LISTED_SECS = 30.0
"""How long what a remote's ``/models`` said is reused for ``/v1/models``."""
LIST_TIMEOUT_SECS = 3.0
"""A remote that does not answer ``/models`` this fast lists nothing this time."""

LLAMA_ONLY = ("verbose", "response_fields", "id_slot", "cache_prompt", "return_progress")
"""Body fields Blazar adds for llama-server that an OpenAI-compatible server may refuse as unknown."""


def _body(canon: CanonicalRequest, model: str) -> tuple[str, bytes]:
    path, body = render_engine(canon)
    for field in LLAMA_ONLY:
        body.pop(field, None)
    body["model"] = model
    return path, orjson.dumps(body)


def not_here(model: str, what: str) -> HttpError:
    """400 (not a 503 a client would retry): ``what`` needs a model this daemon runs itself."""
    return HttpError(
        400,
        f"'{model}' is served by a remote ([[remotes]] in config.toml), and {what} needs a model this daemon runs"
        " itself; ask the remote directly",
        "invalid_request_error",
    )


def _failed(remote: Remote, what: str) -> HttpError:
    return HttpError(
        502, f"remote '{remote.name}' ({remote.where}) {remote.scrub(what)}", "remote_error", source="remote"
    )


def _answered(remote: Remote, status: int, data: bytes) -> HttpError:
    """The remote's error answer: its 4xx pass through with its message; a refusal of Blazar's credentials, or
    anything else, is a 502 naming the remote."""
    if status in (401, 403):  # its message may quote part of the key it was sent: not repeated
        return _failed(
            remote,
            f"refused Blazar's credentials (HTTP {status}); check api_key under its [[remotes]] table in"
            " config.toml",
        )
    err = proxy.engine_error(status, data)
    if 400 <= status < 500:
        return HttpError(
            status,
            f"remote '{remote.name}': {remote.scrub(err.message)}",
            err.kind or "invalid_request_error",
            source="remote",
        )
    return _failed(remote, f"failed (HTTP {status}): {err.message}")


FORWARDED = ("x-blazar-session",)
"""The client's headers a remote is sent too: a session pin, so a Blazar there keeps the conversation on the engine
and slot that hold it (``Gate.check_model`` refuses a malformed one first; ``forwarded`` sends printable ASCII
only, so no value can add a header line)."""


def forwarded(req: Request) -> bytes:
    """``FORWARDED`` headers of ``req`` as header lines for the remote."""
    out = b""
    for name in FORWARDED:
        value = req.headers.get(name)
        if value and value.isascii() and value.isprintable():
            out += f"{name}: {value}\r\n".encode()
    return out


async def _open(
    sup: Supervisor, remote: Remote, path: str, body: bytes, headers: bytes = b""
) -> tuple[EngineConn, int]:
    bound = float(sup.cfg.child_header_timeout_secs)
    try:
        async with asyncio.timeout(bound):
            return await remote.links.exchange(remote.path(path), body, headers=headers)
    except TimeoutError:
        raise HttpError(
            504,
            f"remote '{remote.name}' ({remote.where}) sent no response headers within {bound:g}s"
            " (child_header_timeout_secs)",
            "timeout_error",
            source="remote",
        ) from None
    except (LinkError, OSError) as e:
        raise _failed(
            remote, f"could not be reached: {e.strerror if isinstance(e, OSError) else e}"
        ) from None


SERVED_BY = "x-blazar-remote"
"""On an answer for a pool's name: the ``[[remotes]]`` name of the host that served it."""
PREFIX_CHARS = 4096
"""Of a completion's prompt, what the pool's affinity hashes (a chat's: its messages up to the first user one)."""


def affinity(req: Request, canon: CanonicalRequest) -> bytes | None:
    """What keeps a conversation on one host of a pool: its ``x-blazar-session``, else its first messages (up to
    and with the first user message: the system prompt and the opening question, which every later turn repeats),
    else the start of its prompt; None for a request with none (an embedding), which goes to the least loaded."""
    session: str | None = req.headers.get("x-blazar-session")
    if session:
        return b"session\0" + session.encode()
    if canon.messages:
        head: list[dict[str, Any]] = []
        for message in canon.messages:
            head.append(message)
            if message.get("role") == "user":
                break
        try:
            return orjson.dumps(head)
        except TypeError:
            return None
    if isinstance(canon.prompt, str) and canon.prompt:
        return canon.prompt[:PREFIX_CHARS].encode()
    if isinstance(canon.prompt, list) and canon.prompt:
        try:
            return orjson.dumps(canon.prompt[:PREFIX_CHARS])
        except TypeError:
            return None
    return None


async def _opened(
    sup: Supervisor, req: Request, target: Target, key: bytes | None, path: str, body: bytes
) -> tuple[Remote, EngineConn, int]:
    """The request sent to ``target`` and its head: on a pool's host in its policy's order, failing over once to
    the next when the first cannot be reached or answers 502/503 before any byte of the answer (its breaker then
    opens until its health check answers). The host's ``outstanding`` is raised: ``_done`` lowers it."""
    hosts = [target] if isinstance(target, Remote) else target.ranked(key)[:2]
    for n, host in enumerate(hosts):
        last = n == len(hosts) - 1
        host.outstanding += 1
        try:
            conn, status = await _open(sup, host, path, body, forwarded(req))
        except HttpError as e:
            host.outstanding -= 1
            if isinstance(target, Pool) and e.status == 502:  # unreachable
                _down(host, target, e.message, last)
                if not last:
                    continue
            raise
        except BaseException:
            host.outstanding -= 1
            raise
        if isinstance(target, Pool):
            if status in (502, 503) and not last:
                try:
                    await host.links.body(conn)
                except LinkError:
                    pass
                finally:
                    host.links.release(conn)
                host.outstanding -= 1
                _down(host, target, f"remote '{host.name}' ({host.where}) answered HTTP {status}", last)
                continue
            host.answered()
            req.set_header(SERVED_BY, host.name)
        return host, conn, status
    raise AssertionError("a pool has at least one host")  # the loop returns or raises on its last host


def _down(host: Remote, pool: Pool, why: str, last: bool) -> None:
    if host.up:
        then = "the request fails" if last else "the request goes to the next host"
        log.warning(
            "pool '%s': remote '%s' (%s) %s; %s", pool.name, host.name, host.where, host.scrub(why), then
        )
    host.failed(why)


def _done(host: Remote, conn: EngineConn) -> None:
    host.links.release(conn)
    host.outstanding -= 1


async def _whole(
    sup: Supervisor, req: Request, target: Target, key: bytes | None, path: str, body: bytes
) -> tuple[Remote, int, bytes]:
    host, conn, status = await _opened(sup, req, target, key, path, body)
    try:
        return host, status, await host.links.body(conn)
    except LinkError as e:
        raise _failed(host, f"closed the connection before its answer ended: {e}") from None
    finally:
        _done(host, conn)


async def _ask(
    sup: Supervisor, req: Request, target: Target, key: bytes | None, path: str, body: bytes
) -> tuple[Remote, bytes]:
    """One whole answer from the remote (its error answers raised); a client that leaves stops the wait."""
    work = _whole(sup, req, target, key, path, body)
    host, status, data = await req.waiting(proxy.unless_gone(work, req.client))
    if status >= 400:
        raise _answered(host, status, data)
    return host, data


async def serve(
    sup: Supervisor, req: Request, proto: Any, canon: CanonicalRequest, shape: Any, target: Target, model: str
) -> Response | None:
    """A chat or completion request for ``remote:model`` or a pool's name, already claimed (scope and quotas)."""
    if canon.suffix is not None:
        raise not_here(canon.model, "fill-in-the-middle (suffix, llama-server's /infill)")
    with await req.gate.admit(req, target.admission_key, target.parallel, canon):
        path, body = _body(canon, model)
        key = affinity(req, canon) if isinstance(target, Pool) else None
        if canon.stream:
            req.dispatch()
            await _stream(sup, req, proto, canon, shape, target, key, path, body)
            return None
        req.dispatch()
        host, data = await _ask(sup, req, target, key, path, body)
        try:
            out, summary = translate_whole(
                shape.translator,
                canon.model,
                data,
                total_duration_ns=int((time.perf_counter() - req.t0) * 1e9),
                echo=canon.echo,
                alternatives=canon.alternatives,
            )
        except StreamError as e:
            raise _failed(host, f"sent an answer that is not a chat completion: {e}") from None
        if summary["engine_error"] is not None:
            raise _answered(host, 502, data)
        req.summary = summary
        watch.judge_whole(sup, req, canon)
        return 200, [("content-type", "application/json")], out


async def _stream(
    sup: Supervisor,
    req: Request,
    proto: Any,
    canon: CanonicalRequest,
    shape: Any,
    target: Target,
    key: bytes | None,
    path: str,
    body: bytes,
) -> None:
    req.mark_overhead()
    # a client that leaves before the remote's head arrives frees its place in the remote's queue at once
    remote, conn, status = await proxy.unless_gone(_opened(sup, req, target, key, path, body), req.client)
    translator = StreamTranslator(
        shape.translator,
        canon.model,
        include_usage=canon.include_usage,
        redact=remote.secret,
        echo=canon.echo,
        alternatives=canon.alternatives,
    )
    try:
        if status >= 400:
            try:
                data = await remote.links.body(conn)
            except LinkError as e:
                raise _failed(remote, f"closed the connection before its answer ended: {e}") from None
            raise _answered(remote, status, data)

        async def failed(e: LinkError) -> str:
            if remote.links.closed:
                return "Blazar is shutting down; the stream from the remote was cut off"
            return f"remote '{remote.name}' ({remote.where}) closed the stream: {remote.scrub(str(e))}"

        req.client_left = await proxy.relay(conn, proto, req.extra_headers, translator, shape.stream_type,
                                            canon.model, failed, watch.on_stall(sup, req, canon))  # fmt: skip
    finally:
        _done(remote, conn)
        req.summary = translator.summary()  # a stream cut off is charged what it sent (Gate.finish)
    watch.observe(sup, req, canon)


async def embed(
    sup: Supervisor, req: Request, canon: CanonicalRequest, target: Target, model: str
) -> dict[str, Any]:
    """An embedding request for ``remote:model`` or a pool's name, already claimed: the remote's OpenAI embeddings
    body, parsed (a pool's least loaded host answers it)."""
    with await req.gate.admit(req, target.admission_key, target.parallel, canon):
        host, data = await _ask(sup, req, target, None, *_body(canon, model))
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("data"), list):
        raise _failed(host, "sent an embeddings answer without a data array")
    return parsed


async def listed(sup: Supervisor, req: Request) -> list[dict[str, Any]]:
    """``/v1/models`` entries for every pool (by its name) and for what every remote's own ``/models`` lists, as
    ``remote:model`` (each remote asked at most every ``LISTED_SECS``; one that fails lists nothing, and the local
    models are listed all the same)."""
    remotes = list(sup.remotes.by_name.values())
    ids = await asyncio.gather(*(_ids(sup, r) for r in remotes))
    pools = [_pool_object(p) for p in sup.remotes.pools.values() if visible(req, p.name)]
    return pools + [
        _model_object(r, name)
        for r, got in zip(remotes, ids, strict=True)
        for name in (f"{r.name}:{m}" for m in got)
        if visible(req, name)
    ]


async def _ids(sup: Supervisor, remote: Remote) -> list[str]:
    now = time.monotonic()
    if remote.listed is not None and now - remote.listed[0] < LISTED_SECS:
        return remote.listed[1]
    ids: list[str] = []
    try:
        async with sup.http.get(
            remote.url + "/models",
            headers={**remote.auth, LISTING: "1"},
            ssl=remote.tls if remote.tls is not None else True,
            timeout=aiohttp.ClientTimeout(total=LIST_TIMEOUT_SECS),
        ) as r:
            body = await r.json(content_type=None) if r.status == 200 else None
        data = body.get("data") if isinstance(body, dict) else None
        if isinstance(data, list):
            ids = [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]]
        else:
            log.warning("remote '%s' (%s): GET /models gave no model list", remote.name, remote.where)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
        why = remote.scrub(str(e)) or type(e).__name__
        log.warning("remote '%s' (%s): GET /models failed: %s", remote.name, remote.where, why)
    remote.listed = (now, ids)
    return ids


async def retrieve(sup: Supervisor, req: Request, name: str) -> dict[str, Any] | None:
    """``GET /v1/models/remote:model``: the model object when the remote's ``/models`` lists it, else None; a
    pool's name: the pool's."""
    hit = sup.remote_for(name)
    if hit is None:
        return None
    remote, model = hit
    if isinstance(remote, Pool):
        return _pool_object(remote)
    if model not in await _ids(sup, remote):
        return None
    return _model_object(remote, name)


def _model_object(remote: Remote, name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": f"remote {remote.name}"}


def _pool_object(pool: Pool) -> dict[str, Any]:
    hosts = ", ".join(h.name for h in pool.hosts)
    return {"id": pool.name, "object": "model", "created": 0, "owned_by": f"pool of remotes {hosts}"}
