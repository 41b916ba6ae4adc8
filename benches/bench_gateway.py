"""The gateway as a whole, in one run: direct to a fake upstream, a bare Python proxy, Blazar, LiteLLM proxy.

Targets, all driven with the same requests by a separate load-generator process (``wrk``, installed with
apt-get when missing and possible; else the aiohttp load generator of ``gateway_harness.py``, ``--loadgen python``):

  direct   the fake OpenAI upstream (``baselines/fake_upstream.py``: precomputed bytes on a raw asyncio server);
  bare     ``baselines/bare_proxy.py`` (Granian RSGI + aiohttp, orjson per chunk, no features) -> upstream;
  blazar   ``blazar serve`` with its full middleware (trace ids, 100 ``[[keys]]`` and auth, quotas, admission)
           -> its own child, ``baselines/fake_engine.py`` (the same fake upstream, registered as the llama-cpp
           engine binary, so the request takes Blazar's real path: catalog, supervisor, child key, proxy,
           native translator);
  litellm  LiteLLM proxy (``pip install 'litellm[proxy]'`` into its own venv under
           ``~/.cache/blazar/bench-venvs/litellm``; ``--no-litellm`` skips it) -> upstream.

Scenarios, each at every ``--concurrency`` (default 1, 16, 64):
  whole    non-streamed chat completions;
  stream   streamed chat completions, ``--chunks`` content events + finish + usage + [DONE], the upstream writing
           one event per socket write as fast as it can (how many events one proxy read holds then depends on
           how fast the proxy itself is);
  tokens   the same stream paced at one event per 5 ms per stream (a 200 tokens/s engine): each event reaches
           the proxy alone, so this is the per-read cost;
  burst    the same stream written by the upstream in one write: the per-event cost, reads batched.

Per cell: requests/s, streamed events ("chunks") per second as the client receives them, p50/p99 latency
(whole response), the added p50/p99 against direct in the same round, and the gateway process's CPU time
(all its threads, from /proc schedstat) per request and per chunk; for Blazar the ``blazar serve`` process
only, never its engine child; for LiteLLM the proxy process and its children. Every target runs in every
round (``--repeat``), rounds interleaved, the target order rotated; figures are medians over rounds, ratios
the median of per-round ratios. LiteLLM runs one round with a longer window (it is two orders slower).

Also: the ``x-blazar-overhead-ms`` header Blazar returns (sequential requests, and under load at c=16), and
with ``--profile DIR`` py-spy profiles of Blazar and the bare proxy under load at c=16 (top functions printed)
and, where ``perf`` can read syscall tracepoints, syscalls and context switches per request.

Usage:
  python benches/bench_gateway.py                      # full run; --json FILE to keep the figures
  python benches/bench_gateway.py --quick              # a few seconds, no LiteLLM: proves the script works
  python benches/bench_gateway.py --profile /tmp/prof  # also py-spy (installed into this venv when missing)
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateway_harness as harness
from gateway_harness import (
    N_KEYS,
    SCENARIOS,
    TARGETS,
    Bench,
    Server,
    default_model,
    ensure_wrk,
    log,
    med,
    one_request,
    probe,
    run_pyload,
    run_wrk,
    scenario_body,
    start_bare,
    start_blazar,
    start_litellm,
    start_upstream,
    summarize_ms,
)


def overhead_header(server: Server, n_whole: int, n_stream: int) -> dict[str, Any]:
    """``x-blazar-overhead-ms`` over sequential requests, next to the client's total time."""
    out: dict[str, Any] = {}
    for scenario, n in (("whole", n_whole), ("stream", n_stream)):
        values, totals = [], []
        for _ in range(n):
            status, headers, _data, took = one_request(server, scenario_body(scenario))
            assert status == 200
            values.append(float(headers["x-blazar-overhead-ms"]))
            totals.append(took * 1000)
        out[scenario] = summarize_ms(values) | {"client_total_p50_ms": round(statistics.median(totals), 3)}
    return out


