"""The engine manifest: the packaged data validates, versions order, assets are picked, bad documents teach."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blazar.engines import KINDS
from blazar.engines.manifest import MANIFEST_ENV, load_manifest, parse_manifest, pick_asset, version_key
from blazar.errors import EngineError


def test_packaged_manifest_covers_every_kind() -> None:
    m = load_manifest(env={})
    assert m.origin == "(packaged)"
    assert set(m.lanes) == set(KINDS)
    llama = m.lane("llama-cpp")
    newest = llama.newest()
    assert newest is not None and llama.binary == "llama-server" and llama.lane_class == "mainstream"
    for asset in newest.assets:
        assert asset.download.url.startswith("https://github.com/ggml-org/llama.cpp/releases/download/")
        assert newest.version in asset.download.url
    cuda = pick_asset(llama, newest, "linux-x86_64", "cuda")
    assert "cuda" in cuda.download.url and [
        e.url.rsplit("/", 1)[1].startswith("cudart-") for e in cuda.extras
    ] == [True]
    assert pick_asset(llama, newest, "linux-x86_64", None).accel == "cpu"
    assert pick_asset(llama, newest, "darwin-arm64", None).accel == "metal"
    for kind in ("sglang", "mlx"):
        lane = m.lane(kind)
        assert lane.venv is not None and lane.newest() is not None
    with pytest.raises(EngineError, match="lists no mistralrs release; this manifest records no prebuilt"):
        m.lane("mistralrs").release(None)


def test_env_and_explicit_source(tmp_path: Path) -> None:
    doc = {"schema": 1, "lanes": {"whisper": {"source": "fork", "binary": "whisper-server"}}}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    assert load_manifest(env={MANIFEST_ENV: str(path)}).lane("whisper").lane_class == "fork"
    assert load_manifest(path, env={MANIFEST_ENV: "/nonexistent"}).origin == str(path)
    with pytest.raises(EngineError, match="cannot read the engine manifest /nonexistent"):
        load_manifest(env={MANIFEST_ENV: "/nonexistent"})
    with pytest.raises(EngineError, match=r"has no 'sd' lane \(it lists: whisper\)"):
        load_manifest(path).lane("sd")


def test_version_order() -> None:
    ordered = ["b900", "b9000", "11434", "b11435"]
    assert sorted(reversed(ordered), key=version_key) == ordered
    assert version_key("0.5.10") > version_key("0.5.9") > version_key("0.5.5.post1") > version_key("0.5.5")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"schema": 2, "lanes": {}}, "'schema' must be 1"),
        ({"schema": 1, "lanes": {"vllm": {}}}, "unknown lane 'vllm'"),
        ({"schema": 1, "lanes": {"sd": {"source": "vendor", "binary": "x"}}}, "'lanes.sd.source' must be"),
        (
            {"schema": 1, "lanes": {"sd": {"source": "official", "binary": "x", "releases": [{"version": "1", "assets": [
                {"platform": "p", "accel": "cpu", "url": "ftp://x/y.zip", "sha256": None}]}]}}},
            "'lanes.sd.releases[0].assets[0].url' must be an http(s) URL",
        ),
        (
            {"schema": 1, "lanes": {"sd": {"source": "official", "binary": "x", "releases": [{"version": "1", "assets": [
                {"platform": "p", "accel": "cpu", "url": "http://x/y.zip", "sha256": "ABC"}]}]}}},
            "sha256' must be 64 lowercase hex digits or null",
        ),
    ],
)  # fmt: skip
def test_bad_documents_teach(doc: object, message: str) -> None:
    with pytest.raises(EngineError, match=r"engine manifest t\.json") as e:
        parse_manifest(doc, "t.json")
    assert message in str(e.value)
