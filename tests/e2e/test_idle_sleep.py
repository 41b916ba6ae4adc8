"""End to end: ``idle_sleep_secs`` on a real llama-server. Idle for that long, the engine frees its weights and
KV cache (its memory falls) while its process stays; ``/api/ps`` says it is asleep; the next request wakes the
same process and reports the reload as Ollama's ``load_duration``. An Ollama ``keep_alive`` longer than the sleep
keeps it awake; an engine stopped while asleep is not woken to save a session bank it no longer holds."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import HANG, Daemon, wait_for

pytestmark = pytest.mark.e2e

SLEEPY = "idle_sleep_secs = 2\n"
KEPT_AWAKE = 'idle_sleep_secs = 6\n[models."smollm2:latest"]\nextra_args = ["--ignore-eos"]\n'
"""A sleep long enough that the keep-awake ping (due at half of it, looked for every quarter) is 1.5 s early
even on a loaded machine; an engine whose answers all run to their num_predict."""


def fell_asleep(d: Daemon) -> int:
    """How often the engine has freed its model, from its own log (a look at /api/ps could miss a short nap)."""
    return (
        (d.data_dir / "logs" / "smollm2--latest.log").read_text().count("server is entering sleeping state")
    )


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def running(d: Daemon) -> dict[str, Any]:
    r = httpx.get(d.url + "/api/ps", timeout=30)
    assert r.status_code == 200, r.text
    [model] = r.json()["models"]
    assert isinstance(model, dict)
    return model


def generate(d: Daemon, **extra: Any) -> dict[str, Any]:
    body = {"model": "smollm2", "prompt": "Say hi", "stream": False, "options": {"num_predict": 2}, **extra}
    r = httpx.post(d.url + "/api/generate", json=body, timeout=HANG)  # 200 tokens beside stress-ng: minutes
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def test_an_idle_engine_frees_its_model_and_the_next_request_wakes_it(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(SLEEPY)
    generate(d)
    [pid] = d.child_pids()
    awake = rss_kib(pid)
    assert running(d)["asleep"] is False
    wait_for(lambda: running(d)["asleep"] is True, HANG, "the engine to fall asleep")
    assert rss_kib(pid) < awake - 40_000, (awake, rss_kib(pid))  # the weights and KV cache went
    assert running(d)["asleep"] is True  # asking does not wake it
    assert "(asleep: its model reloads on the next request)" in d.cli("ps").stdout

    again = generate(d)
    assert d.child_pids() == [pid]  # the same process, not a restart
    assert again["load_duration"] > 100_000_000  # the reload is the request's load time, as in Ollama
    assert running(d)["asleep"] is False
    assert "smollm2:latest woke from its idle sleep" in d.log.read_text()

    # stopped while asleep: no wake-up to save a bank, and nothing banked (its KV cache went with the sleep)
    wait_for(lambda: running(d)["asleep"] is True, HANG, "the engine to fall asleep again")
    r = httpx.post(d.url + "/api/generate", json={"model": "smollm2", "keep_alive": 0}, timeout=60)
    assert r.status_code == 200, r.text
    wait_for(lambda: not d.child_pids(), HANG, "the engine to stop")
    assert not list((d.data_dir / "sessions").glob("*/_auto-*.bin"))
    assert d.log.read_text().count("woke from its idle sleep") == 1


def test_a_keep_alive_longer_than_the_sleep_keeps_the_model_loaded(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(KEPT_AWAKE)
    # the time passing is the point: 2.5 times the sleep, then twice it, in which it would have slept without
    # the pings; a slower machine only makes that time longer
    generate(d, keep_alive=-1)
    time.sleep(15)
    assert running(d)["asleep"] is False and fell_asleep(d) == 0
    generate(d, keep_alive="30s")
    time.sleep(12)
    assert running(d)["asleep"] is False and fell_asleep(d) == 0
    # a request without keep_alive puts the default back, and the engine sleeps again
    generate(d)
    wait_for(lambda: running(d)["asleep"] is True, HANG, "the engine to fall asleep")

    # an unload asked for while an earlier request wakes the engine is kept: the latest to arrive wins
    assert len(d.child_pids()) == 1
    waking = threading.Thread(target=generate, args=(d,), kwargs={"options": {"num_predict": 200}})
    waking.start()
    # it holds the engine (so ps takes it for awake) while it wakes it and runs its 200 tokens
    wait_for(lambda: running(d)["asleep"] is False, HANG, "the request to be waking the engine")
    r = httpx.post(d.url + "/api/generate", json={"model": "smollm2", "keep_alive": 0}, timeout=60)
    assert r.status_code == 200 and r.json()["done_reason"] == "unload", r.text
    assert len(d.child_pids()) == 1  # not before the waking request ended
    waking.join(300)
    wait_for(lambda: not d.child_pids(), HANG, "the engine to stop once the waking request ended")
    assert "smollm2:latest woke from its idle sleep" in d.log.read_text()


def test_an_asleep_engine_that_answers_nothing_is_replaced_within_seconds(daemon_factory: object) -> None:
    """A stopped (SIGSTOP) engine asleep: the wake-up would wait child_start_timeout_secs (a reload can be slow),
    but its health check, which an asleep or reloading engine answers, gets nothing either, so it is stopped as
    wedged within about WAKE_CHECK_SECS and the request runs on a fresh engine."""
    import contextlib
    import os
    import signal

    from blazar.supervisor.sleep import WAKE_CHECK_SECS

    assert callable(daemon_factory)
    d: Daemon = daemon_factory(SLEEPY)
    generate(d)
    [pid] = d.child_pids()
    wait_for(lambda: running(d)["asleep"] is True, HANG, "the engine to fall asleep")
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        generate(d)
        took = time.monotonic() - t0
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed as wedged, as it should be
            os.kill(pid, signal.SIGCONT)
    assert took < WAKE_CHECK_SECS + 20, took  # not child_start_timeout_secs (120 s)
    assert pid not in d.child_pids()
    said = d.log.read_text()
    assert (
        "waking smollm2:latest: it answers neither the wake-up nor its health check, so it is wedged" in said
    )
