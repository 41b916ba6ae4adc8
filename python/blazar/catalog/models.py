"""The model catalog: the ``models`` table plus one directory entry per name under ``<data_dir>/models``.

Each catalog name owns exactly one link to its weights (hard links share the data), so ``rm`` unlinks that
name's entry only. A split GGUF (llama.cpp's ``-00001-of-0000N.gguf`` shards) is kept native: its shards are
linked side by side under ``models/<name>/<tag>/`` with their own file names and the row points at the first
shard, which is what engines load. A model directory (safetensors, quantized safetensors or MLX: see
``model_dir`` for which files one takes) is linked file by file into ``models/<name>/<tag>/``, built under
``models/.importing/`` and renamed into place whole, so no half-imported folder ever carries a name (an aside
folder a killed import left is removed by the next import); the row points at the folder and its format is
``formats.detect_format``'s. ``rm`` renames a folder aside before deleting it. The on-disk side (layout,
linking, staging, the name claim) is ``catalog_files``. It never starts engines or talks HTTP.

Digests: the ``sha256`` column holds the hex sha256 of the model's weights, which the Ollama API serves as
``digest``. For one file it is the sha256 of the file, which is also the Hub's LFS sha256 of it. For a split
GGUF it is the sha256 of the shards' sha256 hex strings, in shard order, each followed by a newline
(``split_digest``): it covers every shard, and a pull can record it from the Hub's per-shard values. For a
model directory it is the sha256 of ``sha256sum``-style lines, one per file sorted by name (``dir_digest``).
Where it comes from: ``pull`` hands over the sha256s its download verified (no rehash); ``import`` hashes while
copying, or reads a hard-linked file once in 1 MiB blocks; ``cp`` reuses the source row's value. Rows written before
digests were recorded have NULL and are filled the first time a digest is wanted: ``fill_digest`` in the
calling thread (the CLI), ``digest`` in a worker thread for the gateway, never on its event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from blazar._native import GgufError, read_gguf_metadata
from blazar.catalog import ggml_whisper, names
from blazar.catalog.digests import (
    HASH_BLOCK,
    CopyProgress,
    DigestCancelled,
    model_digest,
    split_digest,
    split_set,
)
from blazar.catalog.files import ModelFiles, link_or_copy, storage_keys
from blazar.catalog.ggml_whisper import WhisperInfo
from blazar.catalog.gguf_info import GgufSummary, summarize
from blazar.catalog.model_dir import DirSummary, dir_digest, inspect_dir, small_config
from blazar.errors import CatalogError, ModelNotFound, StoreError
from blazar.paths import DataDir, child_keys
from blazar.store import Store

log = logging.getLogger("blazar.catalog")

__all__ = [
    "HASH_BLOCK",
    "CopyProgress",
    "DigestCancelled",
    "ModelRow",
    "model_digest",
    "split_digest",
    "split_set",
]

_COLS = (
    "name, path, format, size_bytes, architecture, parameter_count, context_length, quantization,"
    " has_chat_template, created_at, sha256, preset_json"
)
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class ModelRow:
    name: str
    path: Path
    format: str
    size_bytes: int
    architecture: str | None
    parameter_count: int | None
    context_length: int | None
    quantization: str | None
    has_chat_template: bool
    created_at: str
    sha256: str | None = None
    """The weights' digest (hex; see the module docstring for split GGUF); None until it is computed."""
    preset: Mapping[str, Any] | None = None
    """Its preset (``presets.py``: system prompt, conversation, options, license), or None."""


def _row(r: tuple[object, ...]) -> ModelRow:
    name, path, fmt, size, arch, params, ctx, quant, tmpl, created, sha, preset = r
    return ModelRow(
        name=str(name),
        path=Path(str(path)),
        format=str(fmt),
        size_bytes=int(str(size)),
        architecture=None if arch is None else str(arch),
        parameter_count=None if params is None else int(str(params)),
        context_length=None if ctx is None else int(str(ctx)),
        quantization=None if quant is None else str(quant),
        has_chat_template=bool(tmpl),
        created_at=str(created),
        sha256=None if sha is None else str(sha),
        preset=None if preset is None else orjson.loads(str(preset)),
    )


