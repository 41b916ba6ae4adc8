"""The gateway benchmarks' harness: the processes under test, the requests, the load generators and the
measurement of one cell, shared by ``bench_gateway.py`` and ``bench_stack.py``.

It owns starting and stopping the fake upstream, the bare proxy, ``blazar serve`` over the fake engine and
LiteLLM; probing that each answers every scenario; driving load with ``wrk`` (or the aiohttp load generator
below, run as ``python benches/gateway_harness.py loadgen SPEC``); and reading a process's CPU time from
/proc schedstat. Reports and targets belong to the bench scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from blazar import paths

HERE = Path(__file__).resolve().parent
BASELINES = HERE / "baselines"
FAKE_UPSTREAM = BASELINES / "fake_upstream.py"
FAKE_ENGINE = BASELINES / "fake_engine.py"
BARE_PROXY = BASELINES / "bare_proxy.py"

N_KEYS = 100
SCENARIOS = ("whole", "stream", "tokens", "burst")
MODELS = {"whole": "bench", "stream": "bench", "tokens": "bench-tokens", "burst": "bench-burst"}
TARGETS = ("direct", "bare", "blazar", "litellm")
LITELLM_SPEC = "litellm[proxy]"


def cache_dir() -> Path:
    return paths.cache_dir()  # $BLAZAR_CACHE_DIR, else the user's cache: ~/.cache/blazar


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def loadavg() -> float:
    return round(os.getloadavg()[0], 2)


# ---------------------------------------------------------------------------------------------------------
# Requests


def request_body(model: str, stream: bool) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": "Tell me about foxes."}],
        "max_tokens": 128,
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body, separators=(",", ":")).encode()


def scenario_body(scenario: str) -> bytes:
    return request_body(MODELS[scenario], scenario != "whole")


# ---------------------------------------------------------------------------------------------------------
# Processes under test


@dataclass
class Server:
    name: str
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    headers: dict[str, str] = field(default_factory=dict)
    include_children: bool = False
    """Count the CPU of the process's children too (LiteLLM's workers); never for Blazar's engine child."""

    def pids(self) -> list[int]:
        p = psutil.Process(self.proc.pid)
        if not self.include_children:
            return [p.pid]
        return [p.pid, *(c.pid for c in p.children(recursive=True))]

    def cpu_snapshot(self) -> dict[tuple[int, int], float]:
        """CPU seconds per thread of the process (and of its children for LiteLLM), from
        ``/proc/PID/task/TID/schedstat`` (nanoseconds; psutil's process times tick at 10 ms, too coarse for a
        few token-paced streams). Falls back to psutil's process times where /proc has no schedstat."""
        snap: dict[tuple[int, int], float] = {}
        for pid in self.pids():
            try:
                tasks = os.listdir(f"/proc/{pid}/task")
            except OSError:
                tasks = []
            for tid in tasks:
                try:
                    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                        snap[(pid, int(tid))] = int(f.read().split()[0]) / 1e9
                except (OSError, ValueError, IndexError):
                    continue
            if not tasks:
                with contextlib.suppress(psutil.NoSuchProcess):
                    t = psutil.Process(pid).cpu_times()
                    snap[(pid, 0)] = t.user + t.system
        return snap

    @staticmethod
    def cpu_between(before: dict[tuple[int, int], float], after: dict[tuple[int, int], float]) -> float:
        """CPU seconds between two snapshots: threads present in both, plus threads born in between (a thread
        that ended in between is lost; the servers here keep theirs)."""
        return sum(t - before.get(k, 0.0) for k, t in after.items())

    def cpu_seconds(self) -> float:
        return sum(self.cpu_snapshot().values())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def spawn(name: str, argv: list[str], tmp: Path, env: dict[str, str] | None = None) -> tuple[Any, Path]:
    log_path = tmp / f"{name}.log"
    with log_path.open("ab") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=f, stdin=subprocess.DEVNULL, env=env)
    return proc, log_path


def wait_http(server: Server, path: str, timeout: float) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive():
            raise RuntimeError(f"{server.name} exited:\n{server.log_path.read_text()[-3000:]}")
        try:
            c = http.client.HTTPConnection(host, int(port), timeout=2)
            c.request("GET", path)
            if c.getresponse().status < 500:
                c.close()
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(
        f"{server.name} did not answer {path} within {timeout}s:\n{server.log_path.read_text()}"
    )


