"""`blazar engine install --kind llama-cpp [--tag T|latest]` against a local HTTPS stand-in of GitHub's Releases API.

The stand-in answers ``/repos/ggml-org/llama.cpp/releases/tags/{tag}`` and ``/releases/latest`` in the API's JSON
shape (``tag_name``, ``assets[].name``, ``browser_download_url``, ``size``, ``digest: "sha256:<hex>"``) and serves
the asset: an archive made from the locally built ``llama-server``, as llama.cpp's releases pack it. Its TLS
certificate comes from a test CA (trustme) that the command trusts through ``SSL_CERT_FILE``. A good asset installs,
passes the gate and serves; a tampered one, a missing digest, a manifest digest that disagrees and a rate limit are
each refused with their message, and nothing is installed.
"""

from __future__ import annotations

import hashlib
import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from blazar.engines import releases
from tests.conftest import Assets, Daemon
from tests.engines.conftest import make_archive

pytestmark = pytest.mark.e2e

REPO = "ggml-org/llama.cpp"
TAG = "b11434"
ASSET = f"llama-{TAG}-bin-ubuntu-x64.tar.gz"
CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@dataclass
class StandIn:
    """The Releases API and its download host in one HTTPS server; the fields say how it answers."""

    root: Path
    url: str = ""
    ca_file: Path = Path()
    digest: str | None = None
    """What ``digest`` the API lists for the asset: ``None`` lists none."""
    rate_limited: bool = False
    """Answer 403 with ``x-ratelimit-remaining: 0`` unless a token is sent."""
    tokens: list[str | None] = field(default_factory=list)
    """The Authorization header of each API request."""
    latest: str = TAG
    """The tag ``/releases/latest`` answers; every tag up to it is served, with the same archive."""

    def doc(self, tag: str) -> dict[str, Any]:
        data = (self.root / ASSET).read_bytes()
        name = ASSET.replace(TAG, tag)
        asset: dict[str, Any] = {
            "name": name,
            "browser_download_url": f"{self.url}/download/{tag}/{name}",
            "size": len(data),
            "digest": None if self.digest is None else f"sha256:{self.digest}",
        }
        return {"tag_name": tag, "assets": [asset, {"name": "other.zip", "browser_download_url": self.url + "/x",
                                                    "size": 1, "digest": None}]}  # fmt: skip


def _handler(s: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.startswith(f"/repos/{REPO}/releases/"):
                token = self.headers.get("authorization")
                s.tokens.append(token)
                if s.rate_limited and token is None:
                    body = b'{"message": "API rate limit exceeded for 127.0.0.1."}'
                    self._send(403, body, {"x-ratelimit-remaining": "0", "content-type": "application/json"})
                    return
                rest = self.path.removeprefix(f"/repos/{REPO}/releases/")
                tag = s.latest if rest == "latest" else rest.removeprefix("tags/")
                if tag not in (TAG, s.latest):
                    self._send(404, b'{"message": "Not Found"}')
                    return
                self._send(200, json.dumps(s.doc(tag)).encode(), {"content-type": "application/json"})
            elif self.path in {f"/download/{t}/{ASSET.replace(TAG, t)}" for t in (TAG, s.latest)}:
                self._send(200, (s.root / ASSET).read_bytes(), {"content-type": "application/octet-stream"})
            else:
                self._send(404, b"")

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def stand_in(tmp_path: Path, assets: Assets) -> Iterator[StandIn]:
    root = tmp_path / "github"
    archive = make_archive(root / ASSET, f"llama-{TAG}", {"llama-server": assets.llama_server})
    s = StandIn(root=root, digest=hashlib.sha256(archive.read_bytes()).hexdigest())
    ca = trustme.CA()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)
    s.ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(s.ca_file))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(s))
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    httpd.daemon_threads = True
    s.url = f"https://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield s
    httpd.shutdown()
    httpd.server_close()


def daemon_for(daemon_factory: Any, s: StandIn, manifest: Path | None = None) -> Daemon:
    d: Daemon = daemon_factory(engine=False, start=False)  # the model is there for the gate's generation
    d.env.update({releases.API_ENV: s.url, "SSL_CERT_FILE": str(s.ca_file)})
    d.env.pop(releases.TOKEN_ENV, None)
    if manifest is not None:
        d.env["BLAZAR_ENGINE_MANIFEST"] = str(manifest)
    return d


def install(d: Daemon, *args: str) -> Any:
    return d.cli("engine", "install", "--kind", "llama-cpp", "--from", "release", *args, check=False)


