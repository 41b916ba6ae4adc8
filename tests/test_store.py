"""Tests for blazar.store on real SQLite files: pragmas, migrations, refusals, transactions, constraints.

They own only files under ``tmp_path`` and always close every connection they open.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import apsw
import pytest

from blazar.errors import BlazarError, StoreError
from blazar.store import LATEST_SCHEMA_VERSION, MIGRATIONS, Store, utc_now_iso

TABLES = {
    "schema_version",
    "engines",
    "models",
    "profiles",
    "key_usage",
    "bench_history",
    "files",
    "batches",
    "loras",
}


def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "nested" / "blazar.db"


def tables(store: Store) -> set[str]:
    return {
        str(r[0])
        for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not str(r[0]).startswith("sqlite_")
    }


def scalar(conn: apsw.Connection, sql: str) -> object:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return row[0]


def add_engine(store: Store, kind: str, tag: str, active: int) -> None:
    store.conn.execute(
        "INSERT INTO engines (kind, tag, path, source, active, created_at) VALUES (?, ?, ?, 'local', ?, ?)",
        (kind, tag, f"/bin/{kind}-{tag}", active, utc_now_iso()),
    )


def test_open_creates_parents_and_schema(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    with Store.open(path) as store:
        assert path.is_file()
        assert store.path == path
        assert tables(store) == TABLES
        assert store.schema_version() == LATEST_SCHEMA_VERSION == len(MIGRATIONS)


def test_pragmas(tmp_path: Path) -> None:
    with Store.open(db_path(tmp_path)) as store:
        c = store.conn
        assert scalar(c, "PRAGMA journal_mode") == "wal"
        assert scalar(c, "PRAGMA busy_timeout") == 5000
        assert scalar(c, "PRAGMA foreign_keys") == 1
        assert scalar(c, "PRAGMA synchronous") == 1  # NORMAL


def test_wal_persists_in_the_file(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    Store.open(path).close()
    raw = apsw.Connection(str(path))
    try:
        assert scalar(raw, "PRAGMA journal_mode") == "wal"
    finally:
        raw.close()


def test_version_table_content(tmp_path: Path) -> None:
    with Store.open(db_path(tmp_path)) as store:
        rows = store.conn.execute(
            "SELECT version, applied_at FROM schema_version ORDER BY version"
        ).fetchall()
    assert [r[0] for r in rows] == [v for v, _ in MIGRATIONS]
    for _, applied_at in rows:
        assert isinstance(applied_at, str)
        assert datetime.fromisoformat(applied_at).tzinfo is not None


def test_reopen_is_idempotent_and_keeps_data(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    with Store.open(path) as store:
        add_engine(store, "llama-cpp", "b1", 1)
        first = store.conn.execute("SELECT version, applied_at FROM schema_version").fetchall()
    for _ in range(3):
        with Store.open(path) as store:
            assert store.schema_version() == LATEST_SCHEMA_VERSION
            assert store.conn.execute("SELECT version, applied_at FROM schema_version").fetchall() == first
            assert store.conn.execute("SELECT kind, tag FROM engines").fetchall() == [("llama-cpp", "b1")]


def test_two_stores_on_one_file(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    with Store.open(path) as a, Store.open(path) as b:
        with a.transaction():
            add_engine(a, "llama-cpp", "x", 0)
        assert scalar(b.conn, "SELECT COUNT(*) FROM engines") == 1


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    with Store.open(path) as store:
        store.conn.execute(
            "INSERT INTO schema_version VALUES (?, ?)", (LATEST_SCHEMA_VERSION + 5, utc_now_iso())
        )
    with pytest.raises(StoreError) as info:
        Store.open(path)
    assert str(info.value) == (
        f"database {path} has schema version {LATEST_SCHEMA_VERSION + 5} but this blazar knows up to "
        f"{LATEST_SCHEMA_VERSION}; upgrade blazar"
    )


def test_non_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "blazar.db"
    path.write_bytes(b"this is certainly not a database file\n" * 200)
    with pytest.raises(StoreError, match="is damaged \\(not a SQLite database") as info:
        Store.open(path)
    assert isinstance(info.value, BlazarError)
    assert "blazar doctor --repair" in str(info.value)  # the command that mends it
    assert "\n" not in str(info.value)
    assert path.read_bytes().startswith(b"this is certainly")


def test_empty_file_becomes_a_database(tmp_path: Path) -> None:
    path = tmp_path / "blazar.db"
    path.touch()
    with Store.open(path) as store:
        assert store.schema_version() == LATEST_SCHEMA_VERSION


def test_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "blazar.db"
    raw = apsw.Connection(str(path))
    raw.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY)")
    raw.close()
    with pytest.raises(StoreError, match=r"not a blazar database .*photos"):
        Store.open(path)


def test_directory_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        Store.open(tmp_path)


def test_unwritable_parent_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot create directory"):
        Store.open(blocker / "sub" / "blazar.db")


def test_transaction_commits(tmp_path: Path) -> None:
    with Store.open(db_path(tmp_path)) as store:
        with store.transaction() as conn:
            assert conn is store.conn
            assert conn.in_transaction
            add_engine(store, "llama-cpp", "a", 0)
        assert not store.conn.in_transaction
        assert scalar(store.conn, "SELECT COUNT(*) FROM engines") == 1


def test_transaction_rolls_back_on_exception(tmp_path: Path) -> None:
    with Store.open(db_path(tmp_path)) as store:
        with pytest.raises(RuntimeError, match="boom"), store.transaction():
            add_engine(store, "llama-cpp", "a", 0)
            raise RuntimeError("boom")
        assert not store.conn.in_transaction
        assert scalar(store.conn, "SELECT COUNT(*) FROM engines") == 0
        with store.transaction():  # still usable afterwards
            add_engine(store, "llama-cpp", "b", 0)
        assert store.conn.execute("SELECT tag FROM engines").fetchall() == [("b",)]


def test_nested_transaction_rolls_back_only_the_inner_part(tmp_path: Path) -> None:
    with Store.open(db_path(tmp_path)) as store:
        with store.transaction():
            add_engine(store, "llama-cpp", "outer", 0)
            with pytest.raises(ValueError), store.transaction():
                add_engine(store, "llama-cpp", "inner", 0)
                raise ValueError
            with store.transaction():
                add_engine(store, "llama-cpp", "inner2", 0)
        tags = [r[0] for r in store.conn.execute("SELECT tag FROM engines ORDER BY tag")]
        assert tags == ["inner2", "outer"]


def test_outer_failure_rolls_back_committed_inner(tmp_path: Path) -> None:
    with Store.open(db_path(tmp_path)) as store:
        with pytest.raises(KeyError), store.transaction():
            with store.transaction():
                add_engine(store, "llama-cpp", "inner", 0)
            raise KeyError("x")
        assert scalar(store.conn, "SELECT COUNT(*) FROM engines") == 0


def test_transaction_is_immediate(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    with Store.open(path) as a, Store.open(path) as b:
        b.conn.execute("PRAGMA busy_timeout = 0")
        with a.transaction():
            with pytest.raises(StoreError, match="locked by another blazar process"), b.transaction():
                pass  # pragma: no cover - BEGIN IMMEDIATE fails before the body
            assert not b.conn.in_transaction


def test_one_active_engine_per_kind(tmp_path: Path) -> None:
    with Store.open(db_path(tmp_path)) as store:
        add_engine(store, "llama-cpp", "a", 1)
        add_engine(store, "llama-cpp", "b", 0)
        add_engine(store, "mistralrs", "a", 1)  # another kind may have its own active engine
        with pytest.raises(apsw.ConstraintError):
            add_engine(store, "llama-cpp", "c", 1)
        with pytest.raises(apsw.ConstraintError):
            store.conn.execute("UPDATE engines SET active = 1 WHERE kind = 'llama-cpp' AND tag = 'b'")
        with store.transaction():  # switching the active engine is done in two steps
            store.conn.execute("UPDATE engines SET active = 0 WHERE kind = 'llama-cpp'")
            store.conn.execute("UPDATE engines SET active = 1 WHERE kind = 'llama-cpp' AND tag = 'b'")
        active = store.conn.execute("SELECT kind, tag FROM engines WHERE active = 1 ORDER BY kind").fetchall()
        assert active == [("llama-cpp", "b"), ("mistralrs", "a")]


def test_engine_kind_tag_unique_and_source_checked(tmp_path: Path) -> None:
    with Store.open(db_path(tmp_path)) as store:
        add_engine(store, "llama-cpp", "a", 0)
        with pytest.raises(apsw.ConstraintError):
            add_engine(store, "llama-cpp", "a", 0)
        with pytest.raises(apsw.ConstraintError):
            store.conn.execute(
                "INSERT INTO engines (kind, tag, path, source, created_at) VALUES ('k', 't', '/p', 'magic', 'now')"
            )
        row = store.conn.execute("SELECT accel, active FROM engines WHERE tag = 'a'").fetchone()
        assert row == ("cpu", 0)


def test_other_tables_accept_rows(tmp_path: Path) -> None:
    now = utc_now_iso()
    with Store.open(db_path(tmp_path)) as store, store.transaction() as c:
        c.execute(
            "INSERT INTO models (name, path, format, size_bytes, created_at) VALUES ('m:latest', '/m.gguf', 'gguf', 10, ?)",
            (now,),
        )
        with pytest.raises(apsw.ConstraintError):
            c.execute(
                "INSERT INTO models (name, path, format, size_bytes, created_at) VALUES ('m:latest', '/x', 'gguf', 1, ?)",
                (now,),
            )
        c.execute(
            "INSERT INTO profiles (model, engine_kind, argv_json, updated_at) VALUES ('m:latest', 'llama-cpp', '[]', ?)",
            (now,),
        )
        c.execute("INSERT INTO key_usage (key_name, day, updated_at) VALUES ('k', '2024-01-01', ?)", (now,))
        c.execute(
            "INSERT INTO bench_history (model, engine_kind, gen_tps, created_at) VALUES ('m:latest', 'llama-cpp', 1.5, ?)",
            (now,),
        )
        assert scalar(c, "SELECT has_chat_template FROM models") == 0
        assert c.execute("SELECT requests, prompt_tokens, completion_tokens FROM key_usage").fetchone() == (
            0,
            0,
            0,
        )


def test_close_is_idempotent_and_conn_after_close_is_a_store_error(tmp_path: Path) -> None:
    store = Store.open(db_path(tmp_path))
    store.close()
    store.close()
    assert "closed" in repr(store)
    with pytest.raises(StoreError, match="is closed"):
        _ = store.conn


def test_a_database_that_cannot_be_written_is_a_teaching_store_error(tmp_path: Path) -> None:
    path = db_path(tmp_path)
    Store.open(path).close()
    # a read-only connection fails every write as a read-only file, directory or mount does
    store = Store(apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY), path)
    try:
        with pytest.raises(StoreError, match="read-only") as e, store.transaction():
            add_engine(store, "llama-cpp", "a", 0)
        assert str(path) in str(e.value) and "writable" in str(e.value)
        assert not store.conn.in_transaction  # rolled back, nothing half-written
    finally:
        store.close()
    with Store.open(path) as again:
        assert scalar(again.conn, "SELECT COUNT(*) FROM engines") == 0
