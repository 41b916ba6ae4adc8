"""End to end: weighted fair share across keys on one saturated engine slot, measured."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.conftest import Daemon

pytestmark = pytest.mark.e2e

CONFIG = """
parallel = 1
queue_wait_secs = 300

[[keys]]
name = "light"
secret = "sk-light-0123456789abcdef"
weight = 1.0

[[keys]]
name = "heavy"
secret = "sk-heavy-0123456789abcdef"
weight = 3.0
"""
BODY = {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
TOTAL = 200
CLIENTS_PER_KEY = 6


def test_weights_1_and_3_get_service_within_10_percent_of_1_to_3(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(CONFIG)
    headers = {k: {"authorization": f"Bearer sk-{k}-0123456789abcdef"} for k in ("light", "heavy")}
    assert httpx.post(
        d.url + "/v1/chat/completions", json=BODY, headers=headers["light"], timeout=60
    ).is_success
    order: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(key: str) -> None:
        with httpx.Client(timeout=300) as c:
            while not stop.is_set():
                r = c.post(d.url + "/v1/chat/completions", json=BODY, headers=headers[key])
                assert r.status_code == 200, r.text
                with lock:
                    order.append(key)
                    if len(order) >= TOTAL:
                        stop.set()

    threads = [
        threading.Thread(target=client, args=(k,)) for k in ("light", "heavy") for _ in range(CLIENTS_PER_KEY)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    # Skip the ramp-up (clients still arriving) and the tail (clients leaving): the middle is saturated.
    window = order[CLIENTS_PER_KEY * 2 : TOTAL - CLIENTS_PER_KEY * 2]
    light, heavy = window.count("light"), window.count("heavy")
    ratio = heavy / light
    assert 2.7 <= ratio <= 3.3, f"heavy:light = {heavy}:{light} = {ratio:.2f}, want 3 within 10%"
