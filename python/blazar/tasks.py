"""Background asyncio tasks: stopping one (the reaper, the audit writer, the OTLP exporter, the usage flusher)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def stop(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` and wait until it has ended, its cancellation swallowed; None does nothing."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