def summarize(bench: Bench) -> dict[str, Any]:
    a = bench.args
    table: dict[str, Any] = {}
    for (target, scenario, conc), cells in bench.cells.items():
        row = {k: med([c[k] for c in cells]) for k in cells[0] if k != "errors"}
        row["errors"] = sum(c["errors"] for c in cells)
        row["rounds"] = len(cells)
        direct = bench.cells.get(("direct", scenario, conc))
        if direct and target != "direct":
            paired = list(zip(cells, direct, strict=False))
            row["added_p50_ms"] = med([c["p50_ms"] - d["p50_ms"] for c, d in paired])
            row["added_p99_ms"] = med([c["p99_ms"] - d["p99_ms"] for c, d in paired])
        table[f"{target}/{scenario}/{conc}"] = row
    # The per-chunk cost beyond a request's own: (CPU per streamed request - CPU per whole request) / events.
    for key, row in table.items():
        target, scenario, conc_s = key.split("/")
        whole = table.get(f"{target}/whole/{conc_s}")
        per_resp = bench.events_per_response[target].get(scenario)
        if scenario != "whole" and whole and per_resp:
            row["cpu_us_per_event_beyond_whole"] = (
                (row["cpu_ms_per_req"] - whole["cpu_ms_per_req"]) * 1000 / per_resp
            )

    def ratio(num: str, den: str, scenario: str, conc: int, key: str) -> float | None:
        n, d = bench.cells.get((num, scenario, conc)), bench.cells.get((den, scenario, conc))
        if not n or not d:
            return None
        if len(n) == len(d):
            return med([x[key] / y[key] if x[key] and y[key] else None for x, y in zip(n, d, strict=True)])
        nm, dm = med([x[key] for x in n]), med([y[key] for y in d])
        return nm / dm if nm and dm else None

    targets: list[dict[str, Any]] = []
    for conc in a.concurrency:
        for scenario in ("stream", "tokens", "burst"):
            if scenario in a.scenarios:
                r = ratio("blazar", "bare", scenario, conc, "cpu_us_per_event")
                targets.append(
                    {"what": f"Blazar CPU per chunk / bare ({scenario}, c={conc})", "value": r, "target": "<= 0.5",
                     "met": r is not None and r <= 0.5}
                )  # fmt: skip
                b = table.get(f"blazar/{scenario}/{conc}", {}).get("cpu_us_per_event_beyond_whole")
                p = table.get(f"bare/{scenario}/{conc}", {}).get("cpu_us_per_event_beyond_whole")
                targets.append(
                    {"what": f"(info) same, beyond a whole request's CPU ({scenario}, c={conc})",
                     "value": b / p if b is not None and p else None, "target": "<= 0.5",
                     "met": b is not None and bool(p) and b / p <= 0.5}
                )  # fmt: skip
        if "whole" in a.scenarios:
            r = ratio("blazar", "bare", "whole", conc, "rps")
            targets.append(
                {"what": f"Blazar req/s / bare (whole, c={conc})", "value": r, "target": ">= 0.8",
                 "met": r is not None and r >= 0.8}
            )  # fmt: skip
        # tokens: the upstream paces the stream, so throughput says nothing there; CPU per chunk does.
        for scenario, key in (("whole", "rps"), ("stream", "events_per_s"), ("burst", "events_per_s")):
            if scenario in a.scenarios and ("litellm", scenario, conc) in bench.cells:
                r = ratio("blazar", "litellm", scenario, conc, key)
                targets.append(
                    {"what": f"Blazar / LiteLLM throughput ({scenario}, c={conc})", "value": r, "target": ">= 50",
                     "met": r is not None and r >= 50}
                )  # fmt: skip
        if "tokens" in a.scenarios and ("litellm", "tokens", conc) in bench.cells:
            r = ratio("litellm", "blazar", "tokens", conc, "cpu_us_per_event")
            targets.append(
                {"what": f"(info) LiteLLM CPU per chunk / Blazar's (tokens, c={conc})", "value": r, "target": "-",
                 "met": True}
            )  # fmt: skip
    if 1 in a.concurrency:
        for scenario in a.scenarios:
            if scenario == "tokens":  # a 0.5 s token-paced stream: its p50 is the pacing, not the proxy
                continue
            row = table.get(f"blazar/{scenario}/1", {})
            v = row.get("added_p50_ms")
            targets.append(
                {"what": f"Blazar added p50 latency, c=1 ({scenario}), ms", "value": v, "target": "< 0.5",
                 "met": v is not None and v < 0.5}
            )  # fmt: skip
            v = table.get(f"bare/{scenario}/1", {}).get("added_p50_ms")
            targets.append(
                {"what": f"(info) bare proxy added p50 latency, c=1 ({scenario}), ms", "value": v, "target": "-",
                 "met": True}
            )  # fmt: skip
    return {"cells": table, "targets": targets}


