"""End to end: weighted fair share across keys on one saturated engine slot, measured.

Each key keeps 16 requests in flight so that its queue never empties while its clients turn round, even on a
busy 2-core machine: WFQ shares a slot only between keys that are both waiting."""

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
TOTAL = 320
CLIENTS_PER_KEY = 16
HANG = 3600
"""A bound on a hang only, never on the machine's speed: on a 2-core machine under a CPU-heavy job the 320 answers
took over 300 s (about one a second), which the old 300 s join cut short, so the ratio was measured on part of a
run and the daemon stopped under clients still sending."""


def test_weights_1_and_3_get_service_within_10_percent_of_1_to_3(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(CONFIG)
    headers = {k: {"authorization": f"Bearer sk-{k}-0123456789abcdef"} for k in ("light", "heavy")}
    assert httpx.post(
        d.url + "/v1/chat/completions", json=BODY, headers=headers["light"], timeout=60
    ).is_success
    # (key, client index) per answer, in the order the answers came back.
    order: list[tuple[str, int]] = []
    lock = threading.Lock()
    stop = threading.Event()
    start = threading.Barrier(CLIENTS_PER_KEY * 2)

    def client(key: str, n: int) -> None:
        with httpx.Client(timeout=HANG) as c:
            start.wait(HANG)
            while not stop.is_set():
                r = c.post(d.url + "/v1/chat/completions", json=BODY, headers=headers[key])
                assert r.status_code == 200, r.text
                with lock:
                    order.append((key, n))
                    if len(order) >= TOTAL:
                        stop.set()

    clients = [(k, n) for n in range(CLIENTS_PER_KEY) for k in ("heavy", "light")]
    threads = [threading.Thread(target=client, args=c) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG)
    # every client ended (the answers it waits on came): the measure is over the whole run, however slow it was
    assert not any(t.is_alive() for t in threads), f"clients still waiting after {HANG}s: a hang"
    # Measure only while the slot is saturated by both keys: from the moment every client has had an answer (so
    # each is in its loop, sending again as soon as it is answered) until the first client stops sending.
    first = max(order.index(c) for c in clients)
    window = [k for k, _ in order[first + 1 : TOTAL]]
    assert len(window) >= 150, f"only {len(window)} answers after every client was running; raise TOTAL"
    light, heavy = window.count("light"), window.count("heavy")
    ratio = heavy / light
    assert 2.7 <= ratio <= 3.3, f"heavy:light = {heavy}:{light} = {ratio:.2f}, want 3 within 10%"
