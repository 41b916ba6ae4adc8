#!/usr/bin/env python3
"""A fast fake OpenAI upstream for the gateway benchmarks: precomputed bytes on a raw asyncio server.

It speaks just enough HTTP/1.1 (keep-alive, ``content-length`` request bodies) to answer like ``llama-server``:

- ``GET /health`` -> ``{"status":"ok"}`` (never needs the key, as in llama-server);
- ``GET /v1/models`` -> one model;
- ``POST /v1/chat/completions`` -> a whole ``chat.completion`` body, or with ``"stream": true`` an SSE stream
  (``transfer-encoding: chunked``) of ``--chunks`` content events, the finish event, the usage event when the
  request asked for ``stream_options.include_usage``, and ``data: [DONE]``.

Every response is built once at start-up; per request the server only finds the end of the headers, checks the
``Authorization: Bearer`` key (when ``--api-key-file`` is given) and writes bytes.

Stream pacing (``--stream-mode``):
  paced  one SSE event per socket write, the next one written on the next loop iteration (``--gap-ms`` 0) or
         after ``--gap-ms``: what an engine emitting tokens as fast as it can looks like. Under load a reader
         still gets several events per read.
  burst  the whole stream in one write: isolates a proxy's per-event cost from its per-read cost.
  tokens one event per write every ``--token-gap-ms`` (default 5 ms, 200 tokens/s per stream): a token-paced
         engine, where each event reaches the proxy alone (unless the proxy falls behind).
A request whose ``model`` contains ``burst`` (``"model": "bench-burst"``) is answered in burst mode and one whose
``model`` contains ``tokens`` in tokens mode, whatever the flag says, so one server (or one Blazar child per
model name) serves all three.

Usage: python benches/baselines/fake_upstream.py --port 8100 [--api-key-file F] [--chunks 100]
``fake_engine.py`` runs this same server under llama-server's argv, for Blazar to supervise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

MODEL = "fake-model"
CREATED = 1795948317
COMPLETION_ID = "chatcmpl-benchfakeupstream0000000000000"
WORDS = (" The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".")


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _chunk_obj(delta: dict[str, object], finish: str | None) -> dict[str, object]:
    return {
        "choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
        "created": CREATED,
        "id": COMPLETION_ID,
        "model": MODEL,
        "system_fingerprint": "b0-fake",
        "object": "chat.completion.chunk",
    }


def sse_events(n_chunks: int, include_usage: bool) -> list[bytes]:
    """The stream's SSE events (each ``data: ...\\n\\n``), in llama-server's shape."""
    events = []
    for i in range(n_chunks):
        delta: dict[str, object] = {"content": WORDS[i % len(WORDS)]}
        if i == 0:
            delta = {"role": "assistant", "content": WORDS[0]}
        events.append(b"data: " + _dumps(_chunk_obj(delta, None)) + b"\n\n")
    events.append(b"data: " + _dumps(_chunk_obj({}, "stop")) + b"\n\n")
    if include_usage:
        usage = {
            "choices": [],
            "created": CREATED,
            "id": COMPLETION_ID,
            "model": MODEL,
            "system_fingerprint": "b0-fake",
            "object": "chat.completion.chunk",
            "usage": {"completion_tokens": n_chunks, "prompt_tokens": 12, "total_tokens": n_chunks + 12},
        }
        events.append(b"data: " + _dumps(usage) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def whole_body(n_chunks: int) -> bytes:
    text = "".join(WORDS[i % len(WORDS)] for i in range(n_chunks)).strip()
    return _dumps(
        {
            "choices": [
                {"finish_reason": "stop", "index": 0, "message": {"role": "assistant", "content": text}}
            ],
            "created": CREATED,
            "model": MODEL,
            "system_fingerprint": "b0-fake",
            "object": "chat.completion",
            "usage": {"completion_tokens": n_chunks, "prompt_tokens": 12, "total_tokens": n_chunks + 12},
            "id": COMPLETION_ID,
        }
    )


def _response(status: str, ctype: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n"
        "connection: keep-alive\r\n\r\n"
    ).encode() + body


def _http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
)
STREAM_END = b"0\r\n\r\n"


class Responses:
    """Every response, precomputed."""

    def __init__(self, n_chunks: int) -> None:
        self.n_chunks = n_chunks
        self.health = _response("200 OK", "application/json", b'{"status":"ok"}')
        self.models = _response(
            "200 OK",
            "application/json",
            _dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "fake"}]}),
        )
        self.whole = _response("200 OK", "application/json", whole_body(n_chunks))
        self.unauthorized = _response(
            "401 Unauthorized",
            "application/json",
            b'{"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}}',
        )
        self.not_found = _response(
            "404 Not Found",
            "application/json",
            b'{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}',
        )
        self.bad_request = _response(
            "400 Bad Request",
            "application/json",
            b'{"error":{"code":400,"message":"bad request","type":"invalid_request_error"}}',
        )
        # Paced streams: the head rides with the first event; the terminator with the last.
        self.paced: dict[bool, list[bytes]] = {}
        self.burst: dict[bool, bytes] = {}
        for usage in (False, True):
            parts = [_http_chunk(e) for e in sse_events(n_chunks, usage)]
            parts[0] = STREAM_HEAD + parts[0]
            parts[-1] += STREAM_END
            self.paced[usage] = parts
            self.burst[usage] = b"".join(parts)

    @property
    def events_per_stream(self) -> int:
        """SSE events a client receives when it asked for usage: content, finish, usage, [DONE]."""
        return self.n_chunks + 3


def _is_stream(body: bytes) -> bool:
    return b'"stream":true' in body or b'"stream": true' in body


def _model(body: bytes) -> bytes:
    """The request's ``model`` string, found without parsing the JSON."""
    i = body.find(b'"model"')
    if i < 0:
        return b""
    start = body.find(b'"', body.find(b":", i) + 1) + 1
    return body[start : body.find(b'"', start)]


