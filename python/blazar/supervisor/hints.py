"""Cache hints: how much of each engine's prompt work its prompt cache saves, and how many speculative draft tokens
it accepts, from llama-server's Prometheus counters (``--metrics``).

Every ``engine_metrics_secs`` (60) the supervisor scrapes each running llama-server's ``/metrics`` (which does not
wake a sleeping one) and folds what changed since the last scrape into an exponentially weighted average, 0.7 of
the old value and 0.3 of the new sample:

- ``cache_hint``: cached prompt tokens / all prompt tokens (``llamacpp:prompt_tokens_cached_total`` against
  ``llamacpp:prompt_tokens_total``, which excludes the cached ones);
- ``spec_accept``: accepted / drafted speculative tokens (``llamacpp:spec_decode_num_accepted_tokens_total``,
  ``llamacpp:spec_decode_num_draft_tokens_total``), with ``lookup_cache`` or another draft source.

A period without traffic leaves the hints as they were. ``/api/ps`` and ``blazar ps`` show them. ``kv_use`` reads
the share of an engine's KV cache its running requests hold from its ``/slots`` (for the gateway's ``/metrics``).
This module owns the parsing and the arithmetic (pure) and the reads; it never starts or stops a child.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aiohttp

from blazar.supervisor.sleep import may_be_asleep

if TYPE_CHECKING:
    from blazar.supervisor.child import Child

log = logging.getLogger("blazar.supervisor")

KEEP = 0.7
"""The weight of the hint so far in each update; the new period's sample gets the rest."""
SCRAPE_TIMEOUT_SECS = 5.0

PROMPT = "llamacpp:prompt_tokens_total"
CACHED = "llamacpp:prompt_tokens_cached_total"
ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
DRAFTED = "llamacpp:spec_decode_num_draft_tokens_total"
COUNTERS = (PROMPT, CACHED, ACCEPTED, DRAFTED)


def parse(text: str, names: tuple[str, ...] = COUNTERS) -> dict[str, float]:
    """The series ``names`` (by default the counters this module reads), from Prometheus' text format (``name
    value`` lines; comments, labelled series and anything unreadable skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name in names:
            try:
                out[name] = float(rest.split()[0])
            except (IndexError, ValueError):
                continue
    return out


def _fold(old: float | None, sample: float) -> float:
    return sample if old is None else KEEP * old + (1 - KEEP) * sample


@dataclass(slots=True)
class CacheHints:
    """One engine's hints (None until it has served what they measure) and its counters at the last scrape."""

    cache_hint: float | None = None
    spec_accept: float | None = None
    last: dict[str, float] = field(default_factory=dict)

    def update(self, counters: dict[str, float]) -> None:
        """Fold in the change since the last scrape. A counter that went down (the engine reset it) counts from
        zero."""
        delta = {}
        for name in COUNTERS:
            now, before = counters.get(name, 0.0), self.last.get(name, 0.0)
            delta[name] = now - before if now >= before else now
        self.last = {name: counters.get(name, 0.0) for name in COUNTERS}
        prompt = delta[PROMPT] + delta[CACHED]
        if prompt > 0:
            self.cache_hint = _fold(self.cache_hint, delta[CACHED] / prompt)
        if delta[DRAFTED] > 0:
            self.spec_accept = _fold(self.spec_accept, min(delta[ACCEPTED] / delta[DRAFTED], 1.0))


def scraped(child: Child) -> bool:
    """Whether ``child`` serves llama-server's ``/metrics``."""
    return "--metrics" in child.spec.argv_template


async def read_metrics(child: Child, names: tuple[str, ...], timeout: float) -> dict[str, float] | None:
    """The series ``names`` from ``child``'s ``/metrics`` now; None (logged at debug) when it cannot be read."""
    http = child.http
    if http is None or http.closed:
        return None
    try:
        async with http.get(
            child.base_url + "/metrics",
            headers=child.request_headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as r:
            if r.status != 200:
                raise aiohttp.ClientError(f"GET /metrics answered HTTP {r.status}")
            text = await r.text()
    except (aiohttp.ClientError, OSError, TimeoutError, UnicodeDecodeError) as e:
        log.debug("scraping the /metrics of %s failed: %s", child.key, e or type(e).__name__)
        return None
    return parse(text, names)


async def kv_use(child: Child, timeout: float) -> float | None:
    """The share of ``child``'s KV cache its running requests hold now, from llama-server's own ``/slots``: each
    processing slot's prompt and decoded tokens, over the context (one shared context of ``ctx_size`` when the slots
    share it, else the slots' own). None when the engine cannot say, and for one that may be asleep (``/slots``
    would wake it). Cells an idle slot keeps for its prompt cache are free to be reused, so they count as free,
    as vLLM's cache usage counts freed prefix blocks."""
    if may_be_asleep(child, time.monotonic()):
        return None
    try:
        slots = await child.ask("/slots", timeout=timeout)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
        log.debug("reading the /slots of %s failed: %s", child.key, e or type(e).__name__)
        return None
    if not isinstance(slots, list) or not slots or not all(isinstance(s, dict) for s in slots):
        return None
    used = 0
    for s in slots:
        if s.get("is_processing"):
            nxt = s.get("next_token")
            decoded = (
                nxt[0].get("n_decoded", 0)
                if isinstance(nxt, list) and nxt and isinstance(nxt[0], dict)
                else 0
            )
            used += int(s.get("n_prompt_tokens") or 0) + int(decoded or 0)
    own = [int(s.get("n_ctx") or 0) for s in slots]
    capacity = (child.spec.ctx_size or max(own)) if child.spec.kv_unified else sum(own)
    return min(used / capacity, 1.0) if capacity > 0 else None


async def scrape(child: Child) -> None:
    """Update ``child.hints`` from its ``/metrics``; a failure changes nothing."""
    counters = await read_metrics(child, COUNTERS, SCRAPE_TIMEOUT_SECS)
    if counters is not None:
        child.hints.update(counters)
