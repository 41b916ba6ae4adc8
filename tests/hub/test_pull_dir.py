"""`blazar pull hf:org/repo` of a repo with no GGUF: the safetensors or MLX model directory, against the local fake
Hub. Only the files a server needs are fetched (resumable, each LFS file checked against its sha256), registered
whole as a directory model without hashing again; a repo with GGUF files keeps the GGUF path."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from blazar.catalog.model_dir import dir_digest
from blazar.catalog.models import Catalog
from blazar.config import Config
from blazar.engines.lanes import serving_lane
from blazar.engines.registry import EngineRow
from blazar.hub.client import Hub, HubError
from blazar.hub.pull import PullError, pull, pull_events
from tests.conftest import make_daemon
from tests.fakehub import FakeHub, model_dir_files, running, tiny_gguf

AWQ_REPO = "org/tiny-AWQ"
MLX_REPO = "mlx-community/tiny-4bit"
BOTH_REPO = "org/tiny-both"
AWQ = model_dir_files("awq", shards=2)


@pytest.fixture
def fake() -> Iterator[FakeHub]:
    hub = FakeHub()
    for name, data in AWQ.items():
        hub.add(AWQ_REPO, name, data)
    hub.add(AWQ_REPO, "original/consolidated.pth", b"not taken")
    hub.add(AWQ_REPO, "modeling_qwen.py", b"print('remote code is never fetched')")
    for name, data in model_dir_files("mlx").items():
        hub.add(MLX_REPO, name, data)
    for name, data in model_dir_files("plain").items():
        hub.add(BOTH_REPO, name, data)
    hub.add(BOTH_REPO, "tiny-Q4_K_M.gguf", tiny_gguf(floats=1 << 10))
    with running(hub):
        yield hub


SERVED = sorted(n for n in AWQ if n != "README.md")


def test_a_safetensors_repo_is_pulled_as_a_directory(
    catalog: Catalog, hub: Hub, fake: FakeHub, no_rehash: None
) -> None:
    result = pull(catalog, f"hf:{AWQ_REPO}", hub=hub)
    row = result.row
    assert result.plan is not None and result.plan.directory
    assert sorted(f.path for f in result.plan.files) == SERVED
    assert row.name == f"hf.co/{AWQ_REPO}:latest" and row.format == "safetensors-quantized"
    assert row.quantization == "AWQ" and row.path.is_dir()
    assert sorted(p.name for p in row.path.iterdir()) == SERVED
    assert row.sha256 == dir_digest({n: fake.repos[AWQ_REPO][n].sha256 for n in SERVED})
    got = [p for m, p, _r, _a in fake.requests if m == "GET" and ("/cdn/" in p or "/resolve/" in p)]
    assert not any("README" in p or ".py" in p or "original/" in p for p in got)
    assert sum("/cdn/" in p for p in got) == 2  # the two weight shards come from LFS
    assert not (catalog.data.models / ".downloads" / "org--tiny-AWQ").exists()
    sglang = EngineRow("sglang", "t", None, Path("/sglang"), "local", "cpu", None, True)
    assert serving_lane(Config(), row, [sglang]).kind == "sglang"


def test_an_mlx_repo_and_a_repo_with_gguf(catalog: Catalog, hub: Hub) -> None:
    mlx = pull(catalog, f"hf:{MLX_REPO}", hub=hub).row
    assert mlx.format == "mlx" and mlx.quantization == "4bit"
    both = pull(catalog, f"hf:{BOTH_REPO}", hub=hub)
    assert both.plan is not None and not both.plan.directory and both.row.format == "gguf"
    assert both.row.path.name.endswith(".gguf")
    with pytest.raises(
        PullError, match=r"a safetensors or MLX repo is pulled whole.*blazar pull hf:org/tiny-AWQ$"
    ):
        pull(catalog, f"hf:{AWQ_REPO}:Q4_K_M", hub=hub)


def test_resume_and_sha256_refusal(catalog: Catalog, hub: Hub, fake: FakeHub) -> None:
    shard = "model-00002-of-00002.safetensors"
    fake.drops[shard] = [1000] * 3  # more cuts than retries: the first pull fails, keeping the bytes
    with pytest.raises(HubError, match="the next pull resumes"):
        pull(catalog, f"hf:{AWQ_REPO}", hub=hub)
    assert catalog.find(f"hf.co/{AWQ_REPO}") is None
    assert not any((catalog.data.models / "hf.co").glob("**/*.safetensors"))
    row = pull(catalog, f"hf:{AWQ_REPO}", hub=hub).row
    assert fake.ranges(shard)[-1] == "bytes=1000-"
    assert (row.path / shard).read_bytes() == AWQ[shard]

    fake.corrupt.add("model.safetensors")
    with pytest.raises(HubError, match=r"sha256 mismatch for model\.safetensors"):
        pull(catalog, f"hf:{MLX_REPO}", hub=hub)
    assert catalog.find(f"hf.co/{MLX_REPO}") is None


def test_api_pull_events_register_the_directory(catalog: Catalog, fake: FakeHub, no_rehash: None) -> None:
    async def run_all() -> list[str]:
        events = pull_events(catalog, f"hf:{MLX_REPO}", hub_factory=lambda: Hub(fake.url, retries=1))
        return [e.status async for e in events]

    statuses = asyncio.run(run_all())
    assert statuses[-2:] == ["writing manifest", "success"]
    assert catalog.get(f"hf.co/{MLX_REPO}").format == "mlx"


def test_cli_pull_then_show(tmp_path: Path, fake: FakeHub) -> None:
    d = make_daemon(tmp_path)
    d.env["HF_ENDPOINT"] = fake.url
    out = d.cli("pull", f"hf:{AWQ_REPO}", "--name", "qwen-awq").stdout
    assert out.splitlines()[-1].startswith(
        f"pulled qwen-awq:latest from {AWQ_REPO} {len(SERVED)} files (safetensors-quantized):"
    )
    shown = d.cli("show", "qwen-awq").stdout
    assert "format            safetensors-quantized" in shown
    assert (
        "serving lane      unavailable: model 'qwen-awq:latest' is quantized safetensors (awq)" not in shown
    )
    assert "only the sglang lane serves" in shown
