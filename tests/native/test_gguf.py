"""The native GGUF parser on the real SmolLM2 file and on truncated and corrupted copies."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest

from blazar._native import GgufArray, GgufError, parse_gguf_metadata, read_gguf_metadata


@pytest.fixture(scope="module")
def head(model_file: Path) -> bytes:
    header = read_gguf_metadata(str(model_file))
    size = header["header_size"]
    assert isinstance(size, int)
    with model_file.open("rb") as f:
        return f.read(size)


def test_real_file(model_file: Path) -> None:
    h = read_gguf_metadata(model_file)
    md = h["metadata"]
    assert isinstance(md, dict)
    assert h["version"] == 3
    assert md["general.architecture"] == "llama"
    assert md["llama.context_length"] == 8192
    assert md["llama.embedding_length"] == 576
    assert isinstance(md["tokenizer.chat_template"], str)
    tokens = md["tokenizer.ggml.tokens"]
    assert isinstance(tokens, GgufArray) and tokens.item_type == "string" and tokens.length == 49152
    assert repr(tokens) == "GgufArray(item_type='string', length=49152)"
    params = h["parameter_count"]
    assert isinstance(params, int) and 134_000_000 < params < 136_000_000
    types = h["tensor_types"]
    assert isinstance(types, dict) and types.get("Q4_1", 0) > 0
    assert h["tensor_count"] == sum(types.values())


def test_full_arrays_on_request(head: bytes) -> None:
    h = parse_gguf_metadata(head, max_array_len=100_000)
    md = h["metadata"]
    assert isinstance(md, dict)
    tokens = md["tokenizer.ggml.tokens"]
    assert isinstance(tokens, list) and len(tokens) == 49152 and all(isinstance(t, str) for t in tokens[:10])
    with pytest.raises(ValueError):
        parse_gguf_metadata(head, max_array_len=-1)


def test_tensor_infos_on_request(model_file: Path) -> None:
    """``tensors=True`` lists every tensor info in file order: name, ggml type, dimensions; their products add up
    to the parameter count and their types to ``tensor_types``."""
    assert "tensors" not in read_gguf_metadata(model_file)
    h = read_gguf_metadata(model_file, tensors=True)
    tensors = h["tensors"]
    assert isinstance(tensors, list) and len(tensors) == h["tensor_count"]
    first = tensors[0]
    assert set(first) == {"name", "type", "shape"}
    embd = next(t for t in tensors if t["name"] == "token_embd.weight")
    assert embd["shape"] == [576, 49152]
    assert sum(math.prod(t["shape"]) for t in tensors) == h["parameter_count"]
    types: dict[str, int] = {}
    for t in tensors:
        types[t["type"]] = types.get(t["type"], 0) + 1
    assert types == h["tensor_types"]


def test_every_truncation_is_an_error(head: bytes) -> None:
    step = max(1, len(head) // 2000)
    for n in [*range(0, 64), *range(64, len(head), step)]:
        with pytest.raises(GgufError):
            parse_gguf_metadata(head[:n])


def test_corruptions(head: bytes) -> None:
    with pytest.raises(GgufError, match="bad magic"):
        parse_gguf_metadata(b"GGML" + head[4:])
    with pytest.raises(GgufError, match="unsupported GGUF version 1"):
        parse_gguf_metadata(head[:4] + struct.pack("<I", 1) + head[8:])
    # The first key's value type sits right after its name; make it invalid.
    key_len = struct.unpack_from("<Q", head, 24)[0]
    at = 24 + 8 + key_len
    bad = head[:at] + struct.pack("<I", 99) + head[at + 4 :]
    with pytest.raises(GgufError, match="invalid GGUF metadata value type 99"):
        parse_gguf_metadata(bad)
    # A string length far past the end must fail without allocating it.
    huge = head[:24] + struct.pack("<Q", 2**62) + head[32:]
    with pytest.raises(GgufError):
        parse_gguf_metadata(huge)


def test_missing_file_is_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_gguf_metadata(tmp_path / "absent.gguf")
