"""A real headless Chromium (Debian's ``chromium-headless-shell``, from the test assets) driven through the Chrome
DevTools Protocol over its websocket (aiohttp): open a page, collect its console errors and uncaught exceptions,
evaluate expressions, wait on what the page shows, take a screenshot.

Chromium writes the port it listens on to ``DevToolsActivePort`` in its profile; every wait here is on something
observed (that file, a protocol answer, an expression turning true), bounded only on a hang.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from tests.conftest import HANG

POLL_SECS = 0.1


class BrowserError(AssertionError):
    """Chromium did not start, or answered a protocol call with an error."""


class Browser:
    """``async with Browser(launcher, profile) as b``: one page, attached, with Runtime, Log and Page enabled."""

    def __init__(self, launcher: Path, profile: Path, *, width: int = 1280, height: int = 1000) -> None:
        self.launcher = launcher
        self.profile = profile
        self.size = (width, height)
        self.proc: subprocess.Popen[bytes] | None = None
        self.http: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.session = ""
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self.ids = itertools.count(1)
        self.reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Browser:
        self.profile.mkdir(parents=True, exist_ok=True)
        port_file = self.profile / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)
        with (self.profile.parent / "chromium.log").open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    str(self.launcher),
                    "--headless",
                    "--no-sandbox",  # the tests run as root in CI
                    "--disable-gpu",
                    "--no-first-run",
                    "--remote-debugging-port=0",
                    f"--user-data-dir={self.profile}",
                    f"--window-size={self.size[0]},{self.size[1]}",
                    "about:blank",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        async with asyncio.timeout(HANG):
            while not (port_file.is_file() and len(port_file.read_text().splitlines()) >= 2):
                if self.proc.poll() is not None:
                    log = (self.profile.parent / "chromium.log").read_text(errors="replace")
                    raise BrowserError(f"chromium exited with {self.proc.returncode}: {log[-2000:]}")
                await asyncio.sleep(POLL_SECS)
        port, path = port_file.read_text().splitlines()[:2]
        self.http = aiohttp.ClientSession()
        self.ws = await self.http.ws_connect(f"ws://127.0.0.1:{port}{path}", max_msg_size=0)
        self.reader = asyncio.get_running_loop().create_task(self._read())
        target = await self.call("Target.createTarget", {"url": "about:blank"}, page=False)
        attached = await self.call(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, page=False
        )
        self.session = attached["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            await self.call(f"{domain}.enable")
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.reader is not None:
            self.reader.cancel()
        if self.http is not None:
            await self.http.close()
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    async def _read(self) -> None:
        assert self.ws is not None
        async for msg in self.ws:
            if msg.type is not aiohttp.WSMsgType.TEXT:
                continue
            data = msg.json()
            waiter = self.pending.pop(data["id"], None) if "id" in data else None
            if waiter is not None and not waiter.done():
                waiter.set_result(data)
            elif "method" in data:
                self.events.append(data)
        for waiter in self.pending.values():  # the browser went away
            if not waiter.done():
                waiter.set_exception(BrowserError("chromium closed the DevTools connection"))

    async def call(self, method: str, params: dict[str, Any] | None = None, *, page: bool = True) -> Any:
        """One protocol call (on the attached page unless ``page`` is False); its result."""
        assert self.ws is not None
        ident = next(self.ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if page:
            message["sessionId"] = self.session
        waiter = self.pending[ident] = asyncio.get_running_loop().create_future()
        await self.ws.send_json(message)
        async with asyncio.timeout(HANG):
            answer = await waiter
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    async def navigate(self, url: str) -> None:
        """Open ``url`` and wait for its load event."""
        seen = len(self.events)
        result = await self.call("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise BrowserError(f"navigating to {url}: {result['errorText']}")
        async with asyncio.timeout(HANG):
            while not any(e["method"] == "Page.loadEventFired" for e in self.events[seen:]):
                await asyncio.sleep(POLL_SECS)

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def until(self, expression: str, what: str) -> None:
        """Wait until ``expression`` is true on the page (``what`` names it if it never is)."""
        try:
            async with asyncio.timeout(HANG):
                while not await self.evaluate(expression):
                    await asyncio.sleep(POLL_SECS)
        except TimeoutError:
            raise BrowserError(f"the page never showed {what}") from None

    def errors(self) -> list[str]:
        """Uncaught exceptions, console errors and the browser's own error entries (a failed load) so far."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails']}")
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(
                    f"console.{p['type']}: {[a.get('value', a.get('description')) for a in p['args']]}"
                )
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(f"log: {p['entry'].get('text')} ({p['entry'].get('url', '')})")
        return out

    async def screenshot(self, path: Path) -> bytes:
        """A PNG of the whole page, written to ``path``."""
        shot = await self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        png = base64.b64decode(shot["data"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
        return png