def print_tables(report: dict[str, Any]) -> None:
    cells = report["cells"]
    a = report["settings"]
    print(
        f"\nload average: start {report['load_start']}, end {report['load_end']}; loadgen {report['loadgen']}"
    )
    for scenario in a["scenarios"]:
        print(f"\n### {scenario}\n")
        print(
            "| target | c | req/s | chunks/s | p50 ms | p99 ms | added p50 ms | added p99 ms"
            " | CPU ms/req | CPU µs/chunk | of which beyond a whole request | errors |"
        )
        print("| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
        for conc in a["concurrency"]:
            for target in TARGETS:
                row = cells.get(f"{target}/{scenario}/{conc}")
                if not row:
                    continue

                def f(v: float | None, fmt: str) -> str:
                    return "-" if v is None else format(v, fmt)

                print(
                    f"| {target} | {conc} | {f(row['rps'], ',.0f')} | {f(row['events_per_s'] or None, ',.0f')}"
                    f" | {f(row['p50_ms'], '.3f')} | {f(row['p99_ms'], '.3f')}"
                    f" | {f(row.get('added_p50_ms'), '.3f')} | {f(row.get('added_p99_ms'), '.3f')}"
                    f" | {f(row['cpu_ms_per_req'], '.3f')} | {f(row['cpu_us_per_event'], '.2f')}"
                    f" | {f(row.get('cpu_us_per_event_beyond_whole'), '.2f')}"
                    f" | {row['errors']} |"
                )
    print("\n### targets\n")
    print("| comparison | value | target | met |")
    print("| --- | --: | --- | --- |")
    for t in report["targets"]:
        v = "-" if t["value"] is None else f"{t['value']:.3f}"
        met = "-" if t["target"] == "-" else "yes" if t["met"] else "NO"
        print(f"| {t['what']} | {v} | {t['target']} | {met} |")
    if report.get("overhead_header"):
        print("\n### x-blazar-overhead-ms\n")
        print(json.dumps(report["overhead_header"], indent=2))
    if report.get("litellm_error"):
        print(f"\nLiteLLM: {report['litellm_error']}")


# ---------------------------------------------------------------------------------------------------------
# Profiling (py-spy)


def ensure_pyspy() -> str:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).is_file():
        log("installing py-spy into this venv")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=True)
    return exe


