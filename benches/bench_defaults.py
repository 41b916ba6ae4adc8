"""Blazar's defaults against the engine's own: never serve a workload worse than the bare engine would.

Streamed chat, in one run, through two targets over the same real ``llama-server`` build and the same SmolLM2 GGUF
(the test assets, ``make assets``):

- **direct**: ``llama-server -m MODEL --host 127.0.0.1 --port P`` and nothing else, its own defaults (``--parallel
  -1``: 4 slots over a unified KV cache; the model's trained context);
- **blazar**: ``blazar serve`` on an empty config (its defaults: ``parallel = "auto"``, ``ctx_size = 4096``,
  ``queue_wait_secs = 30``), the same binary registered with ``blazar engine add``, the model imported.

Each cell is C clients streaming at once, each sending requests one after another (``max(2, 64 // C)`` each), every
request ``max_tokens`` tokens with ``ignore_eos`` (so both targets generate the same number). Rounds interleave the
targets and rotate their order. Figures per cell: aggregate completion tokens/s (tokens over the cell's wall time),
p50/p99 time to first token, and errors (a status other than 200, or a stream without ``[DONE]``). The ratio is
the median over rounds of blazar / direct tokens/s. Also: the CPU the gateway process itself spent per completion
token (its threads, not the engine child's), which on a machine with few cores is taken from the engine's threads.
Target: at least 0.95x in every cell, and no error through Blazar in a cell where direct has none; the script exits
1 when a cell misses it.

    .venv/bin/python benches/bench_defaults.py [--concurrency 1 4 16 64] [--rounds 3] [--tokens 32] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateway_harness as gw

PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper and the sea."}]


def assets() -> tuple[Path, Path]:
    manifest = gw.cache_dir() / "assets.json"
    if not manifest.is_file():
        raise SystemExit(f"{manifest} is missing: run `make assets` first")
    data = json.loads(manifest.read_text())
    return Path(data["llama_server"]), Path(data["model"])


def start_direct(tmp: Path, server: Path, model: Path) -> gw.Server:
    port = gw.free_port()
    argv = [str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    proc, log_path = gw.spawn("direct", argv, tmp)
    s = gw.Server("direct", f"http://127.0.0.1:{port}", proc, log_path)
    gw.wait_http(s, "/health", 300)
    return s


def start_blazar(tmp: Path, server: Path, model: Path) -> gw.Server:
    root = tmp / "blazar"
    root.mkdir()
    port = gw.free_port()
    cfg = root / "config.toml"
    cfg.write_text("")  # the embedded defaults
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLAZAR_")}
    env.update(BLAZAR_CONFIG=str(cfg), BLAZAR_DATA_DIR=str(root / "data"), BLAZAR_PORT=str(port))
    blazar = [sys.executable, "-m", "blazar"]
    for args in (
        ["engine", "add", "--kind", "llama-cpp", "--path", str(server)],
        ["import", str(model), "--name", "smollm2"],
    ):
        r = subprocess.run([*blazar, *args], env=env, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"blazar {' '.join(args)} failed:\n{r.stdout}{r.stderr}")
    proc, log_path = gw.spawn("blazar", [*blazar, "serve"], tmp, env)
    s = gw.Server("blazar", f"http://127.0.0.1:{port}", proc, log_path)
    gw.wait_http(s, "/healthz", 60)
    return s


def body(tokens: int) -> bytes:
    return orjson.dumps(
        {
            "model": "smollm2",
            "messages": PROMPT,
            "max_tokens": tokens,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )


async def one(session: aiohttp.ClientSession, url: str, payload: bytes) -> dict[str, Any]:
    """One streamed request: its status, time to the first content token, completion tokens, and whether the
    stream ended with ``[DONE]``."""
    t0 = time.perf_counter()
    ttft: float | None = None
    tokens = 0
    done = False
    async with session.post(
        url + "/v1/chat/completions", data=payload, headers={"content-type": "application/json"}
    ) as r:
        status = r.status
        async for line in r.content:
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                done = True
                continue
            if ttft is None and b'"content":"' in data and b'"content":""' not in data:
                ttft = time.perf_counter() - t0
            if b'"usage"' in data:
                usage = orjson.loads(data).get("usage") or {}
                tokens = int(usage.get("completion_tokens") or tokens)
    return {"ok": status == 200 and done, "status": status, "ttft": ttft, "tokens": tokens}


async def cell(url: str, clients: int, per_client: int, payload: bytes) -> dict[str, Any]:
    """``clients`` streaming at once, each sending ``per_client`` requests in turn."""
    # a connection per request, for both targets: llama-server closes a kept-alive connection after a streamed
    # answer, and a client that reuses it fails its next request ("Can not write request body")
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def client() -> list[dict[str, Any]]:
            out = []
            for _ in range(per_client):
                try:
                    out.append(await one(session, url, payload))
                except (TimeoutError, aiohttp.ClientError) as e:
                    out.append({"ok": False, "status": type(e).__name__, "ttft": None, "tokens": 0})
            return out

        t0 = time.perf_counter()
        results = [r for rs in await asyncio.gather(*(client() for _ in range(clients))) for r in rs]
        wall = time.perf_counter() - t0
    ttfts = sorted(r["ttft"] for r in results if r["ttft"] is not None)
    tokens = sum(r["tokens"] for r in results if r["ok"])
    return {
        "requests": len(results),
        "errors": sum(not r["ok"] for r in results),
        "statuses": sorted({str(r["status"]) for r in results if not r["ok"]}),
        "tokens": tokens,
        "wall_s": wall,
        "tok_s": tokens / wall if wall > 0 else 0.0,
        "ttft_p50_ms": 1000 * pct(ttfts, 50) if ttfts else None,
        "ttft_p99_ms": 1000 * pct(ttfts, 99) if ttfts else None,
    }


def pct(sorted_values: list[float], p: float) -> float:
    """The p-th percentile by nearest rank."""
    k = max(0, min(len(sorted_values) - 1, round(p / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32, help="max_tokens of every request (ignore_eos)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    server, model = assets()
    payload = body(args.tokens)
    with tempfile.TemporaryDirectory(prefix="bench-defaults-") as tmpdir:
        tmp = Path(tmpdir)
        targets = [start_direct(tmp, server, model), start_blazar(tmp, server, model)]
        try:
            for t in targets:  # load the model (Blazar starts its engine on the first request)
                warm = asyncio.run(cell(t.url, 1, 1, payload))
                if warm["errors"]:
                    raise SystemExit(f"{t.name} did not answer: {warm}\n{t.log_path.read_text()[-3000:]}")
            runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
            for r in range(args.rounds):
                for c in args.concurrency:
                    order = targets if (r + c) % 2 == 0 else targets[::-1]
                    for t in order:
                        before = t.cpu_snapshot()  # the target's own process: the gateway, or the bare engine
                        res = asyncio.run(cell(t.url, c, max(2, 64 // c), payload))
                        res["cpu_s"] = t.cpu_between(before, t.cpu_snapshot())
                        res["load"] = gw.loadavg()
                        runs.setdefault((t.name, c), []).append(res)
                        gw.log(
                            f"round {r + 1} c={c} {t.name}: {res['tok_s']:.1f} tok/s, ttft p50"
                            f" {res['ttft_p50_ms'] or 0:.0f} ms, {res['errors']} errors"
                        )
        finally:
            for t in targets:
                t.stop()
    report(args, runs)


def per_token_us(rs: list[dict[str, Any]]) -> float:
    """The gateway's CPU per completion token over the cell's rounds, in µs."""
    tokens = sum(x["tokens"] for x in rs)
    return 1e6 * sum(x["cpu_s"] for x in rs) / tokens if tokens else float("nan")


def report(args: argparse.Namespace, runs: dict[tuple[str, int], list[dict[str, Any]]]) -> None:
    rows = []
    missed = False
    print("| streams | direct tok/s | blazar tok/s | ratio (median) | worst round | TTFT p50 direct / blazar |"
          " TTFT p99 direct / blazar | errors direct / blazar | gateway CPU per token |")  # fmt: skip
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in args.concurrency:
        d, b = runs[("direct", c)], runs[("blazar", c)]
        ratios = [bb["tok_s"] / dd["tok_s"] for dd, bb in zip(d, b, strict=True) if dd["tok_s"] > 0]
        ratio = statistics.median(ratios) if ratios else 0.0
        errors_d, errors_b = sum(x["errors"] for x in d), sum(x["errors"] for x in b)

        def med(rs: list[dict[str, Any]], key: str) -> float:
            vals = [x[key] for x in rs if x[key] is not None]
            return statistics.median(vals) if vals else float("nan")

        ok = ratio >= 0.95 and not (errors_b and not errors_d)
        missed |= not ok
        rows.append({"streams": c, "ratio": ratio, "worst": min(ratios, default=0.0), "ok": ok,
                     "direct": d, "blazar": b})  # fmt: skip
        print(
            f"| {c} | {med(d, 'tok_s'):,.1f} | {med(b, 'tok_s'):,.1f} | {ratio:.3f}x | {min(ratios, default=0):.3f}x"
            f" | {med(d, 'ttft_p50_ms'):,.0f} / {med(b, 'ttft_p50_ms'):,.0f} ms"
            f" | {med(d, 'ttft_p99_ms'):,.0f} / {med(b, 'ttft_p99_ms'):,.0f} ms | {errors_d} / {errors_b}"
            f" | {per_token_us(b):,.0f} µs |"
        )
    verdict = "missed" if missed else "met"
    print(
        f"\ntarget (>= 0.95x tokens/s in every cell, no error through blazar where direct has none): {verdict}"
    )
    if args.json is not None:
        args.json.write_text(
            json.dumps({"tokens": args.tokens, "rounds": args.rounds, "cells": rows}, indent=2)
        )
    if missed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
