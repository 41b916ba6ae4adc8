"""Blazar's SQLite store (apsw): opening ``blazar.db``, connection pragmas, numbered migrations, transactions.

It owns the schema (the ``MIGRATIONS`` list) and the connection lifecycle. It must not hold queries that belong
to other modules (catalog, engines, keys, bench read and write their own tables through ``Store.conn``),
must not read config, and must not import ``blazar._native``. Open/migrate failures are ``StoreError``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

import apsw

from blazar.errors import StoreError

__all__ = [
    "BUSY_TIMEOUT_MS",
    "DB_FILENAME",
    "LATEST_SCHEMA_VERSION",
    "MIGRATIONS",
    "QUICK_CHECK_SECS",
    "REPAIR_HINT",
    "Store",
    "damaged",
    "failure",
    "is_damage",
    "lost_catalog",
    "utc_now_iso",
]

DB_FILENAME = "blazar.db"
BUSY_TIMEOUT_MS = 5000
QUICK_CHECK_SECS = 5.0
"""How long the start-up ``PRAGMA quick_check`` may run; on a file too large to check in that time it stops and
the daemon starts (a damaged page is then found when it is read: a 500 naming the file)."""
REPAIR_HINT = "blazar doctor --repair"

_V1 = """
CREATE TABLE engines (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    tag TEXT NOT NULL,
    version TEXT,
    path TEXT NOT NULL,
    source TEXT NOT NULL CHECK (source IN ('build', 'local', 'install')),
    accel TEXT NOT NULL DEFAULT 'cpu',
    sha256 TEXT,
    active INTEGER NOT NULL DEFAULT 0 CHECK (active IN (0, 1)),
    created_at TEXT NOT NULL,
    UNIQUE (kind, tag)
);
CREATE UNIQUE INDEX engines_one_active_per_kind ON engines (kind) WHERE active = 1;

CREATE TABLE models (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    path TEXT NOT NULL,
    format TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    sha256 TEXT,
    architecture TEXT,
    parameter_count INTEGER,
    context_length INTEGER,
    quantization TEXT,
    has_chat_template INTEGER NOT NULL DEFAULT 0 CHECK (has_chat_template IN (0, 1)),
    metadata_json TEXT,
    created_at TEXT NOT NULL
);

CREATE TABLE profiles (
    id INTEGER PRIMARY KEY,
    model TEXT NOT NULL,
    engine_kind TEXT NOT NULL,
    argv_json TEXT NOT NULL,
    estimate_json TEXT,
    updated_at TEXT NOT NULL,
    UNIQUE (model, engine_kind)
);

CREATE TABLE key_usage (
    key_name TEXT NOT NULL,
    day TEXT NOT NULL,
    requests INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (key_name, day)
);

CREATE TABLE bench_history (
    id INTEGER PRIMARY KEY,
    model TEXT NOT NULL,
    engine_kind TEXT NOT NULL,
    engine_tag TEXT,
    prompt_tps REAL,
    gen_tps REAL,
    ttft_ms REAL,
    created_at TEXT NOT NULL,
    notes TEXT
);
"""

_V2 = """
ALTER TABLE engines ADD COLUMN lane_class TEXT NOT NULL DEFAULT 'mainstream'
    CHECK (lane_class IN ('mainstream', 'fork'));