def start_upstream(tmp: Path, chunks: int, key_file: Path) -> Server:
    port = free_port()
    argv = [sys.executable, str(FAKE_UPSTREAM), "--port", str(port), "--api-key-file", str(key_file)]
    proc, lp = spawn("upstream", [*argv, "--chunks", str(chunks)], tmp)
    s = Server("direct", f"http://127.0.0.1:{port}", proc, lp)
    s.headers = {"authorization": f"Bearer {key_file.read_text().strip()}"}
    wait_http(s, "/health", 30)
    return s


def start_unix_upstream(tmp: Path, chunks: int, key_file: Path) -> Server:
    """The fake upstream on a unix socket (its ``url`` is the socket's path): a second engine for the native
    link, which reaches it as ``blazar serve`` reaches a llama-server child."""
    path = tmp / "upstream.sock"
    argv = [sys.executable, str(FAKE_UPSTREAM), "--host", str(path), "--api-key-file", str(key_file)]
    proc, lp = spawn("upstream-unix", [*argv, "--chunks", str(chunks)], tmp)
    s = Server("direct-unix", str(path), proc, lp)
    deadline = time.monotonic() + 30
    while not path.exists():
        if not s.alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the unix upstream did not start:\n{lp.read_text()[-3000:]}")
        time.sleep(0.05)
    return s


def start_bare(tmp: Path, upstream: Server, key_file: Path) -> Server:
    port = free_port()
    argv = [sys.executable, str(BARE_PROXY), "--port", str(port), "--upstream", upstream.url]
    proc, lp = spawn("bare", [*argv, "--api-key-file", str(key_file)], tmp)
    s = Server("bare", f"http://127.0.0.1:{port}", proc, lp)
    wait_http(s, "/health", 60)
    return s


def blazar_config(port: int, chunks: int, secrets_: list[str]) -> str:
    """100 keys with limits that the benchmark never reaches (so every quota path runs and none rejects);
    the benchmark's key is scoped to the bench models. ``parallel`` is raised so admission never queues:
    the fake engine has no slots, and the default of 1 would serialize every request."""
    lines = [
        'host = "127.0.0.1"',
        f"port = {port}",
        "parallel = 256",
        "idle_timeout_secs = 0",
        "",
    ]
    for name in sorted(set(MODELS.values())):
        lines += [f'[models."{name}:latest"]', f'extra_args = ["--chunks", "{chunks}"]', ""]
    return "\n".join(lines) + bench_keys(secrets_, sorted(set(MODELS.values())))


def bench_keys(secrets_: list[str], models: list[str]) -> str:
    """``[[keys]]`` tables for the benches: one per secret, weights 1-4, limits no run reaches (so every quota
    path runs and none refuses), every other key scoped to ``models``."""
    lines: list[str] = []
    for i, secret in enumerate(secrets_):
        lines += [
            "[[keys]]",
            f'name = "bench-{i:03d}"',
            f'secret = "{secret}"',
            f"weight = {1 + i % 4}",
            "max_concurrent = 100000",
            "rpm = 1000000000",
            "tpm = 1000000000000",
            "daily_tokens = 1000000000000000",
        ]
        if i % 2 == 0:
            lines.append(f"models = {json.dumps(models)}")
        lines.append("")
    return "\n".join(lines)


def start_blazar(tmp: Path, model: Path, chunks: int, engine_tcp: bool = False) -> Server:
    root = tmp / "blazar"
    root.mkdir()
    port = free_port()
    keys = [f"sk-bench-{secrets.token_hex(16)}" for _ in range(N_KEYS)]
    cfg = root / "config.toml"
    cfg.write_text(blazar_config(port, chunks, keys))
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLAZAR_")}
    env.update(BLAZAR_CONFIG=str(cfg), BLAZAR_DATA_DIR=str(root / "data"))
    # fake_engine.py's shebang is `/usr/bin/env python3`: let it find this interpreter (and its uvloop).
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    blazar = [sys.executable, "-m", "blazar"]
    # fake_engine.py answers --version as llama-server b11434, so Blazar starts it on a unix socket; with
    # --engine-tcp it answers nothing (an unknown build) and Blazar gives it a TCP port, as before run E.
    add_env = {**env, "FAKE_ENGINE_VERSION": "" if engine_tcp else "1"}
    for args in (
        ["engine", "add", "--kind", "llama-cpp", "--path", str(FAKE_ENGINE)],
        *(["import", str(model), "--name", name] for name in sorted(set(MODELS.values()))),
    ):
        r = subprocess.run([*blazar, *args], env=add_env, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"blazar {' '.join(args)} failed:\n{r.stdout}{r.stderr}")
    proc, lp = spawn("blazar", [*blazar, "serve"], tmp, env)
    s = Server("blazar", f"http://127.0.0.1:{port}", proc, lp)
    s.headers = {"authorization": f"Bearer {keys[N_KEYS // 2]}"}  # bench-050: scoped to the bench models
    wait_http(s, "/healthz", 60)
    return s


