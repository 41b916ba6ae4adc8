"""A local HTTP server laid out like the Hugging Face Hub's API, for pull tests; it listens on 127.0.0.1 only.

Routes: ``GET /api/models/{repo}[/revision/{rev}]`` (``?blobs=true`` adds ``size`` and ``lfs``),
``HEAD``/``GET /{repo}/resolve/{rev}/{path}`` (GGUF and safetensors files are "LFS": a 302 to ``/cdn/...`` carrying
``X-Linked-Etag`` and ``X-Linked-Size``; other files are served in place), and ``/cdn/{repo}/{path}`` with
``Range``. Faults on demand: ``drops[path]`` (cut the connection after that many bytes of the file, one
entry per GET), ``corrupt`` (serve flipped bytes under the true sha256), ``token`` (demand a Bearer token),
``ignore_range``, ``slow``. Also writers for synthetic models: a tiny GGUF, and safetensors model directories
(plain, AWQ, MLX) as a Hub repo or a user's folder holds them.
"""

from __future__ import annotations

import functools
import hashlib
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import orjson

_LFS = (".gguf", ".safetensors")
COMMIT = "5f1e9c3b2a7d4e6f8091a2b3c4d5e6f708192a3b"


@functools.cache
def _file_sha256(path: Path, _mtime_ns: int) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
    return h.hexdigest()


@dataclass
class Blob:
    source: bytes | Path
    size: int = 0
    sha256: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.source, Path):
            self.size = self.source.stat().st_size
            self.sha256 = _file_sha256(self.source, self.source.stat().st_mtime_ns)
        else:
            self.size = len(self.source)
            self.sha256 = hashlib.sha256(self.source).hexdigest()

    def chunks(self, start: int, end: int) -> Iterator[bytes]:
        """Bytes [start, end) in pieces."""
        if isinstance(self.source, bytes):
            for at in range(start, end, 1 << 20):
                yield self.source[at : min(end, at + (1 << 20))]
            return
        with self.source.open("rb") as f:
            f.seek(start)
            left = end - start
            while left > 0:
                block = f.read(min(left, 1 << 20))
                if not block:
                    return
                left -= len(block)
                yield block


