"""The added latency of Blazar's full middleware stack per request, with 100 ``[[keys]]`` configured.

In process (the main figure): the real ``blazar.gateway.app.App`` over a real ``Supervisor`` and ``Gate`` (temp
data dir, SQLite store, 100 keys with quotas, audit off as in the default config) is called directly through
its RSGI entry point with a fake scope and protocol object, back to back with a bare RSGI app that produces
the same response in the same process; both are awaited the same way from the same loop (uvloop). Cases:

  healthz        GET /healthz (never gated: trace id, routing, CORS check, overhead header, finish) against a
                 bare app answering the same bytes.
  models         GET /v1/models with ``Authorization: Bearer`` of key 50 of 100: the whole envelope plus auth
                 and the concurrency lease, against a bare app that calls the same handler
                 (``openai.list_models``) and answers with its bytes, so the handler's own work cancels.
  models-nokeys  the same App with no keys (auth off), to show what auth and quotas add.
  chat           POST /v1/chat/completions (non-streamed) with the key, the engine I/O replaced by
                 precomputed bytes (``proxy.forward_whole`` and ``Supervisor.ensure_ready`` stubbed in this
                 process only): Blazar's whole per-request Python path (envelope, auth, lease, OpenAI parse,
                 scope/rpm/tpm/daily checks, admission through the Cython scheduler, engine body render,
                 native ``translate_whole``, usage charged) against a bare app that parses the request and
                 rewrites the response's ``model`` with orjson. This is more than middleware: it is everything
                 Blazar's Python does for a request apart from the upstream call.

Reported: µs per request for each app (median over rounds) and the added µs (median of per-round
differences). Target (issue 5): the middleware adds under 100 µs per request.

Metrics (``metrics``): what observing a request costs, measured alone: ``Metrics.observe`` on a finished
streamed chat (a key, usage, time to first token and per output token), ``Metrics.admitted`` and the status
page's ``request`` event (``Events.request``: a dict, one ``orjson.dumps``, the recent ring), the three calls
every chat makes, µs per request (median over rounds). Target (issue 25): under 5 µs.

Through real HTTP (``--http``, on by default; off with ``--no-http``): ``blazar serve`` with the same 100 keys
against a bare Granian RSGI app (embedded Granian, same settings as Blazar's) answering the same bytes, each
driven at concurrency 1 by ``wrk`` (or the aiohttp load generator of ``gateway_harness.py``): p50 latency and the
server's CPU per request, for GET /healthz and GET /v1/models (with the key).

Usage: python benches/bench_middleware.py [--rounds R] [--requests N] [--no-http] [--json FILE] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "baselines"))

N_KEYS = 100
BENCH_KEY = N_KEYS // 2


def keys_config(secrets_: list[str]) -> str:
    from gateway_harness import bench_keys

    return 'host = "127.0.0.1"\nparallel = 64\n\n' + bench_keys(secrets_, ["bench"])


# ---------------------------------------------------------------------------------------------------------
# Fake RSGI objects


class Headers(dict[str, str]):
    """Granian's RSGIHeaders is a read-only mapping with lower-case names and ``.get``."""


class Scope:
    __slots__ = ("client", "headers", "http_version", "method", "path", "proto", "query_string", "scheme")

    def __init__(self, method: str, path: str, headers: dict[str, str]) -> None:
        self.proto = "http"
        self.http_version = "1.1"
        self.scheme = "http"
        self.method = method
        self.path = path
        self.query_string = ""
        self.headers = Headers(headers)
        self.client = "127.0.0.1:40000"


