"""`blazar ps` and `blazar stop` as real subprocesses against a real `blazar serve` + llama-server."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import orjson
import pytest

from blazar.cli.ps import until
from tests.conftest import HANG, Daemon, blazar_cmd, free_port, make_daemon, pid_alive, wait_for
from tests.engines.conftest import PLATFORM

pytestmark = pytest.mark.e2e

CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
SECRET = "sk-ps-admin-0123456789abcdef"


def blazar(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, with no colours and no wrapping."""
    return blazar_cmd(*args, env={**env, "NO_COLOR": "1", "COLUMNS": "300"}, check=False)


def test_ps_lists_the_running_engine_and_stop_unloads_it(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    r = blazar(d.env, "ps")
    assert (r.returncode, r.stdout) == (0, "no models are running; a request to one starts it\n"), r.stderr

    assert httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    [pid] = d.child_pids()
    api = httpx.get(d.url + "/api/ps", timeout=10).json()["models"]
    r = blazar(d.env, "ps")
    assert r.returncode == 0, r.stderr
    header, row = r.stdout.splitlines()
    assert header.split() == ["NAME", "ID", "SIZE", "CONTEXT", "CACHED", "UNTIL"]
    digest, context = api[0]["digest"][:12], api[0]["context_length"]
    pattern = (
        # no cache hint measured yet (engine_metrics_secs 60); idle_timeout_secs 1800
        rf"smollm2:latest +{digest} +[0-9.]+ MiB +{context} +-  in (29|30) minutes"
    )
    assert re.fullmatch(pattern, row), row

    r = blazar(d.env, "ps", "--json")
    assert r.returncode == 0 and orjson.loads(r.stdout)["models"][0]["name"] == "smollm2:latest", r.stdout
    assert orjson.loads(r.stdout)["engine_updates"] == []  # no check has run

    # an engine check that finds a newer llama.cpp (`blazar engine check` here; the daemon runs one every
    # engine_check_secs): ps says so, with the command that installs it
    manifest = d.root / "manifest.json"
    asset = {
        "platform": PLATFORM,
        "accel": "cpu",
        "url": "http://127.0.0.1:9/llama.tar.gz",
        "sha256": "0" * 64,
    }
    lane = {
        "source": "official",
        "binary": "llama-server",
        "releases": [{"version": "b99999", "assets": [asset]}],
    }
    manifest.write_text(orjson.dumps({"schema": 1, "lanes": {"llama-cpp": lane}}).decode())
    env = {**d.env, "BLAZAR_ENGINE_MANIFEST": str(manifest)}
    assert "update available: b99999" in blazar(env, "engine", "check").stdout
    lines = blazar(d.env, "ps").stdout.splitlines()
    assert lines[-2] == "engine updates (`blazar engine update --kind KIND` installs one):", lines
    assert "update available: b99999: blazar engine install --kind llama-cpp --version b99999" in lines[-1]

    r = blazar(d.env, "stop", "smollm2")
    assert (r.returncode, r.stdout) == (0, "stopped smollm2:latest\n"), r.stderr
    wait_for(lambda: not pid_alive(pid), HANG, "the engine to stop")
    assert d.child_pids() == []
    assert httpx.get(d.url + "/api/ps", timeout=10).json()["models"] == []

    r = blazar(d.env, "stop", "smollm2")
    assert r.returncode == 1 and r.stdout == ""
    assert (
        r.stderr.strip()
        == "error: model 'smollm2:latest' is not running; `blazar ps` lists the ones that are"
    )
    r = blazar(d.env, "stop", "no/such name")
    assert r.returncode == 1 and r.stderr.startswith("error: invalid model name"), r.stderr


def test_stop_takes_a_name_that_shares_a_running_engine(daemon_factory: object) -> None:
    """A copy runs on the engine of the model it copies: /api/ps names it among that engine's names, and stopping
    it by its own name unloads that engine."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    assert (
        httpx.post(d.url + "/api/copy", json={"source": "smollm2", "destination": "twin"}).status_code == 200
    )
    assert (
        httpx.post(d.url + "/v1/chat/completions", json={**CHAT, "model": "twin"}, timeout=60).status_code
        == 200
    )
    [pid] = d.child_pids()
    [entry] = httpx.get(d.url + "/api/ps", timeout=10).json()["models"]
    assert entry["name"] == "smollm2:latest" and entry["names"] == ["smollm2:latest", "twin:latest"], entry
    r = blazar(d.env, "stop", "twin")
    assert (r.returncode, r.stdout) == (0, "stopped twin:latest\n"), r.stderr
    wait_for(lambda: not pid_alive(pid), HANG, "the shared engine to stop")


def test_with_keys_they_need_one_and_say_so(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(f'[[keys]]\nname = "admin"\nsecret = "{SECRET}"\n')
    r = blazar(d.env, "ps")
    assert r.returncode == 1
    assert r.stderr.strip() == (
        "error: missing or invalid API key (Authorization: Bearer or x-api-key); the daemon has API keys: pass one"
        " with --api-key or BLAZAR_API_KEY"
    ), r.stderr
    assert SECRET not in r.stderr
    r = blazar({**d.env, "BLAZAR_API_KEY": SECRET}, "ps")
    assert (r.returncode, r.stdout) == (0, "no models are running; a request to one starts it\n"), r.stderr
    auth = {"authorization": f"Bearer {SECRET}"}
    assert httpx.post(d.url + "/v1/chat/completions", json=CHAT, headers=auth, timeout=60).status_code == 200
    r = blazar(d.env, "stop", "smollm2", "--api-key", SECRET)
    assert (r.returncode, r.stdout) == (0, "stopped smollm2:latest\n"), r.stderr


def test_no_daemon_is_one_line(tmp_path: Path) -> None:
    d = make_daemon(tmp_path / "none")
    for args in (["ps"], ["stop", "smollm2"]):
        r = blazar({**d.env, "BLAZAR_PORT": str(free_port())}, *args)
        assert r.returncode == 1 and r.stdout == ""
        [line] = r.stderr.strip().splitlines()
        assert line.startswith("error: cannot reach the Blazar daemon at http://127.0.0.1:"), line
        assert line.endswith("(connection refused); start it with: blazar serve"), line


def test_a_bad_address_or_key_is_one_line(tmp_path: Path) -> None:
    env = make_daemon(tmp_path / "none").env
    for args, line in [
        (["ps", "--host", "127.0.0.1:5"], "error: '127.0.0.1:5' is not a host name or address (--host or"
         " BLAZAR_HOST); give the port with --port"),
        (["ps", "--host", "host/path"], "error: 'host/path' is not a host name or address (--host or"
         " BLAZAR_HOST); give the port with --port"),
        (["stop", "smollm2", "--port", "99999"], "error: the daemon's port must be 1-65535, got 99999 (--port or"
         " BLAZAR_PORT)"),
        (["ps", "--api-key", "sk-a\nb"], "error: the API key must be printable ASCII without spaces (--api-key"
         " or BLAZAR_API_KEY)"),
        *((["ps", "--host", host], f"error: '{host}' is not a host name or address (--host or BLAZAR_HOST);"
           " give the port with --port") for host in ("256.1.1.1", "a..b", ".", "xn--")),
        (["ps", "--host", "nosuchhost.invalid", "--port", "9"], "error: cannot reach the Blazar daemon at"
         " http://nosuchhost.invalid:9: its host name does not resolve; check --host"),
    ]:  # fmt: skip
        r = blazar(env, *args)
        assert (r.returncode, r.stdout, r.stderr.strip()) == (1, "", line), (args, r.stderr)


def test_another_server_at_the_address_is_named(tmp_path: Path) -> None:
    """An HTTP server that is not Blazar: one line that says so, for each of its answers."""
    env = make_daemon(tmp_path / "none").env
    port = free_port()
    other = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _answers(port), HANG, "the other server")
        (tmp_path / "api").mkdir()
        (tmp_path / "api" / "ps").write_text("[1, 2]")  # a JSON answer, but no object
        for args in (["ps"], ["stop", "smollm2"]):
            r = blazar({**env, "BLAZAR_PORT": str(port)}, *args)
            assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
            assert f"the server at http://127.0.0.1:{port} did not answer as a Blazar daemon" in r.stderr
        r = blazar({**env, "BLAZAR_PORT": str(port)}, "ps", "--reset")
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert "with no Blazar error body; check that --host and --port name the daemon" in r.stderr
    finally:
        other.terminate()
        other.wait(timeout=10)


def _answers(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
    except httpx.HTTPError:
        return False
    return True


def test_until_reads_like_ollamas_ps() -> None:
    now = datetime(2026, 11, 30, tzinfo=UTC)
    at = lambda **k: (now + timedelta(**k)).isoformat().replace("+00:00", "Z")  # noqa: E731
    assert until(at(minutes=29, seconds=59), now) == "in 29 minutes"
    assert until(at(hours=1, minutes=5), now) == "in 1 hour"
    assert until(at(seconds=1), now) == "in 1 second"
    assert until(at(days=3650), now) == "forever"
    assert until(at(seconds=-3), now) == "now"
    assert until("not a time", now) == "-"
