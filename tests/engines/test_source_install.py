"""`blazar engine install --kind llama-cpp [--from source]`: the pinned llama.cpp source from PyPI, built once per
machine into the build cache and installed into a data directory from it.

The test assets made the cache through this very command (``scripts/test_assets.py`` runs it in a throwaway data
directory), so here the cache's build is installed, and it serves. Without ``--from``, the newcomer's command, the
official release is tried first through GitHub's Releases API, which the tests' machine cannot reach (the API's
address is a loopback port nothing listens on, ``tests.conftest.NO_GITHUB``), so the source is used, each step said
in a line; a release named from the manifest, which records no digest, is refused as unverified.
"""

from __future__ import annotations

import filecmp
from pathlib import Path

import httpx
import pytest

from blazar.engines import source
from tests.conftest import Assets, Daemon

pytestmark = pytest.mark.e2e

TAG = source.tag(cuda=False)
CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_from_source_installs_the_cached_build_and_it_serves(daemon_factory: object, assets: Assets) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(engine=False, start=False)  # the model imported, no engine
    out = d.cli("engine", "install", "--kind", "llama-cpp", "--from", "source").stdout
    installed = d.data_dir / "engines" / "llama-cpp" / TAG
    assert f"using llama-server {TAG} built on this machine before ({assets.llama_server.parent})" in out, out
    assert f"installed llama-cpp {TAG} from source: {installed / 'llama-server'} (active)" in out, out
    assert filecmp.cmp(installed / "llama-server", assets.llama_server, shallow=False)
    assert (installed / "llama-quantize").is_file()  # `blazar quantize` finds it beside the server
    assert (installed / "ggml-rpc-server").is_file()  # and `blazar worker` its RPC server
    again = d.cli("engine", "install", "--kind", "llama-cpp", "--from", "source", check=False)
    assert again.returncode == 1 and f"llama-cpp {TAG} is already installed" in again.stderr, again.stderr
    d.start()
    r = httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=120)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"], r.text


def test_without_from_an_unverifiable_release_falls_back_to_the_source(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(engine=False, start=False)
    # asked for the release alone, or for a release by name, it is refused as before: never an unverified engine
    for args, said in (
        (["--from", "release"], "cannot reach the Releases API at http://127.0.0.1:9 (ConnectError)"),
        (["--version", "b11434"], "the engine manifest records no sha256"),
        (["--tag", "b11434"], "cannot reach the Releases API"),
    ):
        r = d.cli("engine", "install", "--kind", "llama-cpp", *args, check=False)
        assert r.returncode == 1 and said in r.stderr, (args, r.stderr)
    out = d.cli("engine", "install", "--kind", "llama-cpp").stdout
    assert "the official release cannot be installed here (cannot reach the Releases API at" in out, out
    assert "building from source instead (--from source)" in out
    assert f"installed llama-cpp {TAG} from source" in out
    listed = d.cli("engine", "ls").stdout
    assert TAG in listed and "build" in listed, listed


def test_only_llama_cpp_installs_from_source(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(engine=False, model=False, start=False)
    r = d.cli("engine", "install", "--kind", "whisper", "--from", "source", check=False)
    assert r.returncode == 2 and "only llama-cpp installs from source, not whisper" in r.stderr, r.stderr
    r = d.cli("engine", "install", "--kind", "llama-cpp", "--from", "github", check=False)
    assert r.returncode == 2 and "must be auto, release or source" in r.stderr, r.stderr


def test_a_cached_build_without_the_rpc_server_is_built_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, assets: Assets
) -> None:
    """A cache made before Blazar built ggml-rpc-server is not reused: `engine install --from source` builds it again,
    so `blazar worker` finds its RPC server beside the server it installs."""
    monkeypatch.setenv("BLAZAR_CACHE_DIR", str(tmp_path))
    folder = tmp_path / "builds" / "llama-cpp" / TAG
    folder.mkdir(parents=True)
    for tool in ("llama-server", "llama-quantize"):
        (folder / tool).symlink_to(assets.llama_server.with_name(tool))
    assert source.cached_build(cuda=False) is None
    (folder / "ggml-rpc-server").symlink_to(assets.llama_server.with_name("ggml-rpc-server"))
    assert source.cached_build(cuda=False) == folder
