"""The Hugging Face Hub client: repo listings, file metadata and resumable, sha256-verified downloads (httpx).

It owns HTTP to the Hub and the files it writes under the download directory it is handed: ``<file>.part``
(bytes so far), ``<file>.part.json`` (what the part belongs to, so a resume never appends to another file's
bytes) and ``<file>.lock``. A download is renamed to its final name only after its size and its LFS sha256
check out. It never touches the catalog, never chooses which file to pull (that is ``pull``), and never logs,
prints or puts the token into a message.

Hub API used: ``GET {endpoint}/api/models/{repo}[/revision/{rev}]?blobs=true`` (``sha``, ``siblings`` with
``rfilename``, ``size``, ``lfs.sha256``); ``HEAD``/``GET {endpoint}/{repo}/resolve/{rev}/{path}`` (``X-Linked-Etag``
and ``X-Linked-Size`` on the redirect for LFS files, ``Range`` honoured for resume). ``HF_ENDPOINT`` and
``HF_TOKEN`` (sent as a Bearer token) come from the environment.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import IO, Any
from urllib.parse import quote

import httpx
import orjson

from blazar import __version__
from blazar.errors import BlazarError

DEFAULT_ENDPOINT = "https://huggingface.co"
CHUNK_BYTES = 1 << 20
HASH_BLOCK = 8 << 20

Progress = Callable[[int, int | None], None]
"""Called as (bytes_done, bytes_total or None) while a file downloads; also once after a resumed prefix."""

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class HubError(BlazarError):
    """The Hub refused, could not be reached, or sent bytes that do not check out. ``status`` is for the API."""

    status = 502

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class HubCancelled(HubError):
    """The caller cancelled a download; the partial file is kept for the next pull to resume."""

    status = 499


@dataclass(frozen=True, slots=True)
class HubFile:
    """One file of a repo: its path in the repo, and its size and LFS sha256 when the Hub says them."""

    path: str
    size: int | None = None
    sha256: str | None = None

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name


@dataclass(frozen=True, slots=True)
class Downloaded:
    """A finished download: where it is, and the sha256 (hex) of its bytes, hashed as they arrived."""

    path: Path
    sha256: str


@dataclass(frozen=True, slots=True)
class RepoInfo:
    repo_id: str
    revision: str
    """The commit the listing came from when the Hub says it, else the revision asked for."""
    files: tuple[HubFile, ...]


def check_repo_id(repo_id: str) -> str:
    if not _REPO_ID.match(repo_id) or ".." in repo_id:
        raise HubError(f"invalid Hub repo id '{repo_id}': use org/name", 400)
    return repo_id


def _check_path(path: str) -> str:
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or any(p in ("..", ".") for p in parts) or "\\" in path:
        raise HubError(f"invalid file path '{path}' in a Hub repo", 400)
    return path


def _etag_sha256(value: str | None) -> str | None:
    if not value:
        return None
    v = value.strip()
    if v.startswith("W/"):
        v = v[2:]
    v = v.strip('"').lower()
    return v if _SHA256.match(v) else None


def _int_or_none(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _sibling(s: Any) -> HubFile | None:
    if not isinstance(s, dict) or not isinstance(s.get("rfilename"), str):
        return None
    raw = s.get("lfs")
    lfs: dict[str, Any] = raw if isinstance(raw, dict) else {}
    sha = lfs.get("sha256") or lfs.get("oid")
    size = _int_or_none(lfs.get("size")) if lfs else None
    return HubFile(
        path=s["rfilename"],
        size=size if size is not None else _int_or_none(s.get("size")),
        sha256=sha.lower() if isinstance(sha, str) and _SHA256.match(sha.lower()) else None,
    )


class Hub:
    """A Hub client over one ``httpx.Client``; safe to use from one thread at a time."""

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.5,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
        self.retries = retries
        self.backoff = backoff
        self._has_token = bool(token)
        headers = {"user-agent": f"blazar/{__version__}"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            follow_redirects=True,
            transport=transport,
        )

    @classmethod
    def from_env(cls, **kwargs: Any) -> Hub:
        """``HF_ENDPOINT`` (default the public Hub) and ``HF_TOKEN`` (optional) from the environment."""
        return cls(os.environ.get("HF_ENDPOINT") or None, os.environ.get("HF_TOKEN") or None, **kwargs)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Hub:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- URLs and errors -------------------------------------------------------------------------------

    def url(self, repo_id: str, path: str, revision: str) -> str:
        return (
            f"{self.endpoint}/{check_repo_id(repo_id)}/resolve/{quote(revision, safe='')}"
            f"/{quote(_check_path(path), safe='/')}"
        )

    def page(self, repo_id: str) -> str:
        return f"{self.endpoint}/{repo_id}"

    def _refusal(self, r: httpx.Response, repo_id: str, what: str) -> HubError:
        code = r.headers.get("x-error-code", "")
        status = r.status_code
        if code == "GatedRepo":
            return HubError(
                f"{repo_id} is gated: accept its terms at {self.page(repo_id)} and set HF_TOKEN to a token of "
                "that account",
                403,
            )
        if code == "RepoNotFound" or (status == 404 and not code):
            hint = "" if self._has_token else "; a private repo needs HF_TOKEN"
            return HubError(
                f"model repo '{repo_id}' not found on {self.endpoint} (check the name{hint})", 404
            )
        if code == "RevisionNotFound":
            return HubError(f"{what}: revision not found in {repo_id}", 404)
        if code == "EntryNotFound":
            return HubError(f"{what}: no such file in {repo_id}", 404)
        if status in (401, 403):
            fix = (
                "HF_TOKEN was refused; check it" if self._has_token else "set HF_TOKEN to a Hub access token"
            )
            return HubError(f"{what}: the Hub refused access to {repo_id} ({status}); {fix}", 403)
        if status == 429:
            return HubError(f"{what}: rate limited by {self.endpoint}; wait a minute and pull again", 429)
        return HubError(f"{what}: {self.endpoint} answered HTTP {status}", 502)

    def _unreachable(self, e: httpx.HTTPError) -> HubError:
        return HubError(
            f"cannot reach {self.endpoint}: {type(e).__name__}: {e}; check the network, or set HF_ENDPOINT"
        )

    # -- listing and metadata --------------------------------------------------------------------------

    def repo_info(self, repo_id: str, revision: str = "main") -> RepoInfo:
        """The repo's files, with sizes and LFS sha256 (``?blobs=true``)."""
        check_repo_id(repo_id)
        url = f"{self.endpoint}/api/models/{repo_id}"
        if revision != "main":
            url += f"/revision/{quote(revision, safe='')}"
        try:
            r = self._client.get(url, params={"blobs": "true"})
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None
        if r.status_code != 200:
            raise self._refusal(r, repo_id, f"listing {repo_id}")
        try:
            data = orjson.loads(r.content)
        except orjson.JSONDecodeError:
            raise HubError(f"{self.endpoint} sent a listing of {repo_id} that is not JSON") from None
        siblings = data.get("siblings") if isinstance(data, dict) else None
        if not isinstance(siblings, list):
            raise HubError(f"{self.endpoint} sent a listing of {repo_id} without 'siblings'")
        files = tuple(f for f in map(_sibling, siblings) if f is not None)
        sha = data.get("sha")
        return RepoInfo(repo_id, sha if isinstance(sha, str) and sha else revision, files)

    def file_info(self, repo_id: str, path: str, revision: str = "main") -> HubFile:
        """Size and sha256 from the resolve endpoint's headers (``X-Linked-Size``, ``X-Linked-Etag``)."""
        url = self.url(repo_id, path, revision)
        try:
            r = self._client.head(url, follow_redirects=False, headers={"accept-encoding": "identity"})
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None
        if r.status_code >= 400:
            raise self._refusal(r, repo_id, f"{path}")
        h = r.headers
        size = _int_or_none(h.get("x-linked-size") or h.get("content-length"))
        sha = _etag_sha256(h.get("x-linked-etag")) or _etag_sha256(h.get("etag"))
        return HubFile(path, size, sha)

    # -- download --------------------------------------------------------------------------------------

    def download(
        self,
        repo_id: str,
        revision: str,
        f: HubFile,
        dest: Path,
        *,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> Downloaded:
        """Download ``f`` to ``dest``, resuming ``dest.part`` when it belongs to the same file.

        Dropped connections and 5xx answers are retried with ``Range`` from where the bytes stopped. The size
        and, when the Hub gives it, the sha256 are checked before ``dest`` appears; a mismatch removes the
        partial file. Cancelling (or any other failure) keeps it for the next call. The answer carries the
        sha256 the bytes were hashed to on the way in (the Hub's, when it gave one), so nobody hashes them again.
        """
        url = self.url(repo_id, f.path, revision)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with _locked(dest.with_name(dest.name + ".lock"), f.path):
            if dest.is_file():  # left by an earlier call whose registration did not finish
                if f.sha256 is not None and _matches(dest, f):
                    return Downloaded(dest, f.sha256)
                dest.unlink()
            try:
                return _Download(self, repo_id, url, f, dest, progress, cancel).run()
            except OSError as e:
                raise HubError(f"cannot write {dest}: {e.strerror or e}", 507) from None


def _matches(path: Path, f: HubFile) -> bool:
    if f.size is None or f.sha256 is None or path.stat().st_size != f.size:
        return False
    h = hashlib.sha256()
    with path.open("rb") as fi:
        while block := fi.read(HASH_BLOCK):
            h.update(block)
    return h.hexdigest() == f.sha256


@contextlib.contextmanager
def _locked(lock: Path, what: str) -> Iterator[None]:
    with lock.open("a") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise HubError(
                f"another pull is already downloading {what}; wait for it to finish", 409
            ) from None
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                lock.unlink()  # while still held: a later opener gets a fresh file, never a stale lock
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


class _Download:
    """One file's download loop: resume, retry, hash as the bytes arrive, verify, rename."""

    def __init__(
        self,
        hub: Hub,
        repo_id: str,
        url: str,
        f: HubFile,
        dest: Path,
        progress: Progress | None,
        cancel: threading.Event | None,
    ) -> None:
        self.hub = hub
        self.repo_id = repo_id
        self.url = url
        self.f = f
        self.dest = dest
        self.part = dest.with_name(dest.name + ".part")
        self.meta = dest.with_name(dest.name + ".part.json")
        self.progress = progress
        self.cancel = cancel
        self.hash = hashlib.sha256()
        self.done = 0
        self.total = f.size

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(self.done, self.total)

    def _reset(self) -> None:
        self.part.unlink(missing_ok=True)
        self.hash = hashlib.sha256()
        self.done = 0

    def _resume_prefix(self) -> None:
        identity = orjson.dumps({"url": self.url, "size": self.f.size, "sha256": self.f.sha256})
        try:
            same = self.meta.read_bytes() == identity
        except OSError:
            same = False
        if not same:
            self._reset()
        self.meta.write_bytes(identity)
        if not self.part.is_file():
            return
        with self.part.open("rb") as fi:
            while block := fi.read(HASH_BLOCK):
                self.hash.update(block)
                self.done += len(block)
        if self.total is not None and self.done > self.total:
            self._reset()
        self._report()

    def _cancelled(self) -> HubCancelled:
        return HubCancelled(f"download of {self.f.path} cancelled; the next pull resumes it")

    def run(self) -> Downloaded:
        self._resume_prefix()
        failures = 0
        clean = False
        while (self.done < self.total) if self.total is not None else not clean:
            if self.cancel is not None and self.cancel.is_set():
                raise self._cancelled()
            before = self.done
            try:
                clean = self._attempt()
                reason = "the body ended early"
            except (httpx.TransportError, _Retryable) as e:
                clean = False
                reason = f"{type(e).__name__}: {e}"
            if self.total is not None and self.done >= self.total:
                break
            failures = 0 if self.done > before else failures + 1
            if failures > self.hub.retries:
                raise HubError(
                    f"download of {self.f.path} failed after {failures} tries ({reason}); "
                    f"{self.done} bytes are kept and the next pull resumes from there"
                )
            if failures:
                self._sleep(failures)
        return self._finish()

    def _sleep(self, failures: int) -> None:
        delay = self.hub.backoff * (2 ** (failures - 1))
        if self.cancel is None:
            time.sleep(delay)
        elif self.cancel.wait(delay):
            raise self._cancelled()

    def _attempt(self) -> bool:
        """One GET from ``self.done``; True when the body ended cleanly (the file is complete)."""
        headers = {"accept-encoding": "identity"}
        if self.done:
            headers["range"] = f"bytes={self.done}-"
        with self.hub._client.stream("GET", self.url, headers=headers) as r:
            if r.status_code == 416 and self.done:
                self._reset()  # the part is longer than the file, or the file changed
                return False
            if r.status_code in _RETRY_STATUS:
                raise _Retryable(f"HTTP {r.status_code}")
            if r.status_code >= 400:
                raise self.hub._refusal(r, self.repo_id, self.f.path)
            if r.status_code == 206:
                start = _range_start(r.headers.get("content-range"))
                if start != self.done:
                    self._reset()
                    return False
            elif self.done:
                self._reset()  # a 200 answer to a range request: the whole file again
            length = _int_or_none(r.headers.get("content-length"))
            if self.total is None and length is not None:
                self.total = self.done + length
            with self.part.open("ab") as fo:
                self._copy(r, fo)
            return True

    def _copy(self, r: httpx.Response, fo: IO[bytes]) -> None:
        for chunk in r.iter_bytes():  # as the network delivers: a dropped connection loses nothing read
            if self.cancel is not None and self.cancel.is_set():
                raise self._cancelled()
            fo.write(chunk)
            self.hash.update(chunk)
            self.done += len(chunk)
            self._report()

    def _finish(self) -> Downloaded:
        size = self.part.stat().st_size if self.part.exists() else 0
        if self.f.size is not None and size != self.f.size:
            self._discard()
            raise HubError(
                f"{self.f.path}: got {size} bytes, the Hub says {self.f.size}; the download was removed"
            )
        digest = self.hash.hexdigest()
        if self.f.sha256 is not None and digest != self.f.sha256:
            self._discard()
            raise HubError(
                f"sha256 mismatch for {self.f.path}: the Hub says {self.f.sha256}, the download hashed to "
                f"{digest}; the download was removed and nothing was registered; pull again"
            )
        os.replace(self.part, self.dest)
        self.meta.unlink(missing_ok=True)
        return Downloaded(self.dest, digest)

    def _discard(self) -> None:
        self.part.unlink(missing_ok=True)
        self.meta.unlink(missing_ok=True)


class _Retryable(Exception):
    """An answer worth retrying (5xx, 429): treated like a dropped connection."""


def _range_start(content_range: str | None) -> int | None:
    m = re.match(r"^bytes (\d+)-\d+/(?:\d+|\*)$", (content_range or "").strip())
    return int(m.group(1)) if m else None
