"""The child pool: one Child per model key, spawned on demand, reaped when dead, evicted when idle.

It owns the decision of when a child starts and stops (``ensure_ready``, ``idle_victims``, ``reap``); the
process mechanics live in ``child.py`` and routing in ``engines.lanes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import aiohttp

from blazar import tasks
from blazar.catalog import names
from blazar.catalog.loras import LoraRow, Loras
from blazar.catalog.models import Catalog, ModelRow
from blazar.config import Config
from blazar.engines import registry
from blazar.engines.argv import engine_environment
from blazar.engines.lanes import classify_unknown_arch, reroute_once, serving_lane
from blazar.engines.manifest import Manifest, load_manifest
from blazar.engines.registry import EngineRow
from blazar.errors import CatalogError, ChildError, EngineBusy, LaneError, ModelNotFound
from blazar.launch.compilers import compile_profile
from blazar.launch.settings import model_settings
from blazar.paths import DataDir, child_key, instance_key, replica_of
from blazar.store import Store
from blazar.supervisor import adapters, bank, hints, sleep
from blazar.supervisor.breaker import Breakers, EngineHeldBack
from blazar.supervisor.child import Child, State, log_tail, weights_id
from blazar.supervisor.keepalive import KeepAlive
from blazar.supervisor.links import ENGINE_KEEPALIVE_SECS
from blazar.supervisor.placement import Placements
from blazar.supervisor.remotes import Remotes, Target
from blazar.supervisor.replicas import Instances
from blazar.supervisor.sharing import Sharing
from blazar.supervisor.signals import STALLED, WEDGED

log = logging.getLogger("blazar.supervisor")

WEDGED_WAKING = "it answered neither a wake-up from its idle sleep nor its health check"

CATALOG_RECHECK_SECS = 1.0
"""A ready child answers requests without a catalog query for this long after the catalog last confirmed its
model, so a model removed by another process (``blazar rm``) is refused within about a second."""
DRAIN_POLL_SECS = 0.025
RETIRE_POLL_SECS = 0.25
RETIRE_WAIT_SECS = 600.0
"""How long a retired engine (``Supervisor.retire_when_idle``) waits for its requests in flight before it is
stopped all the same."""


def wants_restart(child: Child, num_ctx: int | None) -> bool:
    """Whether a request asking for ``num_ctx`` tokens per slot needs ``child`` restarted: only for more context
    than it runs with, so a smaller num_ctx (served fine by a larger context) can never shrink an engine other
    requests share, and alternating values cannot make it restart on every request. A child already started for
    that num_ctx or a larger one and capped lower (by the model's trained context or the memory fit) is not
    restarted again, nor one that already runs with all the context its model was trained on: a restart would
    give it the same context."""
    per_slot = child.spec.ctx_per_slot
    if num_ctx is None or num_ctx <= per_slot:
        return False
    if child.num_ctx is not None and child.num_ctx > per_slot:
        return False  # started for a larger num_ctx than it got: any larger one is capped the same
    est = child.spec.estimate
    return est is None or per_slot < est.trained_ctx


def _manifest() -> Manifest | None:
    """The engine manifest, for re-routing; a broken manifest must not hide the engine's own failure."""
    try:
        return load_manifest()
    except Exception:
        log.exception("could not load the engine manifest while re-routing")
        return None


REPLICA_IDLE_SECS = 60.0
"""A model's extra engine instance (``name#1``, ...: started because every slot of the others was taken) stops
once idle this long, or at its keep-alive if that comes first: replicas go idle first, the model's first engine
stays for its keep-alive."""


def idle_victims(children: Iterable[Child], now: float, default_timeout: float) -> list[Child]:
    """Children with no request in flight whose idle time passed their keep-alive, or an extra replica's
    ``REPLICA_IDLE_SECS`` (pure; tested alone)."""
    out = []
    for c in children:
        if c.state is not State.READY or c.inflight > 0:
            continue
        limit = c.keep.limit(default_timeout)
        if limit is not None and replica_of(c.key)[1] > 0:
            limit = min(limit, REPLICA_IDLE_SECS)
        if limit is not None and now - c.last_used >= limit:
            out.append(c)
    return out


class Supervisor:
    def __init__(self, cfg: Config, data: DataDir, store: Store) -> None:
        self.cfg = cfg
        self.data = data
        self.store = store
        self.catalog = Catalog(store, data)
        self.loras = Loras(self.catalog)
        self.bad_adapters: dict[
            Path, str
        ] = {}  # adapter files an engine failed to load -> the engine's words
        self.children: dict[str, Child] = {}
        # engines start without Blazar's own environment and secrets (keys, remotes' keys)
        self.engine_env = engine_environment(
            [k.secret for k in cfg.keys] + [r.api_key or "" for r in cfg.remotes]
        )
        self._locks: dict[str, asyncio.Lock] = {}
        self._http: aiohttp.ClientSession | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._hinter: asyncio.Task[None] | None = None
        self.stopping = False  # stop_all has begun: an engine stopped under a request is not replaced for it
        self.breakers = Breakers()
        self.engine_events: dict[tuple[str, str], int] = {}  # (child key, event) -> count, for /metrics
        self.remotes = Remotes(cfg.remotes, cfg.pools)
        self.instances = Instances()  # which of a model's replicas a request runs on
        self._watcher: asyncio.Task[None] | None = None
        self.sharing = Sharing(cfg, self.catalog)  # names over one weights file share an engine
        self.placements = Placements(cfg, self.catalog, self.loras, self.sharing)  # where a name is served
        # out of service, stopped once their requests in flight finish (``retire_when_idle``)
        self.retiring: dict[Child, asyncio.Task[None]] = {}

    @property
    def http(self) -> aiohttp.ClientSession:
        if self._http is None:
            # llama-server (cpp-httplib) closes a keep-alive connection idle for 5 s; aiohttp keeps idle ones
            # for 15 s by default, so a request could go out on a connection the engine was closing.
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=ENGINE_KEEPALIVE_SECS)
            self._http = aiohttp.ClientSession(connector=connector)
        return self._http

    def remote_for(self, model: str) -> tuple[Target, str] | None:
        """(the remote or pool, its model) when ``model`` is ``remote:model`` for a ``[[remotes]]`` name, or a
        ``[[pools]]`` name, and the catalog
        has no model of that exact name (a local model always wins); else None. A name with a space or control
        character is refused (``names.check``, a 400) whether or not it names a remote: it would be passed on."""
        names.check(model)
        hit = self.remotes.route(model)
        if hit is None:
            return None
        try:
            local = self.catalog.find(names.normalize(model))
        except CatalogError:
            local = None
        return None if local is not None else hit

    def start_background(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._idle_loop())
        if self._hinter is None and self.cfg.engine_metrics_secs > 0:
            self._hinter = asyncio.get_running_loop().create_task(self._hint_loop())
        if self._watcher is None and self.remotes.pools:
            self._watcher = asyncio.get_running_loop().create_task(self.remotes.watch(self.http))

    async def ensure_ready(
        self,
        model_name: str,
        *,
        embeddings: bool = False,
        num_ctx: int | None = None,
        tokens: bool = False,
        replica: int = 0,
    ) -> Child:
        """The ready child for ``model_name``, spawning (or respawning a dead one) as needed.

        ``num_ctx`` (Ollama's ``options.num_ctx``: the context one request may use) restarts a child that runs
        with another per-slot context once its requests in flight have finished; without it any running child
        serves. The common case (the child is up and the catalog confirmed its model within
        ``CATALOG_RECHECK_SECS``) takes neither the lock nor a catalog query. ``tokens``: the model's late-chunking
        engine (per-token embeddings), not its pooled one. ``replica``: which of the model's chat engines
        (``instance_for``), each started as it is first asked for."""
        if num_ctx is not None and num_ctx <= 0:
            num_ctx = None
        placed = self.placements.place(model_name, embedding=embeddings, tokens=tokens)
        hot = self.children.get(instance_key(placed.key, replica))
        now = time.monotonic()
        if (
            hot is not None
            and hot.state is State.READY
            and not wants_restart(hot, num_ctx)
            and now - hot.catalog_checked < CATALOG_RECHECK_SECS
            and not adapters.lacks(hot, placed.adapter)
            and hot.alive()
        ):
            if not sleep.needs_wake(hot, now):
                return hot
            if await self._woken(hot):
                return hot
        child = await self._ensure_ready(model_name, embeddings, num_ctx, tokens, replica)
        if sleep.needs_wake(child, time.monotonic()) and not await self._woken(child):
            child = await self._ensure_ready(model_name, embeddings, num_ctx, tokens, replica)
        child.catalog_checked = time.monotonic()
        return child

    async def _woken(self, child: Child) -> bool:
        """Wake ``child`` from its idle sleep under a lease (the idle loop must not evict it meanwhile); whether
        it is still the model's ready engine afterwards (else the caller looks again)."""
        with self.lease(child):
            answered = await sleep.wake(child, float(self.cfg.child_start_timeout_secs))
        if not answered:  # stopped as a wedged engine is; the caller starts a fresh one
            await self.evict(child.key, WEDGED_WAKING, grace=1.0, only=child, crash=True)
        return child.state is State.READY and self.children.get(child.key) is child

    def remove_lora(self, name: str) -> None:
        """Remove a LoRA adapter and forget it at once: no request is sent with it after this returns (an engine
        that loaded it keeps it, unapplied, until it restarts)."""
        self.forget_lora(self.loras.remove(name).name)

    def forget_lora(self, name: str) -> None:
        """Drop what the engines and memos know of adapter ``name`` (removed, or replaced by another file: its
        base model's engine restarts to load the new one when it is next asked for)."""
        for child in self.children.values():
            child.adapters.pop(name, None)
        self.placements.forget(name)

    def _resolve(self, model_name: str, embeddings: bool) -> tuple[ModelRow, LoraRow | None]:
        """The catalog model whose engine serves ``model_name`` (its placement, read afresh): the model itself
        (or the one it shares an engine with), or a LoRA adapter's base model and the adapter (one namespace: an
        adapter is served by its own name)."""
        placed = self.placements.place(model_name, embedding=embeddings, fresh=True)
        adapter = placed.adapter
        if adapter is not None and embeddings:
            raise CatalogError(
                f"'{adapter.name}' is a LoRA adapter, which changes what a model generates; embed with its base model"
                f" '{adapter.base}'"
            )
        if (
            placed.engine_row is None
        ):  # not in the catalog, or an adapter whose base left it: the catalog's 404
            return self.catalog.get(adapter.base if adapter is not None else model_name), adapter
        return placed.engine_row, adapter

    async def _ensure_ready(
        self, model_name: str, embeddings: bool, num_ctx: int | None, tokens: bool = False, replica: int = 0
    ) -> Child:
        if self.stopping:  # stop_all stops the children it finds: one started after that would outlive it
            raise _shutting_down()
        try:
            model, adapter = self._resolve(model_name, embeddings)
        except ModelNotFound:
            await self._evict_model(model_name, "model removed from the catalog")
            raise
        key = instance_key(child_key(model.name, embeddings, tokens), replica)
        lock = self._locks.setdefault(key, asyncio.Lock())
        if (old := self.children.get(key)) is not None and old.weights != weights_id(model.path):
            # `blazar rm` + import of other weights under the same name, from another process
            await self.evict(key, "its weights changed in the catalog")
        async with lock:
            # both may have changed while this waited: a shutdown began, or the model was deleted (its file is gone)
            if self.stopping:
                raise _shutting_down()
            model, adapter = self._resolve(model_name, embeddings)
            child = self.children.get(key)
            if adapter is not None and adapter.path in self.bad_adapters:
                raise adapters.unloadable(adapter, self.bad_adapters[adapter.path], self.data.log_name(key))
            if child is not None and child.state is State.READY and child.alive():
                if adapter is not None:
                    adapters.check_lane(child, adapter)
                if wants_restart(child, num_ctx):
                    why = f"for num_ctx {num_ctx} (it ran with {child.spec.ctx_per_slot} per slot)"
                elif adapters.lacks(child, adapter):
                    assert adapter is not None
                    why = f"to load LoRA adapter '{adapter.name}'"
                else:
                    return adapters.serve(child, adapter)
                await self._drain(child, why)
                log.info("restarting %s %s", key, why)
                # Out of every path that hands children out before the bank save yields: a request that
                # arrives meanwhile waits on this lock for the new one instead of leasing a child being stopped.
                self.children.pop(key, None)
                child.stopped_for = f"it restarts {why}"
                await self._retire(child, self.cfg.stop_grace_secs, save=True)
                child.evicted()
            elif child is not None:
                log.warning("engine for %s is gone (state %s); respawning", key, child.state.value)
                await self._drop_gone(child)
            try:
                self.breakers.check(key, model.name, self.data.log_name(key))
            except EngineHeldBack:
                self.count(key, "held_back")
                raise
            engines = registry.list_all(self.store)
            engine = serving_lane(self.cfg, model, engines)
            try:
                child = await self._spawn(key, model, engine, embeddings, num_ctx, tokens)
            except ChildError:
                if self.stopping:  # stopped while it started: the shutdown's doing, not a crash
                    raise _shutting_down() from None
                # An engine that died on an architecture it does not know is re-routed exactly once.
                arch = classify_unknown_arch(log_tail(self.data.log_file(key), lines=200))
                if arch is None:
                    raise
                nxt = reroute_once(model, engine, engines, arch, manifest=_manifest())
                if isinstance(nxt, LaneError):
                    raise nxt from None
                log.warning("engine %s %s does not know '%s'; re-routing %s to %s %s",
                            engine.kind, engine.tag, arch, key, nxt.kind, nxt.tag)  # fmt: skip
                try:
                    child = await self._spawn(key, model, nxt, embeddings, num_ctx, tokens)
                except ChildError:
                    again = classify_unknown_arch(log_tail(self.data.log_file(key), lines=200))
                    if again is None:
                        raise
                    final = reroute_once(
                        model, nxt, engines, again, manifest=_manifest(), already_rerouted=True
                    )
                    raise (final if isinstance(final, LaneError) else LaneError(str(final))) from None
            self.count(key, "start")
            log.info(
                "engine for %s ready on %s (pid %s) in %.2fs",
                key,
                child.address,
                child.pid,
                child.load_seconds,
            )
            if adapter is not None:
                adapters.check_lane(child, adapter)
                if adapter.path in self.bad_adapters:
                    raise adapters.unloadable(
                        adapter, self.bad_adapters[adapter.path], self.data.log_name(key)
                    )
                if adapters.lacks(child, adapter):  # removed and added again while this engine started
                    raise adapters.AdapterChanged(adapter)
            return adapters.serve(child, adapter)

    async def _evict_model(self, model_name: str, reason: str) -> None:
        """Stop every child of ``model_name`` (chat and embedding), e.g. once the catalog no longer has it."""
        try:
            full = names.normalize(model_name)
        except CatalogError:
            return
        for key in [k for k, c in self.children.items() if c.model == full]:
            await self.evict(key, reason, gone=True)

    async def retire_when_idle(self, key: str, reason: str) -> None:
        """Take the child serving ``key`` out of service now (a request that comes after starts a fresh engine)
        and stop it once its requests in flight have finished, which are never cut (at most ``RETIRE_WAIT_SECS``):
        a deleted model's engine that other names share goes without ending their answers."""
        async with self._locks.setdefault(key, asyncio.Lock()):
            child = self.children.pop(key, None)
        if child is None:
            return
        log.info("retiring %s once its requests finish (%s)", key, reason)
        self.breakers.clean(key)
        self.retiring[child] = asyncio.get_running_loop().create_task(self._retire_idle(child, reason))

    async def _retire_idle(self, child: Child, reason: str) -> None:
        try:
            deadline = time.monotonic() + RETIRE_WAIT_SECS
            while child.inflight > 0 and time.monotonic() < deadline:
                await asyncio.sleep(RETIRE_POLL_SECS)
            child.stopped_for = reason
            await self._retire(child, self.cfg.stop_grace_secs, save=False)
        finally:
            self.retiring.pop(child, None)

    async def _drain(self, child: Child, why: str) -> None:
        """Wait (at most ``queue_wait_secs``) until ``child`` has no request in flight, so a restart (``why``: for
        another context, to load an adapter) never cuts a response off; 503 when it stays busy."""
        deadline = time.monotonic() + float(self.cfg.queue_wait_secs)
        while child.inflight > 0:
            if time.monotonic() >= deadline:
                fix = (
                    "set ctx_size for this model in config.toml so every request gets the context it needs"
                    if why.startswith("for num_ctx")
                    else "adapters added before the model's engine starts are loaded with it"
                )
                raise EngineBusy(
                    f"model '{child.model}' stayed busy for {self.cfg.queue_wait_secs} s, so it could not restart"
                    f" {why}; retry when its requests finish, or {fix}"
                )
            await asyncio.sleep(DRAIN_POLL_SECS)

    async def _spawn(
        self,
        key: str,
        model: ModelRow,
        engine: EngineRow,
        embeddings: bool,
        num_ctx: int | None = None,
        tokens: bool = False,
    ) -> Child:
        # Compiling reads the GGUF header and probes the GPU: off the event loop. A request's num_ctx is per
        # slot: the engine's context is that times its KV streams (one when the slots share it, else one a slot).
        streams = model_settings(self.cfg, model.name).kv_streams(embeddings=embeddings or tokens)
        ctx_total = num_ctx * streams if num_ctx else None
        spec = await asyncio.to_thread(
            compile_profile, self.cfg, model, engine, embeddings=embeddings, ctx_size=ctx_total, tokens=tokens
        )
        if not embeddings and spec.can.lora_per_request:
            loadable = [a for a in self.loras.for_base(model.name) if a.path not in self.bad_adapters]
            spec = adapters.with_adapters(spec, loadable)
        child = Child(key, model.name, spec, self.data)
        child.env = self.engine_env
        child.weights = weights_id(model.path)
        child.lane = engine.kind
        child.num_ctx = num_ctx
        child.keep = KeepAlive.default_for(self.cfg, model.name, spec.can.transcription)
        self.children[key] = child
        try:
            await child.start(self.http, float(self.cfg.child_start_timeout_secs))
        except BaseException as e:
            self.children.pop(key, None)
            if isinstance(e, ChildError):
                bad = adapters.failed(log_tail(self.data.log_file(key), lines=200), spec.loras)
                if bad:  # an adapter the engine cannot load: remembered, and the model starts without it
                    log.error("engine for %s could not load LoRA adapter(s) %s; starting it without them",
                              key, ", ".join(str(p) for p in bad))  # fmt: skip
                    self.bad_adapters.update(bad)
                    return await self._spawn(key, model, engine, embeddings, num_ctx, tokens)
                log.error("engine for %s failed to start: %s", key, e)
                self._crashed(child, f"its start failed: {e}")
            raise
        await bank.restore(child)
        return child

    @contextlib.contextmanager
    def lease(self, child: Child) -> Iterator[Child]:
        """Marks a request in flight on ``child`` so the idle reaper leaves it alone."""
        child.inflight += 1
        try:
            yield child
        finally:
            child.inflight -= 1
            child.last_used = time.monotonic()

    async def reap(self, child: Child, wait: float = 1.0) -> bool:
        """After an upstream failure: if the child died, drop it so the next request respawns. True if dead.

        A child the supervisor is stopping on purpose (``evict``) counts as dead at once, and is no crash."""
        proc = child.proc
        if proc is None or child.stopped_for is not None:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), timeout=wait)
        if proc.returncode is None:
            return False
        child.crashed()
        log.error("engine for %s died (exit %s)", child.key, proc.returncode)
        self._crashed(child, f"it died while serving (exit {proc.returncode})")
        if self.children.get(child.key) is child:
            self.children.pop(child.key, None)
        await child.stop(grace=0)
        return True

    def _crashed(self, child: Child, why: str) -> None:
        """One crash of ``child`` for the breaker, however many requests found it."""
        if not child.crash_counted:
            child.crash_counted = True
            self.count(child.key, "wedge" if why in (WEDGED, STALLED, WEDGED_WAKING) else "crash")
            self.breakers.crashed(child.key, child.model, why)

    def count(self, key: str, event: str) -> None:
        """One engine event for ``/metrics``: ``start`` (ready), ``crash``, ``wedge`` (stopped unresponsive) or
        ``held_back`` (a start refused while its breaker holds restarts back)."""
        self.engine_events[(key, event)] = self.engine_events.get((key, event), 0) + 1

    async def evict(
        self,
        key: str,
        reason: str,
        *,
        grace: float | None = None,
        only: Child | None = None,
        crash: bool = False,
        still: Callable[[Child], bool] | None = None,
        gone: bool = False,
    ) -> bool:
        """Stop the child serving ``key`` (SIGTERM, SIGKILL after ``grace``, default ``stop_grace_secs``). With
        ``only``, stop it only if it is still that child: one a request gave up on may have been replaced; with
        ``still``, only if that holds once the key's lock is taken. A stop on purpose clears the key's crash
        history; with ``crash`` (a wedged engine) it adds to it."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            child = self.children.get(key)
            if (
                child is None
                or (only is not None and child is not only)
                or (still is not None and not still(child))
            ):
                return False
            del self.children[key]
            log.info("evicting %s (%s)", key, reason)
            if crash:
                self._crashed(child, reason)
            else:
                self.breakers.clean(key)
            child.stopped_for = reason
            child.model_gone = gone
            stop = asyncio.ensure_future(
                self._retire(  # a model that is gone keeps no slots
                    child, self.cfg.stop_grace_secs if grace is None else grace, save=not crash and not gone
                )
            )
            try:
                await asyncio.shield(stop)
            except asyncio.CancelledError:
                # The caller left (its client did). The engine is stopped all the same, SIGKILL included, and
                # the key stays locked until it is: no new child starts beside it on the same socket and files.
                await asyncio.wait({stop})
                raise
            finally:
                child.evicted()
            return True

    @staticmethod
    async def _retire(child: Child, grace: float, *, save: bool) -> None:
        """Stop ``child``, its slots saved to the session bank first when it is stopped on purpose."""
        if save:
            await bank.save(child)
        await child.stop(grace=grace)

    async def _idle_loop(self) -> None:
        timeout = float(self.cfg.idle_timeout_secs)
        base = min(max(timeout / 4, 0.25), 15.0) if timeout > 0 else 5.0
        configured = [self.cfg.idle_sleep_secs, *(o.idle_sleep_secs or 0 for o in self.cfg.models.values())]
        while True:
            # a keep-awake ping is due at half an engine's sleep time: look at least four times as often (the
            # running engines' sleep may also come from their extra_args)
            sleeps = [s for s in (*configured, *(c.spec.sleep_secs for c in self.children.values())) if s > 0]
            await asyncio.sleep(min(base, max(min(sleeps) / 4, 0.25)) if sleeps else base)
            children = list(self.children.values())
            for c in children:
                if c.state is State.READY and not c.alive() and c.inflight == 0:
                    try:
                        await self._forget_dead(c)
                    except Exception:
                        log.exception("forgetting the dead engine %s failed", c.key)
            for c in idle_victims(children, time.monotonic(), timeout):
                try:
                    await self.evict(c.key, "idle", only=c)
                except Exception:
                    log.exception("evicting %s failed", c.key)
            for c in children:  # removed by another process (blazar rm): its engine serves nothing any more
                if c.inflight == 0 and self.children.get(c.key) is c and self.catalog.find(c.model) is None:
                    try:
                        await self.evict(c.key, "model removed from the catalog", only=c, gone=True)
                    except Exception:
                        log.exception("evicting %s failed", c.key)
            for c in children:
                if c.state is State.READY and c.spec.sleep_secs and self.children.get(c.key) is c:
                    try:
                        await sleep.keep_awake(c)
                    except Exception:
                        log.exception("keeping %s awake failed", c.key)

    async def _forget_dead(self, child: Child) -> None:
        """An idle engine that exited by itself: counted for its breaker and forgotten, so ``ps`` and the idle
        timers stop showing it; the next request for its model starts a new one."""
        async with self._locks.setdefault(child.key, asyncio.Lock()):
            if self.children.get(child.key) is not child or child.alive() or child.state is not State.READY:
                return
            code = child.proc.returncode if child.proc else None
            log.warning("engine for %s exited with code %s while idle; it starts again when next asked for",
                        child.key, code)  # fmt: skip
            await self._drop_gone(child)

    async def _drop_gone(self, child: Child) -> None:
        """Forget a child that no longer serves (the caller holds its key's lock): a death nobody stopped it for
        counts for its breaker, and its run files go."""
        if not child.alive() and child.stopped_for is None:
            code = child.proc.returncode if child.proc else None
            self._crashed(child, f"it exited with code {code} while idle")
        await child.stop(grace=self.cfg.stop_grace_secs)
        self.children.pop(child.key, None)

    async def _hint_loop(self) -> None:
        every = float(self.cfg.engine_metrics_secs)
        while True:
            await asyncio.sleep(every)
            for c in list(self.children.values()):
                if c.state is State.READY and hints.scraped(c):
                    try:
                        await hints.scrape(c)
                    except Exception:
                        log.exception("reading the metrics of %s failed", c.key)

    async def stop_all(self, reason: str = "blazar is shutting down", grace: float | None = None) -> None:
        """Stop every child (SIGTERM, then SIGKILL after ``grace``, default ``stop_grace_secs``); a response still
        streaming from one ends with an error naming ``reason``."""
        self.stopping = True
        await tasks.stop(self._reaper)
        await tasks.stop(self._hinter)
        await tasks.stop(self._watcher)
        self._reaper = self._hinter = self._watcher = None
        self.remotes.close()
        children = list(self.children.values())
        self.children.clear()
        retiring = dict(self.retiring)  # stopped here, at once, with the others
        for task in retiring.values():
            await tasks.stop(task)
        children += [c for c in retiring if c.proc is not None and c.proc.returncode is None]
        self.retiring.clear()
        for c in children:
            c.stopped_for = reason
        wait = self.cfg.stop_grace_secs if grace is None else grace
        save = grace is None  # a forced stop saves nothing
        await asyncio.gather(*(self._retire(c, wait, save=save) for c in children), return_exceptions=True)
        if self._http is not None:
            await self._http.close()
            self._http = None


def _shutting_down() -> LaneError:
    return LaneError("blazar is shutting down and starts no engine; retry once it is back")
