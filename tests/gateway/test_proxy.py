"""``proxy.unless_gone``: a whole answer's upstream work runs in the calling task and is cancelled only when the
client's disconnect future completes first (checked with real asyncio futures standing in for Granian's); the
watch starts only after ``WATCH_AFTER_SECS``, so a fast answer never creates it."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import aiohttp
import pytest

from blazar.errors import BlazarError
from blazar.gateway import proxy
from blazar.gateway.http import ClientGone, HttpError
from blazar.gateway.proxy import unless_gone
from blazar.paths import DataDir
from tests.conftest import until


@pytest.fixture(autouse=True)
def _watch_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy, "WATCH_AFTER_SECS", 0.005)


class Client:
    """The one RSGI call used: ``client_disconnect()``, a future that completes when the client leaves."""

    def __init__(self) -> None:
        self.fut: asyncio.Future[None] | None = None

    def client_disconnect(self) -> asyncio.Future[None]:
        self.fut = asyncio.get_running_loop().create_future()
        return self.fut


async def _work(seconds: float, result: str, seen: list[str]) -> str:
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        seen.append("cancelled")
        raise
    return result


async def _armed(client: Client) -> None:
    """Until ``unless_gone`` watches ``client`` (``WATCH_AFTER_SECS`` after it began)."""
    await until(lambda: client.fut is not None, "the disconnect watch to start")


def test_the_answer_wins_and_the_disconnect_watch_is_dropped() -> None:
    async def main() -> None:
        client, seen = Client(), []

        async def work() -> str:
            await _armed(client)  # the answer comes once the watch is on
            return await _work(0, "body", seen)

        assert await unless_gone(work(), client) == "body"
        assert client.fut is not None and client.fut.cancelled() and seen == []
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0

    asyncio.run(main())


def test_a_client_that_leaves_cancels_the_work() -> None:
    async def main() -> None:
        client, seen = Client(), []

        async def leave() -> None:
            await _armed(client)
            assert client.fut is not None
            client.fut.set_result(None)

        leaving = asyncio.ensure_future(leave())
        with pytest.raises(ClientGone):
            await unless_gone(_work(3600, "never", seen), client)
        await leaving
        assert seen == ["cancelled"]
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0  # the task goes on normally afterwards
        await asyncio.sleep(0)

    asyncio.run(main())


def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    async def main() -> None:
        client, seen = Client(), []
        inner = asyncio.ensure_future(unless_gone(_work(3600, "never", seen), client))
        await _armed(client)  # cancelled while the watch is on: still not the client's doing
        inner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await inner
        assert seen == ["cancelled"] and client.fut is not None and client.fut.cancelled()

    asyncio.run(main())


def test_a_fast_answer_never_watches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy, "WATCH_AFTER_SECS", 10.0)

    async def main() -> None:
        client, seen = Client(), []
        # ready at the next loop turn, long before the watch's timer could fire
        assert await unless_gone(_work(0, "body", seen), client) == "body"
        assert client.fut is None  # client_disconnect() was never called

    asyncio.run(main())


class _DropFirst(asyncio.Protocol):
    """A raw HTTP/1.1 engine stand-in on a real port: the first connection is closed once its request arrived
    (what a keep-alive connection the engine closes as the request goes out looks like); later ones get 200."""

    seen = 0
    drop_all = False
    open: ClassVar[list[asyncio.BaseTransport]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buf = b""
        _DropFirst.open.append(transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if b"\r\n\r\n" not in self.buf:
            return
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        length = int(
            next(
                (ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")),
                b"0",
            )
        )
        if len(rest) < length:
            return
        _DropFirst.seen += 1
        assert isinstance(self.transport, asyncio.Transport)
        if _DropFirst.seen == 1 or _DropFirst.drop_all:
            self.transport.close()
            return
        body = b'{"ok": true}'
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (len(body), body)
        )
        self.buf = b""


def test_a_pooled_connection_closed_under_a_request_is_retried_once() -> None:
    from blazar.gateway.proxy import forward_whole
    from blazar.supervisor.links import Links

    async def main() -> None:
        _DropFirst.seen, _DropFirst.drop_all = 0, False
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_DropFirst, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        child = SimpleNamespace(
            links=Links(port, "k"),
            model="m:latest",
            key="m:latest",
            alive=lambda: True,
            inflight=0,
            last_used=0.0,
            stopped_for=None,
        )
        sup = SimpleNamespace(
            cfg=SimpleNamespace(child_header_timeout_secs=5), data=DataDir(Path("/nonexistent"))
        )
        sup.lease = lambda c: contextlib.nullcontext(c)
        status, data = await forward_whole(sup, child, "/v1/chat/completions", b"{}")  # type: ignore[arg-type]
        assert (status, data, _DropFirst.seen) == (200, b'{"ok": true}', 2)
        assert len(child.links.idle) == 1  # the answered connection is kept for the next request

        _DropFirst.seen, _DropFirst.drop_all = 0, True  # every request dropped: one retry, then a failure
        reaped: list[object] = []

        async def reap(c: object) -> bool:
            reaped.append(c)
            return False

        sup.reap = reap
        with pytest.raises(HttpError) as exc:
            await forward_whole(sup, child, "/v1/chat/completions", b"{}")  # type: ignore[arg-type]
        assert exc.value.status == 502 and "closed the connection before answering" in exc.value.message
        assert _DropFirst.seen == 2 and reaped == [child]  # two attempts, not more
        child.links.close()
        for t in _DropFirst.open:
            t.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())


def test_a_disconnect_queued_as_the_answer_finishes_cancels_nothing_after() -> None:
    """The client leaves in the same loop turn as the answer completes: the already queued callback must not
    cancel the request task once ``unless_gone`` has returned."""

    async def main() -> None:
        client = Client()
        ran = asyncio.Event()

        async def work() -> str:
            await _armed(client)
            assert client.fut is not None
            client.fut.add_done_callback(lambda _: ran.set())  # queued after the watch's own callback
            client.fut.set_result(None)  # queues on_gone for the next loop turn
            return "body"

        assert await unless_gone(work(), client) == "body"
        await asyncio.wait_for(
            ran.wait(), 30
        )  # the queued callback has run; it must not have cancelled this task
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0

    asyncio.run(main())


def test_the_props_probe_holds_a_lease_on_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """A concurrent num_ctx restart drains a child's requests in flight before stopping it, so the first forced
    tool request's /props probe must count as one."""
    from blazar.gateway import forced_tools, proxy
    from blazar.launch.spec import LLAMA_SERVER, LaunchSpec
    from blazar.supervisor.pool import Supervisor

    class StandIn:  # a child the probe may keep facts about (weakly, as of a real one)
        spec = LaunchSpec(("x",), can=LLAMA_SERVER)
        inflight = 0
        last_used = 0.0

    child = StandIn()
    seen: list[int] = []

    async def get_whole(sup: object, c: StandIn, path: str) -> tuple[int, bytes, str]:
        seen.append(c.inflight)
        return 200, b'{"chat_template_caps": {"supports_tool_calls": true}}', "application/json"

    monkeypatch.setattr(proxy, "get_whole", get_whole)
    sup = SimpleNamespace(lease=lambda c: Supervisor.lease(sup, c))  # type: ignore[arg-type]
    assert asyncio.run(forced_tools.template_emits_tool_calls(sup, child))  # type: ignore[arg-type]
    assert seen == [1] and child.inflight == 0


