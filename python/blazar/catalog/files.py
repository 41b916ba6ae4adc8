"""Where a catalog model's files live under ``<data_dir>/models``, and how they get there whole.

A GGUF file is ``models/<name>/<tag>.gguf``; a split GGUF set or a model directory is the folder
``models/<name>/<tag>/``. Files are linked (or copied) into a staging folder under ``models/.importing/`` first,
then renamed into place under the name's claim, an flock on ``catalog.lock`` held across processes while the
catalog re-checks the name and writes its row. So no half-imported folder ever carries a name, and of two
imports of one name the later is refused without touching the first one's files. Folders are removed by being
renamed aside first. The ``models`` rows themselves are ``blazar.catalog.models``'s.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from blazar.catalog import names
from blazar.catalog.digests import CopyProgress, sha256_file
from blazar.errors import CatalogError
from blazar.paths import EMBED_SUFFIXES, DataDir, alive, safe_component


def link_or_copy(src: Path, dest: Path, progress: CopyProgress | None, *, digest: bool = False) -> str | None:
    """Put ``src`` at ``dest`` (a hard link, else a copy). With ``digest``, return the sha256 of the bytes:
    hashed as they are copied, or read once after linking; ``dest`` is removed if that fails."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
        os.replace(tmp, dest)
        linked = True
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise CatalogError(f"cannot link {src} into the catalog: {e.strerror}") from None
        linked = False
    if linked:
        if not digest:
            return None
        try:
            return sha256_file(dest, progress)
        except BaseException as e:  # an interrupted import leaves no file without a row
            dest.unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise CatalogError(f"cannot read {src} to hash it: {e.strerror or e}") from None
            raise
    h = hashlib.sha256() if digest else None
    total = src.stat().st_size
    done = 0
    try:
        with src.open("rb") as fi, tmp.open("wb") as fo:
            while chunk := fi.read(8 << 20):
                fo.write(chunk)
                if h is not None:
                    h.update(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total)
        os.replace(tmp, dest)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise CatalogError(f"cannot copy {src} into the catalog: {e.strerror}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return None if h is None else h.hexdigest()


def storage_keys(name: str) -> set[tuple[str, str]]:
    """Where a catalog name lands on disk: its weights under models/ (a file, or a folder for a split set) and
    the run/, logs/, sessions/ and speccache/ entries of its chat and embedding (``@embed``, ``@tokens``) children. ``safe_component``
    writes '/', ':' and '@' all as '--', so two names can land in one place; compared case-folded, as a
    case-insensitive file system compares them."""
    base, _, tag = name.rpartition(":")
    folder = f"{safe_component(base)}/{safe_component(tag)}"
    keys = {
        ("models", folder),
        ("models", folder + ".gguf"),
        ("run", safe_component(name)),
        *(("run", safe_component(name + suffix)) for suffix in EMBED_SUFFIXES),
    }
    return {(where, key.casefold()) for where, key in keys}


@dataclass(frozen=True, slots=True)
class OnDisk:
    """Model weights found under ``models/`` by their place alone (``ModelFiles.on_disk``): the catalog name
    that place is written for, and ``path``, a file (GGUF, whisper.cpp ``.bin``) or a folder (a split GGUF set,
    a model directory)."""

    name: str
    path: Path


def name_for(base: str, tag: str) -> str:
    """The catalog name ``file_for`` writes as ``<base>/<tag>``: each ``--`` of the folder read as the ``/`` it
    most often stands for (``hf.co--org--repo``); one that is no valid name so keeps the ``--``."""
    for candidate in (f"{base.replace('--', '/')}:{tag}", f"{base}:{tag}"):
        try:
            return names.normalize(candidate)
        except CatalogError:
            continue
    raise CatalogError(f"models/{base}/{tag} is not where any model name is kept")


class ModelFiles:
    """The catalog's files under one data dir."""

    def __init__(self, data: DataDir) -> None:
        self.data = data

    def file_for(self, name: str, suffix: str = ".gguf") -> Path:
        base, _, tag = name.rpartition(":")
        return self.data.models / safe_component(base) / f"{safe_component(tag)}{suffix}"

    @contextlib.contextmanager
    def claim(self, check: Callable[[], None]) -> Iterator[None]:
        """Held from the last check that a name is free (``check`` raises if it is not) until its files are in
        place and its row is written, across processes (an flock on ``catalog.lock`` in the data dir): of two imports of one name, the later is
        refused instead of replacing or deleting the first one's files. The copy itself runs before, unlocked."""
        with (self.data.root / "catalog.lock").open("a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            check()
            yield

    def place(
        self, check: Callable[[], None], aside: Path, dest: Path, write_row: Callable[[], None]
    ) -> None:
        """Under the name's claim: rename the staged folder ``aside`` to ``dest`` and ``write_row``; a failure
        removes the folder again."""
        with self.claim(check):
            self.discard(dest)  # a folder no row names: left by a crash between the rename and the row
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.rename(aside, dest)
            try:
                write_row()
            except BaseException:
                self.discard(dest)
                self.prune(dest.parent)
                raise

    def staging(self) -> Path:
        """A fresh folder under ``models/.importing/`` (same filesystem, so renaming it into place is atomic);
        folders there whose process is gone are removed first."""
        root = self.sweep_staging()
        aside = root / f"{os.getpid()}-{os.urandom(6).hex()}"
        aside.mkdir()
        return aside

    def sweep_staging(self) -> Path:
        """Remove the staging folders of processes that are gone (an import or quantization killed mid-way; the
        daemon's start calls this too); the staging root."""
        root = self.data.models / ".importing"
        root.mkdir(parents=True, exist_ok=True)
        for old in root.iterdir():
            pid = old.name.partition("-")[0]
            if pid.isdigit() and not alive(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
        return root

    def discard(self, folder: Path) -> None:
        """Remove a model folder: renamed aside first, so it is never seen half-deleted under its name."""
        if not folder.is_dir():
            return
        gone = self.staging()
        os.rename(folder, gone / folder.name)
        shutil.rmtree(gone, ignore_errors=True)

    def on_disk(self) -> tuple[list[OnDisk], list[tuple[Path, str]]]:
        """What ``models/`` holds by place, for rebuilding a lost catalog: each model's name and weights, and the
        paths that are no model's place (with why). LoRA adapters (``.loras/``) and staging folders are left to
        the caller; an adapter's base model is not written in its place."""
        found: list[OnDisk] = []
        other: list[tuple[Path, str]] = []
        root = self.data.models
        for folder in sorted(root.iterdir()) if root.is_dir() else []:
            if folder.name.startswith("."):
                continue
            if not folder.is_dir():
                other.append((folder, "a file directly under models/ is no model's place"))
                continue
            for place in sorted(folder.iterdir()):
                tag = place.name if place.is_dir() else place.stem
                if place.is_file() and place.suffix not in (".gguf", ".bin"):
                    other.append((place, "not a .gguf or whisper.cpp .bin file"))
                    continue
                try:
                    found.append(OnDisk(name_for(folder.name, tag), place))
                except CatalogError as e:
                    other.append((place, str(e)))
        return found, other

    def prune(self, directory: Path) -> None:
        """Remove ``directory`` and its parents up to ``models/`` while they are empty."""
        while directory != self.data.models and directory.is_relative_to(self.data.models):
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent
