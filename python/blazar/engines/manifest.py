"""The engine manifest: which official releases of each engine kind Blazar knows, as data shipped in the package.

It owns the manifest's schema (``manifest.json`` beside this module), loading it (the packaged copy, or the file or
URL named by ``BLAZAR_ENGINE_MANIFEST`` or ``--manifest``), validation with teaching errors, version ordering and
picking the asset for a platform. It never installs anything and never runs an engine.

Shape (JSON)::

    {"schema": 1, "max_bytes": N,
     "lanes": {"llama-cpp": {"source": "official" | "fork", "binary": "llama-server",
                             "architectures": ["llama", ...] | null, "note": "...",
                             "venv": {"requirement": "sglang[all]", "distribution": "sglang",
                                      "module": "sglang.launch_server", "accel": "cuda",
                                      "platforms": ["linux-x86_64"], "pip_args": []} | absent,
                             "releases": [{"version": "b11434",
                                           "assets": [{"platform": "linux-x86_64", "accel": "cpu",
                                                       "url": "...", "sha256": "hex" | null,
                                                       "size": N | null, "max_bytes": N | absent,
                                                       "extras": [{"url", "sha256", "size"}]}]}]}}}

A lane may add ``"github": {"repo": "owner/name", "assets": [{"platform", "accel", "name": "llama-{tag}-...tar.gz",
"extras": [...]}]}``: its releases are then read from GitHub's Releases API, whose published sha256 digests verify
them (``engines.releases``); a digest recorded here for the same URL must agree.

``source`` gives the lane class: ``official`` lanes are mainstream, ``fork`` lanes are capability forks that only
ever receive the architectures mainstream lacks. A ``null`` sha256 means the digest is not recorded here: the
installer refuses such an asset unless the user passes the digest (``--sha256``).
"""

from __future__ import annotations

import json
import os
import platform as _platform
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import httpx

from blazar.engines import KINDS
from blazar.errors import EngineError

MANIFEST_ENV = "BLAZAR_ENGINE_MANIFEST"
"""A file path or http(s) URL that replaces the packaged manifest."""

DEFAULT_MAX_BYTES = 1 << 30
"""Download cap for an asset whose manifest entry records neither ``size`` nor ``max_bytes``."""

MAX_MANIFEST_BYTES = 1 << 20
"""A remote manifest larger than this is refused."""

LANE_CLASSES: dict[str, str] = {"official": "mainstream", "fork": "fork"}

_SHA = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class Download:
    """One file to fetch: its URL, sha256 (``None``: not recorded) and exact size when known."""

    url: str
    sha256: str | None
    size: int | None


@dataclass(frozen=True, slots=True)
class Asset:
    """One release archive for one platform and accelerator, plus any archives unpacked beside it."""

    platform: str
    accel: str
    download: Download
    max_bytes: int
    extras: tuple[Download, ...] = ()


@dataclass(frozen=True, slots=True)
class VenvSpec:
    """A lane installed with pip into its own venv: ``requirement==version``."""

    requirement: str
    distribution: str
    module: str
    accel: str
    platforms: tuple[str, ...]
    pip_args: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Release:
    version: str
    assets: tuple[Asset, ...] = ()


@dataclass(frozen=True, slots=True)
class GithubAsset:
    """Which asset of a GitHub release is the build for one platform and accelerator: its name, with ``{tag}``
    for the release's tag, and the names of archives unpacked beside it."""

    platform: str
    accel: str
    name: str
    extras: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GithubSource:
    """A lane whose releases are read from GitHub's Releases API (``engines.releases``), digests included."""

    repo: str
    assets: tuple[GithubAsset, ...]


@dataclass(frozen=True, slots=True)
class Lane:
    """Everything the manifest says about one engine kind."""

    kind: str
    source: str
    binary: str
    releases: tuple[Release, ...]
    architectures: tuple[str, ...] | None = None
    venv: VenvSpec | None = None
    note: str = ""
    health_path: str = "/health"
    github: GithubSource | None = None

    @property
    def lane_class(self) -> str:
        return LANE_CLASSES[self.source]

    def newest(self) -> Release | None:
        return max(self.releases, key=lambda r: version_key(r.version), default=None)

    def release(self, version: str | None) -> Release:
        """The release named ``version`` (the newest when ``None``), or a teaching EngineError."""
        if version is None:
            newest = self.newest()
            if newest is None:
                raise EngineError(
                    f"the engine manifest lists no {self.kind} release; {self.no_release_hint()}"
                )
            return newest
        for r in self.releases:
            if r.version == version:
                return r
        known = ", ".join(r.version for r in sorted(self.releases, key=lambda r: version_key(r.version)))
        raise EngineError(
            f"the engine manifest has no {self.kind} release '{version}' (known: {known or 'none'})"
        )

    def no_release_hint(self) -> str:
        return self.note or f"register a binary you built: blazar engine add --kind {self.kind} --path BINARY"


