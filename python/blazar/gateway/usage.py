"""Key usage made durable as each request ends, off the event loop.

``UsageWriter`` owns a thread and its own connection to ``blazar.db``. ``Gate.finish`` charges a request's tokens
in memory (``quotas``) and hands the writer what must wait for the commit (the request's audit line, the record
of its end); the thread writes every usage row changed since its last commit in one transaction, so requests
that end together share one, then runs what waited on the event loop. A daemon killed after an end was recorded
has that request's tokens on disk. It must not decide what is charged (``quotas``) or block the loop: a write
(tens of microseconds, more on a slow disk, seconds behind another process's lock) happens on its thread only.
A failed write (a full disk) keeps the rows in memory for the next commit and still releases what waited.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from blazar.errors import BlazarError
from blazar.store import Store
from blazar.tenancy.quotas import Quotas

log = logging.getLogger("blazar.usage")


class UsageWriter:
    """Commits ``quotas``' changed usage rows: on its own thread and connection once started, else (before
    ``start``, after ``close``) at once through ``store``, the loop's connection."""

    def __init__(self, quotas: Quotas, store: Store) -> None:
        self._quotas = quotas
        self._store = store
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._waiting: list[Callable[[], None]] = []
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread; call on the event loop that ``commit``'s callbacks run on."""
        if self._thread is None:
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._run, name="blazar-usage", daemon=True)
            self._thread.start()

    def commit(self, then: Callable[[], None] | None = None) -> None:
        """Write the changed usage soon, in the next transaction; ``then`` runs on the loop once it is written
        (or its write failed). Before ``start`` (or after ``close``) it writes at once, on the caller's thread."""
        if self._thread is None:
            self._write(self._store)
            if then is not None:
                then()
            return
        with self._lock:
            if then is not None:
                self._waiting.append(then)
        self._wake.set()

    async def close(self) -> None:
        """Write what is left and stop the thread; what waited runs before this returns."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        with self._lock:
            self._stopping = True
        self._wake.set()
        await asyncio.to_thread(thread.join)
        self._release(self._take())  # anything queued after the thread's last round
        self._write(self._store)

    def _take(self) -> list[Callable[[], None]]:
        with self._lock:
            waiting, self._waiting = self._waiting, []
        return waiting

    def _release(self, waiting: list[Callable[[], None]]) -> None:
        for then in waiting:
            try:
                then()
            except Exception:
                log.exception("a callback waiting on the usage write failed")

    def _write(self, store: Store) -> None:
        try:
            self._quotas.flush(store)
        except BlazarError as e:
            log.error(
                "writing key usage failed; it stays in memory and is written with the next request: %s", e
            )

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        with Store.open(
            self._store.path
        ) as store:  # this thread's own connection: the loop's never waits on it
            while True:
                self._wake.wait()
                self._wake.clear()
                waiting = self._take()  # taken before the write: each of them is charged already
                self._write(store)
                if waiting:
                    try:
                        loop.call_soon_threadsafe(self._release, waiting)
                    except RuntimeError:  # the loop closed under us: nothing is left to tell
                        return
                with self._lock:
                    if self._stopping and not self._waiting:
                        return
