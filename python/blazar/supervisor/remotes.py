"""Remotes at run time: each ``[[remotes]]`` entry's pooled connections, its health, the ``[[pools]]`` over them,
and which model names route there.

A request for ``name:model`` whose ``name`` is a remote's goes to that remote as ``model``; a pool's name goes to
one of its remotes (``Pool.ranked``: the policy, pure apart from the clock); every other name is the catalog's. A remote's connections are the same native links as an engine child's (``supervisor.links``), so
its streams are decoded and translated without a Python frame per read. Serving a request there is
``blazar.gateway.remote``'s; this module starts nothing and knows no dialect.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
import time
from urllib.parse import urlsplit

import aiohttp

from blazar.config.model import PoolConfig, RemoteConfig, normalize_model_name
from blazar.config.remotes import host_of
from blazar.supervisor.links import Links

log = logging.getLogger("blazar.remote")

LISTING = "x-blazar-listing"
"""Sent with a remote's ``/models`` request: a Blazar that gets it lists its own models only, so two daemons that
are each other's remote (or one that is its own) never ask each other in a loop."""
HEALTH_SECS = 2.0
"""How often each pooled remote's ``/models`` is asked whether it is up: a host that went down is skipped within
that, and one that comes back is used again within that."""
HEALTH_TIMEOUT_SECS = 3.0