ALTER TABLE engines ADD COLUMN architectures_json TEXT;
ALTER TABLE engines ADD COLUMN activated_at TEXT;
UPDATE engines SET activated_at = created_at WHERE active = 1;
"""
"""Engines: the lane class and advertised architectures (from the engine manifest) and when each row was last
made active (``engine rollback`` returns to the most recently active other tag)."""

_V3 = """
CREATE TABLE files (
    id TEXT PRIMARY KEY,
    owner TEXT,
    filename TEXT NOT NULL,
    purpose TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE batches (
    id TEXT PRIMARY KEY,
    owner TEXT,
    status TEXT NOT NULL,
    doc_json TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
"""
"""The Files and Batches APIs (``batches.py``): uploaded and produced files (their bytes live under
``<data_dir>/files/``) and batch jobs, each stored as its OpenAI Batch object; ``owner`` is the key name that
made it (NULL without auth)."""

_V4 = """
CREATE TABLE loras (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    base TEXT NOT NULL,
    path TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    scale REAL NOT NULL DEFAULT 1.0,
    created_at TEXT NOT NULL
);
CREATE INDEX loras_by_base ON loras (base);
"""
"""LoRA adapters (``loras.py``): each served by name on top of the catalog model ``base``; ``id`` order is the
order its engine loads them."""

_V5 = """
ALTER TABLE models ADD COLUMN preset_json TEXT;
"""
"""A model's preset (``presets.py``): the system prompt, conversation, options and license Ollama's
``/api/create`` gave it, as a JSON object in Ollama's own field shapes; NULL for none."""

_V6 = """
ALTER TABLE engines ADD COLUMN asset_url TEXT;
ALTER TABLE engines ADD COLUMN asset_sha256 TEXT;
"""
"""Engines: the release archive an installed engine came from and the sha256 it was verified against (NULL for a
build or a registered binary)."""

MIGRATIONS: tuple[tuple[int, str], ...] = ((1, _V1), (2, _V2), (3, _V3), (4, _V4), (5, _V5), (6, _V6))
"""Ordered (version, sql) pairs; append only, never edit a released one. Each runs in its own transaction."""

LATEST_SCHEMA_VERSION = MIGRATIONS[-1][0]

for _i, (_version, _sql) in enumerate(MIGRATIONS, start=1):
    if _version != _i:  # pragma: no cover - a programming error caught at import
        raise RuntimeError(f"store.MIGRATIONS must be numbered 1, 2, 3, ...; entry {_i} is {_version}")

_VERSION_TABLE = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at TEXT)"


def utc_now_iso() -> str:
    """The current UTC time as ISO 8601, the format every ``*_at`` column uses."""
    return datetime.now(UTC).isoformat()


def _where(path: Path | None) -> str:
    return (
        f"the database {path}"
        if path is not None
        else "the catalog database (blazar.db in the data directory)"
    )


def is_damage(exc: BaseException) -> bool:
    """Whether an apsw error says the file itself is damaged (not busy, not full): permanent until repaired."""
    return isinstance(exc, apsw.CorruptError | apsw.NotADBError)


def damaged(path: Path | None, detail: str) -> StoreError:
    """The teaching error for a damaged database file: what happened and the commands that mend it."""
    return StoreError(
        f"{_where(path)} is damaged ({detail}); restore it from a backup, or move it aside and rebuild the catalog"
        f" from the model files with `{REPAIR_HINT}`"
    )


def failure(exc: apsw.Error, path: Path | None = None) -> StoreError | None:
    """The teaching StoreError for an apsw error the user must act on: a damaged file (``damaged``), or one that
    cannot be written (read-only file, directory or mount; full disk; I/O error); None for another (busy, a bug)."""
    if is_damage(exc):
        return damaged(path, f"SQLite: {exc}")
    if isinstance(exc, apsw.ReadOnlyError | apsw.CantOpenError | apsw.PermissionsError):
        why = "it or its directory is read-only"
    elif isinstance(exc, apsw.FullError):
        why = "the disk is full"
    elif isinstance(exc, apsw.IOError):
        why = "the disk reported an I/O error"
    else:
        return None
    return StoreError(
        f"cannot write {_where(path)}: {why} ({exc}); make the data directory and blazar.db writable by this"
        " user (or point data_dir / BLAZAR_DATA_DIR at a writable directory); nothing was changed"
    )


def _model_files(weights: Path) -> int:
    """How many files the catalog's ``models/`` folder holds (staging folders of imports not counted)."""
    if not weights.is_dir():
        return 0
    return sum(
        1 for p in weights.rglob("*") if p.is_file() and ".importing" not in p.relative_to(weights).parts[:1]
    )


def lost_catalog(path: Path, weights: Path) -> StoreError | None:
    """A missing or empty database beside model files: the catalog was lost (a crash while the file was being
    written, a full disk, a file deleted by hand), not a new install."""
    try:
        empty = path.stat().st_size == 0
    except FileNotFoundError:
        empty = True
    except OSError:  # a part of the path is no directory: opening it says so
        return None
    if not empty:
        return None
    count = _model_files(weights)
    if not count:
        return None
    state = "empty" if path.exists() else "missing"
    return StoreError(
        f"the database {path} is {state} but {weights} holds {count} model file(s): the catalog (models,"
        f" engines, keys' usage) was lost, by a crash while it was written or a full disk. Rebuild it from the"
        f" files with `{REPAIR_HINT}` (every model under models/ is imported again by its file's name), or move"
        f" {weights} aside to start with an empty catalog"
    )


class Store:
    """One open connection to ``blazar.db``; use ``Store.open`` and close it (or use it as a context manager)."""

    def __init__(self, conn: apsw.Connection, path: Path) -> None:
        self._conn: apsw.Connection | None = conn
        self._depth = 0
        self.path = path

    # -- lifecycle ------------------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, *, weights: Path | None = None) -> Store:
        """Open (creating it and its parent dirs if needed) and migrate the database at ``path``.

        With ``weights`` (the data dir's ``models/``), a missing or empty database beside model files is refused:
        the catalog was lost, and starting afresh would forget every model without a word. A damaged file is
        refused when a page read says so (``failure``); ``quick_check`` reads them all."""
        path = Path(path)
        if weights is not None and (lost := lost_catalog(path, weights)) is not None:
            raise lost
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create directory {path.parent} for database {path}: {exc.strerror or exc}"
            ) from None
        if path.is_dir():
            raise StoreError(f"database path {path} is a directory; it must be a SQLite file")
        try:
            conn = apsw.Connection(str(path))
        except apsw.Error as exc:
            raise StoreError(f"cannot open database {path}: {exc}") from None
        store = cls(conn, path)
        try:
            store._configure()
            store._migrate()
        except BaseException:
            store.close()
            raise
        return store

    def close(self) -> None:
        """Close the connection; closing twice is harmless."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else "open"
        return f"Store({str(self.path)!r}, {state})"

    @property
    def conn(self) -> apsw.Connection:
        """The raw apsw connection for other modules' queries."""
        if self._conn is None:
            raise StoreError(f"database {self.path} is closed")
        return self._conn

    # -- transactions -----------------------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[apsw.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back if the block raises; nested calls use savepoints."""
        conn = self.conn
        if self._depth > 0:
            yield from self._savepoint(conn)
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
        except apsw.BusyError:
            raise StoreError(
                f"database {self.path} is locked by another blazar process (waited {BUSY_TIMEOUT_MS} ms); "
                "retry, or stop the other process"
            ) from None
        except apsw.Error as exc:
            mended = failure(exc, self.path)
            if mended is None:
                raise
            raise mended from None
        self._depth = 1
        try:
            yield conn
        except BaseException as exc:
            self._depth = 0
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            mended = failure(exc, self.path) if isinstance(exc, apsw.Error) else None
            if mended is not None:
                raise mended from None
            raise
        self._depth = 0
        try:
            conn.execute("COMMIT")
        except apsw.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise failure(exc, self.path) or StoreError(
                f"cannot commit to database {self.path}: {exc}"
            ) from None

    def _savepoint(self, conn: apsw.Connection) -> Iterator[apsw.Connection]:
        name = f"blazar_sp_{self._depth}"
        conn.execute(f"SAVEPOINT {name}")
        self._depth += 1
        try:
            yield conn
        except BaseException:
            self._depth -= 1
            conn.execute(f"ROLLBACK TO {name}")
            conn.execute(f"RELEASE {name}")
            raise
        self._depth -= 1
        conn.execute(f"RELEASE {name}")

    def quick_check(self, bound_secs: float = QUICK_CHECK_SECS) -> bool:
        """``PRAGMA quick_check`` (the b-trees' structure, without matching indexes to tables), stopped after
        ``bound_secs``; raises the teaching ``damaged`` error when it finds a problem. True when it ran to the end,
        False when the bound stopped it first."""
        conn = self.conn
        deadline = time.monotonic() + bound_secs
        conn.set_progress_handler(lambda: time.monotonic() > deadline, 10_000)
        try:
            rows = conn.execute("PRAGMA quick_check(5)").fetchall()
        except apsw.InterruptError:
            return False
        except apsw.Error as exc:
            raise failure(exc, self.path) or StoreError(f"cannot check database {self.path}: {exc}") from None
        finally:
            conn.set_progress_handler(None)
        found = [str(r[0]) for r in rows]
        if found != ["ok"]:
            raise damaged(self.path, "SQLite's quick_check found: " + "; ".join(found))
        return True

    # -- schema -----------------------------------------------------------------------------------------------

    def schema_version(self) -> int:
        """The highest migration applied to this database (0 before any)."""
        rows = self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
        ).fetchall()
        if not rows:
            return 0
        row = self.conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
        return int(row[0]) if row is not None else 0

    def _configure(self) -> None:
        conn = self.conn
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            row = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            mode = str(row[0]).lower() if row is not None else "unknown"
            if mode != "wal":
                raise StoreError(
                    f"database {self.path} could not be switched to WAL journal mode (got '{mode}'); "
                    "put the data dir on a local file system"
                )
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")
        except (apsw.NotADBError, apsw.CorruptError) as exc:
            raise damaged(self.path, f"not a SQLite database, or its header is damaged: {exc}") from None
        except apsw.Error as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}") from None

    def _migrate(self) -> None:
        try:
            with self.transaction() as conn:
                if self.schema_version() == 0:
                    self._refuse_foreign(conn)
                conn.execute(_VERSION_TABLE)
            self._check_not_newer()
            for version, sql in MIGRATIONS:
                if version <= self.schema_version():
                    continue
                with self.transaction() as conn:
                    current = self.schema_version()  # another process may have migrated meanwhile
                    if current >= version:
                        continue
                    conn.execute(sql).fetchall()
                    conn.execute(
                        "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                        (version, utc_now_iso()),
                    )
        except apsw.Error as exc:
            raise failure(exc, self.path) or StoreError(
                f"cannot migrate database {self.path}: {exc}"
            ) from None

    def _refuse_foreign(self, conn: apsw.Connection) -> None:
        """A database with tables but no ``schema_version`` was made by something else: do not touch it."""
        names = [
            str(r[0])
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        if names:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise StoreError(
                f"database {self.path} is not a blazar database (it has tables {shown} but no schema_version); "
                "point BLAZAR_DATA_DIR at another directory"
            )

    def _check_not_newer(self) -> None:
        version = self.schema_version()
        if version > LATEST_SCHEMA_VERSION:
            raise StoreError(
                f"database {self.path} has schema version {version} but this blazar knows up to "
                f"{LATEST_SCHEMA_VERSION}; upgrade blazar"
            )
