"""The model catalog: the ``models`` table plus one directory entry per name under ``<data_dir>/models``.

Each catalog name owns exactly one link to its weights (hard links share the data), so ``rm`` unlinks that
name's entry only. It never starts engines or talks HTTP.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson

from blazar import names
from blazar._native import GgufError, read_gguf_metadata
from blazar.errors import CatalogError, ModelNotFound
from blazar.gguf_info import GgufSummary, summarize
from blazar.paths import DataDir, safe_component
from blazar.store import Store

CopyProgress = Callable[[int, int], None]
"""Called as (bytes_done, bytes_total) while copying."""

_COLS = (
    "name, path, format, size_bytes, architecture, parameter_count, context_length, quantization,"
    " has_chat_template, created_at"
)


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


def _row(r: tuple[object, ...]) -> ModelRow:
    name, path, fmt, size, arch, params, ctx, quant, tmpl, created = r
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
    )


def read_header(path: Path) -> dict[str, object]:
    """The GGUF header of ``path``; a corrupt or truncated file is a CatalogError naming the file."""
    try:
        return read_gguf_metadata(str(path))
    except GgufError as e:
        raise CatalogError(f"{path} is not a usable GGUF file: {e}") from None
    except OSError as e:
        raise CatalogError(f"cannot read {path}: {e.strerror or e}") from None


def inspect(path: Path) -> GgufSummary:
    return summarize(read_header(path))


def _link_or_copy(src: Path, dest: Path, progress: CopyProgress | None) -> str:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
        os.replace(tmp, dest)
        return "linked"
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise CatalogError(f"cannot link {src} into the catalog: {e.strerror}") from None
    total = src.stat().st_size
    done = 0
    try:
        with src.open("rb") as fi, tmp.open("wb") as fo:
            while chunk := fi.read(8 << 20):
                fo.write(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total)
        os.replace(tmp, dest)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise CatalogError(f"cannot copy {src} into the catalog: {e.strerror}") from None
    return "copied"


class Catalog:
    """Catalog operations over one store and data dir."""

    def __init__(self, store: Store, data: DataDir) -> None:
        self.store = store
        self.data = data

    def _file_for(self, name: str, suffix: str = ".gguf") -> Path:
        base, _, tag = name.rpartition(":")
        return self.data.models / safe_component(base) / f"{safe_component(tag)}{suffix}"

    def get(self, name: str) -> ModelRow:
        full = names.normalize(name)
        for r in self.store.conn.execute(f"SELECT {_COLS} FROM models WHERE name = ?", (full,)):
            return _row(r)
        known = [m.name for m in self.list()]
        hint = f" (known models: {', '.join(known[:10])})" if known else " (the catalog is empty)"
        raise ModelNotFound(
            f"model '{full}' not found; import it with: blazar import PATH --name {full}{hint}"
        )

    def find(self, name: str) -> ModelRow | None:
        try:
            return self.get(name)
        except ModelNotFound:
            return None

    def list(self) -> list[ModelRow]:
        return [_row(r) for r in self.store.conn.execute(f"SELECT {_COLS} FROM models ORDER BY name")]

    def import_file(
        self, src: Path, name: str | None = None, progress: CopyProgress | None = None
    ) -> ModelRow:
        src = src.expanduser().resolve()
        if not src.is_file():
            raise CatalogError(f"{src} does not exist or is not a file")
        header = read_header(src)
        info = summarize(header)
        full = names.normalize(name) if name else names.default_name_for_file(src.stem)
        if self.find(full) is not None:
            raise CatalogError(
                f"model '{full}' already exists; remove it first (blazar rm {full}) or pick --name"
            )
        dest = self._file_for(full)
        _link_or_copy(src, dest, progress)
        try:
            self._insert(full, dest, info, header)
        except Exception:
            dest.unlink(missing_ok=True)
            raise
        return self.get(full)

    def _insert(self, full: str, dest: Path, info: GgufSummary, header: dict[str, object]) -> None:
        meta = header.get("metadata")
        small = (
            {
                k: v
                for k, v in meta.items()
                if isinstance(v, str | int | float | bool) and k != "tokenizer.chat_template"
            }
            if isinstance(meta, dict)
            else {}
        )
        with self.store.transaction():
            self.store.conn.execute(
                "INSERT INTO models (name, path, format, size_bytes, architecture, parameter_count,"
                " context_length, quantization, has_chat_template, metadata_json, created_at)"
                " VALUES (?, ?, 'gguf', ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    full,
                    str(dest),
                    dest.stat().st_size,
                    info.architecture,
                    info.parameter_count,
                    info.context_length,
                    info.quantization,
                    int(info.has_chat_template),
                    orjson.dumps(small).decode(),
                    datetime.now(UTC).isoformat(),
                ),
            )

    def copy(self, src_name: str, dest_name: str) -> ModelRow:
        """A second name for the same weights, as a hard link (zero copy on one filesystem)."""
        src = self.get(src_name)
        full = names.normalize(dest_name)
        if self.find(full) is not None:
            raise CatalogError(f"model '{full}' already exists")
        dest = self._file_for(full)
        _link_or_copy(src.path, dest, None)
        try:
            header = read_header(dest)
            self._insert(full, dest, summarize(header), header)
        except Exception:
            dest.unlink(missing_ok=True)
            raise
        return self.get(full)

    def remove(self, name: str) -> ModelRow:
        row = self.get(name)
        with self.store.transaction():
            self.store.conn.execute("DELETE FROM models WHERE name = ?", (row.name,))
            self.store.conn.execute("DELETE FROM profiles WHERE model = ?", (row.name,))
        if row.path.is_relative_to(self.data.models):
            row.path.unlink(missing_ok=True)
            parent = row.path.parent
            if parent != self.data.models and not any(parent.iterdir()):
                shutil.rmtree(parent, ignore_errors=True)
        return row
