"""Shared fixtures: the cached real assets (llama-server, SmolLM2) and a real `blazar serve` subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil
import pytest

from blazar import paths
from blazar.catalog import files as catalog_files
from blazar.catalog import models as catalog_mod
from blazar.catalog.models import Catalog
from blazar.engines import releases
from blazar.hub.client import Hub
from blazar.paths import DataDir
from blazar.store import Store
from blazar.supervisor import worker as supervised_worker

C = TypeVar("C")


NO_GITHUB = "http://127.0.0.1:9"
"""Where the tests' daemons and commands find GitHub's Releases API: a loopback port nothing listens on (tests
reach nothing but loopback), so an install that asks it is refused at once, as on a machine that cannot reach
GitHub; the tests of the API itself run a stand-in (``tests/engines/test_releases_api.py``)."""
os.environ[releases.API_ENV] = NO_GITHUB  # in-process code, and commands run with os.environ


def cache_dir() -> Path:
    return paths.cache_dir()  # $BLAZAR_CACHE_DIR, else the user's cache: ~/.cache/blazar


@dataclass(frozen=True)
class Assets:
    llama_server: Path
    model: Path


def _manifest() -> dict[str, str]:
    manifest = cache_dir() / "assets.json"
    if not manifest.is_file():
        pytest.fail(f"{manifest} is missing: run `make assets` (scripts/test_assets.py) first", pytrace=False)
    data: dict[str, str] = json.loads(manifest.read_text())
    return data


def _existing(p: Path) -> Path:
    if not p.is_file():
        pytest.fail(f"{p} is missing: run `make assets` again", pytrace=False)
    return p


def manifest_asset(key: str, what: str) -> Path:
    """The cached asset ``key`` of assets.json (``what`` names it when it is missing)."""
    m = _manifest()
    if key not in m:
        pytest.fail(
            f"assets.json has no {what}: run `make assets` (scripts/test_assets.py) again", pytrace=False
        )
    return _existing(Path(m[key]))


@pytest.fixture(scope="session")
def model_file() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF."""
    return _existing(Path(_manifest()["model"]))


@pytest.fixture(scope="session")
def assets(model_file: Path) -> Assets:
    """The real model and the llama-server built from source."""
    return Assets(_existing(Path(_manifest()["llama_server"])), model_file)


@dataclass(frozen=True)
class WhisperAssets:
    server: Path
    model: Path
    sample: Path


@pytest.fixture(scope="session")
def whisper_assets() -> WhisperAssets:
    """whisper-server built from source, Whisper tiny.en in whisper.cpp's format and a spoken sample (JFK)."""
    m = _manifest()
    if "whisper_server" not in m:
        pytest.fail(
            "assets.json has no whisper assets: run `make assets` (scripts/test_assets.py) again",
            pytrace=False,
        )
    return WhisperAssets(
        _existing(Path(m["whisper_server"])),
        _existing(Path(m["whisper_model"])),
        _existing(Path(m["whisper_sample"])),
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def blazar_cmd(
    *args: str, env: dict[str, str], check: bool = True, python: str = sys.executable
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "blazar", *args],
        env=env,
        capture_output=True,
        text=True,
        check=check,
        timeout=600,  # a bound on a hang
    )


