"""The catalog over a real SQLite file and the real SmolLM2 GGUF: import, cp, rm, and the weights' digests
(recorded on import and cp, filled lazily for rows from before digests were recorded)."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import threading
from datetime import UTC, datetime
from pathlib import Path

import apsw
import pytest

from blazar.catalog import files as catalog_files
from blazar.catalog import models as catalog_mod
from blazar.catalog.digests import sha256_file
from blazar.catalog.models import Catalog, DigestCancelled, ModelRow, split_digest
from blazar.errors import CatalogError, ModelNotFound, StoreError
from blazar.paths import DataDir
from blazar.store import LATEST_SCHEMA_VERSION, MIGRATIONS, Store
from tests.conftest import until
from tests.fakehub import split_gguf, tiny_gguf

SHARDS = split_gguf("tiny-Q8_0", 2, 100_000)


@pytest.fixture(scope="module")
def model_sha(model_file: Path) -> str:
    return hashlib.sha256(model_file.read_bytes()).hexdigest()


@pytest.fixture
def no_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any read of a file to hash it fails the test."""

    def refuse(*_a: object, **_k: object) -> str:
        raise AssertionError("the weights were hashed again")

    monkeypatch.setattr(catalog_files, "sha256_file", refuse)


def _shards(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in SHARDS.items():
        (folder / name).write_bytes(data)
    return [folder / name for name in SHARDS]


def test_import_ls_cp_rm(catalog: Catalog, model_file: Path, model_sha: str) -> None:
    row = catalog.import_file(model_file)
    assert row.name == "smollm2-135m-instruct:q4_1"
    assert row.architecture == "llama" and row.quantization == "Q4_1" and row.has_chat_template
    assert row.context_length == 8192
    assert 130e6 < (row.parameter_count or 0) < 140e6
    assert os.stat(row.path).st_ino == os.stat(model_file).st_ino  # hard link, same filesystem
    assert row.sha256 == model_sha

    alias = catalog.copy(row.name, "smol")
    assert alias.name == "smol:latest" and os.stat(alias.path).st_ino == os.stat(row.path).st_ino
    assert alias.sha256 == model_sha
    assert [m.name for m in catalog.list()] == ["smol:latest", "smollm2-135m-instruct:q4_1"]

    catalog.remove("smol")
    assert not alias.path.exists() and row.path.exists()
    with pytest.raises(ModelNotFound, match="model 'smol:latest' not found"):
        catalog.get("smol")


def test_a_preset_is_stored_and_copied(catalog: Catalog, model_file: Path) -> None:
    row = catalog.import_file(model_file, "base")
    assert row.preset is None
    preset = {"system": "Be brief.", "parameters": {"temperature": 0.2}}
    before = catalog.generation
    assert catalog.set_preset("base", preset).preset == preset
    assert catalog.generation > before  # what tells a memo of rows (the gateway's routes) it is stale
    assert catalog.copy("base", "twin").preset == preset  # a copy is the same model, preset and all
    assert catalog.set_preset("base", None).preset is None
    assert catalog.get("twin").preset == preset
    with pytest.raises(ModelNotFound):
        catalog.set_preset("nosuch", preset)
    before = catalog.generation
    catalog.remove("twin")
    assert catalog.generation > before


def test_duplicate_name_refused(catalog: Catalog, model_file: Path) -> None:
    catalog.import_file(model_file, "m")
    with pytest.raises(CatalogError, match="already exists"):
        catalog.import_file(model_file, "m:latest")


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("team/m", "team--m"),  # '/' is written as '--': one models/ folder
        ("m", "M"),  # one file on a case-insensitive file system
        ("m.", "m"),  # safe_component strips the trailing '.'
        ("x/t:embed", "x:t"),  # x:t's @embed child would share x/t:embed's run/ and logs/ files
        ("a:b--c", "a--b:c"),  # different weights files, one run/ pid and apikey file
    ],
)
def test_names_that_share_files_are_refused(
    catalog: Catalog, model_file: Path, first: str, second: str
) -> None:
    kept = catalog.import_file(model_file, first)
    with pytest.raises(CatalogError, match=f"would share its files with '{kept.name}'"):
        catalog.copy(first, second)
    with pytest.raises(CatalogError, match="would share its files"):
        catalog.import_file(model_file, second)
    with pytest.raises(CatalogError, match="would share its files"):
        catalog.import_split(_shards(catalog.data.root / "split"), second)
    assert [m.name for m in catalog.list()] == [kept.name] and kept.path.is_file()
    catalog.copy(first, "elsewhere")  # an unrelated name is fine
    catalog.remove("elsewhere")
    assert kept.path.is_file()


