"""End to end: what `ollama create -f Modelfile` does for `FROM ./model.gguf` and `ADAPTER ./lora.gguf`, driven by
the official `ollama` client: the file is uploaded as a blob (`HEAD`/`POST /api/blobs/sha256:...`), then named in
`/api/create`'s `files` (or `adapters`); the new model answers on the real engine."""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import select
import shutil
import socket
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from tests.conftest import HANG, Assets, Daemon, closing, wait_for
from tests.fakehub import lora_gguf

pytestmark = pytest.mark.e2e

USER = [{"role": "user", "content": "Say hello."}]


def head(d: Daemon, digest: str) -> int:
    return httpx.head(d.url + f"/api/blobs/{digest}", timeout=30).status_code


def test_a_gguf_uploaded_as_a_blob_becomes_a_model(
    daemon_factory: Any, assets: Assets, tmp_path: Path
) -> None:
    d: Daemon = daemon_factory()
    client = closing(ollama.Client(host=d.url, timeout=120))
    digest = client.create_blob(assets.model)
    assert digest == "sha256:" + hashlib.sha256(assets.model.read_bytes()).hexdigest()
    assert head(d, digest) == 200 and head(d, "sha256:" + "0" * 64) == 404
    again = httpx.post(d.url + f"/api/blobs/{digest}", content=b"not read", timeout=30)
    assert again.status_code == 200  # here already: its body is not read, as in Ollama

    steps = list(
        client.create(model="fromfile", files={"SmolLM2.gguf": digest}, system="Be brief.", stream=True)
    )
    assert steps[-1].status == "success"
    tags = {m.model: m for m in client.list().models}
    assert tags["fromfile:latest"].digest == digest.removeprefix("sha256:")
    # the blob stays for other creates from it, as in Ollama, and the weights are on disk once: the model's file is
    # a hard link of it
    assert head(d, digest) == 200
    blob = d.data_dir / "blobs" / f"sha256-{digest.removeprefix('sha256:')}"
    model = d.data_dir / "models" / "fromfile" / "latest.gguf"
    assert blob.stat().st_ino == model.stat().st_ino
    with concurrent.futures.ThreadPoolExecutor(3) as pool:  # creates from one blob at once all succeed
        made = list(
            pool.map(
                lambda n: httpx.post(
                    d.url + "/api/create",
                    json={"model": f"twin{n}", "files": {"m.gguf": digest}, "stream": False},
                    timeout=120,
                ),
                range(3),
            )
        )
    assert [r.status_code for r in made] == [200, 200, 200], [r.text for r in made]
    body = httpx.post(d.url + "/api/show", json={"model": "fromfile"}, timeout=30).json()
    assert body["system"] == "Be brief."
    answer = client.chat(model="fromfile", messages=USER, options={"num_predict": 4})
    assert answer.message.content
    # the same file again with an edited SYSTEM: only the preset changes, the engine keeps serving
    pids = d.child_pids()
    assert client.create_blob(assets.model) == digest
    client.create(model="fromfile", files={"SmolLM2.gguf": digest}, system="Be terse.")
    assert (
        httpx.post(d.url + "/api/show", json={"model": "fromfile"}, timeout=30).json()["system"]
        == "Be terse."
    )
    assert d.child_pids() == pids and head(d, digest) == 200

    # ADAPTER ./lora.gguf: a LoRA adapter over the FROM model
    lora = tmp_path / "pirate.gguf"
    lora.write_bytes(lora_gguf("llama", 30, 576, {"attn_q": 576, "attn_v": 192}, spread=0.5))
    ldigest = client.create_blob(lora)
    client.create(model="pirate", from_="fromfile", adapters={"pirate.gguf": ldigest})
    tags = {m.model: m for m in client.list().models}
    assert (
        tags["pirate:latest"].details is not None
        and tags["pirate:latest"].details.parent_model == "fromfile:latest"
    )
    assert client.chat(model="pirate", messages=USER, options={"num_predict": 4}).message.content
    # the adapter made again from another file, as Ollama overwrites a name: the new file replaces the old one
    # and the base model's engine restarts to load it
    loras = d.data_dir / "models" / ".loras"
    (before,) = loras.iterdir()
    lora.write_bytes(lora_gguf("llama", 30, 576, {"attn_q": 576, "attn_v": 192}, spread=0.5, seed=1))
    client.create(model="pirate", from_="fromfile", adapters={"pirate.gguf": client.create_blob(lora)})
    (after,) = loras.iterdir()
    assert after != before and "pirate:latest" in {m.model for m in client.list().models}
    assert client.chat(model="pirate", messages=USER, options={"num_predict": 4}).message.content
    made = {"model": "x", "from": "pirate", "system": "s", "stream": False}
    refused = httpx.post(d.url + "/api/create", json=made, timeout=30)
    assert refused.status_code == 400 and "'pirate:latest' is a LoRA adapter" in refused.json()["error"]