@dataclass
class Daemon:
    """A `blazar serve` child process with its own config and data dir."""

    root: Path
    env: dict[str, str]
    port: int
    proc: subprocess.Popen[bytes] | None = None
    python: str = sys.executable
    """The interpreter whose blazar runs (the wheel test's fresh venv has its own)."""
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.root / "serve.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return Path(self.env["BLAZAR_DATA_DIR"])

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return blazar_cmd(*args, env=self.env, check=check, python=self.python)

    def start(self, *args: str, within_s: float = 600) -> None:
        """Start `blazar serve` (with ``args``) and wait until it answers /healthz, at most ``within_s``: a bound
        on a daemon that hangs, not a wait on an answer."""
        with self.log.open("ab") as logf:
            self.proc = subprocess.Popen(
                [self.python, "-m", "blazar", "serve", *args],
                env=self.env,
                stdout=logf,
                stderr=logf,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"blazar serve exited {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"blazar serve did not answer /healthz:\n{self.log.read_text()}")

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=600)  # a bound on a hang: a loaded machine stops slowly
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("blazar serve did not stop within 30s of SIGTERM") from None

    def child_pids(self) -> list[int]:
        run = self.data_dir / "run"
        return [int(p.read_text()) for p in run.glob("*.pid")] if run.is_dir() else []


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); treat it as gone once its last thread is (the leader of a multi-threaded
    # process like llama-server shows "Z" while its other threads still exit, holding its sockets, and its parent's
    # waitid does not report it yet).
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split(") ", 1)[1][0] != "Z":
                return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def children_where(pid: int, predicate: Callable[[psutil.Process], bool]) -> list[psutil.Process]:
    """The live children of ``pid`` for which ``predicate`` holds: a child that ends between the listing and the
    look at it (its name, its command line) is not one of them (it is gone, which is what a test waiting for it to
    end wants to see, and what a test looking for a live one must not trip on)."""
    found = []
    for child in psutil.Process(pid).children():
        try:
            if predicate(child):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def children_named(pid: int, name: str) -> list[psutil.Process]:
    """The live children of ``pid`` whose process name is ``name``."""
    return children_where(pid, lambda child: child.name() == name)


def worker_rpc_pid(data_dir: Path, port: int) -> int | None:
    """The RPC server a `blazar worker` on ``port`` runs (its state file in ``data_dir``), once it listens."""
    try:
        state = json.loads(supervised_worker.state_file(DataDir(data_dir), port).read_text())
        pid = int(state["rpc_pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid if supervised_worker.listening(pid, port) else None


def wait_for(predicate: object, timeout: float, what: str) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def until(predicate: Callable[[], object], what: str, timeout: float = 600.0) -> None:
    """``wait_for`` on an event loop: poll ``predicate`` until it is true, yielding to the loop (and its other
    tasks) between looks; fail after ``timeout`` seconds. For a test that must wait on a state, not a timer."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)


HANG = 3600.0
"""A bound on a hang, not on a speed: what a test waits for must come, however slow a shared CI machine is."""
HEADER_BOUND = f"child_header_timeout_secs = {int(HANG)}\n"
"""Test daemons bound the header phase at ``HANG`` unless a test sets the bound itself: a whole answer's head
comes only when it is complete, and on a loaded machine a few hundred tokens take longer than the default 120 s
(a batch test's 400-token answer ran at one token a second beside stress-ng and met the bound's 504)."""


def make_daemon(root: Path, config_text: str = "") -> Daemon:
    root.mkdir(parents=True, exist_ok=True)
    cfg = root / "config.toml"
    if "child_header_timeout_secs" not in config_text:
        config_text = HEADER_BOUND + config_text  # a top-level key, so before any table
    cfg.write_text(config_text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLAZAR_")}
    env.update(BLAZAR_CONFIG=str(cfg), BLAZAR_DATA_DIR=str(root / "data"), BLAZAR_PORT=str(free_port()))
    env[releases.API_ENV] = NO_GITHUB
    return Daemon(root=root, env=env, port=int(env["BLAZAR_PORT"]))


def provision(d: Daemon, assets: Assets, *, engine: bool = True, model: bool = True) -> Daemon:
    if engine:
        d.cli("engine", "add", "--kind", "llama-cpp", "--path", str(assets.llama_server))
    if model:
        d.cli("import", str(assets.model), "--name", "smollm2")
    return d


def cleanup(d: Daemon) -> None:
    if d.proc is not None and d.proc.poll() is None:
        d.stop()
    for pid in d.child_pids():
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


SHARED_DAEMON_CONFIG = 'parallel = 1\n[models."smollm2:latest"]\nextra_args = ["--no-cache-prompt"]\n'


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, assets: Assets) -> Iterator[Daemon]:
    """One shared daemon per test module: the real engine registered, SmolLM2 imported as smollm2:latest.

    Its engine runs without prompt caching (``--no-cache-prompt``; requests that pin a session still ask for it)
    and with one slot (``parallel = 1``, not the default four over a unified KV cache): tests compare answers
    across requests (streamed == whole, one text across three dialects, `blazar run` against /api/chat), and
    llama.cpp's greedy output can differ in a rare token between a prompt evaluated whole and one whose cached
    prefix was reused, or one placed beside another slot's cells in a shared cache, since the sums run in
    another order. The default's four slots are tested on daemons of their own."""
    d = provision(make_daemon(tmp_path_factory.mktemp("daemon"), SHARED_DAEMON_CONFIG), assets)
    d.start()
    yield d
    cleanup(d)


@pytest.fixture
def daemon_factory(tmp_path: Path, assets: Assets) -> Iterator[object]:
    """Daemons with their own config, for tests that change settings or kill things."""
    made: list[Daemon] = []

    def factory(
        config_text: str = "", *, engine: bool = True, model: bool = True, start: bool = True
    ) -> Daemon:
        d = provision(
            make_daemon(tmp_path / f"d{len(made)}", config_text), assets, engine=engine, model=model
        )
        made.append(d)
        if start:
            d.start()
        return d

    yield factory
    for d in made:
        cleanup(d)


_CLIENTS: list[Any] = []


def closing(client: C) -> C:
    """Register an SDK client (openai, anthropic, ollama) to be closed when the test ends: they pool sockets."""
    _CLIENTS.append(client)
    return client


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _CLIENTS:
        _CLIENTS.pop().close()


# ---- the catalog and the Hub client, for the catalog, import and pull tests -------------------------------


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    """A fresh catalog over a real SQLite file in a temporary data dir."""
    data = DataDir(tmp_path / "data").ensure()
    store = Store.open(data.db)
    yield Catalog(store, data)
    store.close()


@pytest.fixture
def hub(fake: Any) -> Iterator[Hub]:
    """A Hub client of the module's ``fake`` Hub (a ``tests.fakehub.FakeHub`` on a real port)."""
    with Hub(fake.url, retries=1, backoff=0.01) as h:
        yield h


@pytest.fixture
def no_rehash(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registering a pull must not hash the weights again: the download already did."""

    def refuse(*_a: object, **_k: object) -> str:
        raise AssertionError("the catalog hashed a pulled file again")

    monkeypatch.setattr(catalog_files, "sha256_file", refuse)
    monkeypatch.setattr(catalog_mod, "model_digest", refuse)
