"""``blazar engine install``: fetch an official release (or pip-install a venv lane), gate it, then record it.

Order, so that every failure leaves the installed set (rows and tag dirs) exactly as it was: download and verify
into ``engines/.downloads`` (an interrupted transfer keeps its ``.part`` for resume), unpack into a
``.staging-*`` dir beside the tag dirs, run the regression gate there, rename the staging dir to
``engines/<kind>/<tag>`` and only then record the row and make it active. The previously active tag stays
installed and active until that last step, and stays available to ``engine rollback`` after it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from blazar.catalog.models import ModelRow
from blazar.engines import archive, gate, registry, releases, venv
from blazar.engines.download import Progress, fetch
from blazar.engines.lanes import kinds_for_format
from blazar.engines.manifest import (
    DEFAULT_MAX_BYTES,
    Asset,
    Download,
    GithubSource,
    Lane,
    Manifest,
    Release,
    host_platform,
    pick_asset,
)
from blazar.engines.registry import EngineRow
from blazar.engines.removal import (
    STAGING_PREFIX,
    discard,
    downloads_dir,
    kind_dir,
    kind_lock,
    sweep,
)
from blazar.errors import EngineError
from blazar.paths import DataDir
from blazar.store import Store


class Unverifiable(EngineError):
    """No digest for a release archive: Blazar never installs one it cannot verify."""


@dataclass(frozen=True, slots=True)
class InstallResult:
    row: EngineRow
    previous: EngineRow | None
    gate: gate.GateReport


def gate_model(kind: str, models: Sequence[ModelRow]) -> Path | None:
    """The smallest catalog model this lane can load whose file exists, for the gate's test generation."""
    usable = [m for m in models if kind in kinds_for_format(m.format) and m.path.exists()]
    return min(usable, key=lambda m: (m.size_bytes, m.name)).path if usable else None


def _digest(dl: Download, given: str | None, what: str) -> str:
    if given is not None and dl.sha256 is not None and given != dl.sha256:
        raise EngineError(f"--sha256 {given} disagrees with the manifest's {dl.sha256} for {what}; refusing")
    sha = given or dl.sha256
    if sha is None:
        raise Unverifiable(
            f"the engine manifest records no sha256 for {dl.url}, and Blazar never installs an unverified"
            " engine; pass the digest from the release page with --sha256 HEX, or point"
            " BLAZAR_ENGINE_MANIFEST (or --manifest) at a manifest that records it"
        )
    return sha.lower()


def _fetch_all(
    data: DataDir, asset: Asset, sha256: str | None, progress: Progress | None
) -> list[tuple[Download, Path]]:
    plan = [(asset.download, _digest(asset.download, sha256, asset.download.url))]
    plan += [(e, _digest(e, None, e.url)) for e in asset.extras]
    out: list[tuple[Download, Path]] = []
    for dl, sha in plan:
        name = dl.url.rsplit("/", 1)[-1].split("?", 1)[0] or "download"
        dest = downloads_dir(data) / f"{sha[:12]}-{name}"
        cap = asset.max_bytes if dl is asset.download else (dl.size or asset.max_bytes)
        out.append((dl, fetch(dl.url, dest, sha256=sha, max_bytes=cap, progress=progress)))
    return out