def ensure_litellm() -> Path:
    """The LiteLLM venv's ``litellm`` script, creating the venv and installing LiteLLM when missing."""
    venv = cache_dir() / "bench-venvs" / "litellm"
    exe = venv / "bin" / "litellm"
    if exe.is_file():
        return exe
    log(f"installing {LITELLM_SPEC} into {venv} (one time; minutes)")
    if not (venv / "bin" / "python").is_file():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    r = subprocess.run([*pip, LITELLM_SPEC], capture_output=True, text=True, timeout=1800)
    if r.returncode != 0 or not exe.is_file():
        raise RuntimeError(f"pip install {LITELLM_SPEC} failed:\n{(r.stdout + r.stderr)[-3000:]}")
    return exe


def start_litellm(tmp: Path, upstream: Server, key_file: Path) -> Server:
    exe = ensure_litellm()
    port = free_port()
    master = f"sk-{secrets.token_hex(16)}"
    upstream_key = key_file.read_text().strip()
    models = "".join(
        f"  - model_name: {name}\n"
        f"    litellm_params:\n"
        f"      model: openai/{name}\n"
        f"      api_base: {upstream.url}/v1\n"
        f"      api_key: {upstream_key}\n"
        for name in sorted(set(MODELS.values()))
    )
    cfg = tmp / "litellm.yaml"
    cfg.write_text(f"model_list:\n{models}general_settings:\n  master_key: {master}\n")
    env = dict(os.environ)
    # No network on the bench machine: use the bundled model-cost map; no telemetry.
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_TELEMETRY="False", LITELLM_LOG="ERROR")
    argv = [str(exe), "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    proc, lp = spawn("litellm", argv, tmp, env)
    s = Server("litellm", f"http://127.0.0.1:{port}", proc, lp, include_children=True)
    s.headers = {"authorization": f"Bearer {master}"}
    wait_http(s, "/health/liveliness", 180)
    return s


# ---------------------------------------------------------------------------------------------------------
# Probes: one request per scenario, checked; the x-blazar-overhead-ms header


def one_request(server: Server, body: bytes) -> tuple[int, dict[str, str], bytes, float]:
    host, port = server.url.removeprefix("http://").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=120)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, {"content-type": "application/json", **server.headers})
    r = c.getresponse()
    data = r.read()
    took = time.perf_counter() - t0
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data, took


def count_events(data: bytes) -> int:
    return data.replace(b"\r\n", b"\n").count(b"\n\n")


def probe(server: Server) -> dict[str, int]:
    """Check every scenario answers 200 with the expected shape; return SSE events per streamed response."""
    events = {}
    for scenario in SCENARIOS:
        status, _h, data, _t = one_request(server, scenario_body(scenario))
        if status != 200:
            raise RuntimeError(f"{server.name} {scenario}: HTTP {status}: {data[:500]!r}")
        if scenario == "whole":
            obj = json.loads(data)
            assert obj["choices"][0]["message"]["content"], data[:300]
            events[scenario] = 0
        else:
            assert data.rstrip().endswith(b"data: [DONE]"), data[-300:]
            events[scenario] = count_events(data)
    return events


def summarize_ms(values: list[float]) -> dict[str, Any]:
    values = sorted(values)
    return {
        "n": len(values),
        "p50_ms": round(statistics.median(values), 3),
        "p99_ms": round(values[min(len(values) - 1, int(len(values) * 0.99))], 3),
        "max_ms": round(values[-1], 3),
    }


# ---------------------------------------------------------------------------------------------------------
# Load generators


