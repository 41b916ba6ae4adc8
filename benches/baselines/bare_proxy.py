"""The "write it yourself" baseline: a bare OpenAI proxy in pure Python, Granian RSGI + an aiohttp client.

No features: no auth, no quotas, no admission, no trace ids, no dialects, no native code. It does what any
hand-written proxy must do and nothing else:

- ``POST /v1/chat/completions``: parse the request JSON (to know whether it streams), forward the body with the
  upstream's key over one pooled client, and answer with the upstream's response, the ``model`` field
  rewritten to the name the client asked for:
  - whole bodies: ``orjson.loads`` + set ``model`` + ``orjson.dumps``;
  - streams: each upstream read is split into SSE events in Python, every ``data:`` event is parsed and
    re-encoded with orjson (``[DONE]`` passes through), and what one read held goes out as one write.
- ``GET /health``: ``{"status":"ok"}``.

It runs on Granian exactly as ``blazar serve`` does (embedded ``granian.server.embed.Server``, RSGI, HTTP/1,
no websockets, backpressure 1024, uvloop), so the two differ only in the application.

``benches/bench_stack.py`` runs the same proxy with one part swapped, to choose the serving stack by
measurement (the defaults are the baseline ``bench_gateway.py`` uses):

- ``--interface asgi``: Granian's ASGI interface instead of RSGI (same app logic, ASGI messages);
- ``--client httpx``: an ``httpx.AsyncClient`` instead of the aiohttp session;
- ``--client native``: Blazar's own engine connections (``blazar.supervisor.links.Links``, each read decoded
  and, for a stream, translated and written by the native ``EngineLink``) and its native OpenAI translator,
  with none of Blazar's middleware: RSGI only.

Usage: python benches/baselines/bare_proxy.py --port 8200 --upstream http://127.0.0.1:8100 [--api-key-file F]
       [--interface rsgi|asgi] [--client aiohttp|httpx|native]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx
import orjson
import uvloop
from granian.constants import HTTPModes, Interfaces
from granian.server.embed import Server

JSON = [("content-type", "application/json")]
SSE = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
HEALTH = b'{"status":"ok"}'
NOT_FOUND = b'{"error":{"message":"not found","type":"not_found","code":404}}'
BAD_REQUEST = b'{"error":{"message":"bad request","type":"invalid","code":400}}'
PATH = "/v1/chat/completions"


def rewrite_whole(data: bytes, model: str) -> bytes:
    obj = orjson.loads(data)
    obj["model"] = model
    return orjson.dumps(obj)


def rewrite_events(pending: bytes, model: str) -> tuple[bytes, bytes]:
    """The complete SSE events in ``pending``, each ``data: {...}`` re-encoded with ``model`` set; and the rest."""
    *events, rest = pending.split(b"\n\n")
    out = []
    for ev in events:
        if ev.startswith(b"data: {"):
            obj = orjson.loads(ev[6:])
            obj["model"] = model
            out.append(b"data: " + orjson.dumps(obj) + b"\n\n")
        elif ev:
            out.append(ev + b"\n\n")
    return b"".join(out), rest


class AiohttpClient:
    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url, self.headers = url, headers
        self.session: Any = None

    def _session(self) -> Any:
        if self.session is None:  # created on the worker's loop, on first use
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self.session

    async def whole(self, body: bytes) -> tuple[int, bytes]:
        async with self._session().post(self.url, data=body, headers=self.headers) as resp:
            return resp.status, await resp.read()

    @asynccontextmanager
    async def stream(self, body: bytes) -> AsyncIterator[tuple[int, AsyncIterator[bytes]]]:
        async with self._session().post(self.url, data=body, headers=self.headers) as resp:
            yield resp.status, resp.content.iter_any()

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


class HttpxClient:
    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url, self.headers = url, headers
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        self.client = httpx.AsyncClient(limits=limits, timeout=None)

    async def whole(self, body: bytes) -> tuple[int, bytes]:
        resp = await self.client.post(self.url, content=body, headers=self.headers)
        return resp.status_code, resp.content

    @asynccontextmanager
    async def stream(self, body: bytes) -> AsyncIterator[tuple[int, AsyncIterator[bytes]]]:
        async with self.client.stream("POST", self.url, content=body, headers=self.headers) as resp:
            yield resp.status_code, resp.aiter_raw()

    async def close(self) -> None:
        await self.client.aclose()


def parse(body: bytes) -> tuple[str, bool] | None:
    try:
        req = orjson.loads(body)
        return str(req["model"]), bool(req.get("stream"))
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None


async def rsgi_request(scope: Any, proto: Any) -> tuple[bytes, str, bool] | None:
    """The chat request's body, ``model`` and ``stream``; or None once ``/health``, a 404 or a 400 is answered."""
    if scope.path == "/health":
        proto.response_bytes(200, JSON, HEALTH)
        return None
    if scope.path != PATH or scope.method != "POST":
        proto.response_bytes(404, JSON, NOT_FOUND)
        return None
    body = await proto()
    req = parse(body)
    if req is None:
        proto.response_bytes(400, JSON, BAD_REQUEST)
        return None
    return body, *req


