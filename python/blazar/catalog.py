"""The model catalog: the ``models`` table plus one directory entry per name under ``<data_dir>/models``.

Each catalog name owns exactly one link to its weights (hard links share the data), so ``rm`` unlinks that
name's entry only. A split GGUF (llama.cpp's ``-00001-of-0000N.gguf`` shards) is kept native: its shards are
linked side by side under ``models/<name>/<tag>/`` with their own file names and the row points at the first
shard, which is what engines load. It never starts engines or talks HTTP.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Sequence
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


_SHARD = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def split_set(first: Path) -> list[Path] | None:
    """The shard paths of the split GGUF whose first shard is ``first``, in order; None for any other file."""
    m = _SHARD.match(first.name)
    if m is None or int(m["no"]) != 1 or int(m["count"]) < 1:
        return None
    count = m["count"]
    return [first.with_name(f"{m['prefix']}-{i:05d}-of-{count}.gguf") for i in range(1, int(count) + 1)]


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

    def import_split(self, shards: Sequence[Path], name: str) -> ModelRow:
        """Add a split GGUF: every shard linked under ``models/<name>/<tag>/`` as itself; the row names shard 1.

        ``size_bytes`` and ``parameter_count`` cover all shards; the metadata comes from the first.
        """
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
        if self.find(full) is not None:
            raise CatalogError(
                f"model '{full}' already exists; remove it first (blazar rm {full}) or pick another name"
            )
        header = read_header(paths[0])
        dest_dir = self._file_for(full, "")
        linked: list[Path] = []
        try:
            for p in paths:
                linked.append(dest_dir / p.name)
                _link_or_copy(p, linked[-1], None)
            params = sum(int(str(read_header(d).get("parameter_count") or 0)) for d in linked)
            info = summarize({**header, "parameter_count": params})
            self._insert(full, linked[0], info, header, size=sum(d.stat().st_size for d in linked))
        except Exception:
            for d in linked:
                d.unlink(missing_ok=True)
            self._prune(dest_dir)
            raise
        return self.get(full)

    def _prune(self, directory: Path) -> None:
        """Remove ``directory`` and its parents up to ``models/`` while they are empty."""
        while directory != self.data.models and directory.is_relative_to(self.data.models):
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent

    def _insert(
        self,
        full: str,
        dest: Path,
        info: GgufSummary,
        header: dict[str, object],
        size: int | None = None,
    ) -> None:
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
                    dest.stat().st_size if size is None else size,
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
        shards = split_set(src.path)
        if shards is not None:
            return self.import_split(shards, dest_name)
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
            for p in split_set(row.path) or [row.path]:
                p.unlink(missing_ok=True)
            self._prune(row.path.parent)
        return row