def top_functions(raw: Path, n: int = 15) -> dict[str, list[tuple[str, float]]]:
    """From py-spy's collapsed stacks, per function (lines merged): the most samples on top of the stack
    (``self``) and anywhere in it (``total``, leaving out the frames under nearly every sample: the loop)."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        c = int(count)
        samples += c
        frames = [re.sub(r":\d+\)$", ")", fr) for fr in stack.split(";") if fr.strip()]
        if not frames:
            frames = ["(no Python frame: Granian's runtime threads, native code)"]
        own[frames[-1]] += c
        for fr in set(frames):
            total[fr] += c
    pct = 100.0 / max(samples, 1)
    root = max(total.values(), default=0)  # the loop's frames, under every sample of the main thread
    return {
        "samples": [("all", float(samples))],
        "self": [(fr, round(c * pct, 1)) for fr, c in own.most_common(n)],
        "total": [(fr, round(c * pct, 1)) for fr, c in total.most_common(8 * n) if c < 0.95 * root][:n],
    }


PERF_EVENTS = (
    "context-switches",
    *(
        f"syscalls:sys_enter_{name}"
        for name in (
            "read",
            "recvfrom",
            "write",
            "writev",
            "epoll_wait",
            "futex",
            "fcntl",
            "getpid",
            "waitid",
        )
    ),
)


def syscalls_per_request(bench: Bench, seconds: int) -> dict[str, Any]:
    """``perf stat`` on the gateway process under load at c=16: syscalls and context switches per request."""
    perf = shutil.which("perf")
    if perf is None or bench.wrk is None:
        return {"error": "needs perf and wrk"}
    found: dict[str, Any] = {}
    for target in ("blazar", "bare"):
        server = bench.servers[target]
        for scenario in bench.args.scenarios:
            out = bench.tmp / f"perf-{target}-{scenario}.csv"
            argv = [
                perf,
                "stat",
                "-x",
                ",",
                "-o",
                str(out),
                "-e",
                ",".join(PERF_EVENTS),
                "-p",
                str(server.proc.pid),
            ]
            stat = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(0.5)
            r = run_wrk(bench.wrk, server, scenario_body(scenario), 16, seconds, bench.tmp)
            stat.send_signal(signal.SIGINT)
            _, err = stat.communicate(timeout=30)
            counts = {}
            for line in out.read_text().splitlines() if out.is_file() else []:
                parts = line.split(",")
                if len(parts) > 3 and parts[0].strip().isdigit():
                    counts[parts[2].removeprefix("syscalls:sys_enter_")] = round(
                        int(parts[0]) / r["requests"], 2
                    )
            found[f"{target}/{scenario}"] = counts or {"error": err[-500:]}
            log(f"perf {target}/{scenario}: {counts}")
    return found


def profile(bench: Bench, out_dir: Path, seconds: int, native: bool) -> dict[str, Any]:
    pyspy = ensure_pyspy()
    out_dir.mkdir(parents=True, exist_ok=True)
    found: dict[str, Any] = {}
    for target in ("blazar", "bare"):
        server = bench.servers[target]
        for scenario in bench.args.scenarios:
            raw = out_dir / f"{target}-{scenario}.txt"
            argv = [
                pyspy,
                "record",
                "--pid",
                str(server.proc.pid),
                "--duration",
                str(seconds),
                "--rate",
                "250",
            ]
            argv += ["--format", "raw", "--output", str(raw), "--nonblocking"]
            if native:
                argv.append("--native")
            spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(1.0)
            body = scenario_body(scenario)
            if bench.wrk:
                run_wrk(bench.wrk, server, body, 16, seconds + 1, bench.tmp)
            else:
                run_pyload(server, body, 16, seconds + 1, None)
            _, err = spy.communicate(timeout=seconds + 60)
            if spy.returncode != 0 or not raw.is_file():
                found[f"{target}/{scenario}"] = {"error": err[-2000:]}
                continue
            found[f"{target}/{scenario}"] = top_functions(raw)
            log(f"profile {target}/{scenario}: {raw}")
    found["syscalls_per_request_c16"] = syscalls_per_request(bench, 4)
    return found


# ---------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def servers_up(args: argparse.Namespace, tmp: Path, report: dict[str, Any]) -> Iterator[dict[str, Server]]:
    key_file = tmp / "upstream.key"
    key_file.write_text(secrets.token_urlsafe(24))
    started: dict[str, Server] = {}
    try:
        started["direct"] = start_upstream(tmp, args.chunks, key_file)
        started["bare"] = start_bare(tmp, started["direct"], key_file)
        started["blazar"] = start_blazar(tmp, args.model, args.chunks, args.engine_tcp)
        if args.litellm:
            try:
                started["litellm"] = start_litellm(tmp, started["direct"], key_file)
            except Exception as e:
                report["litellm_error"] = f"{type(e).__name__}: {e}"[-4000:]
                log(f"LiteLLM unavailable: {report['litellm_error']}")
        yield started
    finally:
        for s in reversed(list(started.values())):
            s.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="a GGUF to import into Blazar (never loaded)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per measurement")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up per cell, first round only")
    ap.add_argument("--repeat", type=int, default=3, help="rounds (direct, bare, blazar each round)")
    ap.add_argument("--chunks", type=int, default=100, help="content events per streamed response")
    ap.add_argument("--loadgen", choices=("wrk", "python"), default="wrk")
    ap.add_argument("--no-litellm", dest="litellm", action="store_false")
    ap.add_argument(
        "--engine-tcp", action="store_true", help="Blazar's engine on a TCP port, not a unix socket"
    )
    ap.add_argument("--litellm-duration", type=float, default=12.0)
    ap.add_argument("--overhead-samples", type=int, default=300, help="sequential requests for the header")
    ap.add_argument("--profile", type=Path, default=None, help="py-spy Blazar and the bare proxy into DIR")
    ap.add_argument("--profile-seconds", type=int, default=8)
    ap.add_argument("--profile-native", action="store_true", help="py-spy --native (Rust/C frames too)")
    ap.add_argument("--quick", action="store_true", help="a few seconds, python load generator, no LiteLLM")
    ap.add_argument("--json", type=Path, default=None, help="write the report here too")
    args = ap.parse_args()
    if args.quick:
        args.concurrency, args.duration, args.warmup, args.repeat = [1, 4], 0.3, 0.0, 1
        args.chunks, args.loadgen, args.litellm, args.overhead_samples = 10, "python", False, 10
        harness.IN_PROCESS_LOADGEN = True
    if args.model is None:
        args.model = default_model()

    wrk = ensure_wrk() if args.loadgen == "wrk" else None
    if args.loadgen == "wrk" and wrk is None:
        log("wrk is not installed and could not be installed; using the python load generator")
    report: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "loadgen": "wrk -t1" if wrk else "python (aiohttp)",
        "load_start": os.getloadavg(),
        "settings": {
            "concurrency": args.concurrency,
            "scenarios": args.scenarios,
            "duration_s": args.duration,
            "repeat": args.repeat,
            "chunks": args.chunks,
            "keys": N_KEYS,
        },
    }
    with (
        tempfile.TemporaryDirectory(prefix="blazar-bench-gw-") as td,
        servers_up(args, Path(td), report) as srv,
    ):
        tmp = Path(td)
        events = {name: probe(s) for name, s in srv.items()}
        report["events_per_response"] = events
        log(f"servers up; SSE events per streamed response: {events}")
        bench = Bench(args, tmp, wrk, srv, events)
        report["overhead_header"] = {
            "sequential": overhead_header(
                srv["blazar"], args.overhead_samples, max(10, args.overhead_samples // 3)
            )
        }
        bench.run()
        report.update(summarize(bench))
        if args.json:  # keep the figures even if a later step fails
            args.json.write_text(json.dumps(report, indent=2, default=str))
        try:
            loaded = run_pyload(
                srv["blazar"], scenario_body("whole"), 16, max(args.duration, 0.5), "x-blazar-overhead-ms"
            )
            report["overhead_header"]["whole_c16_under_load"] = loaded.get("captured")
        except Exception as e:
            log(f"overhead header under load: {e}")
        if args.profile:
            try:
                report["profile"] = profile(bench, args.profile, args.profile_seconds, args.profile_native)
            except Exception as e:
                report["profile"] = {"error": f"{type(e).__name__}: {e}"}
    report["load_end"] = os.getloadavg()
    print_tables(report)
    if report.get("profile"):
        print("\n### py-spy top functions (% of samples)\n")
        print(json.dumps(report["profile"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