def read_header(path: Path, *, max_array_len: int = 1024, tensors: bool = False) -> dict[str, object]:
    """The GGUF header of ``path`` (``read_gguf_metadata``'s); a corrupt or truncated file is a CatalogError
    naming the file."""
    try:
        header = read_gguf_metadata(str(path), max_array_len, tensors)
        size = path.stat().st_size
    except GgufError as e:
        raise CatalogError(f"{path} is not a usable GGUF file: {e}") from None
    except OSError as e:
        raise CatalogError(f"cannot read {path}: {e.strerror or e}") from None
    end = tensor_data_floor(header)
    if end is not None and end >= size:
        raise CatalogError(
            f"{path} is truncated: its last tensor starts at byte {end:,} but the file has {size:,} bytes;"
            " download or copy it again"
        )
    return header


def _not_an_adapter(src: Path, header: dict[str, object]) -> None:
    """A LoRA adapter GGUF is no model of its own: it is served on its base model."""
    meta = header.get("metadata")
    if isinstance(meta, dict) and meta.get("general.type") == "adapter":
        raise CatalogError(
            f"{src.name} is a LoRA adapter (general.type adapter), not a model: serve it on its base model with"
            f" blazar lora add {src.name} --base MODEL (in Ollama's /api/create: adapters, or ADAPTER in a"
            " Modelfile)"
        )