def nothing_installed(d: Daemon) -> bool:
    """No engine row and no tag directory: the refusal changed nothing."""
    folder = d.data_dir / "engines" / "llama-cpp"
    return TAG not in d.cli("engine", "ls").stdout and not (folder.is_dir() and any(folder.glob(f"{TAG}*")))


def test_a_release_verified_by_githubs_digest_installs_and_serves(
    daemon_factory: object, stand_in: StandIn
) -> None:
    d = daemon_for(daemon_factory, stand_in)
    r = install(d, "--tag", "latest")
    assert r.returncode == 0, r.stderr
    assert "gate passed" in r.stdout and f"installed llama-cpp {TAG}-cpu" in r.stdout, r.stdout
    assert stand_in.tokens == [None]  # no token set, none sent
    listed = d.cli("engine", "ls").stdout
    assert f"{TAG}-cpu" in listed and "install" in listed, listed
    d.start()
    answer = httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=120)
    assert answer.status_code == 200, answer.text


def test_a_tampered_asset_is_refused_and_nothing_is_installed(
    daemon_factory: object, stand_in: StandIn
) -> None:
    stand_in.digest = hashlib.sha256(b"what the release was").hexdigest()  # the file served is not it
    d = daemon_for(daemon_factory, stand_in)
    r = install(d)
    assert r.returncode == 1 and "sha256 mismatch for" in r.stderr and stand_in.digest in r.stderr, r.stderr
    assert nothing_installed(d)


def test_an_asset_with_no_digest_is_refused_unless_one_is_given(
    daemon_factory: object, stand_in: StandIn
) -> None:
    good = stand_in.digest
    assert good is not None
    stand_in.digest = None
    d = daemon_for(daemon_factory, stand_in)
    r = install(d)
    assert r.returncode == 1 and "records no sha256" in r.stderr and "--sha256 HEX" in r.stderr, r.stderr
    assert nothing_installed(d)
    r = install(d, "--sha256", good)  # the digest from the release page: installed
    assert r.returncode == 0 and f"installed llama-cpp {TAG}-cpu" in r.stdout, r.stderr


def test_a_manifest_digest_that_disagrees_is_refused(
    daemon_factory: object, stand_in: StandIn, tmp_path: Path
) -> None:
    packaged = json.loads((Path(releases.__file__).parent / "manifest.json").read_text())
    [asset] = [a for a in packaged["lanes"]["llama-cpp"]["releases"][0]["assets"]
               if a["platform"] == "linux-x86_64" and a["accel"] == "cpu"]  # fmt: skip
    asset["url"] = f"{stand_in.url}/download/{TAG}/{ASSET}"
    asset["sha256"] = "0" * 64
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(packaged))
    d = daemon_for(daemon_factory, stand_in, manifest)
    r = install(d)
    assert r.returncode == 1, r.stdout
    assert f"the engine manifest records sha256 {'0' * 64}" in r.stderr and "GitHub publishes" in r.stderr, (
        r.stderr
    )
    assert nothing_installed(d)


def test_a_rate_limit_names_github_token_which_is_then_sent(
    daemon_factory: object, stand_in: StandIn
) -> None:
    stand_in.rate_limited = True
    d = daemon_for(daemon_factory, stand_in)
    r = install(d)
    assert r.returncode == 1 and "rate limited (HTTP 403)" in r.stderr and "set GITHUB_TOKEN" in r.stderr, (
        r.stderr
    )
    assert nothing_installed(d)
    d.env[releases.TOKEN_ENV] = "github_pat_test"
    r = install(d)
    assert r.returncode == 0, r.stderr
    assert stand_in.tokens[-1] == "Bearer github_pat_test"
    assert "github_pat_test" not in r.stdout + r.stderr  # a secret is sent, never shown


def test_check_and_update_find_a_tag_newer_than_the_manifests(
    daemon_factory: object, stand_in: StandIn
) -> None:
    """The packaged manifest's newest is b11434; the API's latest is newer: `engine check` reports it with the
    command that installs it, and `engine update` installs it, verified by GitHub's digest."""
    d = daemon_for(daemon_factory, stand_in)
    assert install(d).returncode == 0  # b11434, the manifest's version, read through the API
    checked = d.cli("engine", "check", "--kind", "llama-cpp").stdout
    assert f"{TAG} (active {TAG}-cpu); up to date (newest {TAG})" in checked, checked
    stand_in.latest = "b99999"
    checked = d.cli("engine", "check", "--kind", "llama-cpp").stdout
    assert "update available: b99999: blazar engine install --kind llama-cpp --tag b99999" in checked, checked
    updated = d.cli("engine", "update", "--kind", "llama-cpp").stdout
    assert "installed llama-cpp b99999-cpu" in updated and f"previous: {TAG}-cpu" in updated, updated