class RsgiProxy:
    def __init__(self, client: AiohttpClient | HttpxClient) -> None:
        self.client = client

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        pass

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        pass

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        got = await rsgi_request(scope, proto)
        if got is None:
            return
        body, model, stream = got
        if not stream:
            status, data = await self.client.whole(body)
            proto.response_bytes(status, JSON, rewrite_whole(data, model))
            return
        async with self.client.stream(body) as (status, reads):
            transport = proto.response_stream(status, SSE)
            pending = b""
            try:
                async for data in reads:
                    out, pending = rewrite_events(pending + data, model)
                    if out:
                        await transport.send_bytes(out)
            except Exception:  # the client went away (Granian raises on send) or the upstream did
                return


class AsgiProxy:
    """The same proxy behind Granian's ASGI interface (``asginl``: no lifespan)."""

    def __init__(self, client: AiohttpClient | HttpxClient) -> None:
        self.client = client

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/health":
            await _asgi_whole(send, 200, HEALTH)
            return
        if scope["path"] != PATH or scope["method"] != "POST":
            await _asgi_whole(send, 404, NOT_FOUND)
            return
        parts = []
        while True:
            msg = await receive()
            parts.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        body = b"".join(parts)
        req = parse(body)
        if req is None:
            await _asgi_whole(send, 400, BAD_REQUEST)
            return
        model, stream = req
        if not stream:
            status, data = await self.client.whole(body)
            await _asgi_whole(send, status, rewrite_whole(data, model))
            return
        async with self.client.stream(body) as (status, reads):
            headers = [(k.encode(), v.encode()) for k, v in SSE]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            pending = b""
            try:
                async for data in reads:
                    out, pending = rewrite_events(pending + data, model)
                    if out:
                        await send({"type": "http.response.body", "body": out, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except Exception:
                return


async def _asgi_whole(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class NativeProxy:
    """RSGI, with Blazar's native engine link and translator doing the upstream I/O and the rewrite."""

    def __init__(self, address: int | Path, api_key: str) -> None:
        from blazar._native import StreamTranslator, translate_whole
        from blazar.supervisor.links import Links

        self.links = Links(address, api_key)
        self.translator = StreamTranslator
        self.whole = translate_whole

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        pass

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.links.close()

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        got = await rsgi_request(scope, proto)
        if got is None:
            return
        body, model, stream = got
        conn, status = await self.links.exchange(PATH, body)
        try:
            if not stream:
                data = await self.links.body(conn)
                proto.response_bytes(status, JSON, self.whole("openai", model, data)[0])
                return
            translator = self.translator("openai", model, include_usage=True)
            transport = proto.response_stream(status, SSE)
            try:
                if await self.links.relay(conn, translator, transport.send_bytes) is None:
                    tail = translator.finish()
                    if tail:
                        await transport.send_bytes(tail)
            except Exception:
                return
            finally:
                del transport
        finally:
            self.links.release(conn)


async def run(args: argparse.Namespace) -> None:
    api_key = args.api_key_file.read_text().strip() if args.api_key_file else ""
    headers = {"content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    url = args.upstream.rstrip("/") + PATH
    client: AiohttpClient | HttpxClient | None = None
    app: Any
    if args.client == "native":
        if args.interface != "rsgi":
            raise SystemExit(
                "--client native needs --interface rsgi: the native relay writes with RSGI's send_bytes"
            )
        if args.upstream.startswith("unix:"):  # the engine's unix socket, as Blazar reaches llama-server
            app = NativeProxy(Path(args.upstream.removeprefix("unix:")), api_key)
        else:
            port = urlsplit(args.upstream).port
            if port is None:
                raise SystemExit("--upstream must name its port")
            app = NativeProxy(port, api_key)
    else:
        client = AiohttpClient(url, headers) if args.client == "aiohttp" else HttpxClient(url, headers)
        app = RsgiProxy(client) if args.interface == "rsgi" else AsgiProxy(client)
    server = Server(
        app,
        address=args.host,
        port=args.port,
        interface=Interfaces.RSGI if args.interface == "rsgi" else Interfaces.ASGINL,
        http=HTTPModes.http1,
        websockets=False,
        backpressure=1024,
        log_enabled=False,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.stop)
    print(
        f"bare proxy ({args.interface}, {args.client}) on http://{args.host}:{args.port} -> {args.upstream}",
        file=sys.stderr,
        flush=True,
    )
    try:
        await server.serve()
    finally:
        if client is not None:
            await client.close()


def main() -> None:
    p = argparse.ArgumentParser(description="bare Granian + aiohttp OpenAI proxy (benchmark baseline)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument(
        "--upstream", required=True, help="base URL of the OpenAI upstream (--client native: or unix:PATH)"
    )
    p.add_argument("--api-key-file", type=Path, default=None)
    p.add_argument("--interface", choices=("rsgi", "asgi"), default="rsgi")
    p.add_argument("--client", choices=("aiohttp", "httpx", "native"), default="aiohttp")
    uvloop.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
