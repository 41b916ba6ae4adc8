"""The gateway's pooled HTTP/1.1 connections to one engine child, each decoded by a native ``EngineLink``.

It owns connecting, writing a request, waiting for the response head, keep-alive reuse (idle connections are
kept ``ENGINE_KEEPALIVE_SECS``, under llama-server's own 5 s) and closing. Each connection's ``data_received``
*is* its link's ``feed``: the event loop hands every engine read straight to Rust, which decodes the HTTP
framing and, for a relayed stream, translates and writes to the client without a Python frame per read.
Mapping failures to client errors belongs to ``blazar.gateway.proxy``.

The engine's GET endpoints (health, ``/props``, tokenize) still go through aiohttp (the child's own session over
its unix socket, else the supervisor's): they are few and off the hot path.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

from blazar._native import EngineLink, LinkError

ENGINE_KEEPALIVE_SECS = 3.0
"""How long an idle engine connection is kept for reuse: under cpp-httplib's 5 s keep-alive, so a request never
goes out on a connection the engine is closing (a closed one is retried once all the same)."""


class EngineConn(asyncio.Protocol):
    """One connection to an engine (TCP, or its unix socket); ``data_received`` is bound to the native link's ``feed``."""

    __slots__ = ("data_received", "idle_since", "link", "pool", "transport")

    def __init__(self, pool: Links) -> None:
        self.link = EngineLink()
        self.data_received = self.link.feed  # type: ignore[method-assign]  # read per connection by the loop
        self.pool = pool
        self.transport: Any = None
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def eof_received(self) -> bool | None:
        self.link.eof()
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.lost(exc is not None)  # a reset never ends a body delimited by the close
        self.pool.forget(self)

    def close(self) -> None:
        self.link.abandon()
        if self.transport is not None:
            self.transport.close()


class Links:
    """The idle connections to one child (or remote), and the request writer. ``address`` is the child's port on
    127.0.0.1, the path of its unix socket, or a remote's (host, port), over TLS with ``tls``; ``api_key`` (None:
    none) goes in every request's ``authorization``."""

    def __init__(
        self, address: int | Path | tuple[str, int], api_key: str | None, tls: ssl.SSLContext | None = None
    ) -> None:
        self.address = address
        self.tls = tls
        self.idle: list[EngineConn] = []
        self.busy: set[EngineConn] = set()  # carrying an exchange: closed too when the links close
        if isinstance(address, Path):
            host = "localhost"
        elif isinstance(address, tuple):
            name, port = address
            host = f"[{name}]" if ":" in name else name
            if port != (443 if tls else 80):  # a default port is left out, as clients write it
                host = f"{host}:{port}"
        else:
            host = f"127.0.0.1:{address}"
        auth = f"authorization: Bearer {api_key}\r\n" if api_key is not None else ""
        self._head = f"host: {host}\r\n{auth}content-type: application/json\r\ncontent-length: ".encode()
        self._closed = False

    async def exchange(
        self, path: str, body: bytes, alive: Any = None, headers: bytes = b""
    ) -> tuple[EngineConn, int]:
        """POST ``body`` to ``path`` (with ``headers``: more header lines, each ending in CRLF, checked by the
        caller); returns the connection (its response head read) and the status.

        A connection the engine closed before sending a byte of its answer (typically a pooled one it was
        closing as the request went out) is retried once on a newly opened connection, while ``alive()`` says
        the engine runs. Raises ``LinkError`` (connection failed) or ``OSError`` (cannot connect)."""
        loop = asyncio.get_running_loop()
        request = b"POST %s HTTP/1.1\r\n%s%s%d\r\n\r\n" % (path.encode(), headers, self._head, len(body))
        retried = False
        while True:
            # a retry never takes another pooled connection: the engine may have closed all of them
            pooled = None if retried else self._take(loop.time())
            conn = pooled or await self._connect(loop)
            head = loop.create_future()
            try:
                conn.link.begin(head)
            except LinkError:  # closed since it was checked: another pooled one, or a new connection
                conn.close()
                if pooled is not None:
                    continue
                raise
            self.busy.add(conn)
            try:
                conn.transport.writelines((request, body))
                return conn, await head
            except LinkError:
                fresh = not conn.link.got_bytes
                self.busy.discard(conn)
                conn.close()
                if retried or not fresh or (alive is not None and not alive()):
                    raise
                retried = True
            except BaseException:
                self.busy.discard(conn)
                conn.close()
                raise

    async def body(self, conn: EngineConn) -> bytes:
        """The whole body of the response whose head ``exchange`` returned."""
        done = asyncio.get_running_loop().create_future()
        conn.link.read_body(done)
        data: bytes = await done
        return data

    async def relay(self, conn: EngineConn, translator: Any, send: Any) -> Any:
        """Stream the response whose head ``exchange`` returned through ``translator`` to ``send`` (the
        client's ``send_bytes``), natively, until it ends: None; or ``send``'s error awaitable when the client
        is gone. Raises ``StreamError`` (malformed stream) or ``LinkError`` (the connection failed)."""
        done = asyncio.get_running_loop().create_future()
        conn.link.relay(translator, send, done)
        # The link holds them while it relays and drops them when it ends. A failure's traceback holds this
        # frame, so keeping ``send`` here would keep the client's transport, and so its stream, open.
        del translator, send
        return await done

    def release(self, conn: EngineConn) -> None:
        """Back to the pool if its response ended cleanly and the engine keeps it open; else closed."""
        self.busy.discard(conn)
        if conn.link.reusable and not self._closed:
            conn.idle_since = asyncio.get_running_loop().time()
            self.idle.append(conn)
        else:
            conn.close()

    @property
    def closed(self) -> bool:
        """``close`` was called: the links are being shut down, not failed by the peer."""
        return self._closed

    def forget(self, conn: EngineConn) -> None:
        self.busy.discard(conn)
        if conn in self.idle:
            self.idle.remove(conn)

    def close(self) -> None:
        """Close every connection. One carrying an exchange is closed under it, so its waiter fails with
        ``LinkError`` (a relayed stream ends with the dialect's error event) instead of waiting on a peer that
        keeps going: a remote is not stopped with the daemon."""
        self._closed = True
        for conn in self.idle[:]:
            conn.close()
        self.idle.clear()
        for conn in list(self.busy):
            if conn.transport is not None:
                conn.transport.close()

    def _take(self, now: float) -> EngineConn | None:
        while self.idle and now - self.idle[0].idle_since >= ENGINE_KEEPALIVE_SECS:
            self.idle.pop(0).close()  # the oldest: close before the engine does
        while self.idle:
            conn = self.idle.pop()  # the most recently used: the others age out
            if (
                conn.link.reusable  # not closed by the engine, not broken by stray bytes
                and not conn.transport.is_closing()
                and now - conn.idle_since < ENGINE_KEEPALIVE_SECS
            ):
                return conn
            conn.close()
        return None

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> EngineConn:
        if isinstance(self.address, Path):
            _t, conn = await loop.create_unix_connection(lambda: EngineConn(self), str(self.address))
        elif isinstance(self.address, tuple):
            host, port = self.address
            _t, conn = await loop.create_connection(
                lambda: EngineConn(self), host, port, ssl=self.tls, server_hostname=host if self.tls else None
            )
        else:
            _t, conn = await loop.create_connection(lambda: EngineConn(self), "127.0.0.1", self.address)
        return conn
