"""``gateway.usage.UsageWriter``: a request's tokens are in ``key_usage`` before what waited on them (its audit
line) runs, on a real SQLite file read back through a second connection."""

from __future__ import annotations

import asyncio
from pathlib import Path

import apsw
import pytest

from blazar.errors import StoreError
from blazar.gateway.usage import UsageWriter
from blazar.store import Store
from blazar.tenancy.quotas import Quotas
from tests.conftest import until


def on_disk(db: Path) -> int:
    conn = apsw.Connection(str(db))
    try:
        rows = conn.execute(
            "SELECT prompt_tokens + completion_tokens FROM key_usage WHERE key_name = 'k'"
        ).fetchall()
    finally:
        conn.close()
    return int(rows[0][0]) if rows else 0


def test_what_waits_runs_after_the_commit_and_close_writes_the_rest(tmp_path: Path) -> None:
    db = tmp_path / "blazar.db"

    async def main() -> list[int]:
        with Store.open(db) as store:
            quotas = Quotas()
            writer = UsageWriter(quotas, store)
            writer.start()
            seen: list[int] = []
            for tokens in (7, 5):
                quotas.record_usage("k", tokens, 0)
                writer.commit(lambda: seen.append(on_disk(db)))
            await until(lambda: len(seen) == 2, "both callbacks")
            quotas.record_usage("k", 3, 0)
            writer.commit()  # nothing waits on it: close still writes it
            await writer.close()
            seen.append(on_disk(db))
            return seen

    first, second, closed = asyncio.run(main())
    assert first >= 7 and second == 12  # each ran once its own tokens were on disk
    assert closed == 15


def test_before_start_it_writes_at_once_through_the_loops_store(tmp_path: Path) -> None:
    with Store.open(tmp_path / "blazar.db") as store:
        quotas = Quotas()
        writer = UsageWriter(quotas, store)
        quotas.record_usage("k", 4, 2)
        ran: list[int] = []
        writer.commit(lambda: ran.append(on_disk(store.path)))
        assert ran == [6]


def test_a_failed_write_still_releases_and_keeps_the_rows_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "blazar.db"

    async def main() -> tuple[list[int], int]:
        with Store.open(db) as store:
            quotas = Quotas()
            writer = UsageWriter(quotas, store)
            writer.start()
            real = quotas.flush

            def full(store: Store) -> int:
                raise StoreError("cannot write the database: the disk is full")

            monkeypatch.setattr(quotas, "flush", full)
            seen: list[int] = []
            quotas.record_usage("k", 9, 0)
            writer.commit(lambda: seen.append(on_disk(db)))
            await until(lambda: len(seen) == 1, "the callback after the failed write")
            monkeypatch.setattr(quotas, "flush", real)
            await writer.close()
            return seen, on_disk(db)

    seen, after = asyncio.run(main())
    assert seen == [0]  # the answer's end was still recorded
    assert after == 9  # and its tokens were written by the next commit
