"""Model directories (safetensors, quantized safetensors, MLX): which files one is made of, whether it is whole,
what it says about itself, and its digest. Pure reads; the catalog (``catalog.py``) places and records them.

A model directory is ``config.json`` plus ``*.safetensors`` weights (one file, or shards named by a
``model.safetensors.index.json``) and the files a server needs beside them. Only the top level is read, and only
the files ``SERVER_FILES`` names are taken (import and pull use the same list):

- ``config.json``, ``generation_config.json``;
- the weights: ``*.safetensors`` and ``*.safetensors.index.json``; with an index, only the shards its
  ``weight_map`` names; ``consolidated*.safetensors`` (mistral-inference's copy of the same weights) only when
  nothing else holds weights;
- the tokenizer: ``tokenizer*`` (``tokenizer.json``, ``tokenizer_config.json``, ``tokenizer.model``...),
  ``special_tokens_map.json``, ``added_tokens.json``, ``vocab.json``, ``vocab.txt``, ``merges.txt``;
- ``chat_template.jinja`` / ``chat_template.json``;
- ``preprocessor_config.json``, ``processor_config.json``, ``video_preprocessor_config.json`` (multimodal).

Left out: READMEs, licences, images, ``*.bin`` / ``*.pt`` / ``*.pth`` weights, ``original/`` and other folders,
and ``*.py`` (remote code, which Blazar never runs).

The format is ``formats.detect_format``'s answer, as for a single weights file.

Digest of a directory (``dir_digest``): the sha256 of one line per file, sorted by relative path (code point
order, which is byte order in UTF-8), each ``<file sha256 hex>  <relative path>\\n``. That is ``sha256sum``'s
own line format, so ``cd DIR && LC_ALL=C ls | xargs sha256sum | sha256sum`` gives the same value.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import struct
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from blazar.catalog.formats import detect_format
from blazar.errors import CatalogError

SERVER_FILES: tuple[str, ...] = (
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "*.safetensors.index.json",
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
)
"""Top-level file name patterns a server needs; everything else in a model directory or Hub repo is left."""

MAX_HEADER = 100 << 20
"""The largest safetensors JSON header taken (the format's own reference loader refuses more)."""

_DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
                "U16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1, "BOOL": 1}  # fmt: skip


def wanted(name: str) -> bool:
    """Whether a top-level file of this name belongs to a model directory (``SERVER_FILES``)."""
    return "/" not in name and "\n" not in name and any(fnmatch.fnmatchcase(name, p) for p in SERVER_FILES)


def _is_weights(name: str) -> bool:
    return name.endswith(".safetensors")


def pick(names: Iterable[str], index_shards: Iterable[str] | None = None) -> list[str]:
    """The files of a listing to take, sorted: ``SERVER_FILES`` only; with an index's shards, only those
    weights; ``consolidated*.safetensors`` only when no other weights are there."""
    chosen = sorted({n for n in names if wanted(n)})
    weights = [n for n in chosen if _is_weights(n)]
    if index_shards is not None:
        keep = set(index_shards)
        return [n for n in chosen if not _is_weights(n) or n in keep]
    plain = [n for n in weights if not n.startswith("consolidated")]
    if plain:
        return [n for n in chosen if not _is_weights(n) or n in plain]
    return chosen


def _read_json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CatalogError(f"{path} is not a readable JSON file: {e}") from None
    if not isinstance(data, dict):
        raise CatalogError(f"{path} is not a JSON object")
    return data


def index_shards(directory: Path) -> list[str] | None:
    """The shard file names the directory's ``*.safetensors.index.json`` maps weights to (None: no index)."""
    indexes = sorted(directory.glob("*.safetensors.index.json"))
    if not indexes:
        return None
    shards: set[str] = set()
    for index in indexes:
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CatalogError(f"{index} has no weight_map naming the weight shards")
        shards.update(str(v) for v in weight_map.values())
    return sorted(shards)


def safetensors_header(path: Path) -> dict[str, object]:
    """The JSON header of a safetensors file (8 bytes little-endian length, then JSON), checked against the size."""
    try:
        with path.open("rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise CatalogError(
                    f"{path} is not a safetensors file: it is shorter than its 8-byte header length"
                )
            (n,) = struct.unpack("<Q", raw)
            if n < 2 or n > MAX_HEADER:
                raise CatalogError(f"{path} is not a safetensors file: header length {n} is out of range")
            body = f.read(n)
            size = path.stat().st_size
    except OSError as e:
        raise CatalogError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        header = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        header = None
    if len(body) < n or not isinstance(header, dict):
        raise CatalogError(f"{path} is not a safetensors file: its header is not a JSON object")
    end = 0
    for key, t in header.items():
        if key == "__metadata__":
            continue
        offsets = t.get("data_offsets") if isinstance(t, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise CatalogError(f"{path} is not a safetensors file: tensor '{key[:80]}' has no data_offsets")
        end = max(end, offsets[1])
    if size < 8 + n + end:
        raise CatalogError(
            f"{path} is truncated: its header describes {8 + n + end} bytes, the file has {size}; copy it again"
        )
    return header


def _elements(tensor: Mapping[str, object]) -> int:
    shape = tensor.get("shape")
    count = 1
    for d in shape if isinstance(shape, list) else []:
        count *= d if isinstance(d, int) else 0
    return count


@dataclass(frozen=True, slots=True)
class DirSummary:
    format: str
    files: tuple[str, ...]
    architecture: str | None
    parameter_count: int | None
    context_length: int | None
    quantization: str | None
    has_chat_template: bool
    config: dict[str, object]


def _expected(directory: Path) -> str:
    return (
        f"{directory} is not a model directory Blazar can import: expected a GGUF file, or a directory with"
        " config.json and *.safetensors weights (one file, or shards with model.safetensors.index.json) beside"
        " the tokenizer files, as a Hugging Face safetensors or MLX repo holds them"
    )


def inspect_dir(directory: Path, only: Iterable[str] | None = None) -> DirSummary:
    """Check that ``directory`` is a whole model directory and summarise it; ``only`` names exactly the files
    to take (a pull's downloads), else ``pick`` chooses from the directory's listing."""
    if not directory.is_dir():
        raise CatalogError(f"{directory} does not exist or is not a directory")
    present = {p.name for p in directory.iterdir() if p.is_file()}
    if "config.json" not in present or not any(_is_weights(n) for n in present):
        missing = " and ".join(
            w for w, ok in (("config.json", "config.json" in present),
                            ("*.safetensors weights", any(_is_weights(n) for n in present))) if not ok
        )  # fmt: skip
        raise CatalogError(f"{_expected(directory)}; it has no {missing}")
    shards = index_shards(directory)
    files = sorted(set(only)) if only is not None else pick(present, shards)
    absent = [n for n in [*files, *(shards or [])] if n not in present]
    if absent:
        raise CatalogError(f"{directory} is incomplete: {', '.join(sorted(set(absent))[:8])} missing")
    config = _read_json(directory / "config.json")
    fmt = detect_format(directory)
    params = 0
    dtypes: dict[str, int] = {}
    for name in files:
        if not _is_weights(name):
            continue
        for key, t in safetensors_header(directory / name).items():
            if key != "__metadata__" and isinstance(t, dict):
                n = _elements(t)
                params += n
                dtype = str(t.get("dtype", "?"))
                dtypes[dtype] = dtypes.get(dtype, 0) + n * _DTYPE_BYTES.get(dtype, 1)
    return DirSummary(
        format=fmt,
        files=tuple(files),
        architecture=_architecture(config),
        parameter_count=params if fmt == "safetensors" and params else None,
        context_length=_context(config),
        quantization=_quantization(fmt, config, dtypes),
        has_chat_template=_has_template(directory, files),
        config=config,
    )


def _architecture(config: Mapping[str, object]) -> str | None:
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type:
        return model_type[:64]
    arches = config.get("architectures")
    if isinstance(arches, list) and arches and isinstance(arches[0], str):
        return arches[0][:64]
    return None


def _context(config: Mapping[str, object]) -> int | None:
    text = config.get("text_config")
    for table in (config, text if isinstance(text, dict) else {}):
        value = table.get("max_position_embeddings")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _quantization(fmt: str, config: Mapping[str, object], dtypes: Mapping[str, int]) -> str | None:
    if fmt == "mlx":
        q = config.get("quantization")
        bits = q.get("bits") if isinstance(q, dict) else None
        return f"{bits}bit" if bits is not None else "mlx"
    if fmt == "safetensors-quantized":
        q = config.get("quantization_config")
        method = q.get("quant_method") if isinstance(q, dict) else None
        return str(method).upper() if method else "quantized"
    return max(dtypes, key=lambda d: dtypes[d]) if dtypes else None


def _has_template(directory: Path, files: Iterable[str]) -> bool:
    names = set(files)
    if names & {"chat_template.jinja", "chat_template.json"}:
        return True
    if "tokenizer_config.json" in names:
        try:
            return bool(_read_json(directory / "tokenizer_config.json").get("chat_template"))
        except CatalogError:
            return False
    return False


def chat_template(directory: Path) -> str:
    """The model directory's chat template text: ``chat_template.jinja``, else ``chat_template.json``'s or
    ``tokenizer_config.json``'s ``chat_template`` (a string; the first of a list of named templates); else ""."""
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        try:
            return jinja.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return ""
    for name in ("chat_template.json", "tokenizer_config.json"):
        if not (directory / name).is_file():
            continue
        try:
            value = _read_json(directory / name).get("chat_template")
        except CatalogError:
            continue
        if isinstance(value, list) and value and isinstance(value[0], dict):
            value = value[0].get("template")
        if isinstance(value, str) and value:
            return value
    return ""


def read_config(directory: Path) -> dict[str, object]:
    """``config.json`` of a model directory as a JSON object (CatalogError when unreadable)."""
    return _read_json(directory / "config.json")


def small_config(config: Mapping[str, object]) -> dict[str, object]:
    """The scalar top-level values of ``config.json``, for the row's ``metadata_json``."""
    return {k: v for k, v in config.items() if isinstance(v, str | int | float | bool)}


# -- digests ------------------------------------------------------------------------------------------------


def dir_digest(file_sha256s: Mapping[str, str]) -> str:
    """A directory's digest from its files' sha256s (relative path -> hex); see the module docstring."""
    lines = "".join(f"{file_sha256s[rel]}  {rel}\n" for rel in sorted(file_sha256s))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def hash_dir(
    directory: Path,
    sha256_file: Callable[[Path, threading.Event | None], str],
    cancel: threading.Event | None,
) -> str:
    """The digest of the files in ``directory`` (the catalog's copy), each hashed by ``sha256_file``."""
    return dir_digest({p.name: sha256_file(p, cancel) for p in directory.iterdir() if p.is_file()})
