"""Prometheus metrics of the gateway: ``GET /metrics`` in the text exposition format (``prometheus-client``).

Per request the envelope's end (``Gate.finish``) calls ``Metrics.observe`` once: plain counters and bucket counts
under bounded labels (model, dialect, route, status class, key name; never a trace id or a prompt), a few
microseconds. Admission adds its wait and its refusals, the sentinel its findings, the semantic cache its lookups.
What is live is read at scrape time: engines and their states, slots, queues, quota left per key, the audit's and
the exporter's dropped counts, and the gauges each llama-server's own ``/metrics`` gives (requests running and
deferred) and the share of its KV cache in use (from its ``/slots``), which a cluster router such as the Gateway
API Inference Extension picks replicas by. ``render`` builds
the exposition with prometheus-client's metric families; nothing here changes a request or an engine.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from blazar.supervisor import hints
from blazar.supervisor.child import State

if TYPE_CHECKING:
    from blazar.gateway.http import Request
    from blazar.gateway.tenancy import Gate
    from blazar.supervisor import Supervisor

METRICS_PATH = "/metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Buckets of request duration, time to first token and admission wait."""
TOKEN_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56)
"""Buckets of the time per output token."""
OVERHEAD_SECONDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)
"""Buckets of Blazar's own time on a request (``x-blazar-overhead-ms``)."""
ENGINE_GAUGES = {
    "llamacpp:requests_processing": ("blazar_engine_requests_running", "Requests the engine is running now"),
    "llamacpp:requests_deferred": (
        "blazar_engine_requests_waiting",
        "Requests the engine holds waiting for a slot",
    ),
}
"""llama-server's own gauges, republished per model (the Inference Extension's running and queued requests)."""
KV_USE = "kv_cache_use"
"""The share of an engine's KV cache in use (``hints.kv_use``, from its ``/slots``), under the engine gauges."""
ENGINE_SCRAPE_SECS = 2.0