class Proto:
    """Records the response; ``await proto()`` gives the request body."""

    __slots__ = ("bad", "body", "n", "status")

    def __init__(self, body: bytes = b"") -> None:
        self.body = body
        self.status = 0
        self.n = 0
        self.bad = 0

    async def __call__(self) -> bytes:
        return self.body

    def response_bytes(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status = status
        self.n += 1
        self.bad += status != 200

    def response_empty(self, status: int, headers: list[tuple[str, str]]) -> None:
        self.status = status
        self.n += 1
        self.bad += status != 200

    def response_str(self, status: int, headers: list[tuple[str, str]], body: str) -> None:
        self.status = status
        self.n += 1
        self.bad += status != 200


RsgiCall = Callable[[Any, Any], Awaitable[None]]


# ---------------------------------------------------------------------------------------------------------
# The apps


def make_blazar(root: Path, with_keys: bool) -> tuple[Any, list[str]]:
    """A real App over a real Supervisor and Gate in a temp data dir."""
    from blazar.config import load_config_text
    from blazar.gateway.app import App
    from blazar.gateway.tenancy import Gate
    from blazar.paths import DataDir
    from blazar.store import Store
    from blazar.supervisor import Supervisor

    root.mkdir(parents=True)
    keys = [f"sk-bench-{secrets.token_hex(16)}" for _ in range(N_KEYS)] if with_keys else []
    text = f'data_dir = "{root / "data"}"\n' + keys_config(keys)
    path = root / "config.toml"
    path.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLAZAR_")}
    cfg = load_config_text(text, path, env)
    data = DataDir(cfg.data_dir).ensure()
    store = Store.open(data.db)
    sup = Supervisor(cfg, data, store)
    gate = Gate(cfg, store, data, path)
    return App(sup, gate), keys


WHOLE_ENGINE_BODY = (
    b'{"choices":[{"finish_reason":"stop","index":0,"message":{"role":"assistant","content":"The quick brown fox'
    b' jumps over the lazy dog."}}],"created":1795948317,"model":"fake-model","system_fingerprint":"b0-fake",'
    b'"object":"chat.completion","usage":{"completion_tokens":10,"prompt_tokens":12,"total_tokens":22},'
    b'"id":"chatcmpl-benchfakeupstream0000000000000"}'
)
CHAT_REQUEST = orjson.dumps(
    {"model": "bench", "messages": [{"role": "user", "content": "Tell me about foxes."}], "max_tokens": 64}
)


def stub_engine(app: Any) -> None:
    """Replace the engine I/O of ``app`` (this process only): a ready child (a real ``Child`` object that was
    never spawned), precomputed engine bytes."""
    from blazar.gateway import proxy
    from blazar.launch.spec import LLAMA_SERVER, LaunchSpec
    from blazar.supervisor import Child
    from blazar.supervisor.child import State

    if app.sup.catalog.find("bench") is None:
        # a catalog model, as every served request names: its route is memoised as in `blazar serve` (an
        # unknown name is looked up in SQLite each time, which no answered request pays)
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import gateway_harness as gw

        app.sup.catalog.import_file(gw.default_model(), "bench")
    spec = LaunchSpec(argv_template=("fake-engine",), ctx_size=8192 * 64, parallel=64, can=LLAMA_SERVER)
    child = Child("bench:latest", "bench:latest", spec, app.sup.data)
    child._state = State.READY  # a stand-in that never ran, serving

    async def ensure_ready(
        model_name: str,
        *,
        embeddings: bool = False,
        num_ctx: int | None = None,
        tokens: bool = False,
        replica: int = 0,
    ) -> Any:
        return child

    async def forward_whole(
        sup: Any, child: Any, path: str, body: bytes, client: Any = None
    ) -> tuple[int, bytes]:
        return 200, WHOLE_ENGINE_BODY

    app.sup.ensure_ready = ensure_ready
    proxy.forward_whole = forward_whole  # type: ignore[assignment]


class BareHealthz:
    """A bare RSGI app answering what Blazar's /healthz answers."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.headers = [("content-type", "application/json")]

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        proto.response_bytes(200, self.headers, self.body)


class BareModels:
    """A bare RSGI app running Blazar's own /v1/models handler (so the handler's cost cancels)."""

    def __init__(self, sup: Any) -> None:
        from blazar.gateway import openai
        from blazar.gateway.http import Request

        self.sup = sup
        self.handler = openai.list_models
        self.request = Request

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        req = self.request(scope.method, scope.path, scope.query_string, scope.headers, b"", "t")
        status, headers, body = await self.handler(self.sup, req, proto)
        proto.response_bytes(status, headers, body)


class BareChat:
    """A bare RSGI app doing the least a proxy does with a whole chat response: parse the request, rewrite
    ``model`` in the engine's answer (the engine call itself replaced by the same precomputed bytes)."""

    def __init__(self) -> None:
        self.headers = [("content-type", "application/json")]

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        req = orjson.loads(await proto())
        obj = orjson.loads(WHOLE_ENGINE_BODY)
        obj["model"] = req["model"]
        proto.response_bytes(200, self.headers, orjson.dumps(obj))


# ---------------------------------------------------------------------------------------------------------
# In-process measurement