class Remote:
    """One remote: where it is (``where``, host:port for messages; never its key) and its connections."""

    __slots__ = (
        "auth",
        "base_path",
        "down_since",
        "links",
        "listed",
        "name",
        "outstanding",
        "parallel",
        "secret",
        "tls",
        "url",
        "where",
        "why_down",
    )

    def __init__(self, cfg: RemoteConfig) -> None:
        parts = urlsplit(cfg.url)
        assert parts.hostname is not None  # the config checked it
        self.name = cfg.name
        self.where = host_of(cfg.url)
        self.base_path = parts.path.rstrip("/")
        tls = None
        if parts.scheme == "https":
            tls = ssl.create_default_context(cafile=str(cfg.ca_file) if cfg.ca_file is not None else None)
        self.links = Links((parts.hostname, parts.port or (443 if tls else 80)), cfg.api_key, tls)
        self.parallel = cfg.parallel
        self.url = cfg.url
        self.tls = tls
        self.auth = {"authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        # its API key: sent upstream, and cut out of whatever the remote says (scrub, the translators' redact)
        self.secret = cfg.api_key or None
        self.listed: tuple[float, list[str]] | None = None  # (when, model ids) its /models last said
        self.outstanding = 0
        """Requests of its pools in flight there now (``Pool.ranked`` reads it; ``gateway.remote`` counts)."""
        self.down_since: float | None = None
        """Its breaker: when it was last found unreachable (a pool skips it until its health check answers)."""
        self.why_down = ""

    def failed(self, why: str) -> None:
        """It could not be reached, or answered 502/503 before any header: open its breaker."""
        if self.down_since is None:
            self.down_since = time.monotonic()
        self.why_down = why

    def answered(self) -> None:
        """It answered (a request's head, or its health check): close its breaker."""
        self.down_since = None
        self.why_down = ""

    @property
    def up(self) -> bool:
        return self.down_since is None

    def path(self, engine_path: str) -> str:
        """The remote's path for an engine path (``/v1/chat/completions`` -> the URL's path + ``/chat/completions``)."""
        return self.base_path + engine_path.removeprefix("/v1")

    def scrub(self, text: str) -> str:
        """``text`` (a remote's own message) with its API key cut out: a server may quote what it was sent."""
        return text.replace(self.secret, "<the remote's api_key>") if self.secret else text

    @property
    def admission_key(self) -> str:
        """The queue its requests share (a remote's capacity is its own, whatever the model)."""
        return f"@remote/{self.name}"  # never a model name, so never a model's queue


def _affinity(key: bytes, host: str) -> bytes:
    """Rendezvous hashing: each host's score for a conversation; the highest is its preferred host, and a host
    that leaves or joins moves only its own share of conversations."""
    return hashlib.blake2b(key + b"\0" + host.encode(), digest_size=8).digest()


class Pool:
    """One ``[[pools]]`` entry: its model name served by any of its hosts (``PoolConfig``'s docstring)."""

    __slots__ = ("bound", "hosts", "model", "name", "parallel", "prefix")

    def __init__(self, cfg: PoolConfig, remotes: dict[str, Remote]) -> None:
        self.name = cfg.name
        self.model = cfg.model
        self.hosts = tuple(remotes[r] for r in cfg.remotes)
        self.prefix = cfg.policy == "prefix"
        self.bound = cfg.affinity_bound
        self.parallel = sum(h.parallel for h in self.hosts)

    @property
    def admission_key(self) -> str:
        """The queue its requests share: every host's capacity together."""
        return f"@pool/{self.name}"

    def ranked(self, key: bytes | None) -> list[Remote]:
        """The hosts in the order to try them: those up before those down (all of them when none is up). First the
        host ``key`` (a conversation's first messages) hashes to, while it has at most ``bound`` more requests in
        flight than the least loaded host up; else the least loaded; then the rest, least loaded first. With no
        key (or the ``least`` policy) the least loaded first, ties in a fixed order."""
        up = [h for h in self.hosts if h.up] or list(self.hosts)
        down = [h for h in self.hosts if h not in up]
        if key is not None and self.prefix:
            up.sort(key=lambda h: _affinity(key, h.name), reverse=True)
            least = min(h.outstanding for h in up)
            if up[0].outstanding <= least + self.bound:
                return [up[0], *sorted(up[1:], key=lambda h: h.outstanding), *down]
        return [*sorted(up, key=lambda h: h.outstanding), *down]  # stable: ties keep the hash's order


Target = Remote | Pool
"""Where a remote-served name goes: one remote, or a pool of them."""


class Remotes:
    def __init__(self, configs: tuple[RemoteConfig, ...], pools: tuple[PoolConfig, ...] = ()) -> None:
        self.by_name = {c.name: Remote(c) for c in configs}
        self.pools = {p.name: Pool(p, self.by_name) for p in pools}

    def route(self, model: str) -> tuple[Target, str] | None:
        """(the remote or pool, the model to ask it for) when ``model`` is ``remote:model`` or a pool's name, else
        None."""
        if not self.by_name:
            return None
        if self.pools:
            try:
                pool = self.pools.get(normalize_model_name(model))
            except ValueError:
                pool = None
            if pool is not None:
                return pool, pool.model
        prefix, sep, rest = model.partition(":")
        remote = self.by_name.get(prefix) if sep and rest else None  # the name as given: nothing trimmed
        return (remote, rest) if remote is not None else None

    def pooled(self) -> list[Remote]:
        """The remotes some pool serves from: the ones the health check watches."""
        seen = {h.name: h for p in self.pools.values() for h in p.hosts}
        return list(seen.values())

    async def watch(self, http: aiohttp.ClientSession) -> None:
        """The pools' health checks, until cancelled: each pooled remote's ``/models`` every ``HEALTH_SECS``; an
        answer (any status under 500) closes its breaker, no answer opens it."""
        hosts = self.pooled()
        while hosts:
            try:
                await asyncio.gather(*(_check(http, h) for h in hosts))
            except Exception:  # a check that failed in an unforeseen way must not end the others for good
                log.exception("the pools' health check failed; trying again in %gs", HEALTH_SECS)
            await asyncio.sleep(HEALTH_SECS)

    def close(self) -> None:
        for remote in self.by_name.values():
            remote.links.close()


async def _check(http: aiohttp.ClientSession, host: Remote) -> None:
    was_up = host.up
    try:
        async with http.get(
            host.url + "/models",
            headers={**host.auth, LISTING: "1"},
            ssl=host.tls if host.tls is not None else True,
            timeout=aiohttp.ClientTimeout(total=HEALTH_TIMEOUT_SECS),
        ) as r:
            await r.read()
            status = r.status
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        host.failed(host.scrub(str(e)) or type(e).__name__)
    else:
        if status < 500:
            host.answered()
        else:
            host.failed(f"its /models answered HTTP {status}")
    if was_up != host.up:
        if host.up:
            log.info(
                "remote '%s' (%s) answers its health check again: back in its pools", host.name, host.where
            )
        else:
            log.warning(
                "remote '%s' (%s) is down (%s): its pools skip it", host.name, host.where, host.why_down
            )
