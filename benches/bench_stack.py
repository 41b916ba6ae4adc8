"""The serving stack, chosen by measurement: Granian's interface (RSGI or ASGI) and the client to the engine.

One run, one fast fake upstream (``baselines/fake_upstream.py``), and the bare proxy of ``baselines/bare_proxy.py``
with one part swapped at a time, all on embedded Granian as ``blazar serve`` runs it:

- ``rsgi+aiohttp``: the baseline ``bench_gateway.py`` calls "bare" (RSGI, an aiohttp session, orjson per event);
- ``asgi+aiohttp``: the same app behind Granian's ASGI interface;
- ``rsgi+httpx``: the same app with an ``httpx.AsyncClient``;
- ``rsgi+native``: Blazar's own engine connections and native OpenAI translator (``Links`` + ``EngineLink``,
  ``StreamTranslator``, ``translate_whole``) with none of Blazar's middleware.

Scenarios as in ``bench_gateway.py`` (whole, stream, tokens, burst; see benches/README.md), each at the given
concurrencies, ``wrk`` driving, variants interleaved and their order rotated each round; medians over rounds.
Figures: requests/s and the proxy process's CPU per request (whole) or per SSE event (streams), each also as a
ratio to ``rsgi+aiohttp`` measured in the same round.

    .venv/bin/python benches/bench_stack.py [--json FILE] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateway_harness as gw

VARIANTS = {
    "rsgi+aiohttp": ("rsgi", "aiohttp"),
    "asgi+aiohttp": ("asgi", "aiohttp"),
    "rsgi+httpx": ("rsgi", "httpx"),
    "rsgi+native": ("rsgi", "native"),
}
BASE = "rsgi+aiohttp"


def start_variant(name: str, tmp: Path, upstream: str, key_file: Path) -> gw.Server:
    interface, client = VARIANTS[name]
    port = gw.free_port()
    argv = [sys.executable, str(gw.BARE_PROXY), "--port", str(port), "--upstream", upstream]
    argv += ["--api-key-file", str(key_file), "--interface", interface, "--client", client]
    proc, log_path = gw.spawn(name.replace("+", "-"), argv, tmp)
    server = gw.Server(name, f"http://127.0.0.1:{port}", proc, log_path)
    gw.wait_http(server, "/health", 60)
    return server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    ap.add_argument("--scenarios", nargs="+", choices=gw.SCENARIOS, default=list(gw.SCENARIOS))
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per measurement")
    ap.add_argument("--repeat", type=int, default=2, help="rounds")
    ap.add_argument("--chunks", type=int, default=100, help="content events per streamed response")
    ap.add_argument(
        "--quick", action="store_true", help="a few seconds, python load generator: checks the script"
    )
    ap.add_argument(
        "--native-unix",
        action="store_true",
        help="rsgi+native reaches a second fake upstream on a unix socket, as blazar serve reaches its engines",
    )
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.quick:
        args.concurrency, args.duration, args.repeat, args.chunks = [1, 4], 0.3, 1, 10
        gw.IN_PROCESS_LOADGEN = True
    if BASE not in args.variants:
        args.variants.insert(0, BASE)
    wrk = None if args.quick else gw.ensure_wrk()
    if wrk is None and not args.quick:
        gw.log("wrk is not installed and could not be installed; using the python load generator")
    report: dict[str, Any] = {
        "load_start": os.getloadavg(),
        "settings": vars(args) | {"json": str(args.json)},
    }
    servers: dict[str, gw.Server] = {}
    with tempfile.TemporaryDirectory(prefix="blazar-bench-stack-") as td:
        tmp = Path(td)
        key_file = tmp / "upstream.key"
        key_file.write_text(secrets.token_urlsafe(24))
        try:
            upstream = gw.start_upstream(tmp, args.chunks, key_file)
            servers["direct"] = upstream
            unix = None
            if args.native_unix:
                unix = gw.start_unix_upstream(tmp, args.chunks, key_file)
                servers["direct-unix"] = unix
            for name in args.variants:
                via = f"unix:{unix.url}" if unix is not None and name == "rsgi+native" else upstream.url
                servers[name] = start_variant(name, tmp, via, key_file)
            events = {name: gw.probe(s) for name, s in servers.items() if not name.startswith("direct")}
            gw.log(f"variants up; SSE events per streamed response: {events}")
            bench = gw.Bench(args, tmp, wrk, servers, events)
            cells: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
            for rep in range(args.repeat):
                for scenario in args.scenarios:
                    for conc in args.concurrency:
                        k = rep % len(args.variants)
                        for name in args.variants[k:] + args.variants[:k]:
                            if rep == 0 and not args.quick:
                                bench.measure(name, scenario, conc, 0.5)  # warm-up
                            cell = bench.measure(name, scenario, conc, args.duration)
                            cell["round"] = rep
                            cells.setdefault((name, scenario, conc), []).append(cell)
                            gw.log(
                                f"round {rep + 1}/{args.repeat} {scenario:<6} c={conc:<3} {name:<13}"
                                f" {cell['rps']:>8,.0f} req/s cpu {cell['cpu_ms_per_req']:.3f} ms/req"
                                f" {cell['cpu_us_per_event'] or 0:.1f} us/event errors {cell['errors']}"
                            )
        finally:
            for s in reversed(list(servers.values())):
                s.stop()
    report["cells"] = summarize(cells, args)
    report["load_end"] = os.getloadavg()
    print_table(report["cells"], args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))


def summarize(
    cells: dict[tuple[str, str, int], list[dict[str, Any]]], args: argparse.Namespace
) -> dict[str, Any]:
    """Per variant, scenario and concurrency: medians, and the median of per-round ratios to the baseline."""
    out: dict[str, Any] = {}
    for (name, scenario, conc), runs in cells.items():
        base = {c["round"]: c for c in cells[(BASE, scenario, conc)]}
        key = "cpu_ms_per_req" if scenario == "whole" else "cpu_us_per_event"

        def ratio(c: dict[str, Any], k: str, base: dict[int, dict[str, Any]] = base) -> float | None:
            b = base[c["round"]][k]
            return c[k] / b if c[k] and b else None

        out[f"{name}/{scenario}/{conc}"] = {
            "requests": sum(c["requests"] for c in runs),
            "rps": statistics.median(c["rps"] for c in runs),
            "events_per_s": statistics.median(c["events_per_s"] for c in runs),
            "cpu": gw.med([c[key] for c in runs]),
            "cpu_unit": "ms/request" if scenario == "whole" else "us/event",
            "cpu_vs_base": gw.med([ratio(c, key) for c in runs]),
            "rps_vs_base": gw.med([ratio(c, "rps") for c in runs]),
            "errors": sum(c["errors"] for c in runs),
        }
    return out


def print_table(cells: dict[str, Any], args: argparse.Namespace) -> None:
    print("\n| variant | scenario | " + " | ".join(f"c={c}" for c in args.concurrency) + " |")
    print("| --- | --- | " + " | ".join("--:" for _ in args.concurrency) + " |")
    for scenario in args.scenarios:
        for name in args.variants:
            row = []
            for conc in args.concurrency:
                c = cells[f"{name}/{scenario}/{conc}"]
                rate = f"{c['rps']:,.0f} req/s" if scenario == "whole" else f"{c['events_per_s']:,.0f} ev/s"
                unit = "ms" if scenario == "whole" else "µs"
                cpu = (
                    "-"
                    if c["cpu"] is None
                    else f"{c['cpu']:.3f}"
                    if scenario == "whole"
                    else f"{c['cpu']:.1f}"
                )
                ratio = "" if name == BASE or c["cpu_vs_base"] is None else f" ({c['cpu_vs_base']:.2f}x CPU)"
                row.append(f"{rate}, {cpu} {unit}{ratio}")
            print(f"| {name} | {scenario} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
