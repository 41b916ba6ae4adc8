"""The status page (``/ui``) in a real headless Chromium (Debian's, from the test assets, driven through the
DevTools protocol: tests/browser.py) against ``blazar serve`` with the real llama-server and SmolLM2: the page
loads and goes live with no console error, a chat shows up among its recent requests with its time to first token
and its engine as ready, and a screenshot is written to ``test-artifacts/status-page.png`` (or under
``$BLAZAR_TEST_ARTIFACTS``)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest

from tests.browser import Browser
from tests.conftest import Daemon, manifest_asset

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def chromium() -> Path:
    """The launcher of Debian's headless Chromium."""
    return manifest_asset("chromium", "Chromium")


def artifacts() -> Path:
    return Path(os.environ.get("BLAZAR_TEST_ARTIFACTS") or ROOT / "test-artifacts")


def chat(url: str) -> httpx.Response:
    body = {
        "model": "smollm2",
        "max_tokens": 8,
        "stream": True,
        "messages": [{"role": "user", "content": "Say hi."}],
    }
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=600)


def test_the_page_goes_live_and_shows_a_chat_with_no_console_error(
    daemon: Daemon, chromium: Path, tmp_path: Path
) -> None:
    async def run() -> None:
        async with Browser(chromium, tmp_path / "profile") as b:
            await b.navigate(daemon.url + "/ui")
            assert await b.evaluate("document.title") == "Blazar status"
            await b.until("document.getElementById('conn').textContent === 'live'", "the stream live")
            await b.until(
                "document.getElementById('models').textContent.includes('smollm2:latest')",
                "the catalog's model",
            )
            r = await asyncio.to_thread(chat, daemon.url)
            assert r.status_code == 200, r.text
            await b.until(
                "[...document.querySelectorAll('#requests tbody tr')].some(tr =>"
                " tr.textContent.includes('smollm2:latest') && tr.textContent.includes('/v1/chat/completions')"
                " && tr.children[1].textContent === '200' && tr.children[5].textContent.endsWith(' ms'))",
                "the chat among the recent requests, with its time to first token",
            )
            await b.until(
                "[...document.querySelectorAll('#engines tbody tr')].some(tr =>"
                " tr.children[0].textContent === 'smollm2:latest' && tr.children[2].textContent === 'ready')",
                "the model's engine ready",
            )
            png = await b.screenshot(artifacts() / "status-page.png")
            assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
            assert b.errors() == []

    asyncio.run(run())