WRK_LUA = """
wrk.method = "POST"
wrk.body = [[%(body)s]]
%(headers)s
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%%d,"duration_s":%%.6f,"bytes":%%d,"connect":%%d,"read":%%d,' ..
    '"write":%%d,"status":%%d,"timeout":%%d,"p50_us":%%d,"p99_us":%%d,"mean_us":%%.1f,"max_us":%%d}\\n',
    summary.requests, summary.duration / 1e6, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.mean, latency.max))
end
"""


def ensure_wrk() -> str | None:
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None
    log("installing wrk with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "install", "-y", "-q", "wrk"], ["apt-get", "update", "-q"]):
        subprocess.run(cmd, env=env, capture_output=True, timeout=600)
        if cmd[1] == "update":
            subprocess.run(
                ["apt-get", "install", "-y", "-q", "wrk"], env=env, capture_output=True, timeout=600
            )
        if shutil.which("wrk"):
            return shutil.which("wrk")
    return None


def run_wrk(wrk: str, server: Server, body: bytes, conc: int, duration: float, tmp: Path) -> dict[str, Any]:
    hdrs = {"Content-Type": "application/json", **server.headers}
    script = tmp / "wrk.lua"
    script.write_text(
        WRK_LUA
        % {
            "body": body.decode(),
            "headers": "\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in hdrs.items()),
        }
    )
    argv = [wrk, "-t1", f"-c{conc}", f"-d{max(1, round(duration))}s", "--timeout", "120s", "-s", str(script)]
    r = subprocess.run([*argv, server.url + "/v1/chat/completions"], capture_output=True, text=True)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("WRKJSON ")), None)
    if r.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    w = json.loads(line.removeprefix("WRKJSON "))
    return {
        "requests": w["requests"],
        "seconds": w["duration_s"],
        "errors": w["connect"] + w["read"] + w["write"] + w["status"] + w["timeout"],
        "p50_ms": w["p50_us"] / 1000,
        "p99_ms": w["p99_us"] / 1000,
        "events": None,  # wrk sees whole responses; events = requests x events per response (probed)
    }


IN_PROCESS_LOADGEN = False
"""--quick: run the aiohttp load generator in this process (saves an interpreter start per cell)."""


def run_pyload(
    server: Server, body: bytes, conc: int, duration: float, capture: str | None
) -> dict[str, Any]:
    spec = {
        "url": server.url + "/v1/chat/completions",
        "body": body.decode(),
        "headers": {"content-type": "application/json", **server.headers},
        "conc": conc,
        "duration": duration,
        "capture": capture,
    }
    if IN_PROCESS_LOADGEN:
        return asyncio.run(_pyload(spec))
    r = subprocess.run(
        [sys.executable, __file__, "loadgen", json.dumps(spec)], capture_output=True, text=True, timeout=600
    )
    if r.returncode != 0:
        raise RuntimeError(f"load generator failed:\n{r.stdout}\n{r.stderr}")
    out: dict[str, Any] = json.loads(r.stdout)
    return out