class Histogram:
    """Bucket counts (the last is +Inf) and a sum, as Prometheus' histogram without its locks."""

    __slots__ = ("counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, bounds: tuple[float, ...], value: float) -> None:
        self.counts[bisect_left(bounds, value)] += 1
        self.sum += value


def _observe(table: dict[Any, Histogram], key: Any, bounds: tuple[float, ...], value: float) -> None:
    h = table.get(key)
    if h is None:
        h = table[key] = Histogram(bounds)
    h.observe(bounds, value)


def _status_class(status: int) -> str:
    return "499" if status == 499 else f"{status // 100}xx"


class Metrics:
    """What requests have done since the daemon started (see the module docstring). One per gateway."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, str, str], int] = {}
        self.duration: dict[tuple[str, str], Histogram] = {}
        self.ttft: dict[str, Histogram] = {}
        self.tpot: dict[str, Histogram] = {}
        self.overhead: dict[str, Histogram] = {}
        self.tokens: dict[tuple[str, str, str], int] = {}
        self.admission_wait: dict[tuple[str, str], Histogram] = {}
        self.busy: dict[str, int] = {}
        self.waiting: dict[tuple[str, str], int] = {}
        self.findings: dict[str, int] = {}
        self.cache: dict[str, int] = {"lookup": 0, "hit": 0}

    def observe(self, req: Request, status: int, now: float) -> None:
        """``req`` ended with ``status`` at ``now`` (``perf_counter``)."""
        model = req.model or ""
        labels = (model, req.dialect, req.route, _status_class(status))
        self.requests[labels] = self.requests.get(labels, 0) + 1
        _observe(self.duration, (req.dialect, req.route), SECONDS, now - req.t0)
        _observe(self.overhead, req.route, OVERHEAD_SECONDS, req.overhead_ms() / 1000)
        summary = req.summary
        if not summary:
            return
        usage = summary.get("usage")
        if isinstance(usage, dict):
            key = req.key.name if req.key is not None else ""
            for kind in ("prompt", "completion"):
                n = usage.get(kind + "_tokens")
                if isinstance(n, int) and n > 0:
                    t = (model, key, kind)
                    self.tokens[t] = self.tokens.get(t, 0) + n
        ttft = req.first_token_ms()  # from the request's arrival, queue and load in
        if ttft is not None:
            _observe(self.ttft, model, SECONDS, ttft / 1000)
        gap = req.token_gap_ms()
        if gap is not None:
            _observe(self.tpot, model, TOKEN_SECONDS, gap / 1000)

    def admitted(self, model_key: str, work_class: str, waited: float) -> None:
        _observe(self.admission_wait, (model_key, work_class), SECONDS, waited)

    def queued(self, model_key: str, work_class: str, change: int) -> None:
        """A request of ``work_class`` started (1) or stopped (-1) waiting for a slot of ``model_key``."""
        where = (model_key, work_class)
        self.waiting[where] = self.waiting.get(where, 0) + change

    def refused_busy(self, model_key: str) -> None:
        self.busy[model_key] = self.busy.get(model_key, 0) + 1

    def found(self, codes: Iterable[str]) -> None:
        for code in codes:
            self.findings[code] = self.findings.get(code, 0) + 1

    def looked_up(self, hit: bool) -> None:
        self.cache["lookup"] += 1
        if hit:
            self.cache["hit"] += 1


def _histogram(
    name: str, doc: str, labels: list[str], table: dict[Any, Histogram], bounds: tuple[float, ...]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=labels)
    edges = [*(repr(b) for b in bounds), "+Inf"]
    for key, h in table.items():
        values = list(key) if isinstance(key, tuple) else [key]
        running, buckets = 0, []
        for edge, count in zip(edges, h.counts, strict=True):
            running += count
            buckets.append((edge, running))
        family.add_metric(values, buckets, h.sum)
    return family


def _counter(name: str, doc: str, labels: list[str], table: dict[Any, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels)
    for key, value in table.items():
        family.add_metric(list(key) if isinstance(key, tuple) else [key], value)
    return family


class _Scrape(Collector):
    """One scrape's families (prometheus-client's registry asks a collector for them)."""

    def __init__(self, families: list[Any]) -> None:
        self.families = families

    def collect(self) -> Iterator[Any]:
        yield from self.families


def families(gate: Gate, sup: Supervisor, engines: dict[str, dict[str, float]]) -> list[Any]:
    """Every family of one scrape; ``engines``: each child key's gauges from its own ``/metrics``."""
    m = gate.metrics
    out: list[Any] = [
        _counter(
            "blazar_requests", "Requests answered, by model, dialect, route and status class",
            ["model", "dialect", "route", "status"], m.requests,
        ),
        _histogram(
            "blazar_request_duration_seconds", "Time from a request's arrival to its last byte",
            ["dialect", "route"], m.duration, SECONDS,
        ),
        _histogram(
            "blazar_time_to_first_token_seconds",
            "Streamed answers: time from the request's arrival (queue and engine load included) to its first token",
            ["model"], m.ttft, SECONDS,
        ),
        _histogram(
            "blazar_time_per_output_token_seconds",
            "Streamed answers: the mean gap between output tokens, one observation per answer",
            ["model"], m.tpot, TOKEN_SECONDS,
        ),
        _histogram(
            "blazar_overhead_seconds", "Blazar's own time on a request (x-blazar-overhead-ms): all but engines and clients",
            ["route"], m.overhead, OVERHEAD_SECONDS,
        ),
        _histogram(
            "blazar_admission_wait_seconds", "Time a request waited for a slot of its model's engine",
            ["model", "work_class"], m.admission_wait, SECONDS,
        ),
        _counter(
            "blazar_all_slots_busy", "Requests refused with 503 all_slots_busy after the bounded wait",
            ["model"], m.busy,
        ),
        _counter("blazar_sentinel_findings", "Sentinel findings on answers, by code", ["code"], m.findings),
        _counter("blazar_semantic_cache_lookups", "Semantic-cache lookups", [], {(): m.cache["lookup"]}),
        _counter("blazar_semantic_cache_hits", "Semantic-cache lookups answered from the cache", [], {(): m.cache["hit"]}),
    ]  # fmt: skip
    tokens = CounterMetricFamily(
        "blazar_tokens", "Tokens read and written, by model and key", labels=["model", "key", "kind"]
    )
    for (model, key, kind), n in m.tokens.items():
        tokens.add_metric([model, key, kind], n)
    out.append(tokens)
    out.append(
        _counter(
            "blazar_audit_lines_dropped",
            "Audit lines lost to a full queue or a failed write",
            [],
            {(): gate.audit.dropped if gate.audit is not None else 0},
        )
    )
    out.append(_counter("blazar_otlp_spans_dropped", "OTLP spans that could not be sent", [],
                        {(): gate.otlp.dropped if gate.otlp is not None else 0}))  # fmt: skip
    out.extend(_engines(gate, sup, engines))
    out.extend(_quotas(gate))
    out.extend(_pools(sup))
    return out


def _pools(sup: Supervisor) -> Iterator[Any]:
    up = GaugeMetricFamily(
        "blazar_pool_remote_up",
        "1 while a pool's remote answers (its breaker closed), else 0",
        labels=["pool", "remote"],
    )
    busy = GaugeMetricFamily(
        "blazar_pool_remote_in_flight", "Requests of the pools in flight at each remote", labels=["remote"]
    )
    for pool in sup.remotes.pools.values():
        for host in pool.hosts:
            up.add_metric([pool.name, host.name], 1 if host.up else 0)
    for host in sup.remotes.pooled():
        busy.add_metric([host.name], host.outstanding)
    yield up
    yield busy


