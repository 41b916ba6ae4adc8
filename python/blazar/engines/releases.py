"""GitHub's Releases API: a release's assets and the sha256 digest GitHub publishes for each, so an official engine
is verified without a digest kept by hand in the manifest.

Owns one read, ``GET /repos/{owner}/{repo}/releases/tags/{tag}`` (or ``.../releases/latest``), against
``$BLAZAR_GITHUB_API`` (default ``https://api.github.com``; a mirror or a test's stand-in with the same JSON shape),
sending ``$GITHUB_TOKEN`` when it is set, and its errors: a rate limit (403/429) names ``GITHUB_TOKEN``; a network
that does not reach the API is ``download.Unreachable``, so ``engine install`` can fall back to the source. Must
not: download an asset (``download.fetch`` does, checking the digest), or trust an asset without a digest.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from blazar.engines.download import Unreachable
from blazar.errors import EngineError

API_ENV = "BLAZAR_GITHUB_API"
DEFAULT_API = "https://api.github.com"
TOKEN_ENV = "GITHUB_TOKEN"
TIMEOUT = httpx.Timeout(30.0, connect=10.0)

_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


class RateLimited(EngineError):
    """The Releases API refused for its rate limit (403/429); the message names GITHUB_TOKEN."""


@dataclass(frozen=True, slots=True)
class ApiAsset:
    name: str
    url: str
    size: int | None
    sha256: str | None
    """The digest GitHub published (``"sha256:<hex>"``), or None when the release has none."""


@dataclass(frozen=True, slots=True)
class ApiRelease:
    tag: str
    assets: Mapping[str, ApiAsset]


def api_base(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return (env.get(API_ENV) or DEFAULT_API).rstrip("/")


def fetch_release(repo: str, tag: str, env: Mapping[str, str] | None = None) -> ApiRelease:
    """The release ``tag`` of ``repo`` (``owner/name``), or its latest for ``tag == "latest"``."""
    env = os.environ if env is None else env
    base = api_base(env)
    path = f"/repos/{repo}/releases/latest" if tag == "latest" else f"/repos/{repo}/releases/tags/{tag}"
    headers = {"accept": "application/vnd.github+json", "x-github-api-version": "2022-11-28"}
    token = env.get(TOKEN_ENV)
    if token:
        headers["authorization"] = f"Bearer {token}"
    try:
        r = httpx.get(base + path, headers=headers, timeout=TIMEOUT, follow_redirects=True)
    except httpx.HTTPError as e:
        raise Unreachable(f"cannot reach the Releases API at {base} ({type(e).__name__})") from None
    if r.status_code in (403, 429):
        limited = (
            r.headers.get("x-ratelimit-remaining") == "0" or r.status_code == 429 or "rate limit" in r.text
        )
        if limited:
            how = (
                f"{TOKEN_ENV} is set, and its limit is spent too: wait for the reset, or use another token"
                if token
                else f"set {TOKEN_ENV} to a GitHub token (a fine-grained one with no scopes reads public releases)"
                " and run the command again: it is sent to the API"
            )
            raise RateLimited(
                f"the Releases API at {base} refused: rate limited (HTTP {r.status_code}); {how}"
            )
    if r.status_code == 404:
        raise EngineError(f"{repo} has no release {tag!r} (the Releases API at {base} answered 404)")
    if r.status_code != 200:
        raise Unreachable(f"the Releases API at {base} answered HTTP {r.status_code} for {path}")
    try:
        doc = r.json()
        assets = {}
        for a in doc.get("assets") or []:
            digest = _DIGEST.fullmatch(str(a.get("digest") or ""))
            size = a.get("size")
            assets[str(a["name"])] = ApiAsset(
                name=str(a["name"]),
                url=str(a["browser_download_url"]),
                size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                sha256=digest.group(1) if digest else None,
            )
        return ApiRelease(tag=str(doc["tag_name"]), assets=assets)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise EngineError(
            f"the Releases API at {base} answered {path} with JSON not shaped as a release"
        ) from None
