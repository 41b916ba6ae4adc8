"""The "write it yourself" baseline: a bare OpenAI proxy in pure Python, Granian RSGI + an aiohttp client.

No features: no auth, no quotas, no admission, no trace ids, no dialects, no native code. It does what any
hand-written proxy must do and nothing else:

- ``POST /v1/chat/completions``: parse the request JSON (to know whether it streams), forward the body with the
  upstream's key over one pooled aiohttp session, and answer with the upstream's response, the ``model`` field
  rewritten to the name the client asked for:
  - whole bodies: ``orjson.loads`` + set ``model`` + ``orjson.dumps``;
  - streams: each upstream read is split into SSE events in Python, every ``data:`` event is parsed and
    re-encoded with orjson (``[DONE]`` passes through), and what one read held goes out as one write.
- ``GET /health``: ``{"status":"ok"}``.

It runs on Granian exactly as ``blazar serve`` does (embedded ``granian.server.embed.Server``, RSGI, HTTP/1,
no websockets, backpressure 1024, uvloop), so the two differ only in the application.

Usage: python benches/baselines/bare_proxy.py --port 8200 --upstream http://127.0.0.1:8100 [--api-key-file F]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import uvloop
from granian.constants import HTTPModes, Interfaces
from granian.server.embed import Server

JSON = [("content-type", "application/json")]
SSE = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]


class BareProxy:
    def __init__(self, upstream: str, api_key: str | None) -> None:
        self.url = upstream.rstrip("/") + "/v1/chat/completions"
        self.headers = {"content-type": "application/json"}
        if api_key:
            self.headers["authorization"] = f"Bearer {api_key}"
        self.session: aiohttp.ClientSession | None = None

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        pass

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        pass

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        if scope.path == "/health":
            proto.response_bytes(200, JSON, b'{"status":"ok"}')
            return
        if scope.path != "/v1/chat/completions" or scope.method != "POST":
            proto.response_bytes(
                404, JSON, b'{"error":{"message":"not found","type":"not_found","code":404}}'
            )
            return
        body = await proto()
        try:
            req = orjson.loads(body)
            model = req["model"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            proto.response_bytes(
                400, JSON, b'{"error":{"message":"bad request","type":"invalid","code":400}}'
            )
            return
        if self.session is None:  # created on the worker's loop, on first use
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        async with self.session.post(self.url, data=body, headers=self.headers) as resp:
            if not req.get("stream"):
                obj = orjson.loads(await resp.read())
                obj["model"] = model
                proto.response_bytes(resp.status, JSON, orjson.dumps(obj))
                return
            transport = proto.response_stream(resp.status, SSE)
            pending = b""
            try:
                async for data in resp.content.iter_any():
                    pending += data
                    *events, pending = pending.split(b"\n\n")
                    out = []
                    for ev in events:
                        if ev.startswith(b"data: {"):
                            obj = orjson.loads(ev[6:])
                            obj["model"] = model
                            out.append(b"data: " + orjson.dumps(obj) + b"\n\n")
                        elif ev:
                            out.append(ev + b"\n\n")
                    if out:
                        await transport.send_bytes(b"".join(out))
            except Exception:  # the client went away (Granian raises on send) or the upstream did
                return


async def run(args: argparse.Namespace) -> None:
    api_key = args.api_key_file.read_text().strip() if args.api_key_file else None
    app = BareProxy(args.upstream, api_key)
    server = Server(
        app,
        address=args.host,
        port=args.port,
        interface=Interfaces.RSGI,
        http=HTTPModes.http1,
        websockets=False,
        backpressure=1024,
        log_enabled=False,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.stop)
    print(f"bare proxy on http://{args.host}:{args.port} -> {args.upstream}", file=sys.stderr, flush=True)
    try:
        await server.serve()
    finally:
        if app.session is not None:
            await app.session.close()


def main() -> None:
    p = argparse.ArgumentParser(description="bare Granian + aiohttp OpenAI proxy (benchmark baseline)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True, help="base URL of the OpenAI upstream")
    p.add_argument("--api-key-file", type=Path, default=None)
    uvloop.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