def tensor_data_floor(header: dict[str, object]) -> int | None:
    """Where the last tensor's data starts in the file (the data section begins at the header's end rounded up
    to ``general.alignment``); a complete file is longer. None for a file without tensors."""
    count, size, last = header.get("tensor_count"), header.get("header_size"), header.get("max_tensor_offset")
    if not isinstance(count, int) or count <= 0 or not isinstance(size, int) or not isinstance(last, int):
        return None
    meta = header.get("metadata")
    align = meta.get("general.alignment") if isinstance(meta, dict) else None
    if not isinstance(align, int) or isinstance(align, bool) or align <= 0:
        align = 32
    return -(-size // align) * align + last


def inspect(path: Path) -> GgufSummary:
    return summarize(read_header(path))


# -- digests ----------------------------------------------------------------------------------------------


def _check_sha256(value: str) -> str:
    v = value.lower()
    if not _HEX64.match(v):
        raise CatalogError(f"'{value}' is not a sha256 digest (64 hex digits)")
    return v


class Catalog:
    """Catalog operations over one store and data dir."""

    def __init__(self, store: Store, data: DataDir) -> None:
        self.store = store
        self.data = data
        self.files = ModelFiles(data)
        self._filling: dict[Path, asyncio.Task[str | None]] = {}
        self.generation = 0
        """Bumped by every change this process makes to a model row (add, remove, preset): what a memo of rows
        (``gateway.core``'s routes) compares to know it is stale."""

    def get(self, name: str) -> ModelRow:
        full = names.normalize(name)
        for r in self.store.conn.execute(f"SELECT {_COLS} FROM models WHERE name = ?", (full,)):
            return _row(r)
        raise self._not_found(full, f"import it with: blazar import PATH --name {full}")

    def _not_found(self, full: str, fix: str) -> ModelNotFound:
        """No model ``full``: a LoRA adapter's name says so (it is served by its own commands), else ``fix``."""
        for (base,) in self.store.conn.execute("SELECT base FROM loras WHERE name = ?", (full,)):
            return ModelNotFound(
                f"'{full}' is a LoRA adapter over {base}, not a catalog model: blazar lora ls lists it, blazar"
                f" lora rm {full} removes it"
            )
        known = [m.name for m in self.list()]
        lead = f"model '{full}' not found; {fix}"
        hint = f" (known models: {', '.join(known[:10])})" if known else " (the catalog is empty)"
        return ModelNotFound(lead + hint, lead=lead, known=tuple(known))

    def check_free(self, full: str) -> None:
        """Refuse a new name whose files would be another model's: adding it would overwrite that model's weights,
        and removing either would delete the other's (``a/b`` and ``a--b``, ``smollm2`` and ``SmolLM2``)."""
        mine = storage_keys(full)
        adapters = [str(n) for (n,) in self.store.conn.execute("SELECT name FROM loras")]
        for other in [*(row.name for row in self.list()), *adapters]:
            if other != full and mine & storage_keys(other):
                raise CatalogError(
                    f"model name '{full}' would share its files with '{other}' (on disk '/', ':' and '@' are "
                    "written as '--', and case may not count); pick another name"
                )

    def find(self, name: str) -> ModelRow | None:
        try:
            return self.get(name)
        except ModelNotFound:
            return None

    def list(self) -> list[ModelRow]:
        return [_row(r) for r in self.store.conn.execute(f"SELECT {_COLS} FROM models ORDER BY name")]

    def _check_new(self, full: str) -> None:
        if self.find(full) is not None:
            raise CatalogError(
                f"model '{full}' already exists; remove it first (blazar rm {full}) or pick another name"
            )
        self._check_replaceable(full)

    def _check_replaceable(self, full: str) -> None:
        """``_check_new``, except that a model of that name may exist (it is to be replaced) unless LoRA
        adapters are served on it."""
        for _ in self.store.conn.execute("SELECT 1 FROM loras WHERE name = ?", (full,)):
            raise CatalogError(  # one namespace with the LoRA adapters (``loras``), which are served by name too
                f"'{full}' names a LoRA adapter; remove it first (blazar lora rm {full}) or pick another name"
            )
        self.check_free(full)
        old = self.find(full)
        if old is not None:
            self.check_removable(old)

    def import_file(
        self,
        src: Path,
        name: str | None = None,
        progress: CopyProgress | None = None,
        *,
        sha256: str | None = None,
        replace: bool = False,
    ) -> ModelRow:
        """Add one GGUF file, or a whisper.cpp model (``ggml_whisper``: format ``whisper``). ``sha256`` is its
        digest when the caller already verified it (a pull); without it the bytes are hashed here, while copying
        them or, after a hard link, read once. ``replace`` (Ollama's create over an existing name): a model of
        that name is replaced in one step once the new file is in hand, so a failure on the way keeps it; its
        engines must be stopped first."""
        known = None if sha256 is None else _check_sha256(sha256)
        src = src.expanduser().resolve()
        if not src.is_file():
            raise CatalogError(f"{src} does not exist or is not a file")
        whisper = ggml_whisper.read(src)
        header = read_header(src) if whisper is None else {}
        _not_an_adapter(src, header)
        full = names.normalize(name) if name is not None else names.default_name_for_file(src.stem)
        (self._check_replaceable if replace else self._check_new)(full)  # early; again under the claim
        dest = self.files.file_for(full, ".gguf" if whisper is None else ".bin")
        aside = self.files.staging()
        try:
            digest = link_or_copy(src, aside / dest.name, progress, digest=known is None) or known

            def write_row() -> None:
                if whisper is None:
                    self._insert(full, dest, summarize(header), header, sha256=digest)
                else:
                    self._insert_whisper(full, dest, whisper, digest)

            self._place(full, aside / dest.name, dest, replace, write_row)
        finally:
            shutil.rmtree(aside, ignore_errors=True)
        return self.get(full)

    def _place(
        self, full: str, staged: Path, dest: Path, replace: bool, write_row: Callable[[], None]
    ) -> None:
        """Under the name's claim: move the ``staged`` file to ``dest`` and ``write_row``. With ``replace`` the
        model of that name, if any, goes in the same transaction: its file at ``dest`` is kept beside ``staged``
        (in its staging folder, which the caller removes) until the new row is written, and put back if that
        fails; its files elsewhere are removed after."""
        check = self._check_replaceable if replace else self._check_new
        with self.files.claim(lambda: check(full)):
            old = self.find(full) if replace else None
            dest.parent.mkdir(parents=True, exist_ok=True)
            kept = None
            if old is not None and old.path == dest:
                kept = staged.with_name(f"replaced-{dest.name}")
                os.replace(dest, kept)
            os.replace(staged, dest)
            try:
                with self.store.transaction():
                    if old is not None:
                        self._delete_row(old)
                    write_row()
            except BaseException:
                dest.unlink(missing_ok=True)
                if kept is not None:
                    os.replace(kept, dest)
                else:
                    with contextlib.suppress(OSError):  # the name's folder, if this import made it
                        dest.parent.rmdir()
                raise
        if old is not None and old.path != dest:
            self._discard_files(old)

    def import_split(
        self, shards: Sequence[Path], name: str, sha256s: Sequence[str] | None = None
    ) -> ModelRow:
        """Add a split GGUF: every shard linked under ``models/<name>/<tag>/`` as itself; the row names shard 1.

        ``size_bytes`` and ``parameter_count`` cover all shards; the metadata comes from the first. ``sha256s``
        are the shards' verified digests, in order (a pull); without them each shard is hashed here.
        """
        if sha256s is None:
            return self._add_split(shards, name, None, compute=True)
        if len(sha256s) != len(shards):
            raise CatalogError(f"{len(shards)} shards but {len(sha256s)} sha256 digests")
        return self._add_split(shards, name, split_digest([_check_sha256(s) for s in sha256s]), compute=False)

    def _add_split(self, shards: Sequence[Path], name: str, digest: str | None, *, compute: bool) -> ModelRow:
        paths = [p.expanduser().absolute() for p in shards]  # keep the names: symlinks may point at blobs
        expected = split_set(paths[0]) if paths else None
        if expected is None or [p.name for p in expected] != [p.name for p in paths]:
            got = ", ".join(p.name for p in paths) or "nothing"
            raise CatalogError(
                f"not a complete split GGUF set (name-00001-of-0000N.gguf and the rest): {got}"
            )
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise CatalogError(f"split GGUF shards missing: {', '.join(missing)}")
        full = names.normalize(name)
        self._check_new(full)  # early, before a long copy; checked again under the claim
        header = read_header(paths[0])
        dest_dir = self.files.file_for(full, "")
        aside = self.files.staging()
        try:
            shard_digests = [link_or_copy(p, aside / p.name, None, digest=compute) or "" for p in paths]
            linked = [aside / p.name for p in paths]
            params = sum(int(str(read_header(d).get("parameter_count") or 0)) for d in linked)
            info = summarize({**header, "parameter_count": params})
            if compute:
                digest = split_digest(shard_digests)
            size = sum(d.stat().st_size for d in linked)
            self.files.place(
                lambda: self._check_new(full),
                aside,
                dest_dir,
                lambda: self._insert(full, dest_dir / paths[0].name, info, header, size=size, sha256=digest),
            )
        finally:
            shutil.rmtree(aside, ignore_errors=True)
        return self.get(full)

    def _insert(
        self,
        full: str,
        dest: Path,
        info: GgufSummary,
        header: dict[str, object],
        size: int | None = None,
        sha256: str | None = None,
    ) -> None:
        meta = header.get("metadata")
        small: dict[str, object] = (
            {
                k: v
                for k, v in meta.items()
                if isinstance(v, str | int | float | bool) and k != "tokenizer.chat_template"
            }
            if isinstance(meta, dict)
            else {}
        )
        self._write_row(
            full,
            dest,
            "gguf",
            dest.stat().st_size if size is None else size,
            (info.architecture, info.parameter_count, info.context_length, info.quantization),
            info.has_chat_template,
            small,
            sha256,
        )

    def _insert_whisper(self, full: str, dest: Path, info: WhisperInfo, sha256: str | None) -> None:
        facts = ("whisper", None, info.n_audio_ctx, info.quantization)
        self._write_row(full, dest, "whisper", dest.stat().st_size, facts, False, info.metadata(), sha256)

    def _write_row(
        self,
        full: str,
        dest: Path,
        fmt: str,
        size: int,
        facts: tuple[str | None, int | None, int | None, str | None],
        has_chat_template: bool,
        metadata: Mapping[str, object],
        sha256: str | None,
    ) -> None:
        """One ``models`` row; ``facts`` is (architecture, parameter_count, context_length, quantization)."""
        self.generation += 1
        with self.store.transaction():
            self.store.conn.execute(
                "INSERT INTO models (name, path, format, size_bytes, architecture, parameter_count,"
                " context_length, quantization, has_chat_template, metadata_json, created_at, sha256)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    full,
                    str(dest),
                    fmt,
                    size,
                    *facts,
                    int(has_chat_template),
                    orjson.dumps(metadata).decode(),
                    datetime.now(UTC).isoformat(),
                    sha256,
                ),
            )

    # -- model directories (safetensors, MLX) ------------------------------------------------------------

    def import_dir(
        self,
        src: Path,
        name: str | None = None,
        progress: CopyProgress | None = None,
        *,
        sha256s: Mapping[str, str] | None = None,
    ) -> ModelRow:
        """Add a model directory (``model_dir``: config.json, safetensors, tokenizer...) as ``models/<name>/<tag>/``.

        ``sha256s`` maps each file to take to its verified sha256 (a pull): exactly those files are taken and
        nothing is hashed. Without it ``model_dir.pick`` chooses the files and each is hashed while copied, or
        read once after a hard link. The directory is built aside and renamed into place whole.
        """
        known = None if sha256s is None else {k: _check_sha256(v) for k, v in sha256s.items()}
        src = src.expanduser().resolve()
        summary = inspect_dir(src, only=None if known is None else known.keys())
        full = names.normalize(name) if name is not None else names.default_name_for_dir(src.name)
        digest = None if known is None else dir_digest(known)
        return self._add_dir(src, summary, full, progress, digest, compute=known is None)

    def _add_dir(
        self,
        src: Path,
        summary: DirSummary,
        full: str,
        progress: CopyProgress | None,
        digest: str | None,
        *,
        compute: bool,
    ) -> ModelRow:
        """Link or copy ``summary.files`` into an aside folder, rename it to the name's folder, add the row with
        ``digest``, or with the digest of the bytes hashed on the way (``compute``)."""
        self._check_new(full)  # early, before a long copy; checked again under the claim
        sizes = {f: (src / f).stat().st_size for f in summary.files}
        total, before = sum(sizes.values()), 0
        dest = self.files.file_for(full, "")
        aside = self.files.staging()
        try:
            shas: dict[str, str] = {}
            for f in summary.files:
                step = None if progress is None else (lambda d, _t, b=before: progress(b + d, total))
                shas[f] = link_or_copy(src / f, aside / f, step, digest=compute) or ""
                before += sizes[f]
            if compute:
                digest = dir_digest(shas)
            facts = (
                summary.architecture,
                summary.parameter_count,
                summary.context_length,
                summary.quantization,
            )
            meta = small_config(summary.config)
            self.files.place(
                lambda: self._check_new(full),
                aside,
                dest,
                lambda: self._write_row(
                    full, dest, summary.format, total, facts, summary.has_chat_template, meta, digest
                ),
            )
        finally:
            shutil.rmtree(aside, ignore_errors=True)
        return self.get(full)

    def copy(self, src_name: str, dest_name: str, *, replace: bool = False) -> ModelRow:
        """``_copy``, with the source's preset. ``replace``: a model named ``dest_name`` is replaced (its engines
        must be stopped first), in one step for a single-file source."""
        src = self.get(src_name)
        row = self._copy(src, dest_name, replace=replace)
        return self.set_preset(row.name, src.preset) if src.preset else row

    def _copy(self, src: ModelRow, dest_name: str, *, replace: bool = False) -> ModelRow:
        """A second name for the same weights, as a hard link (zero copy on one filesystem).

        The copy takes the source's digest as it is, never hashing (``/api/copy`` runs on the event loop); a
        source without one leaves the copy without one too, and each is filled when first wanted.
        """
        full = names.normalize(dest_name)
        shards = None if src.path.is_dir() else split_set(src.path)
        if (src.path.is_dir() or shards is not None) and replace and self.find(full) is not None:
            # folders and split sets are placed by their own paths: the old model goes first
            self.remove(full)
        if src.path.is_dir():
            summary = inspect_dir(src.path, only=[p.name for p in src.path.iterdir() if p.is_file()])
            return self._add_dir(src.path, summary, full, None, src.sha256, compute=False)
        if shards is not None:
            return self._add_split(shards, dest_name, src.sha256, compute=False)
        (self._check_replaceable if replace else self._check_new)(full)
        dest = self.files.file_for(full, src.path.suffix or ".gguf")
        aside = self.files.staging()
        try:
            staged = aside / dest.name
            link_or_copy(src.path, staged, None)
            whisper = ggml_whisper.read(staged) if src.format == "whisper" else None
            header = read_header(staged) if whisper is None else {}

            def write_row() -> None:
                if whisper is not None:
                    self._insert_whisper(full, dest, whisper, src.sha256)
                else:
                    self._insert(full, dest, summarize(header), header, sha256=src.sha256)

            self._place(full, staged, dest, replace, write_row)
        finally:
            shutil.rmtree(aside, ignore_errors=True)
        return self.get(full)

    def set_preset(self, name: str, preset: Mapping[str, Any] | None) -> ModelRow:
        """Replace model ``name``'s preset (None: no preset)."""
        full = self.get(name).name
        stored = None if not preset else orjson.dumps(preset).decode()
        self.generation += 1
        with self.store.transaction():
            self.store.conn.execute("UPDATE models SET preset_json = ? WHERE name = ?", (stored, full))
        return self.get(full)

    def check_removable(self, row: ModelRow) -> None:
        """Refuse to remove a model that LoRA adapters are served on (they name it as their base)."""
        adapters = [
            str(n) for (n,) in self.store.conn.execute("SELECT name FROM loras WHERE base = ?", (row.name,))
        ]
        if adapters:
            raise CatalogError(
                f"model '{row.name}' has LoRA adapters ({', '.join(adapters)}), which are served on it; remove them"
                " first (blazar lora rm NAME)"
            )

    def check_new(self, name: str, *, replace: bool = False) -> str:
        """``name`` normalised, or a CatalogError when a model or LoRA adapter has it (or its files); with
        ``replace``, a model of that name may exist unless adapters are served on it."""
        full = names.normalize(name)
        (self._check_replaceable if replace else self._check_new)(full)
        return full

    def remove(self, name: str) -> ModelRow:
        row = self.find(name)
        if row is None:
            raise self._not_found(names.normalize(name), "nothing to remove")
        self.check_removable(row)
        with self.store.transaction():
            self._delete_row(row)
        self._discard_files(row)
        # what its engines kept: their saved slots (users' prompts) and their logs
        shutil.rmtree(self.data.bank(row.name), ignore_errors=True)
        for key in child_keys(row.name):
            self.data.log_file(key).unlink(missing_ok=True)
        return row

    def _delete_row(self, row: ModelRow) -> None:
        """Delete ``row`` and its profiles, inside the caller's transaction."""
        self.generation += 1
        self.check_removable(row)  # again inside the write: an adapter added meanwhile keeps the model
        self.store.conn.execute("DELETE FROM models WHERE name = ?", (row.name,))
        self.store.conn.execute("DELETE FROM profiles WHERE model = ?", (row.name,))

    def _discard_files(self, row: ModelRow) -> None:
        """Remove the files of a deleted row that the catalog owns (under ``models/``), and empty folders."""
        if row.path.is_relative_to(self.data.models) and row.path.is_dir():
            self.files.discard(row.path)
            self.files.prune(row.path.parent)
        elif row.path.is_relative_to(self.data.models):
            for p in split_set(row.path) or [row.path]:
                p.unlink(missing_ok=True)
            self.files.prune(row.path.parent)

    # -- digests of rows written before they were recorded ------------------------------------------------

    def record_digest(self, row: ModelRow, digest: str) -> ModelRow:
        """Store ``digest`` for ``row`` unless the row has one already, or is gone or replaced meanwhile."""
        with self.store.transaction():
            self.store.conn.execute(
                "UPDATE models SET sha256 = ? WHERE name = ? AND path = ? AND sha256 IS NULL",
                (_check_sha256(digest), row.name, str(row.path)),
            )
        return dataclasses.replace(row, sha256=digest)

    def fill_digest(self, row: ModelRow) -> ModelRow:
        """``row`` with its digest, hashing its file(s) in this thread if it has none yet (the CLI's path).

        A file that cannot be read leaves the digest unknown (None), to be tried again next time.
        """
        if row.sha256 is not None:
            return row
        try:
            digest = model_digest(row.path)
        except OSError as e:
            log.warning("cannot hash %s for model %s: %s", row.path, row.name, e.strerror or e)
            return row
        return self.record_digest(row, digest)

    async def digest(self, row: ModelRow) -> str | None:
        """The gateway's way to ``row``'s digest: the stored one, else hashed in a worker thread, never on the
        event loop, then stored (on the loop). Concurrent callers for one file share one hashing; a caller that
        is cancelled does not stop it, but cancelling the hashing task itself (shutdown) does. None when the
        file cannot be read.
        """
        if row.sha256 is not None:
            return row.sha256
        task = self._filling.get(row.path)
        if task is None:
            task = asyncio.ensure_future(self._fill(row))
            self._filling[row.path] = task
            key = row.path
            task.add_done_callback(lambda _t: self._filling.pop(key, None))
        return await asyncio.shield(task)

    async def _fill(self, row: ModelRow) -> str | None:
        cancel = threading.Event()
        try:
            digest = await asyncio.to_thread(model_digest, row.path, cancel)
        except asyncio.CancelledError:
            cancel.set()  # the worker stops at its next block instead of holding up shutdown
            raise
        except OSError as e:
            log.warning("cannot hash %s for model %s: %s", row.path, row.name, e.strerror or e)
            return None
        try:
            self.record_digest(row, digest)
        except StoreError as e:  # still a right answer; the next caller hashes again and retries the write
            log.warning("cannot record the digest of model %s: %s", row.name, e)
        return digest
