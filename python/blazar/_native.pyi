"""Typed interface of the compiled ``blazar._native`` extension (Rust, pyo3; source in ``native/``)."""

import os
from typing import final

__all__ = ["GgufArray", "GgufError", "parse_gguf_metadata", "read_gguf_metadata"]

class GgufError(ValueError):
    """Raised when data is not a well-formed GGUF header (bad magic, unsupported version,
    truncation, invalid value type, ...). The message names what was being read and the offset."""

@final
class GgufArray:
    """A metadata array longer than ``max_array_len``: its item type and length, not its items.

    Instances are immutable, hashable and compare equal by value; they cannot be built from Python.
    """

    @property
    def item_type(self) -> str:
        """GGUF item type name: "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64" or "float64"."""
    @property
    def length(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

def parse_gguf_metadata(data: bytes, max_array_len: int = 1024) -> dict[str, object]:
    """Parse the header region of a GGUF file held in ``data``; tensor data is never read.

    Returns ``{"version": int, "tensor_count": int, "metadata_kv_count": int,
    "metadata": dict[str, object], "parameter_count": int, "tensor_types": dict[str, int],
    "header_size": int}``. Metadata values are ``int``, ``float``, ``bool``, ``str`` (invalid
    UTF-8 replaced by U+FFFD) or ``list`` of those; arrays longer than ``max_array_len`` become
    :class:`GgufArray`. ``tensor_types`` counts tensors per ggml type name ("F32", "Q4_K", ...,
    or "type<N>" when unknown); ``header_size`` is the offset where the tensor infos end.

    Raises :class:`GgufError` for malformed data and ``ValueError`` if ``max_array_len < 0``.
    """

def read_gguf_metadata(path: str | os.PathLike[str], max_array_len: int = 1024) -> dict[str, object]:
    """Like :func:`parse_gguf_metadata` on the file at ``path``, which is memory-mapped so only
    its header pages are read. The GIL is released while the header is parsed.

    Raises ``OSError`` (``FileNotFoundError``, ``PermissionError``, ``IsADirectoryError``, ...)
    when the file cannot be opened or mapped, and :class:`GgufError` for malformed contents.
    """