def test_what_blobs_and_creates_from_them_refuse(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory(model=False)
    other = "sha256:" + hashlib.sha256(b"other bytes").hexdigest()
    bad = httpx.post(d.url + f"/api/blobs/{other}", content=b"these bytes", timeout=30)
    assert bad.status_code == 400 and "digest mismatch" in bad.json()["error"], bad.text
    assert head(d, other) == 404 and not list(
        (d.data_dir / "blobs").iterdir()
    )  # nothing kept, no partial file
    for path in ("/api/blobs/md5:abc", "/api/blobs/sha256:XYZ"):
        r = httpx.post(d.url + path, content=b"x", timeout=30)
        assert r.status_code == 400 and "must be sha256:<64 lowercase hex digits>" in r.json()["error"]
    text = b"not a model at all"
    digest = "sha256:" + hashlib.sha256(text).hexdigest()
    assert httpx.post(d.url + f"/api/blobs/{digest}", content=text, timeout=30).status_code == 201

    def create(body: dict[str, object]) -> httpx.Response:
        return httpx.post(d.url + "/api/create", json={"model": "x", "stream": False, **body}, timeout=30)

    never = "sha256:" + "1" * 64
    cases: list[tuple[dict[str, object], str]] = [
        ({"files": {"m.gguf": never}}, "is not on this server: upload it first with POST /api/blobs/"),
        ({"files": {"a.gguf": digest, "b.gguf": digest}}, "'files' must name one GGUF file"),
        ({"files": {"m.safetensors": digest}}, "'files' takes a GGUF file"),
        ({"files": {"m.gguf": "abc"}}, "must be sha256:<64 lowercase hex digits>"),
        ({"files": {"m.gguf": digest}, "from": "y"}, "'files' and 'from' name two sources"),
        ({"files": {"m.gguf": digest}, "quantize": "q4_0"}, "then quantize it with a second create"),
        ({"files": {"m.gguf": digest}}, "GGUF"),  # not a model: refused, and the blob stays for another try
    ]
    for body, needle in cases:
        r = create(body)
        assert r.status_code == 400 and needle in r.json()["error"], (body, r.text)
        assert str(d.data_dir) not in r.text  # the blob is named by its digest, never by the server's path
    assert head(d, digest) == 200
    got = httpx.get(d.url + f"/api/blobs/{digest}", timeout=30)  # a blob is not read back
    assert got.status_code == 405 and got.headers["allow"] == "HEAD, POST" and "HEAD" in got.json()["error"]
    put = httpx.put(d.url + f"/api/blobs/{digest}", content=b"x", timeout=30)
    assert put.status_code == 405 and put.headers["allow"] == "HEAD, POST"
    assert httpx.get(d.url + "/api/tags", timeout=30).json()["models"] == []

    # more than the disk holds: refused before a byte is written
    huge = raw(d, f"POST /api/blobs/{never} HTTP/1.1\r\nHost: x\r\nContent-Length: {10**15}\r\n\r\n".encode())
    assert huge.startswith(b"HTTP/1.1 507") and b"does not fit on this server's disk" in huge
    # two uploads that each fit alone but not together: the second is refused while the first is in flight
    size = (shutil.disk_usage(d.data_dir).free - (512 << 20)) * 3 // 5
    first = f"POST /api/blobs/{never} HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode()
    host, port = d.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as held:
        held.sendall(first + b"x" * 10)
        wait_for(lambda: list((d.data_dir / "blobs").glob(".partial-*")), HANG, "the first upload to start")
        second = raw(d, first.replace(never.encode(), other.encode()))
        assert (
            second.startswith(b"HTTP/1.1 507") and b"beside the" in second and b"uploads in flight" in second
        )
    # a body of no declared length (chunked) is held to the same reserve as it arrives
    blobs = d.data_dir / "blobs"
    wait_for(lambda: not list(blobs.glob(".partial-*")), HANG, "the uploads above to be cleaned up")
    room = shutil.disk_usage(d.data_dir).free - (512 << 20)
    third = "sha256:" + "c" * 64
    almost = f"POST /api/blobs/{third} HTTP/1.1\r\nHost: x\r\nContent-Length: {room - (2 << 20)}\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as held:
        held.sendall(almost.encode() + b"x" * 10)
        wait_for(
            lambda: list(blobs.glob(f".partial-*-{'c' * 16}-*")),
            HANG,
            "the nearly disk-sized upload to start",
        )
        step = 8 << 20
        chunked = (
            f"POST /api/blobs/{other} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{step:x}\r\n".encode()
            + b"y" * step
            + b"\r\n0\r\n\r\n"
        )
        refused = raw(d, chunked)
        assert refused.startswith(b"HTTP/1.1 507") and b"does not fit on this server's disk" in refused, (
            refused
        )
    assert head(d, other) == 404
    # a client that hangs up mid-upload leaves nothing behind
    cut = f"POST /api/blobs/{never} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n".encode() + b"x" * 10
    raw(d, cut, close_early=True)
    wait_for(
        lambda: not list((d.data_dir / "blobs").glob(".partial-*")), HANG, "the partial upload to be removed"
    )
    assert head(d, never) == 404
    # one that sends half and half-closes still reads why nothing was kept
    host, port = d.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as half:
        half.sendall(cut)
        half.shutdown(socket.SHUT_WR)
        answer = half.recv(65536)
    assert answer.startswith(b"HTTP/1.1 400") and b"the upload ended after 10 of its 1000 bytes" in answer, (
        answer
    )
    assert head(d, never) == 404


def raw(d: Daemon, data: bytes, close_early: bool = False) -> bytes:
    """Bytes sent on a socket of their own: a request httpx would not send (a body shorter than declared). The
    answer is read as soon as it comes: a server that refuses a body before it has all of it (507) answers and
    closes while the rest is still being sent, and how far the client got by then is the machine's speed."""
    host, port = d.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        if close_early:
            s.sendall(data)
            return b""
        sent = 0
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it answered and closed: read it
            while sent < len(data) and not select.select([s], [], [], 0)[0]:
                sent += s.send(data[sent : sent + (64 << 10)])
        return s.recv(65536)
