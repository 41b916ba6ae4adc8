"""whisper.cpp model files in the catalog: the header read (``blazar.catalog.ggml_whisper``) on the real Whisper tiny.en
of the test assets, its import, copy and removal, and what is not one."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from blazar.catalog import ggml_whisper
from blazar.catalog.formats import detect_format
from blazar.catalog.models import Catalog
from blazar.errors import CatalogError
from tests.conftest import WhisperAssets


def test_the_header_of_a_real_model(whisper_assets: WhisperAssets) -> None:
    info = ggml_whisper.read(whisper_assets.model)
    assert info is not None
    assert (info.n_audio_layer, info.n_text_layer, info.n_mels, info.n_audio_ctx) == (4, 4, 80, 1500)
    assert info.size == "tiny.en" and not info.multilingual and info.quantization == "F16"
    assert info.metadata()["whisper.size"] == "tiny.en"
    assert detect_format(whisper_assets.model) == "whisper"


def test_import_copy_and_remove(catalog: Catalog, whisper_assets: WhisperAssets) -> None:
    row = catalog.import_file(whisper_assets.model, "whisper-tiny")
    assert (row.format, row.architecture, row.quantization, row.context_length) == (
        "whisper",
        "whisper",
        "F16",
        1500,
    )
    assert row.path.suffix == ".bin" and row.sha256 is not None and len(row.sha256) == 64
    copy = catalog.copy("whisper-tiny", "whisper-copy")
    assert copy.format == "whisper" and copy.sha256 == row.sha256 and copy.path.suffix == ".bin"
    catalog.remove("whisper-tiny")
    assert copy.path.is_file() and not row.path.exists()


def test_what_is_not_a_whisper_model(catalog: Catalog, tmp_path: Path, model_file: Path) -> None:
    assert ggml_whisper.read(model_file) is None  # a GGUF
    fake = tmp_path / "fake.bin"
    fake.write_bytes(struct.pack("<12i", ggml_whisper.MAGIC, *([-5] * 11)))  # the magic, nonsense after it
    assert ggml_whisper.read(fake) is None
    with pytest.raises(CatalogError, match="not a usable GGUF file"):
        catalog.import_file(fake, "fake")
    short = tmp_path / "short.bin"
    short.write_bytes(b"lmgg")
    assert ggml_whisper.read(short) is None
