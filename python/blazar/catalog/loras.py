"""LoRA adapters: GGUF adapter files served as models of their own on top of a catalog model (``blazar lora``,
the ``loras`` table; Ollama's ``ADAPTER``).

It owns registering an adapter (its GGUF header must say it is a LoRA adapter for the base model's
architecture), where its file lives (``models/.loras/<name>-<sha256 prefix>.gguf``: a folder no model name can
take, a hard link like every catalog file, and another file under the same name is another path), and the
names: one namespace with the catalog's models. Serving is the supervisor's (``pool``: the base model's llama-server loads every adapter of
that base, unapplied, and restarts when a request names one it lacks) and the gateway's (``core``: the request
body's ``lora`` field applies that adapter to that request only).
"""

from __future__ import annotations

import builtins
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blazar.catalog import names
from blazar.catalog.files import link_or_copy
from blazar.catalog.models import Catalog, read_header
from blazar.errors import CatalogError, ModelNotFound
from blazar.paths import safe_component
from blazar.store import utc_now_iso

_COLS = "name, base, path, sha256, size_bytes, scale, created_at"

MAX_SCALE = 10.0
"""The largest scale taken: llama.cpp applies any float, but past a few times the adapter's own strength a
model emits noise."""


@dataclass(frozen=True, slots=True)
class LoraRow:
    name: str
    base: str
    path: Path
    sha256: str
    size_bytes: int
    scale: float
    created_at: str


def _row(r: tuple[Any, ...]) -> LoraRow:
    name, base, path, sha, size, scale, created = r
    return LoraRow(str(name), str(base), Path(str(path)), str(sha), int(size), float(scale), str(created))


class Loras:
    """The adapters of one store and data dir (through the catalog, whose models they extend)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.store = catalog.store

    def find(self, name: str) -> LoraRow | None:
        try:
            full = names.normalize(name)
        except CatalogError:
            return None
        for r in self.store.conn.execute(f"SELECT {_COLS} FROM loras WHERE name = ?", (full,)):
            return _row(r)
        return None

    def get(self, name: str) -> LoraRow:
        row = self.find(name)
        if row is None:
            raise ModelNotFound(f"LoRA adapter '{name}' not found; `blazar lora ls` lists them")
        return row

    def list(self) -> list[LoraRow]:
        return [_row(r) for r in self.store.conn.execute(f"SELECT {_COLS} FROM loras ORDER BY name")]

    def for_base(self, base: str) -> builtins.list[LoraRow]:
        """``base``'s adapters in the order its engine loads them (the order they were added)."""
        return [
            _row(r)
            for r in self.store.conn.execute(f"SELECT {_COLS} FROM loras WHERE base = ? ORDER BY id", (base,))
        ]

    def add(
        self, src: Path, base: str, name: str | None = None, scale: float = 1.0, *, replace: bool = False
    ) -> LoraRow:
        """Register the adapter file ``src`` for catalog model ``base`` as ``name`` (default: the file's name).
        ``replace`` (Ollama's create over an existing name): an adapter of that name is replaced in the same
        transaction, so a failure on the way keeps it; the caller forgets it on the engines
        (``Supervisor.forget_lora``)."""
        if not 0 < scale <= MAX_SCALE:
            raise CatalogError(f"scale must be above 0 and at most {MAX_SCALE:g}, not {scale!r}")
        src = src.expanduser().resolve()
        if not src.is_file():
            raise CatalogError(f"{src} does not exist or is not a file")
        full = names.normalize(name) if name is not None else names.default_name_for_file(src.stem)
        if self.find(base) is not None and self.catalog.find(base) is None:
            raise CatalogError(
                f"'{base}' is a LoRA adapter; the base must be the catalog model it was trained on"
            )
        model = self.catalog.get(base)
        if model.format != "gguf" or model.path.is_dir():
            raise CatalogError(
                f"'{model.name}' is a {model.format} model; LoRA adapters are served with GGUF models on llama-server"
            )
        meta = read_header(src).get("metadata")
        md = meta if isinstance(meta, dict) else {}
        if md.get("general.type") != "adapter" or md.get("adapter.type") != "lora":
            raise CatalogError(
                f"{src.name} is not a LoRA adapter GGUF (its general.type is {md.get('general.type')!r}, adapter.type"
                f" {md.get('adapter.type')!r}); convert a PEFT adapter with llama.cpp's convert_lora_to_gguf.py"
            )
        arch = md.get("general.architecture")
        if arch != model.architecture:
            raise CatalogError(
                f"{src.name} is an adapter for the '{arch}' architecture, but '{model.name}' is '{model.architecture}';"
                " an adapter only fits the model it was trained on"
            )
        check = self._check_replaceable if replace else self._check_new
        check(full)
        aside = self.catalog.files.staging()
        old = None
        try:
            digest = link_or_copy(src, aside / "adapter.gguf", None, digest=True)
            assert digest is not None
            dest = self.catalog.data.models / ".loras" / f"{safe_component(full)}-{digest[:12]}.gguf"
            with self.catalog.files.claim(lambda: check(full)):
                old = self.find(full) if replace else None
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(aside / "adapter.gguf", dest)
                try:
                    with self.store.transaction() as conn:
                        # under the write lock, as the catalog's remove checks for adapters: a base removed
                        # meanwhile (another process) is not left with an adapter
                        if not any(conn.execute("SELECT 1 FROM models WHERE name = ?", (model.name,))):
                            raise CatalogError(
                                f"model '{model.name}' was removed while adapter '{full}' was being added"
                            )
                        if old is not None:
                            conn.execute("DELETE FROM loras WHERE name = ?", (full,))
                        conn.execute(
                            "INSERT INTO loras (name, base, path, sha256, size_bytes, scale, created_at)"
                            " VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (full, model.name, str(dest), digest, dest.stat().st_size, scale, utc_now_iso()),
                        )
                except BaseException:
                    if old is None or old.path != dest:  # the same bytes again are the old adapter's file
                        dest.unlink(missing_ok=True)
                    raise
        finally:
            shutil.rmtree(aside, ignore_errors=True)
        if old is not None and old.path != dest and old.path.is_relative_to(self.catalog.data.models):
            old.path.unlink(missing_ok=True)
        self.catalog.generation += 1  # a base model's engine is no longer shared (``supervisor.sharing``)
        return self.get(full)

    def _check_replaceable(self, full: str) -> None:
        """``_check_new``, except that an adapter of that name may exist (it is to be replaced)."""
        if self.catalog.find(full) is not None:
            raise CatalogError(f"'{full}' names a catalog model; give the adapter another name (--name)")
        self.catalog.check_free(full)  # nor one that differs from a model's or adapter's only in case

    def _check_new(self, full: str) -> None:
        if self.find(full) is not None:
            raise CatalogError(
                f"LoRA adapter '{full}' already exists; remove it first (blazar lora rm {full})"
            )
        self._check_replaceable(full)

    def remove(self, name: str) -> LoraRow:
        """Drop the adapter's row, then its file (an engine that loaded it keeps it until it restarts)."""
        row = self.get(name)
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM loras WHERE name = ?", (row.name,))
        self.catalog.generation += 1
        if row.path.is_relative_to(self.catalog.data.models):
            row.path.unlink(missing_ok=True)
        return row
