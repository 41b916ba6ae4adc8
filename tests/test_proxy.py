"""``proxy._unless_gone``: a whole answer's upstream work runs in the calling task and is cancelled only when the
client's disconnect future completes first (checked with real asyncio futures standing in for Granian's); the
watch starts only after ``WATCH_AFTER_SECS``, so a fast answer never creates it."""

from __future__ import annotations

import asyncio

import pytest

from blazar.gateway import proxy
from blazar.gateway.http import ClientGone
from blazar.gateway.proxy import _unless_gone


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


def test_the_answer_wins_and_the_disconnect_watch_is_dropped() -> None:
    async def main() -> None:
        client, seen = Client(), []
        assert await _unless_gone(_work(0.05, "body", seen), client) == "body"
        assert client.fut is not None and client.fut.cancelled() and seen == []
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0

    asyncio.run(main())


def test_a_client_that_leaves_cancels_the_work() -> None:
    async def main() -> None:
        client, seen = Client(), []
        asyncio.get_running_loop().call_later(0.05, lambda: client.fut and client.fut.set_result(None))
        with pytest.raises(ClientGone):
            await _unless_gone(_work(5, "never", seen), client)
        assert seen == ["cancelled"]
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0  # the task goes on normally afterwards
        await asyncio.sleep(0)

    asyncio.run(main())


def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    async def main() -> None:
        client, seen = Client(), []
        inner = asyncio.ensure_future(_unless_gone(_work(5, "never", seen), client))
        await asyncio.sleep(0.05)
        inner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await inner
        assert seen == ["cancelled"] and client.fut is not None and client.fut.cancelled()

    asyncio.run(main())


def test_a_fast_answer_never_watches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy, "WATCH_AFTER_SECS", 10.0)

    async def main() -> None:
        client, seen = Client(), []
        assert await _unless_gone(_work(0.01, "body", seen), client) == "body"
        assert client.fut is None  # client_disconnect() was never called

    asyncio.run(main())
