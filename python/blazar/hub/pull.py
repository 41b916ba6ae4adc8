"""Pulling models: a name (an alias, ``hf:org/repo[@rev][:file.gguf]`` or Ollama's ``hf.co/org/repo[:quant]``)
becomes Hub files, verified downloads and a catalog row.

Steps: ``parse_ref`` (pure) -> ``plan`` (the Hub listing; picks the GGUF, or, in a repo with no GGUF, the
files of a safetensors or MLX model directory: ``model_dir.SERVER_FILES``) -> ``fetch`` (downloads under
``models/.downloads/``, on the catalog's filesystem) -> ``register`` (``Catalog.import_file``, ``import_split``
or ``import_dir``, hard links; then the downloads go). The sha256 each file was hashed to while it downloaded
(and checked against the Hub's LFS sha256) becomes the catalog row's digest: registering never reads the
weights again, which matters because ``pull_events`` registers on the event loop. ``pull`` runs them in the calling thread (the CLI);
``pull_events`` runs the network steps in a worker thread and the catalog step on the caller's event loop, as
an async iterator of ``Event``, which are Ollama's ``/api/pull`` progress objects. It never prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
import threading
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from blazar.catalog import names
from blazar.catalog.model_dir import pick
from blazar.catalog.models import Catalog, ModelRow
from blazar.errors import BlazarError, CatalogError
from blazar.hub.aliases import ALIASES
from blazar.hub.client import CHUNK_BYTES, Downloaded, Hub, HubFile, RepoInfo, check_repo_id
from blazar.paths import safe_component

log = logging.getLogger("blazar.pull")

PREFERRED_QUANTS = ("Q4_K_M", "Q4_0")
"""When a repo holds several GGUFs and the name picks none: these first, in order, then the smallest."""

_QUANT = re.compile(r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Za-z0-9]+)*|BF16|F16|F32)(?![A-Za-z0-9])", re.IGNORECASE)
_SHARD = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_HF_PREFIXES = ("hf.co/", "huggingface.co/")


class PullError(BlazarError):
    """The name cannot be pulled: unknown, ambiguous, missing on the Hub, or no room for it."""

    status = 400

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


@dataclass(frozen=True, slots=True)
class Ref:
    """What a pull name means: where on the Hub, which file (or quantization), and the catalog name."""

    repo_id: str
    revision: str
    file: str | None
    quant: str | None
    name: str
    alias: bool = False


@dataclass(frozen=True, slots=True)
class Plan:
    ref: Ref
    revision: str
    """The commit the listing came from: every shard is fetched from the same one."""
    files: tuple[HubFile, ...]
    """One file, or a split GGUF's shards in order (the first is what the catalog points at), or the files of a
    model directory (``directory``)."""
    directory: bool = False

    @property
    def total(self) -> int | None:
        sizes = [f.size for f in self.files]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)


@dataclass(frozen=True, slots=True)
class Event:
    """One progress step, shaped as Ollama's /api/pull stream objects."""

    status: str
    digest: str | None = None
    total: int | None = None
    completed: int | None = None

    def as_ollama(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.digest is not None:
            out["digest"] = self.digest
        if self.total is not None:
            out["total"] = self.total
        if self.completed is not None:
            out["completed"] = self.completed
        return out


@dataclass(frozen=True, slots=True)
class PullResult:
    row: ModelRow
    plan: Plan | None
    """None when the name was already in the catalog and nothing was fetched."""


Emit = Callable[[Event], None]


# -- names ------------------------------------------------------------------------------------------------


def quant_of(filename: str) -> str | None:
    """The quantization label in a GGUF file name ('SmolLM2-135M-Instruct-Q4_K_M.gguf' -> 'Q4_K_M')."""
    stem = PurePosixPath(filename).name
    stem = _SHARD.sub(lambda m: m["prefix"], stem)
    found = _QUANT.findall(stem.removesuffix(".gguf").removesuffix(".GGUF"))
    return found[-1] if found else None


def _tag_for(filename: str) -> str:
    q = quant_of(filename)
    if q:
        return q
    stem = _SHARD.sub(lambda m: m["prefix"], PurePosixPath(filename).name).removesuffix(".gguf")
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.") or "latest"


def _unknown(text: str) -> PullError:
    return PullError(
        f"unknown model '{text}': pull from the Hugging Face Hub with hf:org/repo[:file.gguf] "
        f"(or hf.co/org/repo[:quant]), or use an alias: {', '.join(ALIASES)}",
        404,
    )


def parse_ref(text: str) -> Ref:
    """``hf:org/repo[@rev][:file.gguf|:quant]``, ``hf.co/org/repo[:file.gguf|:quant]`` or an alias."""
    names.check(text)  # taken as given: " smollm2" is refused naming its space, never trimmed
    lower = text.lower()
    rest: str | None = None
    if lower.startswith("hf:"):
        rest = text[3:]
    else:
        for prefix in _HF_PREFIXES:
            if lower.startswith(prefix):
                rest = text[len(prefix) :]
    if rest is None:
        try:
            key = names.normalize(text).lower()
        except CatalogError:
            raise _unknown(text) from None
        alias = ALIASES.get(key)
        if alias is None:
            raise _unknown(text)
        return Ref(alias.repo_id, "main", alias.file, None, key, alias=True)
    repo_part, _, selector = rest.partition(":")
    repo_id, _, revision = repo_part.partition("@")
    check_repo_id(repo_id)
    revision = revision or "main"
    file = selector if selector.lower().endswith(".gguf") else None
    quant = selector if selector and file is None else None
    tag = _tag_for(file) if file else (quant or "latest")
    try:
        name = names.normalize(f"hf.co/{repo_id}:{tag}")
    except CatalogError:
        name = names.normalize(f"hf.co/{repo_id}:latest")
    return Ref(repo_id, revision, file, quant, name)


# -- choosing the file ------------------------------------------------------------------------------------


def _groups(files: Sequence[HubFile]) -> list[tuple[HubFile, ...]]:
    """GGUF files as pullable units: a single file, or every shard of a split set (ordered by shard number)."""
    singles: list[tuple[HubFile, ...]] = []
    sets: dict[tuple[str, str, str], list[tuple[int, HubFile]]] = {}
    for f in files:
        if not f.path.lower().endswith(".gguf"):
            continue
        p = PurePosixPath(f.path)
        m = _SHARD.match(p.name)
        if m is None:
            singles.append((f,))
        else:
            sets.setdefault((str(p.parent), m["prefix"], m["count"]), []).append((int(m["no"]), f))
    groups = singles + [tuple(f for _, f in sorted(shards)) for shards in sets.values()]
    return sorted(groups, key=lambda g: g[0].path)


def _size(group: tuple[HubFile, ...]) -> float:
    sizes = [f.size for f in group]
    return float("inf") if any(s is None for s in sizes) else float(sum(s for s in sizes if s is not None))


def _listing(groups: Sequence[tuple[HubFile, ...]]) -> str:
    def one(g: tuple[HubFile, ...]) -> str:
        size = _size(g)
        shards = f", {len(g)} shards" if len(g) > 1 else ""
        return f"{g[0].path} ({size / 1e9:.2f} GB{shards})" if size != float("inf") else g[0].path

    return "; ".join(one(g) for g in groups)


def _check_complete(group: tuple[HubFile, ...], repo_id: str) -> tuple[HubFile, ...]:
    m = _SHARD.match(PurePosixPath(group[0].path).name)
    if m is None:
        return group
    want = int(m["count"])
    have = sorted(int(x["no"]) for x in (_SHARD.match(PurePosixPath(f.path).name) for f in group) if x)
    if have != list(range(1, want + 1)):
        missing = sorted(set(range(1, want + 1)) - set(have))
        raise PullError(f"the split GGUF {group[0].path} in {repo_id} lacks shards {missing} on the Hub", 502)
    return group


def choose(ref: Ref, info: RepoInfo) -> tuple[HubFile, ...]:
    """The file(s) to pull: the named one; else the only GGUF; else Q4_K_M, Q4_0, then the smallest."""
    groups = _groups(info.files)
    where = f"{info.repo_id}" + (f"@{ref.revision}" if ref.revision != "main" else "")
    if not groups:
        sample = ", ".join(f.path for f in info.files[:12]) or "no files"
        whole = (
            f"; a safetensors or MLX repo is pulled whole, with no file or quantization: blazar pull hf:{info.repo_id}"
            if model_dir_files(info)
            else "; Blazar pulls GGUF files, or a model directory (config.json and *.safetensors)"
        )
        raise PullError(f"{where} has no GGUF files (it has: {sample}){whole}", 404)
    if ref.file is not None:
        hit = [g for g in groups if any(f.path == ref.file for f in g)]
        if not hit:
            hit = [g for g in groups if any(f.name == ref.file for f in g)]
        if len(hit) != 1:
            raise PullError(
                f"{ref.file} is not in {where}; its GGUF files: {_listing(groups)}; "
                f"pull one with: blazar pull hf:{info.repo_id}:<file>",
                404,
            )
        return _check_complete(hit[0], info.repo_id)
    candidates = [g for g in groups if "mmproj" not in g[0].name.lower()] or groups
    if ref.quant is not None:
        want = ref.quant.lower()
        candidates = [g for g in candidates if (quant_of(g[0].path) or "").lower() == want]
        if not candidates:
            raise PullError(
                f"no {ref.quant} GGUF in {where}; its GGUF files: {_listing(groups)}; "
                f"pull one with: blazar pull hf:{info.repo_id}:<file>",
                404,
            )
    if len(candidates) > 1:
        for q in PREFERRED_QUANTS:
            preferred = [g for g in candidates if (quant_of(g[0].path) or "").upper() == q]
            if preferred:
                candidates = preferred
                break
    best = min(candidates, key=lambda g: (_size(g), g[0].path))
    return _check_complete(best, info.repo_id)


def model_dir_files(info: RepoInfo) -> tuple[HubFile, ...]:
    """The files of the repo's model directory (top level, ``model_dir.pick``); empty when it has no
    ``config.json`` or no ``*.safetensors``."""
    top = {f.path: f for f in info.files if "/" not in f.path}
    chosen = pick(top)
    if "config.json" not in chosen or not any(n.endswith(".safetensors") for n in chosen):
        return ()
    return tuple(top[n] for n in chosen)


def plan(hub: Hub, ref: Ref) -> Plan:
    """List the repo and choose: a GGUF (or split set) when it has any, else its safetensors/MLX model directory
    when the name picks no file; files the listing gave no size or sha256 for are asked about one by one."""
    info = hub.repo_info(ref.repo_id, ref.revision)
    directory = ref.file is None and ref.quant is None and not _groups(info.files)
    picked = model_dir_files(info) if directory else ()
    directory = bool(picked)
    files = tuple(
        f
        if f.size is not None and (f.sha256 is not None or directory)
        else _merge(f, hub.file_info(ref.repo_id, f.path, info.revision))
        for f in (picked or choose(ref, info))
    )
    return Plan(ref, info.revision, files, directory)


def _merge(listed: HubFile, head: HubFile) -> HubFile:
    return HubFile(
        listed.path, listed.size if listed.size is not None else head.size, listed.sha256 or head.sha256
    )


# -- fetching and registering ----------------------------------------------------------------------------


def downloads_dir(catalog: Catalog) -> Path:
    """Where pulls download: inside ``models/`` so that registering is a hard link, never a copy."""
    return catalog.data.models / ".downloads"


def _have(dest: Path) -> int:
    for p in (dest, dest.with_name(dest.name + ".part")):
        with contextlib.suppress(OSError):
            return p.stat().st_size
    return 0


def fetch(
    hub: Hub, p: Plan, downloads: Path, emit: Emit, cancel: threading.Event | None = None
) -> list[Downloaded]:
    """Download every file of the plan (resuming what an earlier pull left), emitting progress events."""
    folder = downloads / safe_component(p.ref.repo_id)
    folder.mkdir(parents=True, exist_ok=True)
    need = sum(max(0, (f.size or 0) - _have(folder / f.name)) for f in p.files)
    free = shutil.disk_usage(folder).free
    if need > free:
        raise PullError(
            f"not enough disk space to pull {p.ref.repo_id}: {need / 1e9:.2f} GB more needed, "
            f"{free / 1e9:.2f} GB free under {downloads}",
            507,
        )
    files = []
    for f in p.files:
        files.append(
            hub.download(
                p.ref.repo_id, p.revision, f, folder / f.name, progress=_progress(f, emit), cancel=cancel
            )
        )
    emit(Event("verifying sha256 digest"))
    return files


def _progress(f: HubFile, emit: Emit) -> Callable[[int, int | None], None]:
    status = f"pulling {f.sha256[:12]}" if f.sha256 else f"pulling {f.name}"
    digest = f"sha256:{f.sha256}" if f.sha256 else None
    last = [-1]

    def report(done: int, total: int | None) -> None:
        step = max(total // 100, CHUNK_BYTES) if total else 4 * CHUNK_BYTES
        if last[0] < 0 or done - last[0] >= step or done == total or done < last[0]:
            last[0] = done
            emit(Event(status, digest, total if total is not None else f.size, done))

    return report


def register(
    catalog: Catalog, files: Sequence[Downloaded], name: str, *, directory: bool = False
) -> ModelRow:
    """Add the downloads to the catalog (hard links) with the sha256 they were verified against, then remove
    them from the download folder."""
    paths = [f.path for f in files]
    try:
        if directory:
            return catalog.import_dir(paths[0].parent, name, sha256s={f.path.name: f.sha256 for f in files})
        if len(files) == 1:
            return catalog.import_file(paths[0], name, sha256=files[0].sha256)
        return catalog.import_split(paths, name, sha256s=[f.sha256 for f in files])
    finally:
        for path in paths:
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            paths[0].parent.rmdir()


# -- the two front doors ----------------------------------------------------------------------------------


def _target(ref: Ref, name: str | None) -> str:
    return names.normalize(name) if name else ref.name


def pull(
    catalog: Catalog,
    text: str,
    *,
    name: str | None = None,
    hub: Hub | None = None,
    emit: Emit | None = None,
    cancel: threading.Event | None = None,
) -> PullResult:
    """Pull ``text`` into ``catalog`` in this thread. A name already in the catalog is not fetched again."""
    say: Emit = emit or (lambda _e: None)
    ref = parse_ref(text)
    target = _target(ref, name)
    say(Event("pulling manifest"))
    existing = catalog.find(target)
    if existing is not None:
        say(Event("success"))
        return PullResult(existing, None)
    client = hub or Hub.from_env()
    try:
        p = plan(client, ref)
        files = fetch(client, p, downloads_dir(catalog), say, cancel)
    finally:
        if hub is None:
            client.close()
    say(Event("writing manifest"))
    row = register(catalog, files, target, directory=p.directory)
    say(Event("success"))
    return PullResult(row, p)


async def pull_events(
    catalog: Catalog,
    text: str,
    *,
    name: str | None = None,
    hub_factory: Callable[[], Hub] = Hub.from_env,
) -> AsyncGenerator[Event, None]:
    """Pull ``text`` as an async stream of events; the Hub work runs in a thread, the catalog on this loop.

    A bad name raises before the first event. Closing the iterator early cancels the download, whose partial
    file stays for the next pull to resume.
    """
    ref = parse_ref(text)
    target = _target(ref, name)
    yield Event("pulling manifest")
    if catalog.find(target) is not None:
        yield Event("success")
        return
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Event | None] = asyncio.Queue()
    done: asyncio.Future[tuple[Plan, list[Downloaded]]] = loop.create_future()
    cancel = threading.Event()
    downloads = downloads_dir(catalog)

    def post(item: Event | None) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop is gone (shutdown): stop downloading
            cancel.set()

    def settle(result: tuple[Plan, list[Downloaded]] | None, error: BaseException | None) -> None:
        if done.cancelled():
            return
        if error is not None:
            done.set_exception(error)
        else:
            assert result is not None
            done.set_result(result)

    def work() -> None:
        result: tuple[Plan, list[Downloaded]] | None = None
        error: BaseException | None = None
        try:
            with hub_factory() as hub:
                p = plan(hub, ref)
                result = (p, fetch(hub, p, downloads, post, cancel))
        except BaseException as e:
            error = e
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, result, error)
        post(None)

    threading.Thread(target=work, name=f"blazar-pull {ref.repo_id}", daemon=True).start()
    try:
        while (event := await queue.get()) is not None:
            yield event
        p, files = await done
    finally:
        if not done.done():
            cancel.set()
            done.add_done_callback(_quietly)
    yield Event("writing manifest")
    register(catalog, files, target, directory=p.directory)
    yield Event("success")


def _quietly(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.info("an abandoned pull ended: %s", fut.exception())