@dataclass
class FakeHub:
    repos: dict[str, dict[str, Blob]] = field(default_factory=dict)
    drops: dict[str, list[int]] = field(default_factory=dict)
    corrupt: set[str] = field(default_factory=set)
    token: str | None = None
    ignore_range: bool = False
    slow: dict[str, float] = field(default_factory=dict)
    """Seconds to wait before each MiB of that file: a slow link, so a test can leave mid-file."""
    blobs: bool = True
    requests: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)
    """(method, path, range header, authorization header) per request."""
    _server: ThreadingHTTPServer | None = None

    def add(self, repo: str, path: str, source: bytes | Path) -> Blob:
        blob = Blob(source)
        self.repos.setdefault(repo, {})[path] = blob
        return blob

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def ranges(self, path: str) -> list[str | None]:
        """The Range headers of the GETs that delivered ``path``'s bytes."""
        return [
            r for m, p, r, _ in self.requests if m == "GET" and p.startswith("/cdn/") and p.endswith(path)
        ]

    def start(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            fake = hub

        self._server = _Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


@contextmanager
def running(hub: FakeHub) -> Iterator[FakeHub]:
    hub.start()
    try:
        yield hub
    finally:
        hub.stop()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that cancel or time out mid-body are part of the tests


class _Handler(BaseHTTPRequestHandler):
    fake: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _send(self, status: int, headers: dict[str, str], body: bytes = b"", head: bool = False) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _error(self, status: int, code: str, message: str, head: bool) -> None:
        body = orjson.dumps({"error": message})
        self._send(status, {"x-error-code": code, "content-type": "application/json"}, body, head)

    def _route(self, head: bool) -> None:
        fake = self.fake
        url = urlsplit(self.path)
        path = unquote(url.path)
        fake.requests.append(
            (self.command, path, self.headers.get("range"), self.headers.get("authorization"))
        )
        if fake.token is not None and self.headers.get("authorization") != f"Bearer {fake.token}":
            if path.startswith("/cdn/"):
                return self._error(403, "", "signed URL expected", head)
            return self._error(401, "GatedRepo", "Access to this model is restricted.", head)
        if path.startswith("/api/models/"):
            return self._listing(path.removeprefix("/api/models/"), parse_qs(url.query), head)
        if path.startswith("/cdn/"):
            repo_and_path = path.removeprefix("/cdn/")
            for repo, files in fake.repos.items():
                if repo_and_path.startswith(repo + "/") and repo_and_path[len(repo) + 1 :] in files:
                    return self._serve(files[repo_and_path[len(repo) + 1 :]], repo_and_path, head)
            return self._error(404, "", "no such blob", head)
        if "/resolve/" in path:
            repo, _, tail = path.lstrip("/").partition("/resolve/")
            _rev, _, file = tail.partition("/")
            files = fake.repos.get(repo)
            if files is None:
                return self._error(401, "RepoNotFound", "Repository not found", head)
            blob = files.get(file)
            if blob is None:
                return self._error(404, "EntryNotFound", f"{file} does not exist", head)
            if file.endswith(_LFS):  # LFS: redirect to the CDN, metadata on the redirect
                self._send(
                    302,
                    {
                        "location": f"/cdn/{quote(repo)}/{quote(file)}",
                        "x-linked-etag": f'"{blob.sha256}"',
                        "x-linked-size": str(blob.size),
                        "etag": '"w-not-the-content"',
                        "x-repo-commit": COMMIT,
                    },
                    head=head,
                )
                return None
            return self._serve(blob, f"{repo}/{file}", head, etag=hashlib.sha1(b"blob").hexdigest())
        return self._error(404, "", "not found", head)

    def _listing(self, rest: str, query: dict[str, list[str]], head: bool) -> None:
        repo, _, _rev = rest.partition("/revision/")
        files = self.fake.repos.get(repo)
        if files is None:
            return self._error(401, "RepoNotFound", "Repository not found", head)
        blobs = self.fake.blobs and query.get("blobs") == ["true"]
        siblings: list[dict[str, Any]] = []
        for name, blob in files.items():
            entry: dict[str, Any] = {"rfilename": name}
            if blobs:
                entry["size"] = blob.size
                if name.endswith(_LFS):
                    entry["lfs"] = {"sha256": blob.sha256, "size": blob.size, "pointerSize": 134}
            siblings.append(entry)
        body = orjson.dumps({"id": repo, "sha": COMMIT, "private": False, "siblings": siblings})
        self._send(200, {"content-type": "application/json"}, body, head)
        return None

    def _serve(self, blob: Blob, key: str, head: bool, etag: str | None = None) -> None:
        start, end = 0, blob.size
        status = 200
        rng = self.headers.get("range")
        if rng and not self.fake.ignore_range:
            first = int(rng.removeprefix("bytes=").split("-")[0])
            if first >= blob.size:
                self._send(416, {"content-range": f"bytes */{blob.size}"}, head=head)
                return
            start, status = first, 206
        self.send_response(status)
        self.send_header("content-length", str(end - start))
        self.send_header("accept-ranges", "bytes")
        self.send_header("etag", f'"{etag or blob.sha256}"')
        if status == 206:
            self.send_header("content-range", f"bytes {start}-{end - 1}/{blob.size}")
        self.end_headers()
        if head:
            return
        file = key.split("/", 2)[2]
        cuts = self.fake.drops.get(file)
        cut = cuts.pop(0) if cuts else None
        at = start
        for chunk in blob.chunks(start, end):
            time.sleep(self.fake.slow.get(file, 0.0))
            if file in self.fake.corrupt:
                chunk = bytes(b ^ 0x5A for b in chunk)
            if cut is not None and at + len(chunk) >= cut:
                self.wfile.write(chunk[: max(0, cut - at)])
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            self.wfile.write(chunk)
            at += len(chunk)


# -- synthetic GGUF -------------------------------------------------------------------------------------

_U16, _U32, _I32, _F32, _STR = 2, 4, 5, 6, 8


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str, value: object) -> bytes:
    if isinstance(value, str):
        return _s(key) + struct.pack("<I", _STR) + _s(value)
    if isinstance(value, tuple):
        kind, v = value
        fmt = {_U16: "<H", _U32: "<I", _I32: "<i", _F32: "<f"}[kind]
        return _s(key) + struct.pack("<I", kind) + struct.pack(fmt, v)
    assert isinstance(value, int)
    return _s(key) + struct.pack("<I", _U32) + struct.pack("<I", value)


