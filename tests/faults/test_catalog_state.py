"""The catalog database under faults, with real files and real processes: an empty or missing ``blazar.db`` beside
model files, garbage pages in its middle, damage found while serving, and usage across a kill -9.

Each fault is made to the real SQLite file as a crash, a full disk or a bad sector would leave it; the daemon and
the CLI are real subprocesses.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import apsw
import httpx
import pytest

from tests.conftest import HANG, Assets, Daemon, cleanup, make_daemon, provision, wait_for

pytestmark = pytest.mark.e2e

SECRET = "sk-faults-0123456789abcdef"
KEYED = f'audit = true\n[[keys]]\nname = "team"\nsecret = "{SECRET}"\n'
AUTH = {"authorization": f"Bearer {SECRET}"}


def listed(d: Daemon) -> dict[str, str]:
    """The catalog's names and digest prefixes, as `blazar ls` prints them."""
    out = d.cli("ls").stdout.splitlines()[1:]
    return {line.split()[0]: line.split()[1] for line in out if line.strip()}


def serve_once(d: Daemon) -> subprocess.CompletedProcess[str]:
    """`blazar serve` expected to refuse to start: its exit and output."""
    return subprocess.run(
        [sys.executable, "-m", "blazar", "serve"],
        env=d.env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def crash_leaves(db: Path) -> None:
    """What a crash mid-write (or a full disk) can leave: the database file truncated to nothing, no WAL."""
    for suffix in ("-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)
    db.write_bytes(b"")


@pytest.fixture()
def catalog(tmp_path: Path, assets: Assets) -> Daemon:
    """A data dir with SmolLM2 imported twice (as smollm2 and as org/smol:q4, a name with a '/'), not started."""
    d = provision(make_daemon(tmp_path / "d"), assets)
    d.cli("cp", "smollm2", "org/smol:q4")
    return d


def test_an_empty_database_beside_model_files_is_refused_and_repair_rebuilds_it(
    catalog: Daemon, assets: Assets
) -> None:
    d = catalog
    before = listed(d)
    assert set(before) == {"smollm2:latest", "org/smol:q4"}, before
    crash_leaves(d.data_dir / "blazar.db")

    r = serve_once(d)
    assert r.returncode == 1, r.stderr
    assert "is empty but" in r.stderr and "holds 2 model file(s)" in r.stderr, r.stderr
    assert "blazar doctor --repair" in r.stderr and "Traceback" not in r.stderr, r.stderr
    ls = d.cli("ls", check=False)  # the CLI too: an import now would hide the loss
    assert ls.returncode == 1 and "blazar doctor --repair" in ls.stderr, ls.stderr
    doctor = d.cli("doctor", check=False)
    assert doctor.returncode == 1 and "fix: blazar doctor --repair" in doctor.stdout, doctor.stdout

    repaired = d.cli("doctor", "--repair", check=False)
    assert "repair: removed the empty database" in repaired.stdout, repaired.stdout
    assert "repair: imported smollm2:latest from" in repaired.stdout, repaired.stdout
    assert "repair: imported org/smol:q4 from" in repaired.stdout, repaired.stdout
    assert listed(d) == before  # the same names, the same digests
    # the engine was registered by its path outside the data dir: it is added again, and the model answers
    d.cli("engine", "add", "--kind", "llama-cpp", "--path", str(assets.llama_server))
    d.start()
    try:
        body = {"model": "org/smol:q4", "prompt": "Hi", "stream": False, "options": {"num_predict": 2}}
        r2 = httpx.post(d.url + "/api/generate", json=body, timeout=240)
        assert r2.status_code == 200 and r2.json()["done"] is True, r2.text
    finally:
        d.stop()


def test_a_missing_database_beside_model_files_is_refused(catalog: Daemon) -> None:
    d = catalog
    db = d.data_dir / "blazar.db"
    for suffix in ("", "-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)
    r = serve_once(d)
    assert r.returncode == 1 and "is missing but" in r.stderr and "blazar doctor --repair" in r.stderr, (
        r.stderr
    )
    assert not db.exists()  # nothing was created over the loss


def _pages(db: Path) -> tuple[int, int, int]:
    """The page size, the page count, and the root page of the ``models`` table."""
    conn = apsw.Connection(str(db))  # (apsw's `with` on a connection is a transaction: not here)
    try:
        size = conn.execute("PRAGMA page_size").fetchall()[0][0]
        count = conn.execute("PRAGMA page_count").fetchall()[0][0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'models'").fetchall()[0][0]
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    return int(size), int(count), int(root)


def _scribble(db: Path, page: int, size: int) -> None:
    """Garbage over one whole page, as a bad sector or a torn write leaves it."""
    with db.open("r+b") as f:
        f.seek((page - 1) * size)
        f.write(bytes((i * 37 + 11) % 251 for i in range(size)))


def test_garbage_pages_in_the_middle_are_refused_at_start_and_repaired(catalog: Daemon) -> None:
    d = catalog
    before = listed(d)
    db = d.data_dir / "blazar.db"
    size, count, root = _pages(db)
    assert 1 < root < count, (root, count)  # a page in the middle: the header still says "SQLite format 3"
    _scribble(db, root, size)

    r = serve_once(d)
    assert r.returncode == 1, r.stderr
    assert f"the database {db} is damaged" in r.stderr and "blazar doctor --repair" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    doctor = d.cli("doctor", check=False)
    assert doctor.returncode == 1 and "is damaged" in doctor.stdout, doctor.stdout

    repaired = d.cli("doctor", "--repair", check=False)
    assert "repair: moved the damaged database aside to" in repaired.stdout, repaired.stdout
    aside = list(d.data_dir.glob("blazar.db.damaged-*"))
    assert len([p for p in aside if not p.name.endswith(("-wal", "-shm"))]) == 1, aside  # kept, not deleted
    assert listed(d) == before


def test_damage_found_while_serving_is_a_500_naming_the_file(catalog: Daemon) -> None:
    d = catalog
    d.start()
    try:
        assert httpx.get(d.url + "/api/tags", timeout=30).status_code == 200
        db = d.data_dir / "blazar.db"
        size, _count, root = _pages(db)
        _scribble(db, root, size)
        # another process writes: the daemon's connection sees the file changed and reads its pages again
        with apsw.Connection(str(db)) as conn:
            conn.execute("INSERT INTO bench_history (model, engine_kind, created_at) VALUES ('x', 'y', 'z')")
        for path, shape in (("/api/tags", "ollama"), ("/v1/models", "openai")):
            r = httpx.get(d.url + path, timeout=30)
            assert r.status_code == 500, (path, r.status_code, r.text)
            message = r.json()["error"] if shape == "ollama" else r.json()["error"]["message"]
            assert message.startswith("the database <data dir>/blazar.db is damaged"), message
            assert "blazar doctor --repair" in message and str(d.data_dir) not in message, message
            assert "retry-after" not in r.headers
    finally:
        d.stop()


def test_usage_is_committed_when_each_request_ends_and_survives_kill_9(
    tmp_path: Path, assets: Assets
) -> None:
    """Three answers, then kill -9 as soon as their ends are recorded: every token is in ``key_usage`` (it was
    written every 5 s, so the last requests' tokens were lost and a key could overshoot its quota)."""
    d = provision(make_daemon(tmp_path / "d", KEYED), assets)
    d.start()
    spent = 0
    try:
        for i in range(3):
            body = {"model": "smollm2", "max_tokens": 5, "ignore_eos": True,
                    "messages": [{"role": "user", "content": f"Say {i}."}]}  # fmt: skip
            r = httpx.post(d.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=240)
            assert r.status_code == 200, r.text
            spent += r.json()["usage"]["prompt_tokens"] + r.json()["usage"]["completion_tokens"]
        audit = d.data_dir / "audit" / "audit.log"

        # the end of each request is recorded (its audit line) after its usage was committed; only the chat
        # requests' lines count (the start's /healthz polls have lines of their own)
        def answered() -> int:
            lines = audit.read_bytes().splitlines() if audit.is_file() else []
            return sum(b'"path":"/v1/chat/completions"' in line for line in lines)

        wait_for(lambda: answered() >= 3, HANG, "the 3 chat requests' audit lines")
    finally:
        assert d.proc is not None
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(timeout=30)
        cleanup(d)  # the engines it left
    with apsw.Connection(str(d.data_dir / "blazar.db")) as conn:
        rows = conn.execute(
            "SELECT requests, prompt_tokens + completion_tokens FROM key_usage WHERE key_name = 'team'"
        ).fetchall()
    assert rows and rows[0][1] == spent, (rows, spent)
