"""Ollama Modelfile text, as older clients send it in ``/api/create``'s ``modelfile`` field, read into the create
request's own fields (``from``, ``files``, ``adapters``, ``system``, ``parameters``, ``messages``, ``license``,
``template``), so one path checks and builds both shapes.

The syntax is Ollama's (its docs' ``modelfile.md``): one instruction a line, case-insensitive (``FROM``,
``PARAMETER``, ``SYSTEM``, ``MESSAGE``, ``LICENSE``, ``ADAPTER``, ``TEMPLATE``), ``#`` comment lines, and an
argument that is bare (to the end of the line), ``"quoted"`` (JSON escapes, as ``/api/show`` writes them) or
``\"\"\"triple-quoted\"\"\"`` over several lines. ``FROM`` names a catalog model or an uploaded blob
(``@sha256:<hex>``, what clients rewrite a local file to after uploading it); a file path on the server is
refused. ``PARAMETER`` values are typed as the Ollama dialect types the option; ``stop`` may repeat.

It owns the text's syntax only: what a field may hold is checked by ``gateway.create`` and ``presets``. No I/O.
"""

from __future__ import annotations

import math
import re
from typing import Any

import orjson

from blazar.dialects import ollama

_INSTRUCTIONS = ("from", "parameter", "system", "message", "license", "adapter", "template")
_ROLES = ("system", "user", "assistant", "tool")
_BLOB = re.compile(r"^@?(sha256[:-][0-9a-f]{64})$")


class ModelfileError(ValueError):
    """Modelfile text that cannot be read (a 400 naming the line)."""


def parse(text: str) -> dict[str, Any]:
    """The create fields ``text`` gives. Later ``SYSTEM`` / ``TEMPLATE`` / ``FROM`` lines win, as in Ollama;
    ``PARAMETER stop``, ``MESSAGE`` and ``LICENSE`` lines add up."""
    out: dict[str, Any] = {}
    params: dict[str, Any] = {}
    messages: list[dict[str, str]] = []
    licenses: list[str] = []
    for number, word, rest in _lines(text):
        if word == "from" or word == "adapter":
            _source(out, word, _argument(rest, number), number)
        elif word == "parameter":
            key, value = _word(rest)
            key = key.lower()
            if not key or not value.strip():
                raise ModelfileError(
                    f"line {number}: PARAMETER needs a name and a value, e.g. PARAMETER temperature 0.7"
                )
            typed = _typed(key, _argument(value.strip(), number), number)
            if key == "stop":
                params.setdefault("stop", []).append(typed)
            else:
                params[key] = typed
        elif word == "message":
            role, content = _word(rest)
            if role.lower() not in _ROLES:
                raise ModelfileError(
                    f"line {number}: MESSAGE takes a role ({', '.join(_ROLES)}) and its text, not {role[:40]!r}"
                )
            messages.append({"role": role.lower(), "content": _argument(content.strip(), number)})
        elif word == "license":
            licenses.append(_argument(rest, number))
        else:  # system, template
            out[word] = _argument(rest, number)
    if params:
        out["parameters"] = params
    if messages:
        out["messages"] = messages
    if licenses:
        out["license"] = licenses
    if "from" not in out and "files" not in out:
        raise ModelfileError("the Modelfile has no FROM line: name the model to build on, e.g. FROM smollm2")
    return out


def _word(text: str) -> tuple[str, str]:
    """``text``'s first word and the rest, split at spaces or tabs (as Ollama's parser takes either)."""
    parts = text.split(None, 1)
    return (parts[0], parts[1]) if len(parts) == 2 else (parts[0] if parts else "", "")


def _lines(text: str) -> list[tuple[int, str, str]]:
    """(line number, instruction, the rest with any triple-quoted text joined) for each instruction line."""
    found: list[tuple[int, str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        number, line = i + 1, lines[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        word, rest = _word(line)
        word = word.lower()
        if word not in _INSTRUCTIONS:
            raise ModelfileError(
                f"line {number}: unknown instruction {word.upper()[:40]!r}; a Modelfile takes"
                f" {', '.join(w.upper() for w in _INSTRUCTIONS)}"
            )
        rest = rest.strip()
        at = rest.find('"""')
        if at >= 0 and rest.count('"""') == 1:  # the text goes on until the closing triple quote
            more = []
            while i < len(lines) and '"""' not in lines[i]:
                more.append(lines[i])
                i += 1
            if i == len(lines):
                raise ModelfileError(f'line {number}: the """ opened here is never closed')
            more.append(lines[i])
            i += 1
            rest = "\n".join([rest, *more]).rstrip()
        found.append((number, word, rest))
    return found


def _argument(rest: str, number: int) -> str:
    """An argument's text: between triple quotes, a JSON-style quoted string, or bare."""
    if rest.startswith('"""'):
        if not rest.endswith('"""') or len(rest) < 6:
            raise ModelfileError(f'line {number}: text after the closing """')
        return rest[3:-3]
    if rest.startswith('"'):
        try:
            value = orjson.loads(rest)
        except orjson.JSONDecodeError:
            raise ModelfileError(
                f"line {number}: a quoted argument must end with its closing quote"
            ) from None
        if not isinstance(value, str):
            raise ModelfileError(f"line {number}: a quoted argument must be one string")
        return value
    return rest


def _source(out: dict[str, Any], word: str, value: str, number: int) -> None:
    blob = _BLOB.match(value.strip())
    if word == "adapter":
        if blob is None:
            raise ModelfileError(
                f"line {number}: ADAPTER must name an uploaded blob (ADAPTER @sha256:<hex>): upload the adapter"
                " file with POST /api/blobs/sha256:<hex> first"
            )
        out["adapters"] = {"adapter.gguf": blob.group(1).replace("-", ":")}
        return
    if blob is not None:
        out.pop("from", None)
        out["files"] = {"model.gguf": blob.group(1).replace("-", ":")}
        return
    name = value.strip()
    if (
        not name
        or name.startswith((".", "/", "~"))
        or "\\" in name
        or name.lower().endswith((".gguf", ".bin"))
    ):
        raise ModelfileError(
            f"line {number}: FROM {name[:80]!r} reads a file on the server; upload the file with POST"
            " /api/blobs/sha256:<hex> and write FROM @sha256:<hex>, or import it with blazar import"
        )
    out.pop("files", None)
    out["from"] = name


def _typed(key: str, value: str, number: int) -> Any:
    """A PARAMETER value as the Ollama dialect types the option (an unknown option is refused)."""
    kind = ollama.option_type(key)
    if kind is None:
        raise ModelfileError(f"line {number}: unknown parameter '{key[:60]}'")
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            real = float(value)
            if not math.isfinite(
                real
            ):  # JSON has no inf or nan: such a preset could not be shown or sent back
                raise ValueError
            return real
        if kind == "bool":
            low = value.lower()
            if low not in ("true", "false"):
                raise ValueError
            return low == "true"
    except ValueError:
        raise ModelfileError(
            f"line {number}: PARAMETER {key} takes {_KIND[kind]}, not {value[:40]!r}"
        ) from None
    return value


_KIND = {"int": "a whole number", "float": "a number", "bool": "true or false"}