def _wants_usage(body: bytes) -> bool:
    return b'"include_usage":true' in body or b'"include_usage": true' in body


class FakeUpstream(asyncio.Protocol):
    __slots__ = ("auth", "buf", "busy", "closing", "gap", "mode_burst", "resp", "token_gap", "transport")

    def __init__(
        self, resp: Responses, auth: bytes | None, burst: bool, gap: float, token_gap: float
    ) -> None:
        self.resp = resp
        self.auth = auth
        self.mode_burst = burst
        self.gap = gap
        self.token_gap = token_gap
        self.buf = b""
        self.busy = False  # a paced stream is being written; later requests wait in buf
        self.closing = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._serve()

    def _serve(self) -> None:
        while self.transport is not None and not self.busy:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            lines = head.split("\r\n")
            try:
                method, path, _ = lines[0].split(" ", 2)
            except ValueError:
                self._write_and_close(self.resp.bad_request)
                return
            length = 0
            authorization = None
            close = False
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value.strip() or 0)
                elif name == "authorization":
                    authorization = value.strip()
                elif name == "connection":
                    close = value.strip().lower() == "close"
                elif name == "transfer-encoding":
                    self._write_and_close(self.resp.bad_request)  # chunked request bodies: not needed
                    return
            start = end + 4
            if len(self.buf) < start + length:
                return
            body = self.buf[start : start + length]
            self.buf = self.buf[start + length :]
            self._answer(method, path.split("?", 1)[0], authorization, body)
            if close and self.transport is not None and not self.busy:
                self.transport.close()
                return

    def _write_and_close(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)
            self.transport.close()

    def _answer(self, method: str, path: str, authorization: str | None, body: bytes) -> None:
        t = self.transport
        assert t is not None
        if path == "/health":
            t.write(self.resp.health)
            return
        if self.auth is not None and (authorization is None or authorization.encode() != self.auth):
            t.write(self.resp.unauthorized)
            return
        if path == "/v1/models" and method == "GET":
            t.write(self.resp.models)
        elif path == "/v1/chat/completions" and method == "POST":
            if not _is_stream(body):
                t.write(self.resp.whole)
            elif self.mode_burst or b"burst" in (model := _model(body)):
                t.write(self.resp.burst[_wants_usage(body)])
            else:
                self.busy = True
                gap = self.token_gap if b"tokens" in model else self.gap
                self._paced(self.resp.paced[_wants_usage(body)], 0, gap)
        else:
            t.write(self.resp.not_found)

    def _paced(self, parts: list[bytes], i: int, gap: float) -> None:
        t = self.transport
        if t is None or self.closing:
            return
        t.write(parts[i])
        i += 1
        loop = asyncio.get_running_loop()
        if i < len(parts):
            if gap > 0:
                loop.call_later(gap, self._paced, parts, i, gap)
            else:
                loop.call_soon(self._paced, parts, i, gap)
            return
        self.busy = False
        if self.buf:
            loop.call_soon(self._serve)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="required unless --host is a unix socket (*.sock)")
    p.add_argument("--api-key-file", type=Path, default=None, help="require Authorization: Bearer <its text>")
    p.add_argument("--chunks", type=int, default=int(os.environ.get("FAKE_UPSTREAM_CHUNKS", "100")))
    p.add_argument("--stream-mode", choices=("paced", "burst"), default="paced")
    p.add_argument("--gap-ms", type=float, default=0.0, help="pause between paced events (default: none)")
    p.add_argument("--token-gap-ms", type=float, default=5.0, help="pause between events in tokens mode")
    args, _unknown = p.parse_known_args(argv)  # llama-server's other flags (fake_engine.py) are ignored
    if not args.host.endswith(".sock") and args.port == 0:
        p.error("--port is required unless --host is a unix socket path ending in .sock")
    return args


async def serve(args: argparse.Namespace) -> None:
    resp = Responses(args.chunks)
    auth = None
    if args.api_key_file is not None:
        auth = b"Bearer " + args.api_key_file.read_text().strip().encode()
    loop = asyncio.get_running_loop()

    def protocol() -> FakeUpstream:
        return FakeUpstream(
            resp, auth, args.stream_mode == "burst", args.gap_ms / 1000.0, args.token_gap_ms / 1000.0
        )

    if args.host.endswith(".sock"):  # as llama-server does: a --host ending in .sock is a unix socket
        server = await loop.create_unix_server(protocol, args.host, backlog=1024)
        where = f"unix:{args.host}"
    else:
        server = await loop.create_server(protocol, args.host, args.port, backlog=1024, reuse_address=True)
        where = f"http://{args.host}:{args.port}"
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"fake upstream on {where} ({args.chunks} chunks)", file=sys.stderr, flush=True)
    async with server:
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args))
    else:
        uvloop.run(serve(args))


if __name__ == "__main__":
    main()
