"""Engines that free their model while idle (``idle_sleep_secs``, llama-server's ``--sleep-idle-seconds``).

After ``spec.sleep_secs`` without a task, llama-server drops its weights and KV cache and keeps its process and
socket; ``/health`` and ``/props`` still answer (``is_sleeping``) without waking it, and any task wakes it. This
module owns what the supervisor does around that:

- ``wake``: before a request reaches an engine that may be asleep, one ``GET /slots`` (a task) wakes it and
  returns once the model is back, within ``child_start_timeout_secs``. The reload so counts as the request's load
  time (Ollama's ``load_duration``), never against ``child_header_timeout_secs``, which would take a slow reload
  for a wedged engine.
- ``asleep``: whether it is asleep now (``/props``, which does not wake it), for the session bank (an asleep
  engine holds no prompt to save) and ``/api/ps``.
- ``keep_awake``: a request's Ollama ``keep_alive`` longer than the sleep (or negative: forever) asks for the model
  to stay loaded, so the idle loop pings such an engine before it would fall asleep.

It never starts or stops a child.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

import aiohttp

if TYPE_CHECKING:
    from blazar.supervisor.child import Child

log = logging.getLogger("blazar.supervisor")

MARGIN_SECS = 1.0
"""An engine idle this close to its sleep is taken as possibly asleep (the two idle clocks start a little apart)."""
ASK_TIMEOUT_SECS = 5.0
"""Bound on a ``/props`` question or a keep-awake ping."""


def idle_secs(child: Child, now: float) -> float:
    """How long ``child`` has been without a request (or a keep-awake ping) as far as the supervisor knows."""
    return now - max(child.last_used, child.kept_awake)


def may_be_asleep(child: Child, now: float) -> bool:
    """Whether ``child`` may have freed its model: it sleeps when idle, has no request in flight, and has been
    idle for about its sleep time. False means surely awake; True is checked with ``asleep`` or ``wake``."""
    secs = child.spec.sleep_secs
    return secs > 0 and child.inflight == 0 and idle_secs(child, now) >= secs - MARGIN_SECS


async def asleep(child: Child) -> bool:
    """Whether ``child`` is asleep now (llama-server's ``/props`` ``is_sleeping``; asking does not wake it). An
    engine that cannot say is taken as awake."""
    if not may_be_asleep(child, time.monotonic()):
        return False
    try:
        props = await child.ask("/props", timeout=ASK_TIMEOUT_SECS)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
        return False
    return isinstance(props, dict) and props.get("is_sleeping") is True


def needs_wake(child: Child, now: float) -> bool:
    """Whether a request for ``child`` must wake it first: it may be asleep, or a wake-up is under way."""
    return may_be_asleep(child, now) or (child.waking is not None and not child.waking.done())


WAKE_CHECK_SECS = 5.0
"""While a wake-up waits for the model to come back, how often the engine's health check is asked whether it still
answers (a reload is slow; an engine that answers nothing at all, stopped or deadlocked, is wedged)."""


async def wake(child: Child, timeout: float) -> bool:
    """Wake ``child``, waiting until its model is back (at most ``timeout`` seconds); callers that arrive meanwhile
    share the one wake-up. The caller holds a lease on ``child`` meanwhile, so the idle loop leaves it alone.
    False: it answered neither the wake-up nor its health check (``WAKE_CHECK_SECS``), so it is wedged and the
    caller stops it. A wake-up that fails otherwise is left to the request, whose own failure handling applies."""
    if child.waking is None or child.waking.done():
        child.waking = asyncio.get_running_loop().create_task(_wake(child, timeout))
    return await asyncio.shield(child.waking)


def _no_slots(child: Child) -> bool:
    """An engine started with ``--no-slots`` (``extra_args``) answers ``/slots`` with 501: there is no wake-up
    to ask for (its next request wakes it) and no ping to keep it awake."""
    return "--no-slots" in child.spec.argv_template


async def _wake(child: Child, timeout: float) -> bool:
    if _no_slots(child):
        return True
    t0 = time.monotonic()
    asked = asyncio.ensure_future(child.ask("/slots", timeout=timeout))
    try:
        while not (await asyncio.wait({asked}, timeout=WAKE_CHECK_SECS))[0]:
            # asleep or reloading, it still answers /health (and the wake-up may have come in meanwhile)
            if not await child.responsive(any_answer=True) and not asked.done():
                log.warning(
                    "waking %s: it answers neither the wake-up nor its health check, so it is wedged",
                    child.key,
                )
                return False
        asked.result()
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
        log.warning(
            "waking %s failed (%s); the request goes to it as it is", child.key, str(e) or type(e).__name__
        )
        return True
    finally:
        asked.cancel()  # a no-op once it is done
    child.kept_awake = time.monotonic()
    took = child.kept_awake - t0
    if took > 0.05:
        log.info("%s woke from its idle sleep in %.2fs", child.key, took)
    return True


def wants_awake(child: Child) -> bool:
    """Whether a request asked for ``child`` to stay loaded past its sleep: an Ollama ``keep_alive`` (not the
    model's own default) that is negative (forever) or longer than ``idle_sleep_secs``."""
    secs = child.spec.sleep_secs
    kept = child.keep.asked()
    if secs <= 0 or kept is None or _no_slots(child):
        return False
    return kept < 0 or kept > secs


async def keep_awake(child: Child) -> None:
    """Ping ``child`` (a ``/slots`` task resets its idle clock) when a request asked for it to stay loaded and it
    has been idle for half its sleep time."""
    now = time.monotonic()
    if not wants_awake(child) or child.inflight > 0 or idle_secs(child, now) < child.spec.sleep_secs / 2:
        return
    try:
        await child.ask("/slots", timeout=ASK_TIMEOUT_SECS)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
        log.warning("keeping %s awake failed: %s", child.key, str(e) or type(e).__name__)
        return
    child.kept_awake = now