async def _pyload(spec: dict[str, Any]) -> dict[str, Any]:
    """The aiohttp load generator (its own process): closed loop, ``conc`` connections, whole responses read,
    SSE events counted as they arrive."""
    import aiohttp

    url, body, headers = spec["url"], spec["body"].encode(), spec["headers"]
    capture = spec.get("capture")
    latencies: list[float] = []
    captured: list[float] = []
    counts = {"requests": 0, "errors": 0, "events": 0}
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=300)) as session:
        t_start = time.perf_counter()
        deadline = t_start + spec["duration"]

        async def worker() -> None:
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                try:
                    async with session.post(url, data=body, headers=headers) as resp:
                        tail = b""
                        async for data in resp.content.iter_any():
                            buf = tail + data
                            counts["events"] += buf.count(b"\n\n")
                            tail = buf[-1:]
                        if resp.status != 200:
                            counts["errors"] += 1
                        if capture and capture in resp.headers:
                            captured.append(float(resp.headers[capture]))
                except aiohttp.ClientError:
                    counts["errors"] += 1
                    continue
                latencies.append(time.perf_counter() - t0)
                counts["requests"] += 1

        await asyncio.gather(*(worker() for _ in range(spec["conc"])))
        seconds = time.perf_counter() - t_start
    latencies.sort()
    n = len(latencies)
    out: dict[str, Any] = {
        **counts,
        "seconds": seconds,
        "p50_ms": latencies[n // 2] * 1000 if n else None,
        "p99_ms": latencies[min(n - 1, int(n * 0.99))] * 1000 if n else None,
    }
    if capture:
        out["captured"] = summarize_ms(captured) if captured else None
    return out


def loadgen_main(spec_json: str) -> None:
    spec = json.loads(spec_json)
    try:
        import uvloop

        result = uvloop.run(_pyload(spec))
    except ImportError:
        result = asyncio.run(_pyload(spec))
    print(json.dumps(result))


# ---------------------------------------------------------------------------------------------------------
# Measuring


@dataclass
class Bench:
    args: argparse.Namespace
    tmp: Path
    wrk: str | None
    servers: dict[str, Server]
    events_per_response: dict[str, dict[str, int]]
    cells: dict[tuple[str, str, int], list[dict[str, Any]]] = field(
        default_factory=lambda: collections.defaultdict(list)
    )

    def measure(self, target: str, scenario: str, conc: int, duration: float) -> dict[str, Any]:
        server = self.servers[target]
        body = scenario_body(scenario)
        la = loadavg()
        cpu0 = server.cpu_snapshot()
        if self.wrk:
            r = run_wrk(self.wrk, server, body, conc, duration, self.tmp)
        else:
            r = run_pyload(server, body, conc, duration, None)
        cpu = server.cpu_between(cpu0, server.cpu_snapshot())
        if not server.alive():
            raise RuntimeError(f"{target} died:\n{server.log_path.read_text()[-3000:]}")
        per_resp = self.events_per_response[target][scenario]
        events = r["events"] if r["events"] is not None else r["requests"] * per_resp
        if scenario == "whole":
            events = 0
        req = max(r["requests"], 1)
        return {
            "rps": r["requests"] / r["seconds"],
            "events_per_s": events / r["seconds"],
            "p50_ms": r["p50_ms"],
            "p99_ms": r["p99_ms"],
            "errors": r["errors"],
            "requests": r["requests"],
            "cpu_ms_per_req": cpu * 1000 / req,
            "cpu_us_per_event": cpu * 1e6 / events if events else None,
            "cpu_util": cpu / r["seconds"],
            "load": la,
        }

    def run(self) -> None:
        a = self.args
        fast = [t for t in ("direct", "bare", "blazar") if t in self.servers]
        for rep in range(a.repeat):
            for scenario in a.scenarios:
                for conc in a.concurrency:
                    order = fast[rep % len(fast) :] + fast[: rep % len(fast)]
                    for target in order:
                        if rep == 0 and a.warmup > 0:
                            self.measure(target, scenario, conc, a.warmup)
                        cell = self.measure(target, scenario, conc, a.duration)
                        self.cells[(target, scenario, conc)].append(cell)
                        log(
                            f"round {rep + 1}/{a.repeat} {scenario:<6} c={conc:<3} {target:<7}"
                            f" {cell['rps']:>9,.0f} req/s {cell['events_per_s']:>10,.0f} ev/s"
                            f" p50 {cell['p50_ms']:.3f} ms cpu {cell['cpu_ms_per_req']:.3f} ms/req"
                            f" load {cell['load']}"
                        )
        if "litellm" in self.servers:
            for scenario in a.scenarios:
                for conc in a.concurrency:
                    cell = self.measure("litellm", scenario, conc, a.litellm_duration)
                    self.cells[("litellm", scenario, conc)].append(cell)
                    log(
                        f"litellm {scenario:<6} c={conc:<3} {cell['rps']:>9,.1f} req/s"
                        f" {cell['events_per_s']:>10,.0f} ev/s p50 {cell['p50_ms']:.1f} ms errors {cell['errors']}"
                    )


def med(values: list[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return statistics.median(vs) if vs else None


def default_model() -> Path:
    manifest = cache_dir() / "assets.json"
    if not manifest.is_file():
        raise SystemExit(f"{manifest} is missing: run `make assets`, or pass --model FILE.gguf")
    return Path(json.loads(manifest.read_text())["model"])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "loadgen":
        loadgen_main(sys.argv[2])
    else:
        raise SystemExit(
            "usage: gateway_harness.py loadgen SPEC_JSON (the benches run it; see bench_gateway.py)"
        )