async def per_request_us(call: RsgiCall, scope: Any, proto: Proto, n: int) -> float:
    """CPU µs per request (``time.process_time``: robust to other processes on a busy machine; the wall-clock
    figure moves with the load average, the CPU one much less)."""
    gc.collect()
    t0 = time.process_time()
    for _ in range(n):
        await call(scope, proto)
    took = (time.process_time() - t0) / n * 1e6
    if proto.bad or proto.n != n:
        raise RuntimeError(f"{proto.bad} of {n} requests were not answered 200 (last status {proto.status})")
    return took


async def in_process(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    blazar, keys = make_blazar(root / "keys", with_keys=True)
    nokeys, _ = make_blazar(root / "nokeys", with_keys=False)
    for app in (blazar, nokeys):
        app.__rsgi_init__(loop)
        stub_engine(app)
    await asyncio.sleep(0)
    auth = {"authorization": f"Bearer {keys[BENCH_KEY]}", "content-type": "application/json"}

    healthz_body = orjson.dumps({"status": "ok", "version": __import__("blazar").__version__})
    cases: dict[str, tuple[RsgiCall, RsgiCall, Scope, bytes]] = {
        "healthz": (blazar.__rsgi__, BareHealthz(healthz_body).__rsgi__, Scope("GET", "/healthz", {}), b""),
        "models": (blazar.__rsgi__, BareModels(blazar.sup).__rsgi__, Scope("GET", "/v1/models", auth), b""),
        "models-nokeys": (
            nokeys.__rsgi__,
            BareModels(nokeys.sup).__rsgi__,
            Scope("GET", "/v1/models", {}),
            b"",
        ),
        "chat": (
            blazar.__rsgi__,
            BareChat().__rsgi__,
            Scope("POST", "/v1/chat/completions", {**auth, "content-length": str(len(CHAT_REQUEST))}),
            CHAT_REQUEST,
        ),
    }
    if args.cases:
        cases = {k: v for k, v in cases.items() if k in args.cases}
    results: dict[str, Any] = {}
    for name, (app_call, bare_call, scope, body) in cases.items():
        # correctness: both answer 200
        for call in (app_call, bare_call):
            p = Proto(body)
            await call(scope, p)
            if p.status != 200:
                raise RuntimeError(f"{name}: HTTP {p.status} from {call}")
        await per_request_us(app_call, scope, Proto(body), args.requests // 4)  # warm-up
        await per_request_us(bare_call, scope, Proto(body), args.requests // 4)
        app_us, bare_us, added = [], [], []
        for r in range(args.rounds):
            pair = [(app_call, app_us), (bare_call, bare_us)]
            if r % 2:
                pair.reverse()
            got = {}
            for call, sink in pair:
                us = await per_request_us(call, scope, Proto(body), args.requests)
                sink.append(us)
                got[id(sink)] = us
            added.append(got[id(app_us)] - got[id(bare_us)])
        results[name] = {
            "blazar_us": round(statistics.median(app_us), 2),
            "bare_us": round(statistics.median(bare_us), 2),
            "added_us": round(statistics.median(added), 2),
            "added_us_min_max": [round(min(added), 2), round(max(added), 2)],
        }
        print(
            f"  {name:<14} blazar {results[name]['blazar_us']:8.2f} µs  bare {results[name]['bare_us']:7.2f} µs"
            f"  added {results[name]['added_us']:8.2f} µs (rounds {min(added):.1f}..{max(added):.1f})",
            file=sys.stderr,
            flush=True,
        )
    with contextlib.suppress(Exception):
        await blazar.gate.close()
        await nokeys.gate.close()
        await blazar.sup.stop_all()
        await nokeys.sup.stop_all()
    return results


def metrics_cost(args: argparse.Namespace) -> dict[str, Any]:
    """µs per request of the three observing calls a streamed chat makes (see the module docstring)."""
    from blazar.config import KeyLimits
    from blazar.gateway.events import Events
    from blazar.gateway.http import Request
    from blazar.gateway.metrics import Metrics
    from blazar.tenancy.keys import KeyCtx

    m, events = Metrics(), Events()
    req = Request("POST", "/v1/chat/completions", "", {}, b"", "t" * 32, t0=time.perf_counter())
    req.model, req.dialect, req.route, req.dispatched_at = (
        "smollm2:latest",
        "openai",
        "/v1/chat/completions",
        req.t0,
    )
    req.key = KeyCtx("key-50", 1.0, frozenset(), KeyLimits())
    req.summary = {
        "usage": {"prompt_tokens": 31, "completion_tokens": 64},
        "ttft_ms": 12.5,
        "tpot_ms": {"count": 63, "mean": 9.8, "p50": 9.5, "p90": 11.0, "p99": 14.0, "max": 15.0},
    }
    n = args.requests
    rounds = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            m.admitted("smollm2:latest", "interactive", 0.0001)
            m.observe(req, 200, t0)
            events.request(req, 200)
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    us = round(statistics.median(rounds), 3)
    print(
        f"  metrics        {us:8.3f} µs per request (observe + admitted + event)", file=sys.stderr, flush=True
    )
    return {"us_per_request": us, "rounds_min_max": [round(min(rounds), 3), round(max(rounds), 3)],
            "target_us": 5, "met": us < 5}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# Through HTTP


def bare_server_main(port: int, healthz: str, models: str) -> None:
    """``bench_middleware.py bare-server PORT HEALTHZ_BODY MODELS_BODY``: the bare app under embedded Granian
    with Blazar's settings."""
    import signal

    import uvloop
    from granian.constants import HTTPModes, Interfaces
    from granian.server.embed import Server

    class Bare:
        def __init__(self) -> None:
            self.headers = [("content-type", "application/json")]
            self.bodies = {"/healthz": healthz.encode(), "/v1/models": models.encode()}

        def __rsgi_init__(self, loop: Any) -> None:
            pass

        def __rsgi_del__(self, loop: Any) -> None:
            pass

        async def __rsgi__(self, scope: Any, proto: Any) -> None:
            body = self.bodies.get(scope.path)
            if body is None:
                proto.response_bytes(404, self.headers, b"{}")
            else:
                proto.response_bytes(200, self.headers, body)

    async def run() -> None:
        server = Server(
            Bare(),
            address="127.0.0.1",
            port=port,
            interface=Interfaces.RSGI,
            http=HTTPModes.http1,
            websockets=False,
            backpressure=1024,
            log_enabled=False,
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, server.stop)
        await server.serve()

    uvloop.run(run())


def through_http(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    import http.client

    import gateway_harness as gw

    root.mkdir(parents=True)
    keys = [f"sk-bench-{secrets.token_hex(16)}" for _ in range(N_KEYS)]
    port = gw.free_port()
    cfg = root / "config.toml"
    cfg.write_text(f"port = {port}\n" + keys_config(keys))
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLAZAR_")}
    env.update(BLAZAR_CONFIG=str(cfg), BLAZAR_DATA_DIR=str(root / "data"))
    servers: list[gw.Server] = []
    try:
        proc, lp = gw.spawn("blazar-mw", [sys.executable, "-m", "blazar", "serve"], root, env)
        blazar = gw.Server("blazar", f"http://127.0.0.1:{port}", proc, lp)
        servers.append(blazar)
        gw.wait_http(blazar, "/healthz", 60)
        auth = {"authorization": f"Bearer {keys[BENCH_KEY]}"}
        bodies = {}
        for path, headers in (("/healthz", {}), ("/v1/models", auth)):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", path, headers=headers)
            r = c.getresponse()
            bodies[path] = r.read().decode()
            assert r.status == 200, (path, r.status, bodies[path])
            c.close()
        bport = gw.free_port()
        argv = [sys.executable, __file__, "bare-server", str(bport), bodies["/healthz"], bodies["/v1/models"]]
        proc, lp = gw.spawn("bare-mw", argv, root)
        bare = gw.Server("bare", f"http://127.0.0.1:{bport}", proc, lp)
        servers.append(bare)
        gw.wait_http(bare, "/healthz", 60)
        wrk = gw.ensure_wrk() if not args.quick else None
        results: dict[str, Any] = {"loadgen": "wrk -t1 -c1" if wrk else "python (aiohttp), c=1"}
        for path in ("/healthz", "/v1/models"):
            rows: dict[str, list[dict[str, float]]] = {"blazar": [], "bare": []}
            for r in range(args.http_rounds):
                order = [blazar, bare] if r % 2 == 0 else [bare, blazar]
                for srv in order:
                    srv.headers = auth if (srv is blazar and path == "/v1/models") else {}
                    cpu0 = srv.cpu_snapshot()
                    res = get_load(wrk, srv, path, args.http_seconds, root)
                    cpu = srv.cpu_between(cpu0, srv.cpu_snapshot())
                    rows[srv.name].append(
                        {
                            "p50_us": res["p50_ms"] * 1000,
                            "p99_us": res["p99_ms"] * 1000,
                            "rps": res["requests"] / res["seconds"],
                            "cpu_us_per_req": cpu * 1e6 / max(res["requests"], 1),
                        }
                    )
            out = {}
            for name, rs in rows.items():
                out[name] = {k: round(statistics.median(x[k] for x in rs), 1) for k in rs[0]}
            out["added_p50_us"] = round(
                statistics.median(
                    b["p50_us"] - a["p50_us"] for a, b in zip(rows["bare"], rows["blazar"], strict=True)
                ),
                1,
            )
            out["added_cpu_us_per_req"] = round(
                statistics.median(
                    b["cpu_us_per_req"] - a["cpu_us_per_req"]
                    for a, b in zip(rows["bare"], rows["blazar"], strict=True)
                ),
                1,
            )
            results[path] = out
            print(f"  HTTP {path}: {json.dumps(out)}", file=sys.stderr, flush=True)
        return results
    finally:
        for s in servers:
            s.stop()


def get_load(wrk: str | None, srv: Any, path: str, seconds: float, tmp: Path) -> dict[str, Any]:
    """c=1 GET load on ``path``: wrk when available, else the aiohttp load generator (in this process)."""
    if wrk:
        argv = [wrk, "-t1", "-c1", f"-d{max(1, round(seconds))}s", "-s", str(tmp / "get.lua")]
        (tmp / "get.lua").write_text(
            "\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in srv.headers.items())
            + "\ndone = function(s, l, r)\n"
            '  io.write(string.format("WRKJSON {\\"requests\\":%d,\\"seconds\\":%.6f,\\"p50\\":%d,\\"p99\\":%d}\\n",'
            " s.requests, s.duration / 1e6, l:percentile(50), l:percentile(99)))\nend\n"
        )
        r = subprocess.run([*argv, srv.url + path], capture_output=True, text=True, check=True)
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith("WRKJSON "))
        w = json.loads(line.removeprefix("WRKJSON "))
        return {
            "requests": w["requests"],
            "seconds": w["seconds"],
            "p50_ms": w["p50"] / 1000,
            "p99_ms": w["p99"] / 1000,
        }
    spec = {"url": srv.url + path, "headers": srv.headers, "conc": 1, "duration": seconds}
    return asyncio.run(_get_loop(spec))


async def _get_loop(spec: dict[str, Any]) -> dict[str, Any]:
    import aiohttp

    lat: list[float] = []
    async with aiohttp.ClientSession() as s:
        t_start = time.perf_counter()
        deadline = t_start + spec["duration"]
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            async with s.get(spec["url"], headers=spec["headers"]) as r:
                await r.read()
            lat.append(time.perf_counter() - t0)
        seconds = time.perf_counter() - t_start
    lat.sort()
    return {
        "requests": len(lat),
        "seconds": seconds,
        "p50_ms": lat[len(lat) // 2] * 1000,
        "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000,
    }


# ---------------------------------------------------------------------------------------------------------


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "bare-server":
        bare_server_main(int(sys.argv[2]), sys.argv[3], sys.argv[4])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9, help="in-process rounds (each runs both apps)")
    ap.add_argument("--requests", type=int, default=20_000, help="requests per app per round")
    ap.add_argument("--cases", nargs="*", choices=("healthz", "models", "models-nokeys", "chat"))
    ap.add_argument("--no-http", dest="http", action="store_false", help="skip the real-HTTP comparison")
    ap.add_argument("--http-rounds", type=int, default=3)
    ap.add_argument("--http-seconds", type=float, default=4.0)
    ap.add_argument("--quick", action="store_true", help="a second or two: proves the script works")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.requests, args.http_rounds, args.http_seconds = 2, 400, 1, 0.3
    report: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "keys": N_KEYS,
        "rounds": args.rounds,
        "requests_per_round": args.requests,
        "load_start": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="blazar-bench-mw-") as td:
        print("in process (µs per request, median of rounds):", file=sys.stderr, flush=True)
        try:
            import uvloop

            report["in_process"] = uvloop.run(in_process(args, Path(td) / "inproc"))
        except ImportError:
            report["in_process"] = asyncio.run(in_process(args, Path(td) / "inproc"))
        report["metrics"] = metrics_cost(args)
        if args.http:
            print("through HTTP (c=1):", file=sys.stderr, flush=True)
            report["http"] = through_http(args, Path(td) / "http")
    report["load_end"] = os.getloadavg()
    added = report["in_process"].get("models", {}).get("added_us")
    report["target"] = {"what": "middleware added per request, 100 keys (models case)", "value_us": added,
                        "target_us": 100, "met": added is not None and added < 100}  # fmt: skip
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