@dataclass(frozen=True, slots=True)
class Manifest:
    lanes: Mapping[str, Lane]
    origin: str

    def lane(self, kind: str) -> Lane:
        lane = self.lanes.get(kind)
        if lane is None:
            raise EngineError(
                f"the engine manifest ({self.origin}) has no '{kind}' lane (it lists: {', '.join(self.lanes)})"
            )
        return lane


def version_key(version: str) -> tuple[tuple[int, str], ...]:
    """Numeric-aware ordering: ``b11434`` > ``b9000``, ``0.5.10`` > ``0.5.9``, ``0.5.5.post1`` > ``0.5.5``.

    A leading letter prefix (``b``, ``v``) is ignored, so a built ``11434`` equals the released ``b11434``."""
    core = re.sub(r"^[A-Za-z]+(?=\d)", "", version.strip())
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in re.findall(r"\d+|[A-Za-z]+", core))


def host_platform() -> str:
    """``linux-x86_64``, ``linux-arm64``, ``darwin-arm64``, ``darwin-x86_64``, ``windows-x86_64``."""
    system = _platform.system().lower()
    machine = _platform.machine().lower()
    arch = {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64"}.get(machine, machine)
    return f"{system}-{arch}"


# -- parsing ---------------------------------------------------------------------------------------------------


class _Where:
    def __init__(self, origin: str) -> None:
        self.origin = origin

    def bad(self, where: str, expected: str, value: object) -> EngineError:
        shown = json.dumps(value)[:60] if not isinstance(value, bytes) else "bytes"
        return EngineError(f"engine manifest {self.origin}: '{where}' must be {expected}, got {shown}")

    def str_(self, obj: Mapping[str, object], key: str, where: str, default: str | None = None) -> str:
        value = obj.get(key, default)
        if not isinstance(value, str) or not value:
            raise self.bad(f"{where}.{key}", "a non-empty string", value)
        return value

    def int_(self, obj: Mapping[str, object], key: str, where: str) -> int | None:
        value = obj.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.bad(f"{where}.{key}", "a positive integer or null", value)
        return value

    def table(self, value: object, where: str) -> Mapping[str, object]:
        if not isinstance(value, dict):
            raise self.bad(where, "an object", value)
        return value

    def list_(self, value: object, where: str) -> list[object]:
        if not isinstance(value, list):
            raise self.bad(where, "an array", value)
        return value

    def strings(self, value: object, where: str) -> tuple[str, ...]:
        items = self.list_(value, where)
        if not all(isinstance(i, str) and i for i in items):
            raise self.bad(where, "an array of non-empty strings", value)
        return tuple(str(i) for i in items)


def _download(w: _Where, obj: Mapping[str, object], where: str) -> Download:
    url = w.str_(obj, "url", where)
    if not url.startswith(("http://", "https://")):
        raise w.bad(f"{where}.url", "an http(s) URL", url)
    sha = obj.get("sha256")
    if sha is not None and (not isinstance(sha, str) or not _SHA.fullmatch(sha)):
        raise w.bad(f"{where}.sha256", "64 lowercase hex digits or null", sha)
    return Download(url=url, sha256=sha, size=w.int_(obj, "size", where))


def _asset(w: _Where, value: object, where: str, default_cap: int) -> Asset:
    obj = w.table(value, where)
    dl = _download(w, obj, where)
    cap = w.int_(obj, "max_bytes", where) or dl.size or default_cap
    extras = tuple(
        _download(w, w.table(e, f"{where}.extras[{i}]"), f"{where}.extras[{i}]")
        for i, e in enumerate(w.list_(obj.get("extras", []), f"{where}.extras"))
    )
    return Asset(
        platform=w.str_(obj, "platform", where),
        accel=w.str_(obj, "accel", where),
        download=dl,
        max_bytes=cap,
        extras=extras,
    )


def _lane(w: _Where, kind: str, value: object, default_cap: int) -> Lane:
    where = f"lanes.{kind}"
    obj = w.table(value, where)
    source = w.str_(obj, "source", where)
    if source not in LANE_CLASSES:
        raise w.bad(f"{where}.source", '"official" or "fork"', source)
    arches = obj.get("architectures")
    venv_obj = obj.get("venv")
    venv = None
    if venv_obj is not None:
        v = w.table(venv_obj, f"{where}.venv")
        venv = VenvSpec(
            requirement=w.str_(v, "requirement", f"{where}.venv"),
            distribution=w.str_(v, "distribution", f"{where}.venv"),
            module=w.str_(v, "module", f"{where}.venv"),
            accel=w.str_(v, "accel", f"{where}.venv", "cpu"),
            platforms=w.strings(v.get("platforms", []), f"{where}.venv.platforms"),
            pip_args=w.strings(v.get("pip_args", []), f"{where}.venv.pip_args"),
        )
    releases: list[Release] = []
    for i, r in enumerate(w.list_(obj.get("releases", []), f"{where}.releases")):
        rw = f"{where}.releases[{i}]"
        robj = w.table(r, rw)
        assets = tuple(
            _asset(w, a, f"{rw}.assets[{j}]", default_cap)
            for j, a in enumerate(w.list_(robj.get("assets", []), f"{rw}.assets"))
        )
        releases.append(Release(version=w.str_(robj, "version", rw), assets=assets))
    note = obj.get("note", "")
    if not isinstance(note, str):
        raise w.bad(f"{where}.note", "a string", note)
    github = None
    if obj.get("github") is not None:
        gw = f"{where}.github"
        g = w.table(obj["github"], gw)
        repo = w.str_(g, "repo", gw)
        if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
            raise w.bad(f"{gw}.repo", "owner/name", repo)
        specs = []
        for j, a in enumerate(w.list_(g.get("assets", []), f"{gw}.assets")):
            aw = f"{gw}.assets[{j}]"
            aobj = w.table(a, aw)
            specs.append(GithubAsset(
                platform=w.str_(aobj, "platform", aw), accel=w.str_(aobj, "accel", aw),
                name=w.str_(aobj, "name", aw), extras=w.strings(aobj.get("extras", []), f"{aw}.extras"),
            ))  # fmt: skip
        github = GithubSource(repo=repo, assets=tuple(specs))
    return Lane(
        kind=kind,
        source=source,
        binary=w.str_(obj, "binary", where),
        releases=tuple(releases),
        architectures=None if arches is None else w.strings(arches, f"{where}.architectures"),
        venv=venv,
        note=note,
        health_path=w.str_(obj, "health_path", where, "/health"),
        github=github,
    )


def parse_manifest(data: object, origin: str) -> Manifest:
    """Validate a decoded manifest document; every problem is one EngineError naming the key."""
    w = _Where(origin)
    doc = w.table(data, "(top level)")
    if doc.get("schema") != 1:
        raise w.bad("schema", "1", doc.get("schema"))
    cap = w.int_(doc, "max_bytes", "(top level)") or DEFAULT_MAX_BYTES
    lanes_obj = w.table(doc.get("lanes"), "lanes")
    lanes: dict[str, Lane] = {}
    for kind, value in lanes_obj.items():
        if kind not in KINDS:
            raise EngineError(
                f"engine manifest {origin}: unknown lane '{kind}' (known kinds: {', '.join(KINDS)})"
            )
        lanes[kind] = _lane(w, kind, value, cap)
    return Manifest(lanes=lanes, origin=origin)


def packaged_text() -> str:
    return resources.files("blazar.engines").joinpath("manifest.json").read_text(encoding="utf-8")


def _fetch(url: str) -> str:
    try:
        with httpx.stream("GET", url, follow_redirects=True, timeout=30.0) as r:
            if r.status_code != 200:
                raise EngineError(f"cannot fetch the engine manifest {url}: HTTP {r.status_code}")
            body = bytearray()
            for chunk in r.iter_bytes():
                body += chunk
                if len(body) > MAX_MANIFEST_BYTES:
                    raise EngineError(
                        f"the engine manifest {url} is larger than {MAX_MANIFEST_BYTES} bytes; refusing it"
                    )
    except httpx.HTTPError as e:
        raise EngineError(f"cannot fetch the engine manifest {url}: {e}") from None
    return body.decode("utf-8", errors="replace")


def load_manifest(source: str | Path | None = None, env: Mapping[str, str] | None = None) -> Manifest:
    """The manifest from ``source`` (a path or URL), else ``$BLAZAR_ENGINE_MANIFEST``, else the packaged one."""
    env = os.environ if env is None else env
    chosen = str(source) if source is not None else (env.get(MANIFEST_ENV) or None)
    if chosen is None:
        origin, text = "(packaged)", packaged_text()
    elif chosen.startswith(("http://", "https://")):
        origin, text = chosen, _fetch(chosen)
    else:
        origin = chosen
        try:
            text = Path(chosen).expanduser().read_text(encoding="utf-8")
        except OSError as e:
            raise EngineError(f"cannot read the engine manifest {chosen}: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise EngineError(f"engine manifest {origin} is not valid JSON: {e}") from None
    return parse_manifest(data, origin)


def pick_asset(lane: Lane, release: Release, platform: str, accel: str | None) -> Asset:
    """The asset of ``release`` for ``platform`` and ``accel`` (CPU first when ``accel`` is ``None``)."""
    mine = [a for a in release.assets if a.platform == platform]
    if accel is not None:
        found = next((a for a in mine if a.accel == accel), None)
    else:
        found = next((a for a in mine if a.accel == "cpu"), mine[0] if mine else None)
    if found is not None:
        return found
    if mine:
        raise EngineError(
            f"{lane.kind} {release.version} has no {accel} build for {platform} "
            f"(available: {', '.join(a.accel for a in mine)}); pick one with --accel"
        )
    have = sorted({a.platform for a in release.assets})
    raise EngineError(
        f"the engine manifest has no {lane.kind} {release.version} build for {platform}"
        f" (it has: {', '.join(have) or 'none'}); {lane.no_release_hint()}"
    )
