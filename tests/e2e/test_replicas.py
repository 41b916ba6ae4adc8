"""End to end: ``replicas = 2`` on a real llama-server with one slot per engine. The model's second engine starts
only when the first's slot is taken, both are listed by ``/api/ps`` and ``blazar ps``, and a conversation pinned
with ``x-blazar-session`` goes back to the engine that holds its KV cache, not to the idle one the choice would
otherwise take."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import HANG, Assets, Daemon, children_named, cleanup, make_daemon, provision, wait_for

pytestmark = pytest.mark.e2e

CONFIG = '[models."smollm2:latest"]\nparallel = 1\nreplicas = 2\n'


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory, assets: Assets) -> Iterator[Daemon]:
    daemon = provision(make_daemon(tmp_path_factory.mktemp("replicas"), CONFIG), assets)
    daemon.start()
    yield daemon
    cleanup(daemon)


def body(stream: bool, max_tokens: int) -> dict[str, Any]:
    return {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "Tell me about the sea."}],
        "max_tokens": max_tokens,
        "ignore_eos": True,  # the test decides how long a held answer runs: long past what it does meanwhile
        "stream": stream,
    }


def instances(d: Daemon) -> dict[int, dict[str, Any]]:
    models = httpx.get(d.url + "/api/ps", timeout=HANG).json()["models"]
    return {m["replica"]: m for m in models if m["engine"] == "chat"}


def test_a_second_engine_starts_when_the_first_is_busy_and_a_session_stays_on_its_own(d: Daemon) -> None:
    url = d.url + "/v1/chat/completions"
    with httpx.stream("POST", url, json=body(True, 900), timeout=HANG) as held:
        lines = held.iter_lines()  # kept: a generator dropped would close the stream
        next(lines)
        assert {n: m["in_flight"] for n, m in instances(d).items()} == {0: 1}
        r = httpx.post(url, json=body(False, 4), headers={"x-blazar-session": "s2"}, timeout=HANG)
        assert r.status_code == 200, r.text
        running = instances(d)
        assert sorted(running) == [0, 1] and running[1]["name"] == "smollm2:latest"
        assert len(children_named(d.proc.pid if d.proc else 0, "llama-server")) == 2
    wait_for(lambda: instances(d)[0]["in_flight"] == 0, HANG, "the held stream's end")
    # both idle: a request without a session would take the first; the session's goes to the second, its own
    with httpx.stream(
        "POST", url, json=body(True, 900), headers={"x-blazar-session": "s2"}, timeout=HANG
    ) as s:
        lines = s.iter_lines()
        next(lines)
        assert {n: m["in_flight"] for n, m in instances(d).items()} == {0: 0, 1: 1}
    shown = d.cli("ps").stdout
    assert "smollm2:latest#1" in shown and "smollm2:latest " in shown, shown
