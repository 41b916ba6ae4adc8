"""A stand-in for llama-server that the tests of the gateway's exchange run as the engine (a real child process
speaking real HTTP), for what the real one cannot do on demand: die before or after its response head, wedge,
hold a stream until told to end it. No model, no build: the gateway tests run without test assets.

Run as ``python stand_in_engine.py STATE_DIR [llama-server's flags]``: it serves ``--host`` (a unix socket path,
or an address with ``--port``) and checks the Bearer key read from ``--api-key-file``. ``--version`` names a
llama.cpp build. Each chat request is appended to ``STATE_DIR/requests.jsonl`` with the stand-in's pid; what it
does is said by the last message's text:

- ``die before headers`` / ``die after headers``: exit at once, or after the head and one chunk;
- ``wedge once``: the first time (``STATE_DIR/wedged`` absent), stop itself (SIGSTOP: /health goes silent too);
- ``hold``: stream a chunk every 20 ms until ``STATE_DIR/release`` exists, then end; a client that left first
  is recorded in ``STATE_DIR/left``;
- anything else: the answer ``Hello from the stand-in.``, whole or streamed word by word, with usage.

``/infill`` (recorded the same way) answers that text whole, as llama-server's native endpoint does.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

ANSWER = "Hello from the stand-in."
BUILD = "version: 11434 (stand-in)"


def _opt(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def _chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    body: dict[str, Any] = {
        "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
        "created": int(time.time()),
        "id": "chatcmpl-standin",
        "model": "stand-in",
        "object": "chat.completion.chunk",
    }
    if usage:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


USAGE = {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}


def app(state: Path, key: str) -> web.Application:
    async def health(_r: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def props(_r: web.Request) -> web.Response:
        caps = {"supports_tool_calls": True, "supports_reasoning_effort": False}
        return web.json_response({"chat_template_caps": caps, "chat_template": ""})

    async def received(r: web.Request) -> dict[str, Any] | None:
        """The request's body, recorded with this process's pid; None when its key is not this engine's."""
        if r.headers.get("authorization") != f"Bearer {key}":
            return None
        body: dict[str, Any] = await r.json()
        with (state / "requests.jsonl").open("a") as f:
            f.write(json.dumps({"pid": os.getpid(), "body": body}) + "\n")
        return body

    async def chat(r: web.Request) -> web.StreamResponse:
        body = await received(r)
        if body is None:
            return web.json_response({"error": {"message": "Invalid API Key", "code": 401}}, status=401)
        text = body["messages"][-1]["content"]
        if text == "die before headers":
            os._exit(3)
        if text == "wedge once" and not (state / "wedged").exists():
            (state / "wedged").write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGSTOP)
        if not body.get("stream"):
            message = {"role": "assistant", "content": ANSWER}
            return web.json_response({
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "created": int(time.time()), "id": "chatcmpl-standin", "model": "stand-in",
                "object": "chat.completion", "usage": USAGE,
            })  # fmt: skip
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(r)
        await resp.write(_chunk({"role": "assistant", "content": None}))
        if text == "die after headers":
            await resp.write(_chunk({"content": "Hello"}))
            await asyncio.sleep(0.05)  # the chunk leaves before the process does
            os._exit(3)
        if text == "hold":
            try:
                while not (state / "release").exists():
                    await resp.write(_chunk({"content": "."}))
                    await asyncio.sleep(0.02)
            except (ConnectionResetError, asyncio.CancelledError):
                (state / "left").write_text(str(os.getpid()))
                raise
        else:
            for word in ANSWER.split(" "):
                await resp.write(_chunk({"content": word + " "}))
        await resp.write(_chunk({}, "stop"))
        await resp.write(_chunk({}, usage=USAGE))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def infill(r: web.Request) -> web.Response:
        body = await received(r)
        if body is None:
            return web.json_response({"error": {"message": "Invalid API Key", "code": 401}}, status=401)
        timings = {"prompt_n": 5, "prompt_ms": 1.5, "predicted_n": 4, "predicted_ms": 2.5}
        return web.json_response({"content": ANSWER, "stop_type": "eos", "timings": timings})

    application = web.Application()
    application.router.add_get("/health", health)
    application.router.add_get("/props", props)
    application.router.add_post("/v1/chat/completions", chat)
    application.router.add_post("/infill", infill)
    return application


async def serve(state: Path, args: list[str]) -> None:
    key_file = _opt(args, "--api-key-file")
    key = Path(key_file).read_text().strip() if key_file else ""
    runner = web.AppRunner(app(state, key), handle_signals=False, access_log=None)
    await runner.setup()
    host = _opt(args, "--host") or "127.0.0.1"
    site: web.BaseSite
    if host.startswith("/"):
        site = web.UnixSite(runner, host)
    else:
        site = web.TCPSite(runner, host, int(_opt(args, "--port") or "8080"))
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    if "--version" in sys.argv:
        print(BUILD)
        return
    state, args = Path(sys.argv[1]), sys.argv[2:]
    asyncio.run(serve(state, args))


if __name__ == "__main__":
    main()
