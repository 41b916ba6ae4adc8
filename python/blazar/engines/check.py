"""``blazar engine check`` and the background check: installed versions against the newest release. Never installs.

The newest release of a lane is the manifest's, or for a lane read from GitHub's Releases API (``engines.releases``)
the API's latest tag when it is newer, so updates are not limited to the packaged manifest; an API that cannot be
read leaves the manifest's. ``compare`` is pure; ``check_once`` loads the manifest (the packaged one, or
``BLAZAR_ENGINE_MANIFEST``), asks the API, compares with the store, writes ``<data_dir>/engines/check.json`` for
``doctor``/``ps`` and returns the result; ``check_loop`` repeats it every ``engine_check_secs`` (0 = off) and logs
what can be updated.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from blazar.config import Config
from blazar.engines import registry, releases
from blazar.engines.manifest import Manifest, load_manifest, version_key
from blazar.engines.registry import EngineRow
from blazar.errors import BlazarError
from blazar.paths import DataDir
from blazar.store import Store, utc_now_iso

CHECK_FILE = "check.json"

log = logging.getLogger("blazar.engines")


@dataclass(frozen=True, slots=True)
class UpdateStatus:
    kind: str
    installed: str | None
    """The newest installed version of this kind (``None``: none installed, or none with a version)."""
    active_tag: str | None
    newest: str | None
    """The newest release (``None``: neither the manifest nor the Releases API lists one)."""
    update: bool
    from_api: bool = False
    """``newest`` is a tag of the Releases API's, newer than the manifest's: installed with ``--tag``."""

    def line(self) -> str:
        kind = f"{self.kind:<10}"
        if self.newest is None:
            active = f" (active {self.active_tag})" if self.active_tag else ""
            if self.installed:
                have = f"{self.installed} installed{active}"
            elif self.active_tag:
                have = f"unknown version{active}"
            else:
                have = "not installed"
            return f"{kind} {have}; the manifest lists no release"
        how = "--tag" if self.from_api else "--version"
        install = f"blazar engine install --kind {self.kind} {how} {self.newest}"
        if self.installed is None and self.active_tag is None:
            return f"{kind} not installed; newest {self.newest}: {install}"
        active = f" (active {self.active_tag})" if self.active_tag else ""
        if self.update:
            return f"{kind} {self.installed or 'unknown version'}{active}; update available: {self.newest}: {install}"
        return f"{kind} {self.installed}{active}; up to date (newest {self.newest})"


def compare(
    manifest: Manifest,
    rows: Sequence[EngineRow],
    kind: str | None = None,
    latest: Mapping[str, str] | None = None,
) -> list[UpdateStatus]:
    """One status per manifest lane (or just ``kind``): is its newest release newer than what is installed?
    ``latest``: the Releases API's latest tag per kind, where it was read."""
    out: list[UpdateStatus] = []
    for lane in manifest.lanes.values():
        if kind is not None and lane.kind != kind:
            continue
        mine = [r for r in rows if r.kind == lane.kind]
        versions = [r.version for r in mine if r.version and r.version != "unknown"]
        installed = max(versions, key=version_key, default=None)
        newest_release = lane.newest()
        newest = newest_release.version if newest_release is not None else None
        api = (latest or {}).get(lane.kind)
        from_api = api is not None and (newest is None or version_key(api) > version_key(newest))
        if from_api:
            newest = api
        active = next((r.tag for r in mine if r.active), None)
        update = bool(
            mine
            and newest is not None
            and (installed is None or version_key(newest) > version_key(installed))
        )
        out.append(UpdateStatus(lane.kind, installed, active, newest, update, from_api))
    return out


def latest_tags(manifest: Manifest, kind: str | None = None) -> dict[str, str]:
    """The Releases API's latest tag of each lane read from it (or just ``kind``'s); a lane whose API cannot be
    read (unreachable, rate limited) is left out, and its manifest's newest stands."""
    out: dict[str, str] = {}
    for lane in manifest.lanes.values():
        if lane.github is None or (kind is not None and lane.kind != kind):
            continue
        try:
            out[lane.kind] = releases.fetch_release(lane.github.repo, "latest").tag
        except BlazarError as e:
            log.info(
                "engine check: the Releases API for %s could not be read (%s); using the manifest's",
                lane.kind,
                e,
            )
    return out


def _write(data: DataDir, origin: str, statuses: Sequence[UpdateStatus]) -> Path:
    data.engines.mkdir(parents=True, exist_ok=True)
    path = data.engines / CHECK_FILE
    tmp = path.with_name(path.name + ".tmp")
    doc = {"checked_at": utc_now_iso(), "manifest": origin, "lanes": [asdict(s) for s in statuses]}
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_check(data: DataDir) -> tuple[str, list[UpdateStatus]] | None:
    """What the last check found (``check.json``: when, and each lane's status), or None when none ran or its
    file cannot be read."""
    try:
        doc = json.loads((data.engines / CHECK_FILE).read_text(encoding="utf-8"))
        lanes = [UpdateStatus(**lane) for lane in doc["lanes"]]
        return str(doc["checked_at"]), lanes
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_once(
    cfg: Config, store: Store, *, manifest: Manifest | None = None, kind: str | None = None
) -> list[UpdateStatus]:
    """Compare the store with the newest releases, record the result in ``engines/check.json`` and return it."""
    manifest = manifest or load_manifest()
    statuses = compare(manifest, registry.list_all(store), kind, latest_tags(manifest, kind))
    _write(DataDir(cfg.data_dir), manifest.origin, statuses)
    return statuses


async def check_loop(cfg: Config, store: Store, log: logging.Logger) -> None:
    """Run ``check_once`` every ``cfg.engine_check_secs`` seconds until cancelled; returns at once when it is 0.

    The manifest is loaded (possibly over HTTP) in a worker thread; the store is read on the loop. Failures are
    logged as warnings and retried at the next tick.
    """
    if cfg.engine_check_secs <= 0:
        return
    while True:
        try:
            manifest = await asyncio.to_thread(load_manifest)
            for status in check_once(cfg, store, manifest=manifest):
                if status.update:
                    log.info("engine update available: %s", status.line())
        except BlazarError as e:
            log.warning("engine check failed: %s", e)
        await asyncio.sleep(cfg.engine_check_secs)
