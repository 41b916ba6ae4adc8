"""One request's life on a local engine: claimed, admitted, its engine readied, retried once, ended.

``Exchange.claim`` routes the request and checks the key's scope and quotas (``routing``); ``run`` admits it
(``Gate.admit``), picks the instance of a model with replicas (``supervisor.replicas``), readies the engine
(``ready_child``), runs the handler's ``work`` on it, runs it once more on a
fresh engine when the first was wedged or stopped before it answered (``once_more_if_wedged``), and ends it
(``after``: a keep_alive 0 unload) however it ends. Charging, the audit line and freeing the key's lease happen in
``Gate.finish`` when the HTTP exchange ends. Handlers (chat, embeddings, token counts, infill, transcriptions)
write only their ``work``; none types this sequence again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from blazar.dialects.canonical import CanonicalRequest
from blazar.gateway.http import Request
from blazar.gateway.routing import claim, claim_local, route_target, wrong_kind
from blazar.paths import child_key
from blazar.supervisor import Child, Supervisor
from blazar.supervisor.placement import Placement
from blazar.supervisor.signals import EngineStopped, EngineWedged

T = TypeVar("T")
Work = Callable[[Child, int], Awaitable[T]]
"""A handler's part: given the ready engine and its load time in ns (0: it was running), the answer."""

log = logging.getLogger("blazar.exchange")

LOAD_REPORT_NS = 100_000_000
"""load_duration is reported when the engine load took over 100 ms."""


@dataclass(slots=True)
class Exchange:
    """A request claimed for one local engine: ``name`` the catalog model, ``key`` its engine's, ``slots`` one
    engine's, ``replicas`` how many engines of it may run (admission shares out ``slots`` times that)."""

    sup: Supervisor
    req: Request
    canon: CanonicalRequest
    name: str
    key: str
    slots: int
    replicas: int = 1

    @classmethod
    def _of(cls, sup: Supervisor, req: Request, canon: CanonicalRequest, placed: Placement) -> Exchange:
        return cls(sup, req, canon, placed.name, placed.key, placed.slots, placed.replicas)

    @classmethod
    def claim(
        cls, sup: Supervisor, req: Request, canon: CanonicalRequest, *, remote_checked: bool
    ) -> Exchange:
        """Route ``canon`` and check the key's scope and quotas for it. ``remote_checked``: the caller already
        asked ``claim_remote`` (chat, embeddings); else a ``remote:`` name is refused with the feature's name."""
        return cls._of(sup, req, canon, (claim_local if remote_checked else claim)(sup, req, canon))

    @classmethod
    def internal(cls, sup: Supervisor, req: Request, canon: CanonicalRequest) -> Exchange:
        """A request Blazar makes for its own ends while serving ``req`` (the semantic cache's embedding): routed,
        not claimed (the key asked for the request that needs it, not for this one)."""
        return cls._of(sup, req, canon, route_target(sup, canon))

    async def run(self, work: Work[T]) -> T:
        """``work`` admitted, on a ready engine, once more if that engine wedged or was stopped first."""
        with await self.req.gate.admit(self.req, self.key, self.slots * self.replicas, self.canon):
            return await self.unadmitted(work)

    async def unadmitted(self, work: Work[T]) -> T:
        """``run`` without admission: for what takes no slot of its own (counting a prompt's tokens)."""
        return await once_more_if_wedged(lambda: self._on_engine(work))

    async def _on_engine(self, work: Work[T]) -> T:
        if self.replicas == 1:
            return await self._on_instance(work, 0)
        pinned = self.req.gate.session_engine(self.req)
        with self.sup.instances.take(self.key, self.slots, self.replicas, self.sup.children, pinned) as n:
            return await self._on_instance(work, n)

    async def _on_instance(self, work: Work[T], replica: int) -> T:
        child, load_ns = await ready_child(self.sup, self.req, self.canon, replica)
        try:  # from here every end runs ``after``: an unload waiting for this request must not wait in vain
            return await work(child, load_ns)
        finally:
            after(self.sup, child, self.req)

    def keep(self, child: Child) -> None:
        """The request's keep_alive applies to ``child`` (once the request is known to be served)."""
        keep(child, self.canon, self.req)