def _engines(gate: Gate, sup: Supervisor, engines: dict[str, dict[str, float]]) -> Iterator[Any]:
    state = GaugeMetricFamily(
        "blazar_engine_state", "1 for the state each engine is in (by model key)", labels=["model", "state"]
    )
    for key, child in list(sup.children.items()):
        for s in State:
            state.add_metric([key, s.value], 1.0 if child.state is s else 0.0)
    yield state
    yield _counter(
        "blazar_engine_events",
        "Engine starts (ready), crashes, wedges (stopped unresponsive) and starts a crash breaker held back",
        ["model", "event"], sup.engine_events,
    )  # fmt: skip
    busy = GaugeMetricFamily(
        "blazar_slots_busy", "Slots of a model's engine running a request", labels=["model"]
    )
    total = GaugeMetricFamily(
        "blazar_slots", "Slots admission shares out for a model's engine", labels=["model"]
    )
    waiting = GaugeMetricFamily("blazar_admission_waiting", "Requests waiting for a slot", labels=["model"])
    for key, q in gate.admission.stats().items():
        busy.add_metric([key], q.running)
        total.add_metric([key], q.slots)
        waiting.add_metric([key], q.waiting)
    yield from (busy, total, waiting)
    by_class = GaugeMetricFamily(
        "blazar_admission_queued",
        "Requests waiting for a slot, by work class",
        labels=["model", "work_class"],
    )
    for (key, work_class), n in gate.metrics.waiting.items():
        by_class.add_metric([key, work_class], n)
    yield by_class
    kv = GaugeMetricFamily(
        "blazar_engine_kv_cache_utilization",
        "Share (0-1) of the engine's KV cache its running requests hold (llama-server's /slots; the Inference"
        " Extension's KV-cache utilization)",
        labels=["model"],
    )
    for key, gauges in engines.items():
        if KV_USE in gauges:
            kv.add_metric([key], gauges[KV_USE])
    yield kv
    for engine_name, (name, doc) in ENGINE_GAUGES.items():
        family = GaugeMetricFamily(name, doc + " (the engine's own /metrics)", labels=["model"])
        for key, gauges in engines.items():
            if engine_name in gauges:
                family.add_metric([key], gauges[engine_name])
        yield family


def _quotas(gate: Gate) -> Iterator[Any]:
    tokens = GaugeMetricFamily(
        "blazar_key_daily_tokens_remaining",
        "Tokens a key may still use today (UTC), for keys with daily_tokens",
        labels=["key"],
    )
    requests = GaugeMetricFamily(
        "blazar_key_requests_remaining",
        "Requests a key may still make this minute, for keys with rpm",
        labels=["key"],
    )
    for info in gate.keys.listing():
        left_tokens, left_requests = gate.quotas.remaining(info.name, info.limits)
        if left_tokens is not None:
            tokens.add_metric([info.name], left_tokens)
        if left_requests is not None:
            requests.add_metric([info.name], left_requests)
    yield tokens
    yield requests


async def _engine_read(child: Any) -> dict[str, float] | None:
    got, kv = await asyncio.gather(
        hints.read_metrics(child, tuple(ENGINE_GAUGES), ENGINE_SCRAPE_SECS),
        hints.kv_use(child, ENGINE_SCRAPE_SECS),
    )
    if got is not None and kv is not None:
        got[KV_USE] = kv
    return got


async def engine_gauges(sup: Supervisor) -> dict[str, dict[str, float]]:
    """Each running llama-server's gauges (``ENGINE_GAUGES``), read now from its ``/metrics``, and the share of
    its KV cache in use from its ``/slots`` (neither wakes a sleeping engine); one that does not answer in
    ``ENGINE_SCRAPE_SECS`` is left out."""
    kids = [c for c in list(sup.children.values()) if c.state is State.READY and hints.scraped(c)]
    read = await asyncio.gather(*(_engine_read(c) for c in kids))
    return {c.key: got for c, got in zip(kids, read, strict=True) if got is not None}


async def render(gate: Gate, sup: Supervisor) -> bytes:
    """The exposition of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Scrape(families(gate, sup, await engine_gauges(sup))))
    return generate_latest(registry)


async def page(sup: Supervisor, req: Request, proto: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """``GET /metrics``. With keys on: a full-access key, or the config's ``metrics_token`` (the scraper's)."""
    req.require_full_access(
        "/metrics", or_else=", or the metrics_token from config.toml as a scraper's Bearer token"
    )
    return 200, [("content-type", CONTENT_TYPE)], await render(req.gate, sup)
