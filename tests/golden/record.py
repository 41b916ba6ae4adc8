"""Record the golden files under tests/golden/ from a real `blazar serve` and the real llama-server + SmolLM2.

Run explicitly (never from the test suite); it rewrites the case directories it records:

    python tests/golden/record.py                      # every case
    python tests/golden/record.py openai/text ollama   # some cases, or whole dialects
    python tests/golden/record.py --list

Paths default to the cached test assets (``$BLAZAR_CACHE_DIR`` or ``~/.cache/blazar``, ``assets.json``: see
``scripts/test_assets.py``); ``--llama-server`` and ``--model`` override them.

How: the script builds a throwaway config and data dir, registers as the engine a small wrapper that runs this
script in ``tap`` mode, imports the model twice (``smollm2``, and ``smollm2-tools`` served with
``tests/fixtures/streams/tools.jinja``, a ChatML template with ``<tool_call>`` tags, because SmolLM2's own template
ignores tools), and starts ``blazar serve``. When Blazar spawns its engine, the tap starts the real llama-server
on another port and relays every HTTP exchange, saving the engine request and the engine's reply bytes exactly as
they passed. Each case is one HTTP request to the daemon; its response bytes become ``expected.bin``. So the
golden files hold what the real engine said and what the whole Blazar path made of it. After writing a case the
script replays it as the walker test does (``replay.check``) and reports any case that would not pass.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import http.client
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TOOLS_TEMPLATE = REPO / "tests" / "fixtures" / "streams" / "tools.jinja"

# ---------------------------------------------------------------------------------------------------------------
# The cases

MODEL = "smollm2"
TOOLS_MODEL = "smollm2-tools"
SEA = "Say hello and tell me one fact about the sea."
COUNT = "Count from one to fifty in words."
CAPITAL = "What is the capital of France? Answer as JSON."
SAMPLING = {"temperature": 0, "seed": 42}
CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    "required": ["city", "country"],
}
WEATHER_PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"}},
    "required": ["city"],
}
WEATHER_DESC = "Get the current weather for a city."
OPENAI_WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "description": WEATHER_DESC, "parameters": WEATHER_PARAMS},
}
ANTHROPIC_WEATHER = {"name": "get_weather", "description": WEATHER_DESC, "input_schema": WEATHER_PARAMS}
# The 135M model writes a call after one earlier call and an assistant prefill of the opening tag.
PREFILL = "<tool_call>\n"
# Without an earlier call, a prefill that ends inside the call's JSON makes llama-server's output parser fail
# (a real engine error: a 500 body when whole, an error event after the first chunks when streamed).
BROKEN = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "'},
]
# Over the recording daemon's 1024-token context (CTX_SIZE): the engine refuses it before generating.
CTX_SIZE = 1024
LONG = "hello " * 1200


def _oa_tool_history() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Weather in Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "18C and sunny"},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": PREFILL},
    ]


def _ol_tool_history() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Weather in Rome?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Rome"}}}],
        },
        {"role": "tool", "content": "18C and sunny", "tool_name": "get_weather"},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": PREFILL},
    ]


def _an_tool_history() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Weather in Rome?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_0", "name": "get_weather", "input": {"city": "Rome"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_0", "content": "18C and sunny"},
                {"type": "text", "text": "Weather in Paris?"},
            ],
        },
        {"role": "assistant", "content": PREFILL},
    ]


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


@dataclass(frozen=True)
class Spec:
    """One golden case: the client request and what it shows."""

    path: str
    body: Any = None
    raw_body: str | None = None
    note: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None


def _openai_cases() -> dict[str, Spec]:
    chat = "/v1/chat/completions"

    def c(note: str, **fields: Any) -> Spec:
        return Spec(chat, {"model": MODEL, **fields}, note=note)

    tools = {"model": TOOLS_MODEL, "tools": [OPENAI_WEATHER], **SAMPLING}
    return {
        "text": c("whole answer that ends by itself", messages=_user(SEA), max_tokens=64, **SAMPLING),
        "stream": c("the same, streamed", messages=_user(SEA), max_tokens=64, stream=True, **SAMPLING),
        "stream_usage": c(
            "streamed with stream_options.include_usage: the usage-only chunk is kept",
            messages=_user(SEA),
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
            **SAMPLING,
        ),
        "max_tokens": c("truncated by max_tokens", messages=_user(COUNT), max_tokens=8, **SAMPLING),
        "max_tokens_stream": c(
            "truncated by max_completion_tokens, streamed",
            messages=_user(COUNT),
            max_completion_tokens=8,
            stream=True,
            **SAMPLING,
        ),
        "stop": c("ended by a stop sequence", messages=_user(SEA), max_tokens=64, stop="vast", **SAMPLING),
        "stop_stream": c(
            "ended by a stop sequence, streamed",
            messages=_user(SEA),
            max_tokens=64,
            stop=["vast"],
            stream=True,
            **SAMPLING,
        ),
        "tools": Spec(
            chat,
            {**tools, "messages": _oa_tool_history(), "max_tokens": 40, "tool_choice": "auto"},
            note="a get_weather call after an earlier call and a <tool_call> prefill (tools template)",
        ),
        "tools_stream": Spec(
            chat,
            {
                **tools,
                "messages": _oa_tool_history(),
                "max_tokens": 40,
                "stream": True,
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            },
            note="the same call streamed, tool_choice naming the function",
        ),
        "json_object": c(
            "response_format json_object",
            messages=_user(CAPITAL),
            max_tokens=32,
            response_format={"type": "json_object"},
            **SAMPLING,
        ),
        "json_schema_stream": c(
            "response_format json_schema, streamed",
            messages=_user(CAPITAL),
            max_tokens=32,
            stream=True,
            response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": CITY_SCHEMA}},
            **SAMPLING,
        ),
        "error_malformed_json": Spec(chat, raw_body='{"model": "smollm2", "messages": [', note="not JSON"),
        "error_wrong_type": c("temperature as a string", messages=_user(SEA), temperature="hot"),
        "error_missing_messages": c("no messages"),
        "error_unknown_model": Spec(
            chat, {"model": "no-such-model", "messages": _user(SEA)}, note="model not in the catalog"
        ),
        "error_context": c(
            "a prompt over the context: the engine refuses it", messages=_user(LONG), max_tokens=4
        ),
        "error_context_stream": c(
            "the same, streamed: refused before the stream starts",
            messages=_user(LONG),
            max_tokens=4,
            stream=True,
        ),
        "error_engine_500": Spec(
            chat,
            {**tools, "messages": BROKEN, "max_tokens": 32},
            note="the engine's output parser fails on a prefill cut inside the call: its 500 is relayed",
        ),
        "error_engine_stream": Spec(
            chat,
            {**tools, "messages": BROKEN, "max_tokens": 32, "stream": True},
            note="the same failure mid-stream: an in-stream error event",
        ),
    }


def _ollama_cases() -> dict[str, Spec]:
    chat, gen = "/api/chat", "/api/generate"
    opts = {**SAMPLING}

    def c(note: str, options: dict[str, Any] | None = None, **fields: Any) -> Spec:
        return Spec(chat, {"model": MODEL, **fields, "options": {**opts, **(options or {})}}, note=note)

    tools = {"model": TOOLS_MODEL, "tools": [OPENAI_WEATHER]}
    return {
        "text": c("whole answer (stream false)", {"num_predict": 64}, messages=_user(SEA), stream=False),
        "stream": c("streamed (Ollama's default)", {"num_predict": 64}, messages=_user(SEA)),
        "generate": Spec(
            gen,
            {"model": MODEL, "prompt": SEA, "stream": False, "options": {**opts, "num_predict": 64}},
            note="/api/generate, whole",
        ),
        "generate_stream": Spec(
            gen,
            {"model": MODEL, "prompt": SEA, "system": "Be brief.", "options": {**opts, "num_predict": 24}},
            note="/api/generate with a system prompt, streamed",
        ),
        "max_tokens": c("truncated by num_predict", {"num_predict": 8}, messages=_user(COUNT), stream=False),
        "max_tokens_stream": c(
            "truncated by num_predict, streamed", {"num_predict": 8}, messages=_user(COUNT)
        ),
        "stop": c(
            "ended by options.stop", {"num_predict": 64, "stop": ["vast"]}, messages=_user(SEA), stream=False
        ),
        "stop_stream": c(
            "ended by options.stop, streamed", {"num_predict": 64, "stop": ["vast"]}, messages=_user(SEA)
        ),
        "tools": Spec(
            chat,
            {
                **tools,
                "messages": _ol_tool_history(),
                "stream": False,
                "options": {**opts, "num_predict": 40},
            },
            note="a get_weather call with object arguments (tools template, prefill)",
        ),
        "tools_stream": Spec(
            chat,
            {**tools, "messages": _ol_tool_history(), "options": {**opts, "num_predict": 40}},
            note="the same call streamed: one complete tool_calls object",
        ),
        "format_json": c(
            'format: "json"', {"num_predict": 32}, messages=_user(CAPITAL), stream=False, format="json"
        ),
        "format_schema_stream": c(
            "format: a JSON schema, streamed",
            {"num_predict": 32},
            messages=_user(CAPITAL),
            format=CITY_SCHEMA,
        ),
        "error_malformed_json": Spec(chat, raw_body='{"model": "smollm2", "messages": [', note="not JSON"),
        "error_wrong_type": c("stream as a string", messages=_user(SEA), stream="yes"),
        "error_wrong_option_type": c(
            "options.temperature as a string", {"temperature": "hot"}, messages=_user(SEA)
        ),
        "error_missing_model": Spec(chat, {"messages": _user(SEA)}, note="no model"),
        "error_unknown_model": Spec(
            chat,
            {"model": "no-such-model", "messages": _user(SEA), "stream": False},
            note="model not in the catalog",
        ),
        "error_context": c(
            "a prompt over the context: the engine refuses it",
            {"num_predict": 4},
            messages=_user(LONG),
            stream=False,
        ),
        "error_context_stream": c(
            "the same, streamed: refused before the stream starts", {"num_predict": 4}, messages=_user(LONG)
        ),
        "error_engine_stream": Spec(
            chat,
            {**tools, "messages": BROKEN, "options": {**opts, "num_predict": 32}},
            note="the engine's output parser fails mid-stream: an in-stream error object",
        ),
    }


def _anthropic_cases() -> dict[str, Spec]:
    path = "/v1/messages"
    headers = {"anthropic-version": "2023-06-01"}

    def c(note: str, **fields: Any) -> Spec:
        return Spec(path, {"model": MODEL, **fields}, note=note, headers=headers)

    tools = {"model": TOOLS_MODEL, "tools": [ANTHROPIC_WEATHER], "temperature": 0}
    return {
        "text": c("whole answer that ends by itself", messages=_user(SEA), max_tokens=64, temperature=0),
        "stream": c("the same, streamed", messages=_user(SEA), max_tokens=64, temperature=0, stream=True),
        "max_tokens": c(
            "truncated: stop_reason max_tokens", messages=_user(COUNT), max_tokens=8, temperature=0
        ),
        "max_tokens_stream": c(
            "truncated, streamed", messages=_user(COUNT), max_tokens=8, temperature=0, stream=True
        ),
        "stop_sequence": c(
            "stop_reason stop_sequence",
            messages=_user(SEA),
            max_tokens=64,
            temperature=0,
            stop_sequences=["vast"],
        ),
        "stop_sequence_stream": c(
            "stop_sequence, streamed",
            messages=_user(SEA),
            max_tokens=64,
            temperature=0,
            stop_sequences=["vast"],
            stream=True,
        ),
        "system_blocks": c(
            "system as text blocks, metadata accepted",
            system=[{"type": "text", "text": "Be brief."}],
            messages=_user(SEA),
            max_tokens=24,
            temperature=0,
            metadata={"user_id": "golden"},
        ),
        "tools": Spec(
            path,
            {**tools, "messages": _an_tool_history(), "max_tokens": 40, "tool_choice": {"type": "auto"}},
            note="a tool_use block after an earlier call and a <tool_call> prefill (tools template)",
            headers=headers,
        ),
        "tools_stream": Spec(
            path,
            {
                **tools,
                "messages": _an_tool_history(),
                "max_tokens": 40,
                "stream": True,
                "tool_choice": {"type": "tool", "name": "get_weather"},
            },
            note="the same call streamed (input_json_delta), tool_choice naming the tool",
            headers=headers,
        ),
        "json_schema": c(
            "output_format json_schema",
            messages=_user(CAPITAL),
            max_tokens=32,
            temperature=0,
            output_format={"type": "json_schema", "schema": CITY_SCHEMA},
        ),
        "error_malformed_json": Spec(
            path, raw_body='{"model": "smollm2", "messages": [', note="not JSON", headers=headers
        ),
        "error_wrong_type": c(
            "temperature as a string", messages=_user(SEA), max_tokens=8, temperature="hot"
        ),
        "error_missing_max_tokens": c("max_tokens is required", messages=_user(SEA)),
        "error_unknown_model": Spec(
            path,
            {"model": "no-such-model", "messages": _user(SEA), "max_tokens": 8},
            note="model not in the catalog",
            headers=headers,
        ),
        "error_context": c(
            "a prompt over the context: the engine refuses it", messages=_user(LONG), max_tokens=4
        ),
        "error_context_stream": c(
            "the same, streamed: refused before the stream starts",
            messages=_user(LONG),
            max_tokens=4,
            stream=True,
        ),
        "error_engine_500": Spec(
            path,
            {**tools, "messages": BROKEN, "max_tokens": 32},
            note="the engine's output parser fails: its 500 in the Anthropic error shape",
            headers=headers,
        ),
        "error_engine_stream": Spec(
            path,
            {**tools, "messages": BROKEN, "max_tokens": 32, "stream": True},
            note="the same failure mid-stream: an error event",
            headers=headers,
        ),
    }


CASES: dict[str, dict[str, Spec]] = {
    "openai": _openai_cases(),
    "ollama": _ollama_cases(),
    "anthropic": _anthropic_cases(),
}


# ---------------------------------------------------------------------------------------------------------------
# Tap mode: stands in for llama-server, runs the real one behind it and records every exchange


def _die_with_parent() -> None:
    """In the real llama-server: get SIGKILL if the tap dies (Blazar may SIGKILL the tap)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def tap(capture: Path, real: str, argv: list[str]) -> int:
    if argv == ["--version"]:
        return (
            1  # an unknown build to `blazar engine add`: Blazar gives the tap a TCP port (it relays --port)
        )
    at = argv.index("--port")
    port = int(argv[at + 1])
    upstream = free_port()
    real_argv = [real, *argv[:at], "--port", str(upstream), *argv[at + 2 :]]
    capture.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()

    class Relay(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._relay()

        def do_POST(self) -> None:
            self._relay()

        def _relay(self) -> None:
            size = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(size) if size else b""
            keep = ("authorization", "content-type", "accept")
            headers = {k: v for k, v in self.headers.items() if k.lower() in keep}
            conn = http.client.HTTPConnection("127.0.0.1", upstream, timeout=600)
            try:
                conn.request(self.command, self.path, body, headers)
                resp = conn.getresponse()
            except OSError:
                conn.close()
                self.send_response(503)  # the real server is not listening yet
                self.send_header("content-length", "0")
                self.end_headers()
                return
            self.send_response(resp.status)
            skip = ("transfer-encoding", "content-length", "connection", "keep-alive", "server", "date")
            for k, v in resp.getheaders():
                if k.lower() not in skip:
                    self.send_header(k, v)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            parts = []
            while chunk := resp.read1(65536):
                parts.append(chunk)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            conn.close()
            if self.command == "POST":
                with lock:
                    n = len(list(capture.glob("*.json"))) + 1
                    stem = capture / f"{n:04d}"
                    (stem.with_suffix(".req")).write_bytes(body)
                    (stem.with_suffix(".bin")).write_bytes(b"".join(parts))
                    info = {
                        "path": self.path,
                        "status": resp.status,
                        "content_type": resp.getheader("content-type"),
                    }
                    tmp = stem.with_suffix(".tmp")
                    tmp.write_text(json.dumps(info))
                    tmp.rename(stem.with_suffix(".json"))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    server = ThreadingHTTPServer(("127.0.0.1", port), Relay)
    server.daemon_threads = True
    proc = subprocess.Popen(real_argv, preexec_fn=_die_with_parent)
    signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    signal.signal(signal.SIGINT, lambda *_: proc.send_signal(signal.SIGINT))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return proc.wait()


# ---------------------------------------------------------------------------------------------------------------
# Record mode


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_assets() -> dict[str, str]:
    root = Path(os.environ.get("BLAZAR_CACHE_DIR") or Path.home() / ".cache" / "blazar")
    manifest = root / "assets.json"
    return json.loads(manifest.read_text()) if manifest.is_file() else {}


def http_request(
    port: int, method: str, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.request(method, path, body, headers)
        resp = conn.getresponse()
        return resp.status, resp.getheader("content-type") or "", resp.read()
    finally:
        conn.close()


class Daemon:
    """A throwaway `blazar serve` whose engine is the tap around the real llama-server."""

    def __init__(self, root: Path, llama_server: str, model: str) -> None:
        self.root = root
        self.capture = root / "capture"
        self.port = free_port()
        cfg = root / "config.toml"
        cfg.write_text(
            f"ctx_size = {CTX_SIZE}\n"
            f'[models."{TOOLS_MODEL}:latest"]\n'
            f"extra_args = {json.dumps(['--chat-template-file', str(TOOLS_TEMPLATE)])}\n"
        )
        wrapper = root / "llama-server-tap"
        wrapper.write_text(
            "#!/bin/sh\n"
            f"exec {shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).resolve()))} tap"
            f' --capture {shlex.quote(str(self.capture))} --real {shlex.quote(llama_server)} -- "$@"\n'
        )
        wrapper.chmod(0o755)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("BLAZAR_")}
        self.env.update(
            BLAZAR_CONFIG=str(cfg), BLAZAR_DATA_DIR=str(root / "data"), BLAZAR_PORT=str(self.port)
        )
        self.blazar("engine", "add", "--kind", "llama-cpp", "--path", str(wrapper))
        for name in (MODEL, TOOLS_MODEL):
            self.blazar("import", model, "--name", name)
        self.log = (root / "serve.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "blazar", "serve"], env=self.env, stdout=self.log, stderr=self.log
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"blazar serve exited {self.proc.returncode}; see {root / 'serve.log'}")
            with contextlib.suppress(OSError):
                if http_request(self.port, "GET", "/healthz", b"", {})[0] == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError("blazar serve did not answer /healthz")

    def blazar(self, *args: str) -> None:
        subprocess.run([sys.executable, "-m", "blazar", *args], env=self.env, check=True, capture_output=True)

    def exchanges(self) -> list[Path]:
        return sorted(self.capture.glob("*.json")) if self.capture.is_dir() else []

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def warm_up(d: Daemon, models: set[str]) -> None:
    """Start each engine before recording, so no case carries a load time."""
    for model in sorted(models):
        body = {"model": model, "messages": _user("Hi"), "max_tokens": 1}
        status, _ctype, data = http_request(
            d.port,
            "POST",
            "/v1/chat/completions",
            json.dumps(body).encode(),
            {"content-type": "application/json"},
        )
        if status != 200:
            raise RuntimeError(f"warm-up of {model} failed: HTTP {status} {data[:200]!r}")


def record_case(d: Daemon, dialect: str, name: str, spec: Spec) -> Path:
    from tests.golden import replay

    out = HERE / dialect / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    headers = {"content-type": "application/json", **spec.headers}
    request: dict[str, Any] = {"method": "POST", "path": spec.path, "headers": headers}
    if spec.raw_body is not None:
        request["raw_body"] = spec.raw_body
        body = spec.raw_body.encode()
    else:
        request["body"] = spec.body
        body = json.dumps(spec.body, ensure_ascii=False).encode()
    before = len(d.exchanges())
    status, ctype, data = http_request(d.port, "POST", spec.path, body, headers)
    # the tap files an exchange before relaying its last byte, and Blazar answers only after that byte
    new = d.exchanges()[before:]
    if len(new) > 1:
        raise RuntimeError(f"{dialect}/{name}: {len(new)} engine exchanges, expected at most one")
    (out / "request.json").write_text(json.dumps(request, indent=2, ensure_ascii=False) + "\n")
    meta: dict[str, Any] = {"note": spec.note, "status": status, "content_type": ctype}
    if new:
        info = json.loads(new[0].read_text())
        sent = json.loads(new[0].with_suffix(".req").read_bytes())
        engine_request = {"path": info["path"], "body": sent}
        (out / "engine_request.json").write_text(
            json.dumps(engine_request, indent=2, ensure_ascii=False) + "\n"
        )
        shutil.copyfile(new[0].with_suffix(".bin"), out / "engine_reply.bin")
        meta["engine_status"] = info["status"]
        meta["engine_content_type"] = info["content_type"]
    stream = status == 200 and ctype != "application/json"
    meta["volatile"] = replay.volatile_fields(dialect, stream) if status == 200 else []
    if status >= 400:
        meta["error"] = {"status": status, "message": _error_message(data)}
    (out / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    (out / "expected.bin").write_bytes(data)
    return out


def _error_message(data: bytes) -> str:
    body = json.loads(data)
    err = body.get("error")
    return str(err["message"] if isinstance(err, dict) else err)


def selected(names: list[str]) -> list[tuple[str, str]]:
    chosen: list[tuple[str, str]] = []
    for item in names or list(CASES):
        dialect, _, case = item.partition("/")
        if dialect not in CASES or (case and case not in CASES[dialect]):
            raise SystemExit(f"unknown case {item!r}; see --list")
        chosen += [(dialect, c) for c in CASES[dialect] if not case or c == case]
    return chosen


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "tap":
        ap = argparse.ArgumentParser(prog="record.py tap")
        ap.add_argument("--capture", type=Path, required=True)
        ap.add_argument("--real", required=True)
        ap.add_argument("argv", nargs=argparse.REMAINDER)
        args = ap.parse_args(sys.argv[2:])
        argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        return tap(args.capture, args.real, argv)
    assets = default_assets()
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--llama-server", default=assets.get("llama_server"), help="the llama-server binary")
    ap.add_argument("--model", default=assets.get("model"), help="the SmolLM2-135M-Instruct GGUF")
    ap.add_argument(
        "--keep", action="store_true", help="keep the temporary daemon directory (logs, captures)"
    )
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("cases", nargs="*", help="dialect or dialect/case (default: all)")
    args = ap.parse_args()
    if args.list:
        for dialect, name in selected([]):
            print(f"{dialect}/{name}: {CASES[dialect][name].note}")
        return 0
    if not args.llama_server or not args.model:
        ap.error("no llama-server/model given and none in assets.json")
    chosen = selected(args.cases)
    sys.path.insert(0, str(REPO))
    from tests.golden import replay

    root = Path(tempfile.mkdtemp(prefix="blazar-golden-"))
    failed: list[str] = []
    d = Daemon(root, args.llama_server, args.model)
    try:
        warm_up(d, {m for dia, n in chosen if (m := CASES[dia][n].model) in (MODEL, TOOLS_MODEL)})
        for dialect, name in chosen:
            t0 = time.monotonic()
            out = record_case(d, dialect, name, CASES[dialect][name])
            meta = json.loads((out / "meta.json").read_text())
            try:
                replay.check(replay.load(out))
                verdict = "ok"
            except AssertionError as e:
                failed.append(f"{dialect}/{name}")
                verdict = f"REPLAY DIFFERS: {e}"
            print(
                f"{dialect}/{name}: HTTP {meta['status']} engine {meta.get('engine_status', '-')}"
                f" {time.monotonic() - t0:.1f}s {verdict}",
                file=sys.stderr,
            )
    finally:
        d.stop()
        if args.keep:
            print(f"daemon directory kept: {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    if failed:
        print(f"{len(failed)} case(s) do not replay: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
