"""End to end: ``[[remotes]]``. A second real llama-server, on its own port with its own API key, is the remote;
the daemon serves ``up:smollm2`` from it in every client dialect, sends the remote's key upstream (never the
client's, never into a log or an error), gates the client with its own keys, and answers a remote's failures with
errors that name it."""

from __future__ import annotations

import asyncio
import http.server
import json
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest
import trustme

from tests.conftest import Assets, Daemon, cleanup, closing, free_port, make_daemon, provision

pytestmark = pytest.mark.e2e

UPSTREAM_KEY = "sk-upstream-0123456789abcdef"
FULL = "sk-blazar-full-0123456789abcdef0123456789"
SCOPED = "sk-blazar-scoped-0123456789abcdef012345678"
ASK = [{"role": "user", "content": "Name a color."}]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory, assets: Assets) -> Iterator[int]:
    """A real llama-server that insists on ``UPSTREAM_KEY``: the remote."""
    port = free_port()
    log = tmp_path_factory.mktemp("upstream") / "llama-server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(assets.llama_server), "--model", str(assets.model), "--host", "127.0.0.1", "--port", str(port),
             "--api-key", UPSTREAM_KEY, "--ctx-size", "2048", "--no-webui", "--alias", "smollm2"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _healthy(port):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        yield port
    finally:
        proc.kill()
        proc.wait()


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def tls_front(tmp_path_factory: pytest.TempPathFactory, upstream: int) -> Iterator[tuple[int, Path]]:
    """The upstream behind TLS: a front whose certificate comes from a test CA (trustme) forwards the bytes both
    ways. Yields its port and the CA's PEM file."""
    ca = trustme.CA()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)
    ca_file = tmp_path_factory.mktemp("tls") / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))

    async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        except (OSError, ssl.SSLError):
            pass
        finally:
            w.close()

    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection("127.0.0.1", upstream)
        await asyncio.gather(pipe(cr, uw), pipe(ur, cw))

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx))
    port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield port, ca_file

    async def shutdown() -> None:
        server.close()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()

    asyncio.run_coroutine_threadsafe(shutdown(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


class _Quoting(http.server.BaseHTTPRequestHandler):
    """A remote that fails mid-stream and quotes the credentials it was sent in its error event: a fault the real
    llama-server does not produce, answered over real HTTP on a real port."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        sent = self.headers.get("authorization", "")
        body = (
            b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
            + b"data: "
            + json.dumps(
                {"error": {"message": f"upstream lost the session for {sent}", "type": "server_error"}}
            ).encode()
            + b"\n\n"
        )
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def quoting() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quoting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
    assets: Assets,
    upstream: int,
    tls_front: tuple[int, Path],
    quoting: int,
) -> Iterator[Daemon]:
    tls_port, ca_file = tls_front
    config = f"""
[[keys]]
name = "full"
secret = "{FULL}"

[[keys]]
name = "scoped"
secret = "{SCOPED}"
models = ["up:smollm2"]

[[remotes]]
name = "up"
url = "http://127.0.0.1:{upstream}/v1"
api_key = "{UPSTREAM_KEY}"

[[remotes]]
name = "wrongkey"
url = "http://127.0.0.1:{upstream}/v1"
api_key = "sk-not-the-upstream-key-000000"

[[remotes]]
name = "tls"
url = "https://127.0.0.1:{tls_port}/v1"
api_key = "{UPSTREAM_KEY}"
ca_file = "{ca_file}"

[[remotes]]
name = "untrusted"
url = "https://127.0.0.1:{tls_port}/v1"

[[remotes]]
name = "quoting"
url = "http://127.0.0.1:{quoting}/v1"
api_key = "{UPSTREAM_KEY}"

[[remotes]]
name = "down"
url = "http://127.0.0.1:{free_port()}/v1"

[[remotes]]
name = "smollm2"
url = "http://127.0.0.1:{free_port()}/v1"
"""
    d = make_daemon(tmp_path_factory.mktemp("remotes"))
    # and the daemon itself as a remote: its listing must not ask itself again and again
    config += f'\n[[remotes]]\nname = "self"\nurl = "http://127.0.0.1:{d.port}/v1"\napi_key = "{FULL}"\n'
    (d.root / "config.toml").write_text(config)
    provision(d, assets)
    d.start()
    yield d
    cleanup(d)


def post(d: Daemon, path: str, body: dict[str, object], key: str = FULL) -> httpx.Response:
    return httpx.post(d.url + path, json=body, headers={"authorization": f"Bearer {key}"}, timeout=60)


def test_every_dialect_is_served_by_the_remote(served: Daemon) -> None:
    r = post(served, "/v1/chat/completions", {"model": "up:smollm2", "messages": ASK, "max_tokens": 4})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "up:smollm2" and body["choices"][0]["message"]["content"]
    assert body["usage"]["completion_tokens"] >= 1

    ask = {"model": "up:smollm2", "messages": ASK, "max_tokens": 4, "stream": True}
    with httpx.stream("POST", served.url + "/v1/chat/completions", json=ask,
                      headers={"authorization": f"Bearer {FULL}"}, timeout=60) as s:  # fmt: skip
        assert s.status_code == 200
        text = s.read().decode()
    chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    assert chunks and all(c["model"] == "up:smollm2" for c in chunks)
    assert text.rstrip().endswith("data: [DONE]")

    headers = {"authorization": f"Bearer {FULL}", "anthropic-version": "2023-06-01"}
    with httpx.stream("POST", served.url + "/v1/messages", json=ask, headers=headers, timeout=60) as s:
        events = [line[7:] for line in s.read().decode().splitlines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-1] == "message_stop" and "content_block_delta" in events

    o = post(served, "/api/chat", {"model": "up:smollm2", "messages": ASK, "stream": False,
                                   "options": {"num_predict": 4}})  # fmt: skip
    assert o.status_code == 200 and o.json()["done"] is True and o.json()["message"]["content"], o.text
    loaded = post(served, "/api/generate", {"model": "up:smollm2"})  # Ollama's preload: nothing runs here
    assert loaded.status_code == 200 and loaded.json()["done_reason"] == "load"


def test_the_clients_key_gates_and_the_remotes_key_goes_upstream(served: Daemon) -> None:
    ok = post(
        served, "/v1/chat/completions", {"model": "up:smollm2", "messages": ASK, "max_tokens": 2}, SCOPED
    )
    assert ok.status_code == 200, ok.text
    other = post(
        served, "/v1/chat/completions", {"model": "smollm2", "messages": ASK, "max_tokens": 2}, SCOPED
    )
    assert other.status_code == 403, other.text
    anon = httpx.post(served.url + "/v1/chat/completions", json={"model": "up:smollm2", "messages": ASK})
    assert anon.status_code == 401

    bad = post(
        served, "/v1/chat/completions", {"model": "wrongkey:smollm2", "messages": ASK, "max_tokens": 2}
    )
    assert bad.status_code == 502, bad.text
    message = bad.json()["error"]["message"]
    assert (
        message.startswith("remote 'wrongkey' (127.0.0.1:")
        and "refused Blazar's credentials (HTTP 401" in message
    )
    assert bad.headers["x-blazar-error-source"] == "remote"
    log = served.log.read_text()
    for secret in (UPSTREAM_KEY, "sk-not-the-upstream-key-000000", FULL, SCOPED):
        assert secret not in log and secret not in bad.text


def test_a_remotes_failures_name_it(served: Daemon) -> None:
    down = post(served, "/v1/chat/completions", {"model": "down:smollm2", "messages": ASK, "max_tokens": 2})
    assert down.status_code == 502, down.text
    assert down.json()["error"]["message"].startswith("remote 'down' (127.0.0.1:")
    assert "could not be reached" in down.json()["error"]["message"]

    # the remote serves no embeddings (llama-server without --embeddings): its own message comes through
    emb = post(served, "/v1/embeddings", {"model": "up:smollm2", "input": "hi"})
    assert emb.status_code == 502 and "--embeddings" in emb.json()["error"]["message"], emb.text

    headers = {"authorization": f"Bearer {FULL}", "anthropic-version": "2023-06-01"}
    count = httpx.post(served.url + "/v1/messages/count_tokens", json={"model": "up:smollm2", "messages": ASK},
                       headers=headers, timeout=60)  # fmt: skip
    assert count.status_code == 400 and "served by a remote" in count.json()["error"]["message"], count.text
    show = post(served, "/api/show", {"model": "up:smollm2"})
    assert show.status_code == 400 and "served by a remote" in show.json()["error"], show.text


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": ASK, "stream": True}),
        ("/v1/messages", {"messages": ASK, "stream": True, "max_tokens": 8}),
        ("/api/chat", {"messages": ASK}),
    ],
)
def test_a_remotes_mid_stream_error_never_carries_its_key(
    served: Daemon, path: str, body: dict[str, object]
) -> None:
    with httpx.stream("POST", served.url + path, json={"model": "quoting:m", **body},
                      headers={"authorization": f"Bearer {FULL}"}, timeout=60) as s:  # fmt: skip
        assert s.status_code == 200
        text = s.read().decode()
    assert "upstream lost the session for Bearer <redacted>" in text, text
    assert UPSTREAM_KEY not in text
    assert UPSTREAM_KEY not in served.log.read_text()


def test_a_remote_over_tls_is_checked_against_its_ca(served: Daemon) -> None:
    r = post(served, "/v1/chat/completions", {"model": "tls:smollm2", "messages": ASK, "max_tokens": 4})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"], r.text
    ask = {"model": "tls:smollm2", "messages": ASK, "max_tokens": 4, "stream": True}
    with httpx.stream("POST", served.url + "/v1/chat/completions", json=ask,
                      headers={"authorization": f"Bearer {FULL}"}, timeout=60) as s:  # fmt: skip
        assert s.read().decode().rstrip().endswith("data: [DONE]")
    # without ca_file the system's CAs are asked, and they do not know the test CA
    bad = post(
        served, "/v1/chat/completions", {"model": "untrusted:smollm2", "messages": ASK, "max_tokens": 2}
    )
    assert bad.status_code == 502 and "CERTIFICATE_VERIFY_FAILED" in bad.json()["error"]["message"], bad.text


def test_a_remote_table_is_checked_when_the_config_loads(tmp_path: Path) -> None:
    d = make_daemon(tmp_path, '[[remotes]]\nname = "x"\nurl = "ftp://example.test/v1"\n')
    r = d.cli("doctor", check=False)
    assert "key 'remotes[0].url' must be an http:// or https:// URL" in r.stdout + r.stderr


def test_remote_models_are_listed_and_a_local_name_always_wins(served: Daemon) -> None:
    t0 = time.monotonic()
    listed = httpx.get(served.url + "/v1/models", headers={"authorization": f"Bearer {FULL}"}, timeout=60)
    # a daemon listing itself must not loop: a loop would end in the self listing's 3 s timeout, so "self:" would
    # list nothing, and a loaded machine may be slow to list the others, never that slow
    assert time.monotonic() - t0 < 30, "a daemon listing itself must not loop"
    ids = [m["id"] for m in listed.json()["data"]]
    assert "self:smollm2:latest" in ids and not any(i.startswith("self:up:") for i in ids), ids
    assert "smollm2:latest" in ids  # the local model
    assert "up:smollm2" in ids and "tls:smollm2" in ids, ids
    assert not any(i.startswith(("down:", "wrongkey:", "untrusted:")) for i in ids), ids  # they list nothing
    scoped = httpx.get(served.url + "/v1/models", headers={"authorization": f"Bearer {SCOPED}"}, timeout=30)
    assert [m["id"] for m in scoped.json()["data"]] == ["up:smollm2"], scoped.text  # its scope, nothing else
    one = httpx.get(
        served.url + "/v1/models/up:smollm2", headers={"authorization": f"Bearer {SCOPED}"}, timeout=30
    )
    assert one.status_code == 200 and one.json()["id"] == "up:smollm2", one.text
    ollama_client = closing(ollama.Client(host=served.url, headers={"authorization": f"Bearer {FULL}"}))
    tags = ollama_client.list()  # what an Ollama UI lists
    names = [m.model for m in tags.models]
    assert "smollm2:latest" in names and "up:smollm2" in names and "self:smollm2:latest" in names, names

    # a remote named like a local model: the catalog's exact name is served here, any other tag goes there
    local = post(
        served, "/v1/chat/completions", {"model": "smollm2:latest", "messages": ASK, "max_tokens": 2}
    )
    assert local.status_code == 200, local.text
    there = post(served, "/v1/chat/completions", {"model": "smollm2:other", "messages": ASK, "max_tokens": 2})
    assert there.status_code == 502 and "remote 'smollm2'" in there.json()["error"]["message"], there.text
