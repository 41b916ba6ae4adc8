"""`blazar pull` against a local server laid out like the Hub: names and aliases, choosing the GGUF, the real
SmolLM2 file end to end, resume, sha256 refusal, multi-shard sets, the async event stream and the CLI; the
catalog row records the sha256 the download verified, without reading the weights again."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from blazar.catalog import names
from blazar.catalog.models import Catalog, split_digest
from blazar.cli import app
from blazar.hub.aliases import ALIASES
from blazar.hub.client import Hub, HubError, HubFile, RepoInfo, check_repo_id
from blazar.hub.pull import Event, PullError, choose, parse_ref, pull, pull_events, quant_of
from blazar.paths import DataDir
from blazar.store import Store
from tests.conftest import HANG, make_daemon, wait_for
from tests.fakehub import FakeHub, running, split_gguf, tiny_gguf

SMOL_REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"
SMOL_FILE = "SmolLM2-135M-Instruct-Q4_K_M.gguf"
TINY_REPO = "org/tiny-GGUF"
TINY_FILE = "tiny-Q4_K_M.gguf"
TINY = tiny_gguf(floats=3 << 18)  # 3 MiB
SPLIT_REPO = "org/tiny-split-GGUF"
SHARDS = split_gguf("tiny-Q8_0", 2, 100_000)


@pytest.fixture
def fake(model_file: Path) -> Iterator[FakeHub]:
    hub = FakeHub()
    hub.add(SMOL_REPO, SMOL_FILE, model_file)
    hub.add(SMOL_REPO, "README.md", b"# SmolLM2\n")
    hub.add(TINY_REPO, TINY_FILE, TINY)
    for shard, data in SHARDS.items():
        hub.add(SPLIT_REPO, f"Q8_0/{shard}", data)
    with running(hub):
        yield hub


def _downloads(catalog: Catalog) -> list[str]:
    root = catalog.data.models / ".downloads"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


# -- names ------------------------------------------------------------------------------------------------


def test_names_and_aliases() -> None:
    r = parse_ref("smollm2:135m")
    assert (r.repo_id, r.file, r.name, r.alias) == (SMOL_REPO, SMOL_FILE, "smollm2:135m", True)
    assert parse_ref("phi4-mini").name == "phi4-mini:latest"
    assert parse_ref("SmolLM2:135M").name == "smollm2:135m"
    r = parse_ref("hf:org/repo")
    assert (r.repo_id, r.revision, r.file, r.quant, r.name) == (
        "org/repo",
        "main",
        None,
        None,
        "hf.co/org/repo:latest",
    )
    r = parse_ref("hf:org/repo@v1.0:sub/Model-Q8_0.gguf")
    assert (r.revision, r.file, r.name) == ("v1.0", "sub/Model-Q8_0.gguf", "hf.co/org/repo:Q8_0")
    r = parse_ref("HF.CO/org/repo:Q4_K_M")
    assert (r.quant, r.file, r.name) == ("Q4_K_M", None, "hf.co/org/repo:Q4_K_M")
    assert parse_ref("huggingface.co/org/repo").name == "hf.co/org/repo:latest"
    assert parse_ref("hf:org/repo:weights.gguf").name == "hf.co/org/repo:weights"
    with pytest.raises(PullError, match="unknown model 'nosuch:7b': pull from the Hugging Face Hub") as e:
        parse_ref("nosuch:7b")
    assert e.value.status == 404 and "smollm2:135m" in str(e.value)
    with pytest.raises(HubError, match="invalid Hub repo id"):
        parse_ref("hf:just-a-name")


def test_alias_table_is_real_looking_data() -> None:
    assert 4 <= len(ALIASES) <= 12
    for key, alias in ALIASES.items():
        assert names.normalize(key) == key
        assert check_repo_id(alias.repo_id) == alias.repo_id
        assert alias.file.endswith(".gguf") and "/" not in alias.file
        assert (quant_of(alias.file) or "").upper() == "Q4_K_M", alias


def test_quant_labels() -> None:
    assert quant_of("SmolLM2-135M-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert quant_of("qwen2.5-0.5b-instruct-q4_k_m.gguf") == "q4_k_m"
    assert quant_of("Q8_0/model-Q8_0-00001-of-00003.gguf") == "Q8_0"
    assert quant_of("x-IQ4_XS.gguf") == "IQ4_XS" and quant_of("x.BF16.gguf") == "BF16"
    assert quant_of("Qwen2.5-7B.gguf") is None


def _info(*files: tuple[str, int | None]) -> RepoInfo:
    return RepoInfo("org/repo", "c0ffee", tuple(HubFile(p, s, None) for p, s in files))


def _pick(info: RepoInfo, text: str = "hf:org/repo") -> list[str]:
    return [f.path for f in choose(parse_ref(text), info)]


def test_choosing_the_gguf() -> None:
    many = _info(("m-Q8_0.gguf", 8), ("m-Q4_K_M.gguf", 5), ("m-Q4_0.gguf", 4), ("m-Q2_K.gguf", 2))
    assert _pick(many) == ["m-Q4_K_M.gguf"]
    assert _pick(_info(("m-Q8_0.gguf", 8), ("m-Q4_0.gguf", 4), ("m-Q2_K.gguf", 2))) == ["m-Q4_0.gguf"]
    assert _pick(_info(("m-Q8_0.gguf", 8), ("m-Q6_K.gguf", 6), ("README.md", 1))) == ["m-Q6_K.gguf"]
    assert _pick(_info(("mmproj-m-f16.gguf", 1), ("m-Q8_0.gguf", 8))) == ["m-Q8_0.gguf"]
    assert _pick(_info(("only.gguf", None))) == ["only.gguf"]
    assert _pick(many, "hf.co/org/repo:q8_0") == ["m-Q8_0.gguf"]
    assert _pick(many, "hf:org/repo:m-Q2_K.gguf") == ["m-Q2_K.gguf"]
    split = _info(
        ("big/big-Q4_K_M-00002-of-00002.gguf", 6),
        ("big/big-Q4_K_M-00001-of-00002.gguf", 6),
        ("small-Q8_0.gguf", 10),
    )
    assert _pick(split) == ["big/big-Q4_K_M-00001-of-00002.gguf", "big/big-Q4_K_M-00002-of-00002.gguf"]
    assert _pick(split, "hf:org/repo:big-Q4_K_M-00002-of-00002.gguf")[0].endswith("00001-of-00002.gguf")


def test_choosing_teaches() -> None:
    many = _info(("m-Q8_0.gguf", 8_000_000_000), ("m-Q4_K_M.gguf", 5_000_000_000))
    with pytest.raises(
        PullError, match=r"nope\.gguf is not in org/repo; its GGUF files: m-Q4_K_M\.gguf"
    ) as e:
        _pick(many, "hf:org/repo:nope.gguf")
    assert "(5.00 GB)" in str(e.value) and "blazar pull hf:org/repo:<file>" in str(e.value)
    with pytest.raises(PullError, match="no IQ1_S GGUF in org/repo; its GGUF files"):
        _pick(many, "hf.co/org/repo:IQ1_S")
    with pytest.raises(PullError, match=r"org/repo has no GGUF files \(it has: model.safetensors"):
        _pick(_info(("model.safetensors", 9)))
    with pytest.raises(PullError, match=r"lacks shards \[2\] on the Hub"):
        _pick(_info(("b-00001-of-00003.gguf", 1), ("b-00003-of-00003.gguf", 1)))


# -- pulling over HTTP ------------------------------------------------------------------------------------


def test_pull_the_real_model_by_alias(catalog: Catalog, hub: Hub, fake: FakeHub, no_rehash: None) -> None:
    events: list[Event] = []
    result = pull(catalog, "smollm2:135m", hub=hub, emit=events.append)
    row = result.row
    assert row.name == "smollm2:135m" and row.architecture == "llama" and row.quantization == "Q4_1"
    assert row.path.is_relative_to(catalog.data.models) and row.path.stat().st_nlink == 1
    assert _downloads(catalog) == []  # the download became the catalog's file (a link), then went away
    blob = fake.repos[SMOL_REPO][SMOL_FILE]
    assert row.sha256 == blob.sha256 and catalog.get(row.name).sha256 == blob.sha256
    statuses = [e.status for e in events]
    assert statuses[0] == "pulling manifest" and statuses[-3:] == [
        "verifying sha256 digest",
        "writing manifest",
        "success",
    ]
    progress = [e for e in events if e.completed is not None]
    assert {e.status for e in progress} == {f"pulling {blob.sha256[:12]}"}
    assert {e.digest for e in progress} == {f"sha256:{blob.sha256}"} and {e.total for e in progress} == {
        blob.size
    }
    done = [e.completed for e in progress]
    assert done == sorted(done) and done[-1] == blob.size and len(done) <= 110
    assert progress[-1].as_ollama() == {
        "status": f"pulling {blob.sha256[:12]}",
        "digest": f"sha256:{blob.sha256}",
        "total": blob.size,
        "completed": blob.size,
    }
    fake.requests.clear()
    again = pull(catalog, "smollm2:135m", hub=hub)
    assert again.plan is None and again.row == row and fake.requests == []


def test_resume_after_an_interrupted_pull(catalog: Catalog, hub: Hub, fake: FakeHub) -> None:
    fake.drops[TINY_FILE] = [1_500_000] * 3
    with pytest.raises(HubError, match="1500000 bytes are kept and the next pull resumes"):
        pull(catalog, f"hf:{TINY_REPO}", hub=hub)
    assert catalog.list() == [] and _downloads(catalog) == [
        f"org--tiny-GGUF/{TINY_FILE}.part",
        f"org--tiny-GGUF/{TINY_FILE}.part.json",
    ]
    fake.drops.clear()
    fake.requests.clear()
    row = pull(catalog, f"hf:{TINY_REPO}", hub=hub).row
    assert row.name == "hf.co/org/tiny-GGUF:latest" and row.path.read_bytes() == TINY
    assert fake.ranges(TINY_FILE) == ["bytes=1500000-"] and _downloads(catalog) == []
    assert row.sha256 == hashlib.sha256(TINY).hexdigest()  # the kept prefix counted


def test_sha256_mismatch_registers_nothing(catalog: Catalog, hub: Hub, fake: FakeHub) -> None:
    fake.corrupt.add(TINY_FILE)
    with pytest.raises(HubError, match=r"sha256 mismatch .* nothing was registered"):
        pull(catalog, f"hf:{TINY_REPO}:{TINY_FILE}", hub=hub)
    assert catalog.list() == [] and _downloads(catalog) == []


def test_missing_file_teaches(catalog: Catalog, hub: Hub) -> None:
    with pytest.raises(PullError, match=f"nope.gguf is not in {TINY_REPO}; its GGUF files: {TINY_FILE}"):
        pull(catalog, f"hf:{TINY_REPO}:nope.gguf", hub=hub)
    with pytest.raises(HubError, match="model repo 'org/ghost' not found"):
        pull(catalog, "hf:org/ghost", hub=hub)


def test_multi_shard_kept_native(catalog: Catalog, hub: Hub, fake: FakeHub, no_rehash: None) -> None:
    row = pull(catalog, f"hf.co/{SPLIT_REPO}:Q8_0", hub=hub).row
    lfs = [fake.repos[SPLIT_REPO][f"Q8_0/{shard}"].sha256 for shard in SHARDS]
    assert row.sha256 == split_digest(lfs)  # from the Hub's per-shard sha256s
    assert row.name == "hf.co/org/tiny-split-GGUF:Q8_0"
    first, second = (row.path.parent / s for s in SHARDS)
    assert row.path == first and second.is_file()  # side by side, llama.cpp's names kept
    assert row.size_bytes == sum(len(d) for d in SHARDS.values())
    assert row.parameter_count == 200_000 and row.architecture == "llama"
    assert [first.read_bytes(), second.read_bytes()] == list(SHARDS.values())
    assert _downloads(catalog) == []
    copy = catalog.copy(row.name, "split-copy")
    assert copy.sha256 == row.sha256
    assert (
        copy.path.name == first.name
        and os.stat(copy.path.parent / second.name).st_ino == second.stat().st_ino
    )
    catalog.remove(row.name)
    assert not first.exists() and not second.exists() and not row.path.parent.exists()
    catalog.remove(copy.name)
    assert [p.name for p in catalog.data.models.iterdir() if p.name not in (".downloads", ".importing")] == []
    assert not any((catalog.data.models / ".importing").iterdir())  # the staging folder is left empty


def test_async_events_and_cancel(catalog: Catalog, fake: FakeHub, no_rehash: None) -> None:
    def factory() -> Hub:
        return Hub(fake.url, retries=1, backoff=0.01)

    async def run_all() -> list[Event]:
        return [e async for e in pull_events(catalog, f"hf:{TINY_REPO}", hub_factory=factory)]

    statuses = [e.status for e in asyncio.run(run_all())]
    assert statuses[0] == "pulling manifest" and statuses[-3:] == [
        "verifying sha256 digest",
        "writing manifest",
        "success",
    ]
    pulled = catalog.get("hf.co/org/tiny-GGUF:latest")
    assert pulled.size_bytes == len(TINY) and pulled.sha256 == fake.repos[TINY_REPO][TINY_FILE].sha256

    fake.drops[TINY_FILE] = [1_100_000, 1_100_000]  # slow the second pull down so that it is mid-file

    async def leave_early() -> None:
        events = pull_events(catalog, f"hf:{TINY_REPO}:{TINY_FILE}", hub_factory=factory)
        async for e in events:
            if e.completed:
                break
        await events.aclose()

    asyncio.run(leave_early())
    folder = catalog.data.models / ".downloads" / "org--tiny-GGUF"
    wait_for(lambda: not (folder / f"{TINY_FILE}.lock").exists(), HANG, "the cancelled download to stop")
    assert (folder / f"{TINY_FILE}.part").exists() and catalog.find(f"hf.co/{TINY_REPO}:Q4_K_M") is None


async def _first_error(catalog: Catalog, fake: FakeHub) -> str:
    try:
        async for _ in pull_events(catalog, "nosuch:1b", hub_factory=lambda: Hub(fake.url)):
            pass
    except PullError as e:
        return str(e)
    return ""


def test_async_bad_name_raises_before_any_event(catalog: Catalog, fake: FakeHub) -> None:
    assert asyncio.run(_first_error(catalog, fake)).startswith("unknown model 'nosuch:1b'")
    assert fake.requests == []


# -- the CLI ----------------------------------------------------------------------------------------------


def test_cli_pull_prints_readable_progress(tmp_path: Path, fake: FakeHub) -> None:
    d = make_daemon(tmp_path)
    d.env["HF_ENDPOINT"] = fake.url
    out = d.cli("pull", f"hf:{TINY_REPO}").stdout
    lines = out.splitlines()
    sha = fake.repos[TINY_REPO][TINY_FILE].sha256
    assert lines[0] == "pulling manifest"
    assert lines[1] == f"pulling {sha[:12]} (3.1 MB)"
    assert "  100% 3.1/3.1 MB" in lines
    assert lines[-4:-1] == ["verifying sha256 digest", "writing manifest", "success"]
    assert lines[-1].startswith(f"pulled hf.co/{TINY_REPO}:latest from {TINY_REPO} {TINY_FILE}: 3.1 MB")
    assert "\x1b[" not in out  # no terminal escapes in a pipe
    assert "already in the catalog" in d.cli("pull", f"hf:{TINY_REPO}").stdout

    bad = d.cli("pull", f"hf:{TINY_REPO}:nope.gguf", check=False)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and f"its GGUF files: {TINY_FILE}" in bad.stderr
    with Store.open(d.data_dir / "blazar.db") as store:
        row = Catalog(store, DataDir(d.data_dir)).get(f"hf.co/{TINY_REPO}")
    assert row.path.read_bytes() == TINY


def test_cli_lists_aliases() -> None:
    listed = CliRunner().invoke(app, ["pull", "--aliases"])
    assert listed.exit_code == 0
    assert f"smollm2:135m       hf:{SMOL_REPO}:{SMOL_FILE}" in listed.stdout
