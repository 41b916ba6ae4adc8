"""Stand-ins for what the native engine relay (``EngineLink``) calls in Python: an asyncio future's settling
methods and Granian's RSGI ``send_bytes``. Shared by the relay, pool and fuzz tests."""

from __future__ import annotations

from typing import Any


class Future:
    """The slice of asyncio.Future the link uses (done / set_result / set_exception)."""

    def __init__(self) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.settled = 0

    def done(self) -> bool:
        return self.settled > 0

    def set_result(self, value: Any) -> None:
        self.settled += 1
        self.result = value

    def set_exception(self, exc: BaseException) -> None:
        self.settled += 1
        self.error = exc


class PyEmptyAwaitable:
    """Named like Granian's ready awaitable: what ``send_bytes`` returns while the client is there."""


class Gone:
    """What Granian's ``send_bytes`` returns once the client left (its error awaitable)."""


class Client:
    def __init__(self, leave_after: int | None = None) -> None:
        self.sent: list[bytes] = []
        self.leave_after = leave_after

    def send_bytes(self, data: bytes) -> object:
        if self.leave_after is not None and len(self.sent) >= self.leave_after:
            return Gone()
        self.sent.append(data)
        return PyEmptyAwaitable()
