"""The pooled engine connections (``blazar.supervisor.links``) against a raw HTTP/1.1 server on a real port:
keep-alive reuse, idle expiry, ``connection: close``, an answer the client abandons, and a relayed stream whose
client leaves (the engine connection is closed, which is how llama-server learns to stop)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from blazar import _native
from blazar.supervisor import links as links_mod
from blazar.supervisor.links import Links
from tests.conftest import until
from tests.native.standins import Client, Gone


class Engine(asyncio.Protocol):
    """Answers each request with the next scripted response; records connections and request heads."""

    script: ClassVar[list[bytes]] = []
    connections: ClassVar[list[Engine]] = []
    requests: ClassVar[list[bytes]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.buf = b""
        self.closed = asyncio.get_running_loop().create_future()
        Engine.connections.append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            head, _, rest = self.buf.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            if len(rest) < length:
                return
            self.buf = rest[length:]
            Engine.requests.append(head)
            answer = Engine.script.pop(0)
            if answer:
                self.transport.write(answer)


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


@contextlib.asynccontextmanager
async def engine(unix: Path | None = None) -> AsyncIterator[Any]:
    """A scripted engine on a real port (its number), or on the unix socket ``unix`` (its path)."""
    Engine.script, Engine.connections, Engine.requests = [], [], []
    loop = asyncio.get_running_loop()
    if unix is None:
        server = await loop.create_server(Engine, "127.0.0.1", 0)
    else:
        server = await loop.create_unix_server(Engine, str(unix))
    try:
        yield unix if unix is not None else server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


def test_keep_alive_reuse_idle_expiry_and_close() -> None:
    async def main() -> None:
        async with engine() as port:
            links = Links(port, "secret-key")
            Engine.script = [ok(b"one"), ok(b"two"), ok(b"three", b"connection: close\r\n"), ok(b"four")]
            for want in (b"one", b"two", b"three"):
                conn, status = await links.exchange("/v1/chat/completions", b'{"a":1}')
                assert (status, await links.body(conn)) == (200, want)
                links.release(conn)
            assert len(Engine.connections) == 1  # one connection carried all three
            head = Engine.requests[0]
            assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
            assert b"authorization: Bearer secret-key" in head and b"content-length: 7" in head
            assert links.idle == []  # "connection: close" is not pooled
            conn, _ = await links.exchange("/x", b"{}")
            await links.body(conn)
            links.release(conn)
            assert len(Engine.connections) == 2 and len(links.idle) == 1
            # it has been idle longer than the keep-alive: dated back, not slept on
            links.idle[0].idle_since -= links_mod.ENGINE_KEEPALIVE_SECS + 1
            Engine.script = [ok(b"five")]
            conn, _ = await links.exchange("/x", b"{}")
            assert await links.body(conn) == b"five"
            assert len(Engine.connections) == 3  # the idle one had aged out and was closed, not reused
            await asyncio.wait_for(Engine.connections[1].closed, 30)
            links.release(conn)
            links.close()
            await asyncio.wait_for(Engine.connections[2].closed, 30)

    asyncio.run(main())


def test_an_abandoned_answer_closes_its_connection() -> None:
    async def main() -> None:
        async with engine() as port:
            links = Links(port, "k")
            Engine.script = [b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial"]
            conn, _status = await links.exchange("/x", b"{}")
            started = asyncio.Event()

            async def read() -> bytes:
                started.set()  # set in the step that asks the link for the body: it is read from then on
                return await links.body(conn)

            reading = asyncio.ensure_future(read())
            await asyncio.wait_for(started.wait(), 30)
            reading.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reading
            links.release(conn)  # the cancelled read left the response unfinished: closed, never pooled
            assert links.idle == []
            await asyncio.wait_for(Engine.connections[0].closed, 30)

    asyncio.run(main())


def test_a_relayed_stream_whose_client_leaves_closes_the_engine_connection() -> None:
    async def main() -> None:
        async with engine() as port:
            links = Links(port, "k")
            Engine.script = [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"]
            conn, _status = await links.exchange("/v1/chat/completions", b"{}")
            upstream = Engine.connections[0]
            client = Client(leave_after=2)
            tr = _native.StreamTranslator("openai", "m")
            relaying = asyncio.ensure_future(links.relay(conn, tr, client.send_bytes))
            event = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
            # token by token, as an engine sends them: each relayed before the next is sent
            for i in range(1, 4):

                def relayed(n: int = i) -> bool:
                    """The client got n pieces, or the relay ended (it leaves after 2)."""
                    return len(client.sent) >= n or relaying.done()

                upstream.transport.write(b"%x\r\n%s\r\n" % (len(event), event))
                await until(relayed, f"event {i} to be relayed")
            outcome = await asyncio.wait_for(relaying, 30)
            assert isinstance(outcome, Gone) and len(client.sent) == 2
            links.release(conn)
            await asyncio.wait_for(upstream.closed, 30)  # the engine sees the close and stops generating

    asyncio.run(main())


def test_a_dead_port_is_an_os_error() -> None:
    async def main() -> None:
        async with engine() as port:
            pass
        with pytest.raises(OSError):  # the engine is gone: nothing listens on its port
            await Links(port, "k").exchange("/x", b"{}")

    asyncio.run(main())


def test_a_pooled_connection_the_engine_spoiled_or_closed_is_never_reused() -> None:
    async def main() -> None:
        async with engine() as port:
            links = Links(port, "k")
            # 1: stray bytes after a finished answer, while the connection sits in the pool
            Engine.script = [ok(b"one"), ok(b"two")]
            conn, _ = await links.exchange("/x", b"{}")
            assert await links.body(conn) == b"one"
            links.release(conn)
            spoiled = conn
            Engine.connections[0].transport.write(b"\r\n")
            await until(lambda: not spoiled.link.reusable, "the stray bytes to reach the pooled connection")
            conn, _ = await links.exchange("/x", b"{}")
            assert await links.body(conn) == b"two"
            assert len(Engine.connections) == 2  # the spoiled one was closed, not handed out
            links.release(conn)
            await asyncio.wait_for(Engine.connections[0].closed, 30)
            # 2: the engine closes an idle connection (its keep-alive ran out): a new one carries the next request
            Engine.connections[1].transport.close()
            await until(lambda: not links.idle, "the pool to see the engine's close")
            Engine.script = [ok(b"three")]
            conn, _ = await links.exchange("/x", b"{}")
            assert await links.body(conn) == b"three" and len(Engine.connections) == 3
            links.release(conn)
            links.close()

    asyncio.run(main())


def test_a_reset_fails_a_body_delimited_by_the_close() -> None:
    import socket
    import struct

    async def main() -> None:
        async with engine() as port:
            links = Links(port, "k")
            Engine.script = [b"HTTP/1.0 200 OK\r\n\r\ndata: partial\n\n"]
            conn, status = await links.exchange("/x", b"{}")
            assert status == 200
            upstream = Engine.connections[0]
            sock = upstream.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            upstream.transport.abort()  # RST, not a clean close
            with pytest.raises(_native.LinkError, match="reset"):
                await asyncio.wait_for(links.body(conn), 30)
            links.release(conn)
            # a clean close ends such a body normally
            Engine.script = [b"HTTP/1.0 200 OK\r\n\r\ndata: whole\n\n"]
            conn, _ = await links.exchange("/x", b"{}")
            Engine.connections[1].transport.close()
            assert await asyncio.wait_for(links.body(conn), 30) == b"data: whole\n\n"
            links.release(conn)
            assert links.idle == []

    asyncio.run(main())


def test_over_a_unix_socket(tmp_path: Path) -> None:
    """A child on a unix socket (llama-server's ``--host *.sock``): the same pool, ``host: localhost``."""

    async def main() -> None:
        sock = tmp_path / "engine.sock"
        async with engine(sock):
            Engine.script = [ok(b"one"), ok(b"two")]
            links = Links(sock, "k")
            for want in (b"one", b"two"):
                conn, status = await links.exchange("/v1/chat/completions", b"{}")
                assert (status, await links.body(conn)) == (200, want)
                links.release(conn)
            assert len(Engine.connections) == 1  # kept alive and reused
            assert b"\r\nhost: localhost\r\n" in Engine.requests[0]
            links.close()
        sock.unlink()
        with pytest.raises(OSError):  # the engine is gone: no socket to connect to
            await Links(sock, "k").exchange("/x", b"{}")

    asyncio.run(main())