def gguf_bytes(meta: dict[str, object], tensors: Sequence[tuple[str, int]], seed: int = 0) -> bytes:
    """A valid GGUF v3 file: ``meta`` (str, int as uint32, or (type, int)) and F32 tensors of n elements."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    head += b"".join(_kv(k, v) for k, v in meta.items())
    offset = 0
    for name, n in tensors:
        head += _s(name) + struct.pack("<IQIQ", 1, n, 0, offset)
        offset += (n * 4 + 31) // 32 * 32
    head += b"\0" * (-len(head) % 32)
    return head + random.Random(seed).randbytes(offset)


def lora_gguf(
    arch: str,
    layers: int,
    n_embd: int,
    targets: dict[str, int],
    rank: int = 8,
    spread: float = 0.1,
    seed: int = 0,
) -> bytes:
    """A LoRA adapter GGUF as llama.cpp's convert_lora_to_gguf.py writes one (``general.type`` adapter,
    ``adapter.type`` lora, ``adapter.lora.alpha``), with random F32 ``lora_a`` (ne = [n_embd, rank]) and
    ``lora_b`` (ne = [rank, out]) for ``blk.N.<target>.weight`` in every layer; ``targets`` maps a target to
    its output size. Its values are uniform in +-``spread``: strong enough to change what a model says."""
    meta: dict[str, object] = {
        "general.architecture": arch,
        "general.type": "adapter",
        "adapter.type": "lora",
        "general.name": "test adapter",
        "adapter.lora.alpha": (_F32, float(rank)),
    }
    shapes = []
    for layer in range(layers):
        for target, out in targets.items():
            shapes.append((f"blk.{layer}.{target}.weight.lora_a", (n_embd, rank)))
            shapes.append((f"blk.{layer}.{target}.weight.lora_b", (rank, out)))
    head = b"GGUF" + struct.pack("<IQQ", 3, len(shapes), len(meta))
    head += b"".join(_kv(k, v) for k, v in meta.items())
    offset, data = 0, bytearray()
    rng = random.Random(seed)
    for name, (ne0, ne1) in shapes:
        head += _s(name) + struct.pack("<IQQIQ", 2, ne0, ne1, 0, offset)
        values = [rng.uniform(-spread, spread) for _ in range(ne0 * ne1)]
        chunk = struct.pack(f"<{len(values)}f", *values)
        chunk += b"\0" * (-len(chunk) % 32)
        data += chunk
        offset += len(chunk)
    head += b"\0" * (-len(head) % 32)
    return head + bytes(data)


def split_gguf(prefix: str, shards: int, floats_per_shard: int) -> dict[str, bytes]:
    """A split GGUF set named like llama.cpp's gguf-split output: ``{prefix}-0000i-of-0000N.gguf``."""
    out: dict[str, bytes] = {}
    for i in range(shards):
        meta: dict[str, object] = {
            "split.no": (_U16, i),
            "split.count": (_U16, shards),
            "split.tensors.count": (_I32, shards),
        }
        if i == 0:
            meta = {
                "general.architecture": "llama",
                "general.name": "tiny split",
                "general.file_type": 0,
                "llama.context_length": 256,
                **meta,
            }
        out[f"{prefix}-{i + 1:05d}-of-{shards:05d}.gguf"] = gguf_bytes(
            meta, [(f"blk.{i}.weight", floats_per_shard)], seed=i
        )
    return out


def tiny_gguf(floats: int = 1 << 18, seed: int = 7) -> bytes:
    """A single-file synthetic GGUF (1 MiB of tensor data by default)."""
    meta: dict[str, object] = {
        "general.architecture": "llama",
        "general.name": "tiny",
        "general.file_type": 15,
        "llama.context_length": 512,
    }
    return gguf_bytes(meta, [("token_embd.weight", floats)], seed=seed)


# -- synthetic safetensors model directories ----------------------------------------------------------------


def safetensors_bytes(tensors: dict[str, tuple[str, list[int]]], seed: int = 0) -> bytes:
    """A valid safetensors file: an 8-byte little-endian header length, the JSON header, then the tensor data
    (``tensors`` maps a name to its dtype and shape; the data is random)."""
    sizes = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "U8": 1}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = orjson.dumps(header)
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + random.Random(seed).randbytes(offset)


def model_dir_files(kind: str = "plain", shards: int = 1) -> dict[str, bytes]:
    """The files of a tiny model directory as a Hub repo or a user's folder holds them: ``plain`` (bf16),
    ``awq`` (``quantization_config``) or ``mlx`` (mlx-lm's ``quantization`` table); plus a README that is not
    taken. With ``shards`` > 1 the weights are split with a ``model.safetensors.index.json``."""
    config: dict[str, Any] = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "max_position_embeddings": 32768,
        "torch_dtype": "bfloat16",
    }
    if kind == "awq":
        config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128}
    elif kind == "mlx":
        config["quantization"] = {"bits": 4, "group_size": 64}
    files: dict[str, bytes] = {
        "config.json": orjson.dumps(config),
        "generation_config.json": b'{"eos_token_id": 2}',
        "tokenizer.json": b'{"version": "1.0", "model": {"type": "BPE"}}',
        "tokenizer_config.json": orjson.dumps(
            {"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}
        ),
        "special_tokens_map.json": b"{}",
        "README.md": b"# a tiny model\n",
    }
    names = (
        [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
        if shards > 1
        else ["model.safetensors"]
    )
    weight_map = {}
    for i, name in enumerate(names):
        tensor = f"model.layers.{i}.weight"
        files[name] = safetensors_bytes({tensor: ("BF16", [64, 32])}, seed=i)
        weight_map[tensor] = name
    if shards > 1:
        files["model.safetensors.index.json"] = orjson.dumps({"metadata": {}, "weight_map": weight_map})
    return files


def write_model_dir(folder: Path, kind: str = "plain", shards: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in model_dir_files(kind, shards).items():
        (folder / name).write_bytes(data)
    return folder