def install(
    store: Store,
    data: DataDir,
    manifest: Manifest,
    kind: str,
    *,
    version: str | None = None,
    tag: str | None = None,
    accel: str | None = None,
    sha256: str | None = None,
    models: Sequence[ModelRow] = (),
    platform: str | None = None,
    gate_timeout: float = 120.0,
    progress: Progress | None = None,
) -> InstallResult:
    """Install ``kind``, gate it and make it active: the manifest's release ``version``, or for a lane that reads
    GitHub's Releases API the release ``tag`` (``latest``; without either, the manifest's newest version) with the
    digest GitHub publishes for its asset."""
    registry.check_kind(kind)
    lane = manifest.lane(kind)
    platform = platform or host_platform()
    if tag is not None and lane.github is None:
        raise EngineError(
            f"the {kind} lane is not read from a Releases API; name a manifest release with --version"
        )
    asset: Asset | None = None
    if lane.github is not None and version is None and lane.venv is None:
        newest = lane.newest()
        release, asset = _from_api(
            lane, lane.github, tag or (newest.version if newest else "latest"), platform, accel
        )
    else:
        release = lane.release(version)
    if asset is not None:
        accel = asset.accel
    elif lane.venv is not None:
        if lane.venv.platforms and platform not in lane.venv.platforms:
            raise EngineError(
                f"the {kind} lane runs on {', '.join(lane.venv.platforms)} only, and this machine is {platform}"
                + (f" ({lane.note})" if lane.note else "")
            )
        if accel is not None and accel != lane.venv.accel:
            raise EngineError(f"the {kind} lane is built for {lane.venv.accel}, not {accel}")
        accel = lane.venv.accel
    else:
        asset = pick_asset(lane, release, platform, accel)
        accel = asset.accel
    assert accel is not None
    if sha256 is not None and asset is None:
        raise EngineError(f"--sha256 applies to release archives; the {kind} lane is installed with pip")
    tag = f"{release.version}-{accel}"
    if registry.get(store, kind, tag) is not None:
        raise EngineError(
            f"{kind} {tag} is already installed; activate it with: blazar engine use --kind {kind} {tag}"
            f" (or remove it first: blazar engine rm --kind {kind} {tag})"
        )
    model = gate_model(kind, models)
    root = kind_dir(data, kind)
    with kind_lock(data, kind):
        sweep(data, kind)
        files = _fetch_all(data, asset, sha256, progress) if asset is not None else []
        made_root = not root.exists()
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{tag}-", dir=root))
        final = root / tag
        try:
            if asset is not None:
                for dl, path in files:
                    archive.unpack(path, staging, max_bytes=asset.max_bytes, name=dl.url.rsplit("/", 1)[-1])
                binary = archive.find_binary(staging, lane.binary)
            else:
                assert lane.venv is not None
                binary = venv.create(staging, lane.venv, release.version, lane.binary)
            try:
                report = gate.run_gate(
                    kind,
                    binary,
                    model=model,
                    workdir=binary.parent,
                    health_path=lane.health_path,
                    timeout=gate_timeout,
                )
            except gate.GateFailed as e:
                prev = registry.active(store, kind)
                kept = f"; {kind} {prev.tag} stays active" if prev is not None else ""
                raise gate.GateFailed(
                    f"{kind} {tag} failed its regression gate: {e}; nothing was installed{kept}"
                ) from None
            if final.exists():
                discard(final)  # a tag dir with no row: left by a crash between the rename and the insert
            os.rename(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            for _dl, path in files:
                path.unlink(missing_ok=True)  # verified but unusable: do not keep it around
            if made_root:
                with contextlib.suppress(OSError):
                    root.rmdir()
            raise
        previous = registry.active(store, kind)
        try:
            row = registry.add(
                store,
                kind=kind,
                tag=tag,
                path=final / binary.relative_to(staging),
                source="install",
                version=release.version,
                accel=accel,
                lane_class=lane.lane_class,
                architectures=lane.architectures,
                asset_url=asset.download.url if asset is not None else None,
                asset_sha256=(sha256 or asset.download.sha256 or "").lower() or None
                if asset is not None
                else None,
            )
        except BaseException:
            shutil.rmtree(final, ignore_errors=True)
            raise
        for _dl, path in files:
            path.unlink(missing_ok=True)
    return InstallResult(row=row, previous=previous, gate=report)


def _from_api(
    lane: Lane, gh: GithubSource, tag: str, platform: str, accel: str | None
) -> tuple[Release, Asset]:
    """The release ``tag`` as GitHub's Releases API lists it, and its asset for this platform and accelerator, with
    the digest GitHub published. A digest the manifest records for the same URL must agree; neither is left for
    ``_digest`` to refuse (or ``--sha256`` to give)."""
    mine = [a for a in gh.assets if a.platform == platform]
    spec = next(
        (a for a in mine if a.accel == (accel or "cpu")), None if accel else (mine[0] if mine else None)
    )
    if spec is None:
        have = ", ".join(f"{a.platform}/{a.accel}" for a in gh.assets) or "none"
        raise EngineError(
            f"{lane.kind} releases have no {accel or 'cpu'} build for {platform} (they have: {have});"
            f" {lane.no_release_hint()}"
        )
    api = releases.fetch_release(gh.repo, tag)
    recorded = {
        d.url: d.sha256 for r in lane.releases if r.version == api.tag for a in r.assets
        for d in (a.download, *a.extras) if d.sha256 is not None
    }  # fmt: skip

    def download(name: str) -> Download:
        found = api.assets.get(name.format(tag=api.tag))
        if found is None:
            raise EngineError(
                f"{gh.repo} release {api.tag} has no asset {name.format(tag=api.tag)} for {platform}/{spec.accel}"
                f" ({len(api.assets)} assets listed); pick another with --tag, or --accel"
            )
        mine = recorded.get(found.url)
        if mine is not None and found.sha256 is not None and mine != found.sha256:
            raise EngineError(
                f"the engine manifest records sha256 {mine} for {found.url}, but GitHub publishes {found.sha256};"
                " refusing: one of them is wrong"
            )
        return Download(url=found.url, sha256=found.sha256 or mine, size=found.size)

    main = download(spec.name)
    asset = Asset(platform=platform, accel=spec.accel, download=main, max_bytes=main.size or DEFAULT_MAX_BYTES,
                  extras=tuple(download(e) for e in spec.extras))  # fmt: skip
    return Release(version=api.tag, assets=(asset,)), asset