def test_replace_swaps_a_model_in_one_step_and_a_failure_keeps_it(
    catalog: Catalog, model_file: Path, model_sha: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = catalog.import_file(model_file, "m")
    other = tmp_path / "tiny.gguf"
    other.write_bytes(tiny_gguf())
    tiny_sha = hashlib.sha256(other.read_bytes()).hexdigest()
    with pytest.raises(CatalogError, match="already exists"):
        catalog.import_file(other, "m")  # without replace, as before
    # a file that is no GGUF is refused before anything changes
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04" + bytes(4096))
    with pytest.raises(CatalogError, match="not a usable GGUF file"):
        catalog.import_file(junk, "m", replace=True)
    assert catalog.get("m").sha256 == model_sha and sha256_file(old.path) == model_sha
    # a failure while the new row is written puts the old file and row back
    real = catalog._insert

    def broken(*a: object, **k: object) -> None:
        raise StoreError("disk I/O error")

    monkeypatch.setattr(catalog, "_insert", broken)
    with pytest.raises(StoreError):
        catalog.import_file(other, "m", replace=True)
    monkeypatch.setattr(catalog, "_insert", real)
    assert [(r.name, r.sha256) for r in catalog.list()] == [("m:latest", model_sha)]
    assert sha256_file(old.path) == model_sha
    assert not any((catalog.data.models / ".importing").iterdir())
    # and a good one replaces it: same name and path, the new weights, the old preset gone with its row
    catalog.set_preset("m", {"system": "old"})
    new = catalog.import_file(other, "m", replace=True, sha256=tiny_sha)
    assert new.path == old.path and new.sha256 == tiny_sha and new.preset is None
    assert sha256_file(new.path) == tiny_sha and model_file.is_file()
    # a copy over it is one step too (a hard link of the source)
    catalog.import_file(model_file, "src")
    again = catalog.copy("src", "m", replace=True)
    assert again.sha256 == model_sha and os.path.samefile(again.path, model_file)
    assert sorted(r.name for r in catalog.list()) == ["m:latest", "src:latest"]


def test_replace_is_refused_for_a_model_with_adapters_and_for_an_adapter_name(
    catalog: Catalog, model_file: Path, tmp_path: Path
) -> None:
    catalog.import_file(model_file, "m")
    catalog.store.conn.execute(
        "INSERT INTO loras (name, base, path, sha256, size_bytes, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        ("ad:latest", "m:latest", str(tmp_path / "ad.gguf"), "0" * 64, 1, datetime.now(UTC).isoformat()),
    )
    with pytest.raises(CatalogError, match="has LoRA adapters"):
        catalog.import_file(model_file, "m", replace=True)
    with pytest.raises(CatalogError, match="names a LoRA adapter"):
        catalog.import_file(model_file, "ad", replace=True)
    assert [r.name for r in catalog.list()] == ["m:latest"] and catalog.get("m").path.is_file()


def test_corrupt_and_truncated_files_are_refused(catalog: Catalog, model_file: Path, tmp_path: Path) -> None:
    head = model_file.read_bytes()[:4096]
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(head[:1000])
    with pytest.raises(CatalogError, match="not a usable GGUF file"):
        catalog.import_file(cut)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04" + head[4:])
    with pytest.raises(CatalogError, match="not a usable GGUF file"):
        catalog.import_file(junk)
    assert catalog.list() == []
    with pytest.raises(CatalogError, match="does not exist"):
        catalog.import_file(tmp_path / "absent.gguf")


# -- digests ----------------------------------------------------------------------------------------------


def test_a_linked_import_is_hashed_once_with_progress(
    catalog: Catalog, model_file: Path, model_sha: str
) -> None:
    seen: list[tuple[int, int]] = []
    row = catalog.import_file(model_file, "m", progress=lambda d, t: seen.append((d, t)))
    assert os.stat(row.path).st_ino == os.stat(model_file).st_ino
    size = model_file.stat().st_size
    assert row.sha256 == model_sha and seen[-1] == (size, size)
    assert len(seen) == -(-size // catalog_mod.HASH_BLOCK)  # one read per 1 MiB block, once
    assert catalog.get("m").sha256 == model_sha  # stored, not just returned


def test_a_copied_import_is_hashed_while_copying(
    catalog: Catalog, model_file: Path, model_sha: str, monkeypatch: pytest.MonkeyPatch, no_hashing: None
) -> None:
    def cross_device(src: object, dst: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(catalog_mod.os, "link", cross_device)
    row = catalog.import_file(model_file, "m")  # no_hashing: a second read of the bytes would fail here
    assert os.stat(row.path).st_ino != os.stat(model_file).st_ino
    assert row.sha256 == model_sha and row.path.read_bytes() == model_file.read_bytes()


def test_a_known_sha256_is_recorded_without_reading(
    catalog: Catalog, model_file: Path, no_hashing: None
) -> None:
    row = catalog.import_file(model_file, "m", sha256="AB" * 32)
    assert row.sha256 == "ab" * 32
    with pytest.raises(CatalogError, match="'xyz' is not a sha256 digest"):
        catalog.import_file(model_file, "n", sha256="xyz")
    assert catalog.find("n") is None and not (catalog.data.models / "n" / "latest.gguf").exists()


def test_cp_reuses_the_source_digest(
    catalog: Catalog, model_file: Path, model_sha: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog.import_file(model_file, "m")

    def refuse(*_a: object, **_k: object) -> str:
        raise AssertionError("cp hashed the weights")

    monkeypatch.setattr(catalog_files, "sha256_file", refuse)
    assert catalog.copy("m", "m2").sha256 == model_sha


def test_split_digest_covers_every_shard(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shas = [hashlib.sha256(d).hexdigest() for d in SHARDS.values()]
    assert split_digest(shas) == hashlib.sha256(f"{shas[0]}\n{shas[1]}\n".encode()).hexdigest()
    row = catalog.import_split(_shards(tmp_path / "src"), "split")
    assert row.sha256 == split_digest(shas)
    assert catalog_mod.model_digest(row.path) == row.sha256  # the lazy path agrees with the import path

    def refuse(*_a: object, **_k: object) -> str:
        raise AssertionError("hashed again")

    monkeypatch.setattr(catalog_files, "sha256_file", refuse)
    assert catalog.copy("split", "split2").sha256 == row.sha256
    given = catalog.import_split(_shards(tmp_path / "other"), "given", sha256s=shas)
    assert given.sha256 == row.sha256
    with pytest.raises(CatalogError, match="2 shards but 1 sha256 digests"):
        catalog.import_split(_shards(tmp_path / "third"), "bad", sha256s=shas[:1])


def test_an_interrupted_hash_leaves_no_file(
    catalog: Catalog, model_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*_a: object, **_k: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(catalog_files, "sha256_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        catalog.import_file(model_file, "m")
    assert catalog.list() == [] and not (catalog.data.models / "m" / "latest.gguf").exists()


def test_hashing_can_be_cancelled(model_file: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(DigestCancelled):
        sha256_file(model_file, cancel=cancel)


# -- rows from before digests were recorded ---------------------------------------------------------------


def older_database(data: DataDir, model_file: Path) -> Path:
    """A blazar.db as an older blazar left it, written with plain apsw: every migration it knew applied, one
    model row whose ``sha256`` was never written, and that model's hard link under ``models/``."""
    link = data.models / "smollm2" / "latest.gguf"
    link.parent.mkdir(parents=True)
    os.link(model_file, link)
    conn = apsw.Connection(str(data.db))
    now = datetime.now(UTC).isoformat()
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT)")
    for version, sql in MIGRATIONS:
        conn.execute(sql).fetchall()
        conn.execute("INSERT INTO schema_version VALUES (?, ?)", (version, now))
    conn.execute(
        "INSERT INTO models (name, path, format, size_bytes, architecture, has_chat_template, created_at)"
        " VALUES ('smollm2:latest', ?, 'gguf', ?, 'llama', 1, ?)",
        (str(link), model_file.stat().st_size, now),
    )
    conn.close()
    return link


def test_anolder_database_opens_with_null_digests(tmp_path: Path, model_file: Path, model_sha: str) -> None:
    data = DataDir(tmp_path / "data").ensure()
    older_database(data, model_file)
    with Store.open(data.db) as store:
        assert store.schema_version() == LATEST_SCHEMA_VERSION  # the column was in the schema from v1
        cat = Catalog(store, data)
        row = cat.get("smollm2")
        assert row.sha256 is None
        assert row.preset is None  # the preset column came with a later migration
        filled = cat.fill_digest(row)
        assert filled.sha256 == model_sha
    with Store.open(data.db) as store:
        assert Catalog(store, data).get("smollm2").sha256 == model_sha  # stored once, for good


def test_lazy_fill_runs_off_the_event_loop_once(
    tmp_path: Path, model_file: Path, model_sha: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = DataDir(tmp_path / "data").ensure()
    older_database(data, model_file)
    real = catalog_mod.model_digest
    calls: list[int] = []
    loop_ran = threading.Event()

    def gated(path: Path, cancel: threading.Event | None = None) -> str:
        calls.append(threading.get_ident())
        # Only a loop that is free while this thread hashes can set the event: on the loop this would hang.
        assert loop_ran.wait(60), "the event loop was blocked while hashing"
        return real(path, cancel)

    monkeypatch.setattr(catalog_mod, "model_digest", gated)

    async def main(cat: Catalog, row: ModelRow) -> list[str | None]:
        first = asyncio.ensure_future(cat.digest(row))
        second = asyncio.ensure_future(cat.digest(row))
        await until(
            lambda: calls, "the hash to start in its thread"
        )  # the loop runs while that thread hashes
        loop_ran.set()
        return [*(await asyncio.gather(first, second)), await cat.digest(cat.get(row.name))]

    with Store.open(data.db) as store:
        cat = Catalog(store, data)
        got = asyncio.run(main(cat, cat.get("smollm2")))
        assert got == [model_sha] * 3
        assert len(calls) == 1 and calls[0] != threading.get_ident()  # one hash, in a worker thread
        assert cat.get("smollm2").sha256 == model_sha


def test_lazy_fill_of_a_missing_file_is_none_and_retried(
    tmp_path: Path, model_file: Path, model_sha: str
) -> None:
    data = DataDir(tmp_path / "data").ensure()
    link = older_database(data, model_file)
    link.rename(link.with_suffix(".away"))
    with Store.open(data.db) as store:
        cat = Catalog(store, data)
        row = cat.get("smollm2")
        assert asyncio.run(cat.digest(row)) is None and cat.fill_digest(row).sha256 is None
        assert cat.get("smollm2").sha256 is None
        link.with_suffix(".away").rename(link)
        assert asyncio.run(cat.digest(row)) == model_sha


def test_a_caller_that_leaves_does_not_stop_the_fill_but_shutdown_does(
    tmp_path: Path, model_file: Path, model_sha: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = DataDir(tmp_path / "data").ensure()
    older_database(data, model_file)
    real = catalog_mod.model_digest
    cancels: list[threading.Event] = []
    started = threading.Event()
    go = threading.Event()

    def gated(path: Path, cancel: threading.Event | None = None) -> str:
        assert cancel is not None
        cancels.append(cancel)
        started.set()
        go.wait(10)
        if cancel.is_set():
            raise DigestCancelled("stopped")
        return real(path, cancel)

    monkeypatch.setattr(catalog_mod, "model_digest", gated)

    async def leave_then_finish(cat: Catalog, row: ModelRow) -> str | None:
        caller = asyncio.ensure_future(cat.digest(row))
        await asyncio.to_thread(started.wait, 10)
        caller.cancel()  # a client that went away
        with pytest.raises(asyncio.CancelledError):
            await caller
        fill = cat._filling[row.path]
        go.set()
        return await fill  # the hashing went on and is stored

    async def shut_down(cat: Catalog, row: ModelRow) -> None:
        caller = asyncio.ensure_future(cat.digest(row))
        await asyncio.to_thread(started.wait, 10)
        cat._filling[row.path].cancel()  # what the loop's shutdown does to every task left
        with pytest.raises(asyncio.CancelledError):
            await caller
        go.set()

    with Store.open(data.db) as store:
        cat = Catalog(store, data)
        row = cat.get("smollm2")
        assert asyncio.run(leave_then_finish(cat, row)) == model_sha
        assert cat.get("smollm2").sha256 == model_sha and cat._filling == {}
        assert not cancels[0].is_set()

        store.conn.execute("UPDATE models SET sha256 = NULL")
        started.clear()
        go.clear()
        asyncio.run(shut_down(cat, cat.get("smollm2")))
        assert cancels[1].is_set()  # the worker was told to stop at its next block
        assert cat.get("smollm2").sha256 is None and cat._filling == {}


def test_removing_a_model_removes_what_its_engines_kept(catalog: Catalog, model_file: Path) -> None:
    """Its saved slots (users' prompts) and its engines' logs go with it; another model's stay."""
    catalog.import_file(model_file, "gone")
    catalog.import_file(model_file, "kept")
    data = catalog.data
    for name in ("gone:latest", "kept:latest"):
        data.bank(name).mkdir(parents=True)
        (data.bank(name) / "_auto-512-abcdefabcdef-0.bin").write_bytes(b"slot")
        data.log_file(name).write_text("log")
        data.log_file(name + "@embed").write_text("log")
    catalog.remove("gone")
    assert not data.bank("gone:latest").exists()
    assert not data.log_file("gone:latest").exists() and not data.log_file("gone:latest@embed").exists()
    assert (data.bank("kept:latest") / "_auto-512-abcdefabcdef-0.bin").exists()
    assert data.log_file("kept:latest").exists()


def test_staging_folders_of_processes_that_are_gone_are_swept(catalog: Catalog) -> None:
    """An import or quantization killed mid-way leaves its staging folder; the next daemon's start removes it."""
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    root = catalog.data.models / ".importing"
    left = root / f"{dead.pid}-abcdef"
    left.mkdir(parents=True)
    (left / "quantized.gguf").write_bytes(b"x" * 100)
    mine = catalog.files.staging()
    assert catalog.files.sweep_staging() == root
    assert not left.exists() and mine.exists()
