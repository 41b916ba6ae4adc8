"""Eviction is a pure function over the children; tested alone. Also: what a child that fails to start tells."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from blazar.errors import ChildError
from blazar.launch.spec import LaunchSpec
from blazar.paths import DataDir
from blazar.supervisor import Child, State
from blazar.supervisor.pool import idle_victims
from tests.conftest import until


def child(key: str, last_used: float, inflight: int = 0, keep_alive: float | None = None) -> Child:
    c = Child(key, key, LaunchSpec(("x",)), DataDir(Path("/nonexistent")))
    c._state = State.READY  # a child that never ran, in the state under test
    c.last_used = last_used
    c.inflight = inflight
    c.keep.secs = keep_alive
    return c


def test_idle_victims() -> None:
    kids = [
        child("old", 0),
        child("fresh", 95),
        child("busy", 0, inflight=1),
        child("forever", 0, keep_alive=-1),
        child("short", 98, keep_alive=1),
    ]
    assert [c.key for c in idle_victims(kids, now=100, default_timeout=30)] == ["old", "short"]


def test_an_extra_replica_goes_idle_first() -> None:
    kids = [
        child("m:latest", 0),
        child("m:latest#1", 0),
        child("m:latest#2", 0, keep_alive=10),
        child("k#1", 0, keep_alive=-1),
    ]
    assert [c.key for c in idle_victims(kids, now=61, default_timeout=300)] == ["m:latest#1", "m:latest#2"]
    assert [c.key for c in idle_victims(kids, now=59, default_timeout=300)] == ["m:latest#2"]
    assert [c.key for c in idle_victims(kids, now=301, default_timeout=300)] == [
        "m:latest",
        "m:latest#1",
        "m:latest#2",
    ]


def test_zero_timeout_never_evicts() -> None:
    assert idle_victims([child("a", 0)], now=1e9, default_timeout=0) == []


def test_only_ready_children() -> None:
    c = child("a", 0)
    c._state = State.STARTING  # a child that never ran, in the state under test
    assert idle_victims([c], now=100, default_timeout=1) == []


def test_wants_restart_only_for_more_context() -> None:
    from blazar.supervisor.pool import wants_restart

    c = Child("m", "m", LaunchSpec(("x",), ctx_size=4096, parallel=2), DataDir(Path("/nonexistent")))
    assert not wants_restart(c, None)  # no num_ctx: whatever runs serves
    assert not wants_restart(c, 2048)  # what it runs with per slot
    assert not wants_restart(c, 1024)  # less: served by the larger context, never shrinks a shared engine
    assert wants_restart(c, 3000)
    c.num_ctx = 8192  # started for 8192, capped lower by the trained context: not restarted again and again
    assert not wants_restart(c, 8192)
    assert not wants_restart(c, 65536)  # nor for a larger num_ctx, or alternating ones: capped the same


def test_an_engine_at_its_trained_context_is_not_restarted_for_more() -> None:
    import dataclasses

    from blazar.launch.fit import KvSettings, MemoryEstimate
    from blazar.supervisor.pool import wants_restart

    est = MemoryEstimate(
        ctx_size=8192, requested_ctx=8192, trained_ctx=4096, parallel=2, weights=1, kv=1, compute=1, mmproj=0,
        placement="cpu", available=1, headroom=0, settings=KvSettings("f16", "f16", "auto", False, 2),
    )  # fmt: skip
    spec = LaunchSpec(("x",), ctx_size=8192, parallel=2, estimate=est)
    c = Child("m", "m", spec, DataDir(Path("/nonexistent")))
    assert not wants_restart(c, 10**9)  # 4096 per slot is all the model was trained on
    short = Child("m", "m", dataclasses.replace(spec, ctx_size=4096), DataDir(Path("/nonexistent")))
    assert wants_restart(short, 10**9)  # 2048 per slot: the trained 4096 is more


def test_a_busy_child_is_not_cut_off_for_a_restart() -> None:
    import asyncio
    from types import SimpleNamespace

    import pytest

    from blazar.errors import LaneError
    from blazar.supervisor.pool import Supervisor

    c = child("m:latest", 0, inflight=1)
    owner = SimpleNamespace(cfg=SimpleNamespace(queue_wait_secs=0))
    with pytest.raises(LaneError) as exc:
        asyncio.run(Supervisor._drain(owner, c, "for num_ctx 1024 (it ran with 512 per slot)"))  # type: ignore[arg-type]
    assert exc.value.status == 503 and "could not restart for num_ctx 1024" in str(exc.value)
    assert exc.value.retry_after == 1  # busy: Retry-After, a 529 for Anthropic clients, retried by batches

    async def finishes_soon() -> None:
        asyncio.get_running_loop().call_later(0.05, setattr, c, "inflight", 0)
        owner.cfg.queue_wait_secs = 5
        await Supervisor._drain(owner, c, "for num_ctx 1024")  # type: ignore[arg-type]

    asyncio.run(finishes_soon())
    assert c.inflight == 0


def test_an_engine_that_exits_while_starting_is_taught_without_server_paths(tmp_path: Path) -> None:
    """The error a client sees quotes the engine log's last lines, with the data directory written as
    ``<data dir>``, and names the log relative to it."""
    data = DataDir(tmp_path / "data").ensure()
    model = data.models / "m" / "latest.gguf"
    script = f"import sys; print('loading model from {model}'); sys.exit(3)"
    child = Child("m:latest", "m:latest", LaunchSpec((sys.executable, "-c", script)), data)

    async def main() -> None:
        async with aiohttp.ClientSession() as http:
            await child.start(http, timeout=20)

    with pytest.raises(ChildError) as exc:
        asyncio.run(main())
    message = str(exc.value)
    assert "exited with code 3" in message and "logs/m--latest.log in blazar's data directory" in message
    assert "loading model from <data dir>/models/m/latest.gguf" in message
    assert str(data.root) not in message

    # a later start that writes nothing: its error quotes nothing of the earlier run's log
    child.spec = LaunchSpec((sys.executable, "-c", "import sys; sys.exit(4)"))
    with pytest.raises(ChildError) as exc:
        asyncio.run(main())
    message = str(exc.value)
    assert "exited with code 4" in message and message.endswith("\n(nothing)"), message
    assert "loading model" not in message


def test_an_engine_that_cannot_bind_its_socket_is_started_again_on_a_port(tmp_path: Path) -> None:
    """A build that claims sockets but cannot bind one (or a second daemon won the race for the path): the child
    is started once more on a 127.0.0.1 port and serves from there."""
    data = DataDir(tmp_path / "data").ensure()
    sock = data.run_file("m:latest", "sock")
    upstream = Path(__file__).resolve().parents[2] / "benches" / "baselines" / "fake_upstream.py"
    engine = tmp_path / "engine.py"
    engine.write_text(
        "import runpy, sys\n"
        "host = sys.argv[sys.argv.index('--host') + 1]\n"
        "if host.endswith('.sock'):\n"
        '    print(f"couldn\'t bind HTTP server socket, hostname: {host}, port: 8080", flush=True)\n'
        "    sys.exit(1)\n"
        f"sys.argv[0] = {str(upstream)!r}\n"
        f"runpy.run_path({str(upstream)!r}, run_name='__main__')\n"
    )
    spec = LaunchSpec((sys.executable, str(engine), "--host", str(sock)), socket_path=sock)
    child = Child("m:latest", "m:latest", spec, data)

    async def main() -> None:
        async with aiohttp.ClientSession() as http:
            await child.start(http, timeout=20)
            try:
                assert child.state is State.READY and child.spec.socket_path is None and child.port > 0
                assert child.http is http  # the socket attempt's own session was closed with it
                conn, status = await child.links.exchange("/v1/chat/completions", b'{"messages": []}')
                assert status == 200
                await child.links.body(conn)
            finally:
                await child.stop(grace=2)

    asyncio.run(main())
    log = data.log_file("m:latest").read_text()
    assert log.count("--- blazar: starting m:latest") == 2 and "on socket run/m--latest.sock" in log


def test_the_run_files_of_daemons_that_are_gone_are_swept(tmp_path: Path) -> None:
    data = DataDir(tmp_path / "data").ensure()
    assert data.run.stat().st_mode & 0o777 == 0o700
    mine = data.child_file("qwen2.5:7b", "pid")
    assert mine.name == f"qwen2.5--7b.{os.getpid()}.pid"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its pid names no process
    kept = [mine, data.run_file("qwen2.5:7b", "pid"), data.run_file("m:latest", "sock"), data.run / "x.y.z"]
    swept = [data.run / f"qwen2.5--7b.{dead.pid}.pid", data.run / f"m--latest.{dead.pid}.apikey"]
    for f in kept + swept:
        f.write_text("1")
    data.sweep_run()
    assert [f.exists() for f in kept] == [True] * len(kept)
    assert [f.exists() for f in swept] == [False] * len(swept)


def test_engines_a_dead_daemon_left_running_are_stopped(tmp_path: Path) -> None:
    """A daemon killed with -9 leaves its engines running; the next one's start stops those its pid files name
    (known by a command line naming this run directory), and leaves any other process alone."""
    data = DataDir(tmp_path / "data").ensure()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    sleep = "import sys, time; time.sleep(60)"
    engine = subprocess.Popen([sys.executable, "-c", sleep, "--api-key-file", str(data.run / "m.1.apikey")])
    stranger = subprocess.Popen([sys.executable, "-c", sleep])
    try:
        (data.run / f"m--latest.{dead.pid}.pid").write_text(str(engine.pid))
        (data.run / f"x--latest.{dead.pid}.pid").write_text(str(stranger.pid))
        assert data.sweep_run() == [engine.pid]
        assert engine.wait(timeout=10) == -9
        assert stranger.poll() is None
        assert list(data.run.glob("*.pid")) == []
    finally:
        for p in (engine, stranger):
            p.kill()
            p.wait()


def test_one_death_is_one_crash_however_many_requests_find_it(tmp_path: Path) -> None:
    """Three requests in flight on an engine that dies each reap it; the breaker hears of one crash."""
    from blazar.config import Config
    from blazar.store import Store
    from blazar.supervisor.pool import Supervisor

    data = DataDir(tmp_path / "data").ensure()
    store = Store.open(data.db)
    sup = Supervisor(Config(data_dir=data.root), data, store)

    async def main() -> None:
        c = Child("m:latest", "m:latest", LaunchSpec(("x",)), data)
        c.proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "raise SystemExit(3)")
        c._state = State.READY  # a child that never ran, in the state under test
        sup.children[c.key] = c
        assert await asyncio.gather(*(sup.reap(c, wait=5) for _ in range(3))) == [True, True, True]
        [held] = [h for h in [sup.breakers._by_key.get("m:latest")] if h is not None]
        assert len(held.crashes) == 1 and held.last == "it died while serving (exit 3)"

    try:
        asyncio.run(main())
    finally:
        store.close()


def test_a_retired_engine_waits_for_its_requests_and_shutdown_stops_it(tmp_path: Path) -> None:
    """``retire_when_idle`` takes the engine out of service at once, stops it once nothing is in flight, and a
    shutdown meanwhile stops it with the others."""
    from blazar.config import Config
    from blazar.store import Store
    from blazar.supervisor.pool import Supervisor

    data = DataDir(tmp_path / "data").ensure()
    store = Store.open(data.db)
    sup = Supervisor(Config(data_dir=data.root, stop_grace_secs=1), data, store)

    class Watched(Child):
        """A child that counts the looks at its requests in flight: the test knows when the retirement looked."""

        looks = 0
        _inflight = 0

        @property
        def inflight(self) -> int:
            self.looks += 1
            return self._inflight

        @inflight.setter
        def inflight(self, n: int) -> None:
            self._inflight = n

    async def engine(key: str) -> Watched:
        c = Watched(key, key, LaunchSpec(("x",)), data)
        c.proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "import time; time.sleep(60)")
        c._state = State.READY  # a child that never ran, in the state under test
        sup.children[key] = c
        return c

    async def main() -> None:
        a = await engine("a:latest")
        a.inflight = 1
        looks = a.looks
        await sup.retire_when_idle("a:latest", "model deleted")
        assert "a:latest" not in sup.children and a in sup.retiring
        # the retirement saw the request in flight, waited, and saw it again: it has had its chance to stop it
        await until(lambda: a.looks >= looks + 2, "the retirement to look at the request twice")
        assert a.proc is not None and a.proc.returncode is None  # its request is still in flight
        a.inflight = 0
        await asyncio.wait_for(sup.retiring[a], 5)
        assert a.proc.returncode is not None and a.stopped_for == "model deleted" and not sup.retiring
        b = await engine("b:latest")
        b.inflight = 1
        await sup.retire_when_idle("b:latest", "model deleted")
        await sup.stop_all()
        assert b.proc is not None and b.proc.returncode is not None and not sup.retiring

    try:
        asyncio.run(main())
    finally:
        store.close()


def test_a_process_that_exited_and_awaits_reaping_is_not_alive() -> None:
    """A daemon killed a moment ago stays a zombie until init reaps it: its run files are swept all the same."""
    import subprocess
    import time

    from blazar.paths import alive

    proc = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{proc.pid}/stat").read_bytes().rsplit(b")", 1)[1][1:2] != b"Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not alive(proc.pid)
    finally:
        proc.wait()
    assert alive(os.getpid())


def test_a_child_moves_only_as_its_table_allows(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A real engine process through its life: each move is one ``MOVES`` allows, made by the child's own
    methods; a move the table does not allow is logged as the bug it is."""
    from blazar.supervisor.child import MOVES

    assert set(MOVES) == set(State)
    data = DataDir(tmp_path / "data").ensure()
    upstream = Path(__file__).resolve().parents[2] / "benches" / "baselines" / "fake_upstream.py"
    serving = LaunchSpec((sys.executable, str(upstream), "--host", "127.0.0.1", "--port", "{port}"))
    child = Child("m:latest", "m:latest", serving, data)
    seen: list[State] = []
    original = Child._move

    def record(self: Child, to: State) -> None:
        seen.append(to)
        original(self, to)

    async def life() -> None:
        async with aiohttp.ClientSession() as http:
            await child.start(http, timeout=20)
            assert child.state is State.READY
            await child.stop(grace=2)
            child.evicted()
            dying = Child("d:latest", "d:latest", LaunchSpec((sys.executable, "-c", "exit(3)")), data)
            with pytest.raises(ChildError):
                await dying.start(http, timeout=20)
            assert dying.state is State.CRASHED

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Child, "_move", record)
        asyncio.run(life())
    served = [State.STARTING, State.READY, State.STOPPING, State.STOPPED, State.EVICTED]  # served, let go
    failed = [State.STARTING, State.STOPPED, State.CRASHED]  # exited while starting: reaped, then marked
    assert seen == served + failed
    assert not [r for r in caplog.records if "MOVES does not allow" in r.getMessage()]

    wrong = Child("w:latest", "w:latest", serving, data)
    wrong._state = State.READY  # a child that never ran, in the state under test
    wrong.evicted()  # the pool evicts a child it has stopped, never a ready one
    assert wrong.state is State.EVICTED
    assert "moved from State.READY to State.EVICTED" in caplog.text