def test_a_get_to_a_stopped_unix_socket_child_is_a_502_without_the_data_directory(tmp_path: Path) -> None:
    """The child's own aiohttp session (over its unix socket) was closed by a reap or eviction after this request
    got the child: a 502 naming no server path, never a 500 from the closed session."""
    from blazar.gateway.proxy import get_whole

    async def main() -> None:
        sock = tmp_path / "data" / "run" / "m.sock"
        sock.parent.mkdir(parents=True)

        async def reap(c: object) -> bool:
            return False

        sup = SimpleNamespace(
            cfg=SimpleNamespace(child_header_timeout_secs=5),
            data=DataDir(tmp_path / "data"),
            reap=reap,
        )
        for closed in (False, True):
            http = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(sock)))
            child = SimpleNamespace(
                model="m:latest",
                key="m:latest",
                http=http,
                base_url="http://localhost",
                api_key="k",
                stopped_for=None,
            )
            if closed:
                await http.close()
            with pytest.raises(HttpError) as exc:
                await get_whole(sup, child, "/props")  # type: ignore[arg-type]
            await http.close()
            assert exc.value.status == 502 and str(tmp_path) not in exc.value.message, exc.value.message
            assert ("<data dir>/run/m.sock" in exc.value.message) is not closed, exc.value.message

    asyncio.run(main())


def test_a_request_whose_engine_was_stopped_before_it_answered_runs_once_more() -> None:
    from blazar.gateway.exchange import once_more_if_wedged
    from blazar.supervisor.signals import EngineStopped, EngineWedged

    def attempts(*outcomes: object) -> Any:
        left = list(outcomes)

        async def attempt() -> object:
            got = left.pop(0)
            if isinstance(got, BaseException):
                raise got
            return got

        return attempt

    run = asyncio.run
    assert run(once_more_if_wedged(attempts(EngineStopped("m", "keep_alive 0"), "served"))) == "served"
    assert run(once_more_if_wedged(attempts(EngineWedged("m", 10), "served"))) == "served"
    with pytest.raises(BlazarError) as twice:
        run(once_more_if_wedged(attempts(EngineStopped("m", "keep_alive 0"), EngineStopped("m", "idle"))))
    assert twice.value.status == 503 and not isinstance(twice.value, EngineStopped)
    assert twice.value.message == (
        "engine for 'm' was stopped before it answered (keep_alive 0), and again when the request was retried once"
    )
    with pytest.raises(HttpError) as other:  # anything else is not retried
        run(once_more_if_wedged(attempts(HttpError(400, "bad"), "never")))
    assert other.value.status == 400


def test_only_an_engine_stopped_for_a_model_still_there_is_retried() -> None:
    from blazar.gateway.proxy import _stopped_on_purpose
    from blazar.supervisor.signals import EngineStopped

    def child(reason: str | None, gone: bool = False) -> Any:
        return SimpleNamespace(model="m", stopped_for=reason, model_gone=gone)

    running, stopping = SimpleNamespace(stopping=False), SimpleNamespace(stopping=True)
    assert isinstance(_stopped_on_purpose(running, child("keep_alive 0")), EngineStopped)  # type: ignore[arg-type]
    assert _stopped_on_purpose(running, child(None)) is None  # type: ignore[arg-type]  # it died: a 502
    assert _stopped_on_purpose(running, child("model deleted", gone=True)) is None  # type: ignore[arg-type]
    assert _stopped_on_purpose(stopping, child("blazar is shutting down")) is None  # type: ignore[arg-type]


def test_a_prompt_over_the_slots_context_names_the_settings() -> None:
    body = (
        b'{"error":{"code":400,"message":"request (3031 tokens) exceeds the available context size (2048 tokens),'
        b' try increasing it","type":"exceed_context_size_error"}}'
    )
    err = proxy.engine_error(400, body)
    assert err.status == 400 and err.source == "engine"
    assert err.message.startswith("request (3031 tokens) exceeds the available context size (2048 tokens)")
    assert (
        "raise ctx_size (or lower parallel) for the model in config.toml, or Ollama's options.num_ctx"
        in err.message
    )