async def ready_child(
    sup: Supervisor, req: Request, canon: CanonicalRequest, replica: int = 0
) -> tuple[Child, int]:
    """The child for ``canon`` (its model's ``replica``-th instance) and the load time in ns when this request had
    to start it (else 0)."""
    t0 = time.perf_counter()
    child = await req.waiting(
        sup.ensure_ready(
            canon.model,
            embeddings=canon.kind == "embedding",
            num_ctx=canon.options_ctx,
            tokens=canon.late_chunking,
            replica=replica,
        )
    )
    waited = time.perf_counter() - t0
    transcribes = child.spec.can.transcription
    if transcribes != (canon.kind == "audio"):  # route_target refuses these before any load
        raise wrong_kind(child.model, transcribes)
    load_ns = int(waited * 1e9)
    return child, load_ns if load_ns > LOAD_REPORT_NS else 0


async def once_more_if_wedged(attempt: Callable[[], Awaitable[T]]) -> T:
    """``attempt()``; when its engine sent no response headers in time (it has been stopped), or was stopped on
    purpose before it answered (``EngineStopped``), nothing reached the client: once more on the fresh engine the
    supervisor starts. A second failure of the same kind is the client's 504 (503)."""
    try:
        return await attempt()
    except (EngineWedged, EngineStopped) as first:
        log.warning("%s; retrying the request once on a restarted engine", first.what)
        try:
            return await attempt()
        except (EngineWedged, EngineStopped):
            raise first.again() from None


def keep(child: Child, canon: CanonicalRequest, req: Request) -> None:
    """Apply the request's keep_alive as it starts (``KeepAlive.ask``: the latest by arrival wins; 0 unloads the
    model once its requests in flight have finished, in ``after``)."""
    child.keep.ask(canon.keep_alive, req.t0)


def after(sup: Supervisor, child: Child, req: Request) -> None:
    """A request on ``child`` ended: unload it if a keep_alive 0 asked for that, no other request runs on it and
    none waits for it (that one's keep_alive is the latest), in the background (the answer does not wait for the
    engine to stop), checked again under the key's lock. For a chat engine, the model's embedding engines, when
    idle, go too: an unloaded model is unloaded whole, as in Ollama."""
    if not child.keep.unload_when_idle:  # every request but a keep_alive 0 one stops here
        return
    admission = req.gate.admission

    def unloadable(c: Child) -> bool:
        return c.keep.unload_when_idle and c.inflight == 0 and admission.waiting(c.key) == 0

    if not unloadable(child):
        return
    targets = [child]
    # the chat engine takes the model's embedding engines with it; an embedding engine's own keep_alive 0 unloads
    # only itself
    if child.key == child.model:
        for sibling in (sup.children.get(child_key(child.model, True, tokens)) for tokens in (False, True)):
            if sibling is not None:
                sibling.keep.unload_when_idle = True
                targets.append(sibling)
    for c in targets:
        task = asyncio.get_running_loop().create_task(
            sup.evict(c.key, "keep_alive 0", only=c, still=unloadable)
        )
        _UNLOADS.add(task)
        task.add_done_callback(_UNLOADS.discard)


_UNLOADS: set[asyncio.Task[bool]] = set()
"""Unloads under way (a task nobody awaits must be referenced until it ends)."""


async def unloads_done(timeout: float) -> None:
    """Wait (at most ``timeout`` seconds) for the keep_alive 0 unloads under way: at shutdown, an engine such an
    unload took out of the supervisor's table is stopped by that unload or by nobody."""
    if _UNLOADS:
        await asyncio.wait(list(_UNLOADS), timeout=timeout)
